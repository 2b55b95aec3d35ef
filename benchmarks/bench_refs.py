"""Reference ways to run the same per-frame kernel, for benchmarks/bench_core.py.

Other ways to run the kernel on k threads (a plain lock-and-counter loop, the thread
backend's previous hot path, ThreadPoolExecutor.map, numba prange, a GIL-free compiled
ticket loop of backends/compiled.py on bare threads), each ``f(work, k) -> chunks``, and single-thread replicas of the worker loops
for the hot-path CPU measurement, each ``f(work, n)``.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numba
import numpy as np

from hybridsched.core import dispatch
from hybridsched import kernels
from hybridsched.backends import compiled
from hybridsched.core import policies as pol
from hybridsched.oslayer.cpus import pin_current


# --- references: other ways to run the same per-frame kernel on k threads ----------------


PIN = True  # bench_core.py --no-affinity turns it off, as for the schedulers


def _pinned(w: int) -> None:
    """Pin like the thread backend's default (--affinity): worker w on CPU w mod N."""
    if not PIN:
        return
    cpus = sorted(os.sched_getaffinity(0))
    pin_current(cpus[w % len(cpus)])


def _threads(k: int, body) -> None:
    ts = [threading.Thread(target=body, args=(w,)) for w in range(k)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def plain_loop(work: np.ndarray, k: int) -> int:
    """The simplest dynamic schedule: a lock, a counter, one frame per claim, no trace."""
    qf = kernels.quicksort_frames
    n = work.shape[0]
    lock = threading.Lock()
    nxt = [0]

    def body(w):
        _pinned(w)
        while True:
            with lock:
                f = nxt[0]
                if f >= n:
                    return
                nxt[0] = f + 1
            qf(work, f, 1)

    _threads(k, body)
    return n


def previous_hot_path(work: np.ndarray, k: int) -> int:
    """dynamic as the thread backend ran it before this benchmark's changes (commit
    9cb7c10): locked counter sized through partial(), the numba dispatcher, busy/frames
    summed per chunk, the trace recorded per chunk."""
    qf = kernels.quicksort_frames
    n = work.shape[0]
    disp = dispatch.SharedCounter(n, partial(pol.dynamic_size, k=k, c=1))
    traces = [[] for _ in range(k)]

    def body(w):
        _pinned(w)
        record = traces[w].append
        busy, frames = 0.0, 0
        while True:
            chunk = disp.claim(w)
            if chunk is None:
                break
            first, count = chunk
            t0 = time.perf_counter()
            qf(work, first, count)
            t1 = time.perf_counter()
            record((first, count, t0, t1))
            busy += t1 - t0
            frames += count

    _threads(k, body)
    return sum(len(t) for t in traces)


def executor_map(work: np.ndarray, k: int) -> int:
    """concurrent.futures.ThreadPoolExecutor.map, one task per frame (pool start timed)."""
    n = work.shape[0]
    with ThreadPoolExecutor(k) as pool:
        for _ in pool.map(kernels.quicksort_frames, itertools.repeat(work, n), range(n),
                          itertools.repeat(1, n)):
            pass
    return n


@numba.njit(parallel=True, nogil=True)
def prange_frames(t):
    for f in numba.prange(t.shape[0]):
        kernels.quicksort_frames(t, f, 1)


def numba_prange(work: np.ndarray, k: int) -> int:
    """numba parallel=True: prange over frames, numba's own thread pool and schedule."""
    numba.set_num_threads(min(k, numba.config.NUMBA_NUM_THREADS))
    prange_frames(work)
    return work.shape[0]


def numba_prange_dynamic(work: np.ndarray, k: int) -> int:
    """The same prange with numba.parallel_chunksize(1): numba's own dynamic hand-out of
    one frame at a time, what a numba user would reach for instead of our dynamic."""
    numba.set_num_threads(min(k, numba.config.NUMBA_NUM_THREADS))
    with numba.parallel_chunksize(1):
        prange_frames(work)
    return work.shape[0]


# --- the package's GIL-free loop without the backend around it ---------------------------


def nogil_tickets(work: np.ndarray, k: int) -> int:
    """dynamic (chunk 1) in the thread backend's compiled loop (backends/compiled.py: an
    atomic ticket, the trace in arrays) on bare threads: no worker table, no rusage, no
    trace table; what the backend's own bookkeeping costs on top of it."""
    n = work.shape[0]
    run = compiled.CompiledTickets(pol.fixed_bounds(n, 1), k).runner(kernels.quicksort_frames, work)

    def body(w):
        _pinned(w)
        run(w)

    _threads(k, body)
    return n


REFERENCES = {
    "plain lock+counter": plain_loop,
    "previous hot path": previous_hot_path,
    "ThreadPoolExecutor.map": executor_map,
    "numba prange": numba_prange,
    "numba prange chunksize 1": numba_prange_dynamic,
    "compiled ticket loop, bare threads": nogil_tickets,
}


# --- single-thread replicas of the worker loops (hot-path section) -------------------


def loop_previous(work: np.ndarray, n: int) -> None:
    """The thread backend's worker loop before this benchmark's changes (see previous_hot_path)."""
    qf = kernels.quicksort_frames
    claim = dispatch.SharedCounter(n, partial(pol.dynamic_size, k=2, c=1)).claim
    record = [].append
    busy, frames, w = 0.0, 0, 0
    while True:
        chunk = claim(w)
        if chunk is None:
            break
        first, count = chunk
        t0 = time.perf_counter()
        qf(work, first, count)
        t1 = time.perf_counter()
        record((first, count, t0, t1))
        busy += t1 - t0
        frames += count


def loop_current(work: np.ndarray, n: int, entry: bool = True, tickets: bool = True) -> None:
    """The thread backend's worker loop as it is now (backends/threads.py), with switches
    to put back the numba dispatcher or the locked counter."""
    qf = kernels.quicksort_frames
    disp = (dispatch.TicketCounter(n, 2, 1) if tickets else
            dispatch.SharedCounter(n, partial(pol.dynamic_size, k=2, c=1)))
    claim, done, feedback = disp.claim, disp.done, disp.feedback
    run = kernels.direct_entry(qf, work) if entry else qf
    record = [].append
    clock = time.perf_counter
    w = 0
    while True:
        chunk = claim(w)
        if chunk is None:
            break
        first, count = chunk
        t0 = clock()
        run(work, first, count)
        t1 = clock()
        record((first, count, t0, t1))
        if feedback:
            done(w, count, t1 - t0)


def loop_plain(work: np.ndarray, n: int) -> None:
    qf = kernels.quicksort_frames
    lock = threading.Lock()
    nxt = [0]
    while True:
        with lock:
            f = nxt[0]
            if f >= n:
                return
            nxt[0] = f + 1
        qf(work, f, 1)


def loop_aimd(work: np.ndarray, n: int) -> None:
    class FixedU:
        value = 0.5
    qf = kernels.quicksort_frames
    disp = dispatch.AimdGate(n, 2, 2, FixedU(), 1)
    while (chunk := disp.claim(0)) is not None:
        t0 = time.perf_counter()
        qf(work, *chunk)
        disp.done(0, chunk[1], time.perf_counter() - t0)
