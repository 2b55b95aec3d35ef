"""Compiled dispatch: the thread backend's claim-run-record loop as GIL-free machine code.

For a first-come-first-served policy whose hand-out is a fixed sequence (dynamic, chunk,
guided: claims from one counter are serialised, so claim i always gets chunk i), the
registry entry's ``sequence`` gives the chunk boundaries, built by the same pure functions
of :mod:`policies` the Python dispensers call. Each worker thread then runs
:func:`kernels.claim_loop`: an atomic fetch-and-add draws ticket i, the numba kernel runs on
frames ``bounds[i] .. bounds[i+1]-1``, and two CLOCK_MONOTONIC reads go into the worker's
own record table. Nothing per chunk touches the interpreter, so k workers never
queue for the GIL between chunks (the Python loop's cost on fine-grained tasks).

Which loop runs is decided from data: the entry's ``sequence``, whether the kernel is a
numba function, ``--coop`` (which needs a Python scheduling point per chunk) and the run's
``dispatch`` option (:data:`DISPATCH_MODES`), by the one rule of
:func:`core.capabilities.decide` (which the simulator, the API and the spec follow too). A
compiled run says so in its notes.
"""
from __future__ import annotations

import numba
import numpy as np

from ..core.capabilities import Dispatch, decide
from ..core.dispatch import Dispenser
from ..core.policies import check_bounds
from ..errors import DispatchError, TechniqueError
from ..kernels import is_compiled, loop_entry
from ..oslayer.atomics import fetch_add
from ..records import TRACE_DTYPE

AUTO, PYTHON, COMPILED = Dispatch.AUTO, Dispatch.PYTHON, Dispatch.COMPILED
DISPATCH_MODES = tuple(Dispatch)
NOTE = "dispatch=compiled"  # in the run's notes: which dispatch ran (none: the Python loop)

# Added to the ticket counter by stop(): every later ticket is past any hand-out (at most
# PLAN_MAX_TASKS-sized), and 2**62 plus one ticket per claim cannot overflow int64.
_STOP = 1 << 62
_NS = 1e9  # CLOCK_MONOTONIC nanoseconds per second


@numba.njit(nogil=True, cache=True)
def _bump(ctl, delta):
    return fetch_add(ctl, 0, delta)


# Slack over a worker's even share of the chunks before its record table first grows: a
# few rows of memory per worker against one copy of the table when a worker draws more.
_SPARE_ROWS = 64


class CompiledTickets(Dispenser):
    """The shared state of a compiled run: the chunk boundaries and the ticket counter;
    each worker's loop returns its own (ticket, start ns, end ns) records."""

    def __init__(self, bounds: np.ndarray, workers: int = 1, tasks: int | None = None,
                 who: str = "compiled dispatch"):
        super().__init__()
        # checked before any worker claims: a hand-out that misses or repeats a task would
        # otherwise run and be timed (and, with --verify none, stored as a run). ``tasks``:
        # the loop's N (None: the last boundary, for a loop over a prefix of the tasks)
        bounds = np.asarray(bounds)
        tasks = int(bounds[-1]) if tasks is None and len(bounds) else tasks
        self.bounds = np.ascontiguousarray(check_bounds(bounds, tasks or 0, who), np.int64)
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
        loop = loop_entry(kernel, data)

        def run(w: int) -> None:
            records[w] = loop(bounds, ctl, cap)
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


def wanted(configs) -> bool:
    """Whether any of the run configurations may run the compiled loop (its scheduler's
    hand-out is a fixed sequence, or chosen per execution, and nothing rules it out):
    then the study loads the loop before its first run, untimed and before any fork."""
    from ..core import registry

    for c in configs:
        d = decide(registry.get(c.scheduler), c.dispatch, coop=bool(c.coop))
        if d.compiled or d.delegates:
            return True
    return False


def decision(job, kernel):
    """How ``job`` dispatches with ``kernel`` (:func:`core.capabilities.decide`)."""
    return decide(job.info, getattr(job, "dispatch", AUTO), numba=is_compiled(kernel),
                  coop=job.coop is not None)


def use_compiled(job, kernel) -> bool:
    """Whether the thread backend runs ``job`` in the compiled loop (see the module doc)."""
    d = decision(job, kernel)
    if d.refused:
        raise DispatchError(f"--dispatch compiled: {d.why}")
    return d.compiled


def may_delegate(job, kernel) -> bool:
    """Whether ``job``'s dispenser may hand its execution to the compiled loop (auto, when
    the technique it picks has a fixed hand-out): the loop is then compiled untimed."""
    return decision(job, kernel).delegates


class Delegated(CompiledTickets):
    """The compiled tickets of the technique a choosing dispenser (auto) picked: its notes
    and technique are the chooser's, and the end of the run goes back to it."""

    def __init__(self, bounds: np.ndarray, workers: int, tasks: int, who: str,
                 chooser: Dispenser):
        super().__init__(bounds, workers, tasks, who)
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
    if arm is None or not may_delegate(job, kernel) or not decide(arm).compiled:
        return None
    params = {k: v for k, v in (job.params or {}).items() if k != "profile"}
    chunk = arm.resolve_chunk(job.chunk, job.frames)
    try:
        bounds = arm.sequence(job.frames, workers, chunk, params or None, job=job)
    except TechniqueError as exc:  # the chosen technique failed: the chooser drops it
        getattr(disp, "failed", lambda e: None)(exc)
        raise
    return Delegated(bounds, workers, job.frames, f"{job.scheduler} ({arm.name})", disp)


def compile_for(kernel, data: np.ndarray) -> None:
    """Load (or compile) the loop for ``kernel`` on arrays of ``data``'s type. Call before
    forking and before a timed region. A kernel that numba cannot compile as
    ``kernel(data, first, count)`` fails the run, as its first call in the Python loop
    would."""
    try:
        loop_entry(kernel, data)
    except numba.core.errors.NumbaError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DispatchError(f"the numba kernel {getattr(kernel, '__name__', kernel)} cannot run "
                            f"on {numba.typeof(data)}: {first}") from exc
