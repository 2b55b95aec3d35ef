"""``hybridsched calibrate``: this machine's scheduling overheads, measured through the real
backends (timed runs of an empty kernel, so a run's time is its overhead alone).

claim_compiled_s / claim_python_s  dynamic,1 at k = 1 in each dispatch: time per chunk
claim_*_by_k                       the same at k = 1 .. N (up to 64): the claim under contention
pipe_msg_s / pipe_rtt_s            pipe-1to1 and pipe-MtoM at k = 1: time per chunk
fork_s, reap_s                     prolific with one frame per worker: start spacing, and
                                   the run's time after the last worker ended, per worker
exit_s                             the CPU a forked child spends to exit at once
switch_s                           a context switch through a pipe wake-up on one CPU
pipe_serve_s                       the pipe-MtoM producer's CPU per message at k = 2
thread_start_s                     threading.Thread start + join, per thread
wake_s                             an Event set in one thread to the wait returning in another
row_sort_s                         quicksort of one row of --width bytes (the cost model)
"""
from __future__ import annotations

import statistics
import threading
import time

import numba
import numpy as np

from ..kernels import KERNELS, prepare
from ..oslayer.cpus import n_cpus
from ..records import RunConfig
from ..study.runner import timed_run
from ..workloads.slab import Slab
from .costs import exit_seconds, row_sort_seconds, switch_seconds
from .models import Overheads

# Chunks per timing run: enough that a per-chunk figure is stable to a few percent on a
# noisy VM, few enough that the whole calibration takes seconds.
_CHUNKS = 20000
_REPS = 3
# Contention is measured at every k up to N but no further than this: the curve flattens
# long before (one cache line, one GIL), and each k costs a few tenths of a second.
_MAX_CONTENTION_K = 64


@numba.njit(nogil=True, cache=True)
def _nothing(t, first, count):
    """An empty kernel: a run's time is its scheduling overhead alone."""


def _per_chunk(scheduler: str, chunks: int, k: int = 1, dispatch: str = "auto") -> float:
    KERNELS["calibrate-empty"] = (_nothing, "calibration: no work")
    with Slab(chunks, 1, 1, 0) as slab:  # one-byte frames: always sorted, so verified
        times = []
        for _ in range(_REPS):
            rec = timed_run(slab, RunConfig(scheduler, k, chunks, 1, 1, 1, kernel="calibrate-empty",
                                            dispatch=dispatch))
            if not rec.verified:
                raise RuntimeError(f"calibration run {scheduler} failed: {rec.error}")
            times.append(rec.time_s / max(1, len(rec.trace)))
    return statistics.median(times)


def _forks(k: int) -> tuple[float, float]:
    KERNELS["calibrate-empty"] = (_nothing, "calibration: no work")
    with Slab(k, 1, 1, 0) as slab:
        spacing, tail = [], []
        for _ in range(_REPS):
            rec = timed_run(slab, RunConfig("prolific", k, k, 1, 1, 1, kernel="calibrate-empty"))
            s = np.sort(rec.workers["start"])
            spacing.append(float(np.median(np.diff(s))) if len(s) > 1 else float(s[0]))
            tail.append(max(0.0, rec.time_s - float(rec.workers["end"].max())) / k)
    return statistics.median(spacing), statistics.median(tail)


def serve_seconds(chunks: int = _CHUNKS // 5) -> float:
    """The CPU the pipe-MtoM producer (this process) spends per message, at k = 2 with an
    empty kernel: what it takes from the workers when no core is idle."""
    import resource

    KERNELS["calibrate-empty"] = (_nothing, "calibration: no work")
    k = min(2, n_cpus())
    got = []
    with Slab(chunks, 1, 1, 0) as slab:
        for _ in range(_REPS):
            before = resource.getrusage(resource.RUSAGE_SELF)
            rec = timed_run(slab, RunConfig("pipe-MtoM", k, chunks, 1, 1, 1, kernel="calibrate-empty"))
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            got.append(cpu / max(1, len(rec.trace)))
    return statistics.median(got)


def untraced(ov: Overheads, mtom: bool = True) -> Overheads:
    """``ov`` with what a study's traces cannot show, measured here: a forked worker's exit
    and a context switch (milliseconds) and, with ``mtom``, the pipe-MtoM producer's CPU per message (a fraction
    of a second)."""
    got = {"exit_s": exit_seconds(), "switch_s": switch_seconds()}
    if mtom:
        got["pipe_serve_s"] = serve_seconds()
    return Overheads.from_dict({**ov.to_dict(), **got})


def _thread_start(n: int = 200) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
    return (time.perf_counter() - t0) / n


def _wake(n: int = 200) -> float:
    go, back = threading.Event(), threading.Event()
    lat = []

    def echo():
        for _ in range(n):
            go.wait()
            go.clear()
            back.set()
    t = threading.Thread(target=echo)
    t.start()
    for _ in range(n):
        t0 = time.perf_counter()
        go.set()
        back.wait()
        back.clear()
        lat.append((time.perf_counter() - t0) / 2)
    t.join()
    return statistics.median(lat)


def calibrate(width: int = 640, progress=None) -> Overheads:
    """Every overhead the simulator models, measured here."""
    say = progress or (lambda text: None)
    prepare("quicksort", loop=True)
    got: dict[str, float | tuple[float, ...]] = {}  # Overheads fields
    say("claims (compiled and Python loops)")
    got["claim_compiled_s"] = _per_chunk("dynamic", _CHUNKS, dispatch="compiled")
    got["claim_python_s"] = _per_chunk("dynamic", _CHUNKS, dispatch="python")
    say("claims under contention, k = 1 .. N")
    ks = range(1, min(n_cpus(), _MAX_CONTENTION_K) + 1)
    got["claim_compiled_by_k"] = tuple(_per_chunk("dynamic", _CHUNKS, k, "compiled") for k in ks)
    got["claim_python_by_k"] = tuple(_per_chunk("dynamic", _CHUNKS // 4, k, "python") for k in ks)
    say("pipe messages and round trips")
    got["pipe_msg_s"] = _per_chunk("pipe-1to1", _CHUNKS // 4)
    got["pipe_rtt_s"] = _per_chunk("pipe-MtoM", _CHUNKS // 4)
    got["pipe_serve_s"] = serve_seconds()
    say("fork and reap")
    got["fork_s"], got["reap_s"] = _forks(max(4, 2 * n_cpus()))
    got["exit_s"] = exit_seconds()
    got["switch_s"] = switch_seconds()
    say("thread start and wake-up")
    got["thread_start_s"] = _thread_start()
    got["wake_s"] = _wake()
    say("per-row sort time")
    got["row_sort_s"], got["row_width"] = row_sort_seconds(width), width
    return Overheads.from_dict({**Overheads().to_dict(), **got})
