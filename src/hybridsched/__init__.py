"""hybridsched: fork-, pipe- and thread-based schedulers over a shared-memory row-sorting
workload, measured one node at a time or across P nodes with MPI."""

__version__ = "0.1.0"
