"""Compiled dispatch: the thread backend's claim-run-record loop as GIL-free machine code.

For a first-come-first-served policy whose hand-out is a fixed sequence (dynamic, chunk,
guided: claims from one counter are serialised, so claim i always gets chunk i), the
registry entry's ``sequence`` gives the chunk boundaries, built by the same pure functions
of :mod:`policies` the Python dispensers call. Each worker thread then runs
:func:`claim_loop`: an atomic fetch-and-add draws ticket i, the numba kernel runs on
frames ``bounds[i] .. bounds[i+1]-1``, and two CLOCK_MONOTONIC reads go into the worker's
own record table. Nothing per chunk touches the interpreter, so k workers never
queue for the GIL between chunks (the Python loop's cost on fine-grained tasks).

Which loop runs is decided from data: the entry's ``sequence``, whether the kernel is a
numba function, ``--coop`` (which needs a Python scheduling point per chunk) and the run's
``dispatch`` option (:data:`DISPATCH_MODES`). A compiled run says so in its notes.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, is_jitted

from ..dispatch import Dispenser
from ..errors import HybridschedError
from ..records import TRACE_DTYPE

AUTO, PYTHON, COMPILED = "auto", "python", "compiled"
DISPATCH_MODES = (AUTO, PYTHON, COMPILED)
NOTE = "dispatch=compiled"  # in the run's notes: which dispatch ran (none: the Python loop)

# Added to the ticket counter by stop(): every later ticket is past any hand-out (at most
# PLAN_MAX_TASKS-sized), and 2**62 plus one ticket per claim cannot overflow int64.
_STOP = 1 << 62
_NS = 1e9  # CLOCK_MONOTONIC nanoseconds per second


class DispatchError(HybridschedError):
    """--dispatch compiled was asked for a run that cannot be compiled."""


@intrinsic
def fetch_add(typingctx, arr, idx, delta):
    """Atomic ``old = arr[idx]; arr[idx] += delta; return old`` on an int64 array
    (sequentially consistent, as libgomp's ticket for schedule(dynamic))."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")
    return types.int64(arr, types.intp, types.int64), codegen


@intrinsic
def monotonic_ns(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in integer nanoseconds: the clock behind
    time.perf_counter on Linux, which returns the same count divided by 1e9."""
    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        ts_t = ir.LiteralStructType([i64, i64])  # struct timespec on 64-bit Linux
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, ts_t.as_pointer()]), "clock_gettime")
        ts = cgutils.alloca_once(builder, ts_t)
        builder.call(fn, [ir.Constant(i32, 1), ts])  # 1 = CLOCK_MONOTONIC
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)
    return types.int64(), codegen


# Not cache=True: numba cannot cache a function specialised on a dispatcher argument (each
# kernel is its own type), so the loop compiles once per kernel and array type per
# process (~0.5 s), in prepare() or before the timed region of the first run.
@numba.njit(nogil=True)
def claim_loop(kernel, data, bounds, ctl, capacity):
    """One worker's whole run: claim ticket i, run chunk i, record (i, start ns, end ns);
    until the tickets are past the hand-out (done, or stopped). Returns the records in
    claim order. A kernel's exception ends the loop and propagates to the calling thread.

    The records are the worker's own, grown by doubling from ``capacity``: a table shared
    by ticket would put the rows of k workers in the same cache lines, three more
    contended lines per chunk besides the ticket's."""
    m = bounds.shape[0] - 1
    rec = np.empty((max(capacity, 1), 3), np.int64)
    n = 0
    while True:
        i = fetch_add(ctl, 0, 1)
        if i >= m:
            return rec[:n]
        first = bounds[i]
        t0 = monotonic_ns()
        kernel(data, first, bounds[i + 1] - first)
        t1 = monotonic_ns()
        if n == rec.shape[0]:
            grown = np.empty((2 * n, 3), np.int64)
            grown[:n] = rec
            rec = grown
        rec[n, 0] = i
        rec[n, 1] = t0
        rec[n, 2] = t1
        n += 1


@numba.njit(nogil=True, cache=True)
def _bump(ctl, delta):
    return fetch_add(ctl, 0, delta)


# Slack over a worker's even share of the chunks before its record table first grows: a
# few rows of memory per worker against one copy of the table when a worker draws more.
_SPARE_ROWS = 64


class CompiledTickets(Dispenser):
    """The shared state of a compiled run: the chunk boundaries and the ticket counter;
    each worker's loop returns its own (ticket, start ns, end ns) records."""

    def __init__(self, bounds: np.ndarray, workers: int = 1):
        super().__init__()
        self.bounds = np.ascontiguousarray(bounds, np.int64)
        # [0] is the ticket, on a 64-byte line of its own (numpy aligns to 16 bytes only:
        # the view starts at the first line boundary of a 2-line buffer), so no other
        # write invalidates the line every claim contends for
        self._ctl_buf = np.zeros(16, np.int64)
        skip = (-self._ctl_buf.ctypes.data % 64) // 8
        self.ctl = self._ctl_buf[skip:skip + 8]
        self.records: list[np.ndarray | None] = [None] * workers
        self._capacity = (len(self.bounds) - 1) // max(workers, 1) + _SPARE_ROWS

    def claim(self, w):
        """A Python-side claim of the same ticket sequence (not used by the compiled loop)."""
        i = int(_bump(self.ctl, 1))
        if i >= len(self.bounds) - 1:
            return None
        first = int(self.bounds[i])
        return first, int(self.bounds[i + 1]) - first

    def stop(self):
        super().stop()
        _bump(self.ctl, _STOP)  # seen by every worker at its next claim

    def runner(self, kernel, data):
        """``run(w)``: worker w's compiled loop over ``data`` (releases the GIL)."""
        bounds, ctl, cap, records = self.bounds, self.ctl, self._capacity, self.records

        def run(w: int) -> None:
            records[w] = claim_loop(kernel, data, bounds, ctl, cap)
        return run

    def trace(self) -> np.ndarray:
        """The chunk trace as the Python loop's trace_table builds it: rows by worker in
        claim order, then stably ordered by start time; times in perf_counter seconds."""
        mine = [r for r in self.records if r is not None]
        rows = np.concatenate(mine) if mine else np.zeros((0, 3), np.int64)
        out = np.zeros(len(rows), TRACE_DTYPE)
        out["worker"] = np.repeat([w for w, r in enumerate(self.records) if r is not None],
                                  [len(r) for r in mine]) if mine else 0
        tickets = rows[:, 0]
        out["first"] = self.bounds[tickets]
        out["count"] = self.bounds[tickets + 1] - self.bounds[tickets]
        out["start"] = rows[:, 1] / _NS
        out["end"] = rows[:, 2] / _NS
        return out[np.argsort(out["start"], kind="stable")]

    def notes(self):
        return NOTE


def why_not(job, kernel) -> str:
    """Why ``job`` cannot run compiled ('' when it can)."""
    if getattr(job.info, "sequence", None) is None:
        return f"{job.scheduler}'s hand-out is not a fixed first-come-first-served sequence"
    if not is_jitted(kernel):
        return "the kernel is not a numba function"
    if job.coop is not None:
        return "--coop needs a scheduling point between chunks"
    return ""


def use_compiled(job, kernel) -> bool:
    """Whether the thread backend runs ``job`` in the compiled loop (see the module doc)."""
    mode = getattr(job, "dispatch", AUTO)
    if mode == PYTHON:
        return False
    why = why_not(job, kernel)
    if why and mode == COMPILED:
        raise DispatchError(f"--dispatch compiled: {why}")
    return not why


def may_delegate(job, kernel) -> bool:
    """Whether ``job``'s dispenser may hand its execution to the compiled loop (auto, when
    the technique it picks has a fixed hand-out): the loop is then compiled untimed."""
    return (getattr(job.info, "chooses", False) and getattr(job, "dispatch", AUTO) == AUTO
            and is_jitted(kernel) and job.coop is None)


class Delegated(CompiledTickets):
    """The compiled tickets of the technique a choosing dispenser (auto) picked: its notes
    and technique are the chooser's, and the end of the run goes back to it."""

    def __init__(self, bounds: np.ndarray, workers: int, chooser: Dispenser):
        super().__init__(bounds, workers)
        self.chooser = chooser

    def stop(self):
        super().stop()
        self.chooser.stop()

    def executed(self, seconds: float) -> None:
        self.chooser.executed(seconds)

    def technique(self) -> str:
        return self.chooser.technique()

    def notes(self):
        return f"{self.chooser.notes()}; {NOTE}"


def delegated(job, disp: Dispenser, kernel, workers: int) -> Delegated | None:
    """The compiled run of the technique ``disp`` chose for this execution (its ``arm``,
    a registry entry), when that technique can run compiled; None for the Python loop."""
    arm = getattr(disp, "arm", None)
    if arm is None or arm.sequence is None or not may_delegate(job, kernel):
        return None
    params = {k: v for k, v in (job.params or {}).items() if k != "profile"}
    chunk = arm.resolve_chunk(job.chunk, job.frames)
    return Delegated(arm.sequence(job.frames, workers, chunk, params or None), workers, disp)


def compile_for(kernel, data: np.ndarray) -> None:
    """Compile the loop for ``kernel`` on arrays of ``data``'s type (an empty hand-out:
    nothing runs). Call before forking and before a timed region. A kernel that numba
    cannot compile as ``kernel(data, first, count)`` fails the run, as its first call in
    the Python loop would."""
    try:
        CompiledTickets(np.zeros(1, np.int64)).runner(kernel, data)(0)
    except numba.core.errors.NumbaError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DispatchError(f"the numba kernel {getattr(kernel, '__name__', kernel)} cannot run "
                            f"on {numba.typeof(data)}: {first}") from exc
