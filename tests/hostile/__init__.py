"""The hostile user's cases (issues 23 and 33), one module per area, each registered with
:func:`hostile.common.case`; tests/hostile/test_hostile_cases.py runs them under the marker
``hostile``."""
