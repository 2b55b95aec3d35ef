"""The cases of benchmarks/cases_hostile.py, one module per area."""
