"""Where a job's workers may run: data shared by the built-in workloads' policies and the
unmodified commands' ``partition``."""
from __future__ import annotations


def unpinned(j: int, t: int, jobs: int, cpus: list[int]) -> int:
    return -1


def partition(j: int, t: int, jobs: int, cpus: list[int]) -> int:
    """Job j on its own N/J CPUs (jobs share CPUs round-robin when J > N)."""
    n = len(cpus)
    if jobs >= n:
        return cpus[j % n]
    share = n // jobs
    mine = cpus[j * share:(j + 1) * share]
    return mine[t % len(mine)]
