"""What every backend shares: the job it is given and the per-worker bookkeeping."""
from __future__ import annotations

import resource
from dataclasses import dataclass, field

import numpy as np

from ..records import TRACE_DTYPE, WORKER_DTYPE
from ..sysinfo import usable_cpus


@dataclass
class Job:
    """One scheduler execution over the work slab, as handed to a backend. ``info`` is the
    scheduler's registry entry: a backend reads how to hand out work from it, never from
    the scheduler's name."""

    info: object                  # registry.SchedulerInfo
    work: np.ndarray              # uint8[L, H, W], the shared-memory work copy
    kernel: str
    k: int
    chunk: int                    # resolved chunk (the policy default already applied)
    affinity: bool = True
    monitor: object | None = None  # UtilisationMonitor for AIMD
    cpus: list[int] = field(default_factory=usable_cpus)
    # read-only input tensor: lets pipe-MtoM restore a lost worker's chunk before re-sending
    # it and lets --chunk auto rerun trials on unsorted input (None: neither is possible)
    original: np.ndarray | None = None
    pipe_batch: int = 1           # RunConfig.pipe_batch
    inflight: int = 1             # RunConfig.inflight
    dispatch: str = "auto"        # RunConfig.dispatch: threads' chunk loop (backends/compiled.py)
    # --coop: the node's core arbiter (coop.arbiter.Arbiter) and this run's job in it;
    # workers then hold a token to run instead of a fixed CPU
    coop: object | None = None
    coop_job: int = -1
    # a technique's parameters (techniques.PARAM_DEFAULTS keys; "profile": its Profile)
    params: dict = field(default_factory=dict)
    # what the run's record should store besides the measurements (e.g. the profile)
    extra: dict = field(default_factory=dict)

    def coop_worker(self):
        """This worker's arbiter handle (registered, no token yet), or None without --coop."""
        return None if self.coop is None else self.coop.worker(self.coop_job)

    @property
    def scheduler(self) -> str:
        return self.info.name

    @property
    def frames(self) -> int:
        return int(self.work.shape[0])

    def cpu_of(self, w: int) -> int:
        """Round-robin placement: worker w on CPU w mod N (-1 when affinity is off, or under
        --coop, where the token a worker holds says where it runs)."""
        return self.cpus[w % len(self.cpus)] if self.affinity and self.coop is None else -1


def _clock_ticks() -> int:
    import os

    return os.sysconf("SC_CLK_TCK")


_TICK = 1.0 / _clock_ticks()


def thread_usage() -> tuple[float, float, float]:
    """(user, system, iowait) CPU seconds of the calling thread so far.

    iowait is the thread's delay-accounting block-I/O wait from /proc/thread-self/stat
    (field 42); it stays 0 for this in-memory workload but completes Eq. 11.
    """
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    iowait = 0.0
    try:
        with open("/proc/thread-self/stat", "rb") as fh:
            stat = fh.read()
        iowait = int(stat[stat.rindex(b")") + 2:].split()[39]) * _TICK
    except (OSError, ValueError, IndexError):
        pass
    return ru.ru_utime, ru.ru_stime, iowait


def worker_table(n: int) -> np.ndarray:
    table = np.zeros(n, WORKER_DTYPE)
    table["worker"] = np.arange(n)
    table["cpu"] = -1
    return table


def trace_table(per_worker) -> np.ndarray:
    """Concatenate per-worker (first, count, start, end) rows (lists of tuples, or n x 4
    arrays) into one TRACE_DTYPE array, ordered by start time; worker = list index."""
    total = sum(len(t) for t in per_worker)
    out = np.zeros(total, TRACE_DTYPE)
    i = 0
    for w, rows in enumerate(per_worker):
        if len(rows) == 0:
            continue
        arr = np.array(rows, dtype=np.float64)
        n = len(rows)
        out["worker"][i:i + n] = w
        out["first"][i:i + n] = arr[:, 0]
        out["count"][i:i + n] = arr[:, 1]
        out["start"][i:i + n] = arr[:, 2]
        out["end"][i:i + n] = arr[:, 3]
        i += n
    return out[np.argsort(out["start"], kind="stable")]
