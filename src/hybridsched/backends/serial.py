"""Serial backend: one call of the kernel over every frame on the calling thread.

This is T_serial of Eq. 4, the baseline every speedup is measured against, so it carries
no dispatch at all. With affinity on it runs pinned to the first usable CPU.
"""
from __future__ import annotations

import os
from time import perf_counter

from ..errors import INTERRUPTS, KernelRaised
from ..kernels import get_kernel
from ..oslayer.cpus import pinned
from ..oslayer.procfs import thread_usage
from ..records import Execution, trace_table, worker_table
from .base import Job


def execute(job: Job) -> Execution:
    kernel = get_kernel(job.kernel)
    cpu = job.cpu_of(0)
    stats = worker_table(1)
    with pinned(cpu if cpu >= 0 else None):
        u0 = thread_usage()
        t_begin = perf_counter()
        try:
            kernel(job.work, 0, job.frames)
        except INTERRUPTS:
            raise
        except BaseException as exc:  # noqa: BLE001 - a kernel's sys.exit() or a BaseException
            # of its own fails its run too (the latter was a traceback)
            if isinstance(job.kernel, str):
                raise  # a built-in kernel does not raise (a bug)
            raise KernelRaised(f"kernel raised {type(exc).__name__}: {exc}") from exc
        t_end = perf_counter()
        u1 = thread_usage()
    row = stats[0]
    row["pid"], row["cpu"], row["start"], row["end"] = os.getpid(), cpu, t_begin, t_end
    row["busy"], row["frames"], row["chunks"] = t_end - t_begin, job.frames, 1
    row["user"], row["system"], row["iowait"] = (b - a for a, b in zip(u0, u1))
    trace = trace_table([[(0, job.frames, t_begin, t_end)]])
    return Execution(t_begin, t_end, stats, trace, chunk_used=job.frames, notes="")
