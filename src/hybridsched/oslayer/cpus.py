"""CPUs: which this process may use, pinning a thread, and a thread's scheduling policy."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator

# SCHED_BATCH where the platform has it (Linux): the fair class without wake-up preemption
BATCH = getattr(os, "SCHED_BATCH", None)


def usable_cpus() -> list[int]:
    """CPUs this process may run on (respects taskset, cgroups cpusets and Slurm)."""
    return sorted(os.sched_getaffinity(0))


def n_cpus() -> int:
    """N of the paper: the hardware parallelism available to us."""
    return len(usable_cpus())


def pin_current(cpu: int) -> None:
    """Pin the calling thread (pid 0 = this thread on Linux) to one CPU."""
    os.sched_setaffinity(0, {cpu})


def allow(cpus: Iterable[int], tid: int = 0) -> None:
    """Let thread ``tid`` (0: the calling one) run on ``cpus``."""
    os.sched_setaffinity(tid, set(cpus))


def allowed(tid: int = 0) -> set[int]:
    """The CPUs thread ``tid`` (0: the calling one) may run on."""
    return os.sched_getaffinity(tid)


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Pin the calling thread for the duration of the block, then restore its mask."""
    if cpu is None:
        yield
        return
    saved = os.sched_getaffinity(0)
    pin_current(cpu)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def allow_all_threads(cpus: Iterable[int]) -> None:
    """Let every thread of this process (a third-party pool's included) run on ``cpus``."""
    cpus = set(cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that just ended


def thread_policy() -> tuple[int, int]:
    """(policy, priority) of the calling thread."""
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def set_thread_policy(tid: int, policy: int, priority: int = 0) -> bool:
    """Set thread ``tid``'s (0: the calling one) scheduling policy; False when refused or
    the thread is gone."""
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(priority))
    except OSError:
        return False
    return True
