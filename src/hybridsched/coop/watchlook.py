"""The coop watchdog's looks in C (``shim/watch.c``: ``hs_watch_look``, and
``hs_watch_wait``, which sleeps and looks until something is due), loaded through ctypes
from the shim's own library. The watchdog looks about once a bound for as long as the jobs
run, on a CPU a holder wants: a Python thread woken for each look used 6-9 ms of a CPU in
a 1.45 s run of two lock loops, this 1.4-1.9 ms. The library is dormant in the process
that loads it (its constructor acts only in a command launched with a job's key).
:class:`NativeLook` carries the looks' memory from look to look; what to do about a
holding they report is the caller's (shimjob.py)."""
from __future__ import annotations

import ctypes
import functools
from typing import Iterable, NamedTuple

import numpy as np

from .shimbuild import functions, shim_library

# watch.c's struct hs_watch_seen and struct hs_watch_act, field for field
SEEN_DTYPE = np.dtype([("slot", "<i4"), ("signalled", "<i4"), ("acquired", "<i8"),
                       ("since", "<i8")], align=True)
ACT_DTYPE = np.dtype([("cpu", "<i4"), ("slot", "<i4"), ("job", "<i4"), ("pid", "<i4"),
                      ("tid", "<i4"), ("signalled", "<i4"), ("acquired", "<i8")], align=True)


class Act(NamedTuple):
    """A holding due for the watchdog's act: on CPU row ``cpu``, by ``slot`` of ``job``
    (thread ``tid`` of ``pid``), begun at ``acquired``; ``signalled``: asked to rotate
    already since it was last acted on."""

    cpu: int
    slot: int
    job: int
    pid: int
    tid: int
    signalled: bool
    acquired: int


@functools.lru_cache(maxsize=4)
def _functions(path: str) -> tuple:
    """hs_watch_look and hs_watch_wait of the shim at ``path``."""
    look, wait = functions(path, ("hs_watch_look", "hs_watch_wait"), "the watchdog")
    p, i, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int32, ctypes.c_int64
    look.restype = wait.restype = ctypes.c_int
    look.argtypes = [p, p, i, p, i, p, i, p, i64, i64, p, p, p]
    wait.argtypes = [p, p, i, p, i, p, i, p, i64, i64, i64, p, p, p, p, i32]
    return look, wait


def _address(a: np.ndarray) -> int:
    if not a.flags.c_contiguous:
        raise ValueError("the watchdog's look needs contiguous tables")
    return a.ctypes.data


class NativeLook:
    """``hs_watch_look`` with the memory it keeps between looks (what it saw on each CPU,
    the last look that found threads waiting). Not thread-safe: one watchdog's."""

    def __init__(self, library: str | None = None):
        self._look, self._wait = _functions(library or shim_library())
        # the word hs_watch_wait sleeps on: changed (then woken) when the jobs change or
        # the watch ends, which ends the wait
        self.ctl = np.zeros(1, np.int32)
        self._seen = np.zeros(0, SEEN_DTYPE)
        self._acts = np.zeros(0, ACT_DTYPE)
        self._scalars = np.full(2, -1, np.int64)  # waited_at, due
        self._tables: tuple | None = None  # (the tables' arrays, their addresses)
        self._jobs: tuple[int, ...] | None = None
        self._mask = np.zeros(1, np.uint8)

    def _bind(self, st) -> tuple:
        arrays = (st.header, st.cpus, st.workers)
        if self._tables is None or any(a is not b for a, b in zip(arrays, self._tables[0])):
            ncpu = len(st.cpus)
            self._seen = np.zeros(ncpu, SEEN_DTYPE)
            self._seen["slot"] = -1
            self._acts = np.zeros(ncpu, ACT_DTYPE)
            mine = (self._seen, self._scalars, self._scalars[1:], self._acts)
            self._tables = (arrays, tuple(_address(a) for a in arrays + mine))
        return self._tables[1]

    def _watched(self, jobs: Iterable[int]) -> tuple[int, int]:
        key = tuple(jobs)
        if key != self._jobs:
            self._mask = np.zeros(max(key, default=0) + 1, np.uint8)
            self._mask[list(key)] = 1
            self._jobs = key
        return _address(self._mask), len(self._mask)

    def __call__(self, st, jobs: Iterable[int], now: int, bound: int) -> tuple[list[Act], int | None]:
        """One look at the holders of ``jobs`` in ``st``'s tables: the holdings due for an
        act (each counts from ``now`` on), and when the next one is due (None: none seen,
        or nobody waits)."""
        tables, seen, (waited_at, due_at, acts_at) = self._args(st, jobs)
        n = self._look(*tables, seen, now, bound, waited_at, due_at, acts_at)
        return self._acts_of(n), self.due

    def wait(self, st, jobs: Iterable[int], pause: int, bound: int, quantum: int,
             gen: int) -> list[Act] | None:
        """Sleep ``pause`` ns, then look as :meth:`__call__` does, again and again (when
        the first holding seen is due, or a quantum on), all in C and without the GIL,
        until holdings are due (returned) or :attr:`ctl` no longer holds ``gen`` (None)."""
        tables, seen, (waited_at, due_at, acts_at) = self._args(st, jobs)
        n = self._wait(*tables, seen, pause, bound, quantum, waited_at, due_at, acts_at,
                       _address(self.ctl), gen)
        return None if n < 0 else self._acts_of(n)

    def _args(self, st, jobs: Iterable[int]) -> tuple[tuple, int, tuple]:
        """What both C functions take first (the tables and the watched jobs' mask), the
        seen entries' address, and the addresses they write to."""
        header, cpus, workers, seen, waited_at, due_at, acts_at = self._bind(st)
        mask, njobs = self._watched(jobs)
        tables = (header, cpus, len(st.cpus), workers, len(st.workers), mask, njobs)
        return tables, seen, (waited_at, due_at, acts_at)

    @property
    def due(self) -> int | None:
        """When the first holding seen at the last look reaches the bound (None: none)."""
        due = int(self._scalars[1])
        return None if due < 0 else due

    def _acts_of(self, n: int) -> list[Act]:
        return [Act(int(cpu), int(slot), int(job), int(pid), int(tid), bool(sig), int(acq))
                for cpu, slot, job, pid, tid, sig, acq in self._acts[:n].tolist()]

    def forget(self) -> None:
        """Let go of the tables (views of the arbiter's mapping, which they keep mapped)."""
        self._tables = None

    def signalled(self, cpu: int, flag: bool) -> None:
        """What the act did to the holding on ``cpu``: asked it to rotate, or not."""
        self._seen["signalled"][cpu] = int(flag)
