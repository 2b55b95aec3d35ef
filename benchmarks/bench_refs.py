"""Reference ways to run the same per-frame kernel, for benchmarks/bench_core.py.

Other ways to run the kernel on k threads (a plain lock-and-counter loop, the thread
backend's previous hot path, ThreadPoolExecutor.map, numba prange, a GIL-free compiled
ticket loop), each ``f(work, k) -> chunks``, and single-thread replicas of the worker loops
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
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from hybridsched import dispatch, kernels
from hybridsched import policies as pol
from hybridsched.sysinfo import pin_current


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


# --- a GIL-free dynamic loop: the headroom left to the thread backend's Python hot path ----


@intrinsic
def _fetch_add(typingctx, arr, idx, delta):
    """Atomic ``old = arr[idx]; arr[idx] += delta; return old`` on an int64 array."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")
    return types.int64(arr, types.intp, types.int64), codegen


@intrinsic
def _monotonic(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in seconds: the clock behind time.perf_counter."""
    def codegen(context, builder, sig, args):
        i32, i64, f64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
        ts_t = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, ts_t.as_pointer()]),
                                            "clock_gettime")
        ts = cgutils.alloca_once(builder, ts_t)
        builder.call(fn, [ir.Constant(i32, 1), ts])  # CLOCK_MONOTONIC
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.fadd(builder.sitofp(sec, f64), builder.fmul(builder.sitofp(nsec, f64), ir.Constant(f64, 1e-9)))
    return types.float64(), codegen


_dynamic_size = numba.njit(pol.dynamic_size, nogil=True)


@numba.njit(nogil=True)
def _ticket_loop(work, tickets, n, k, c, w, trace_w, trace_f, trace_c, trace_s, trace_e):
    while True:
        j = _fetch_add(tickets, 0, 1)
        first = j * c
        if first >= n:
            return
        count = _dynamic_size(n - first, k, c)
        t0 = _monotonic()
        kernels.quicksort_frames(work, first, count)
        t1 = _monotonic()
        trace_w[j], trace_f[j], trace_c[j], trace_s[j], trace_e[j] = w, first, count, t0, t1


def nogil_tickets(work: np.ndarray, k: int) -> int:
    """dynamic (chunk 1) with the whole claim-run-record loop compiled and GIL-free: an
    atomic ticket counter, chunk sizes from policies.dynamic_size compiled by numba, the
    same per-chunk trace in arrays. Not in the package: it measures what the Python loop
    of the thread backend leaves on the table."""
    n = work.shape[0]
    tickets = np.zeros(1, np.int64)
    trace = [np.zeros(n, np.int32)] + [np.zeros(n, np.int64) for _ in range(2)] + \
        [np.zeros(n) for _ in range(2)]

    def body(w):
        _pinned(w)
        _ticket_loop(work, tickets, n, k, 1, w, *trace)

    _threads(k, body)
    return n


REFERENCES = {
    "plain lock+counter": plain_loop,
    "previous hot path": previous_hot_path,
    "ThreadPoolExecutor.map": executor_map,
    "numba prange": numba_prange,
    "GIL-free ticket loop (prototype)": nogil_tickets,
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
