"""The core arbiter's state and its rules, with no OS in sight (SCHED_COOP on one node).

One token per usable CPU; a worker runs only while it holds one. Tokens change hands only
at scheduling points:

* ``acquire``: a worker that wants to run takes a free token or queues (FIFO);
* ``release``: a worker that blocks (no chunk left, a barrier, a pipe) gives its token to
  a waiter of its own job first, which keeps the job's quantum on that CPU; else to the
  next job in round-robin order that has a waiter; else the token is free;
* ``boundary``: at a chunk boundary, once the quantum of the job on that CPU has run out
  and another worker waits, the token passes to the next job in round-robin order (to the
  worker's own job again only if no other job waits), and the worker queues;
* the lazy park: a worker that sleeps in a primitive while nobody waits keeps its token
  (LAZY) without taking the lock; whoever queues next revokes it (as if it had released).

The state lives in numpy structured arrays so the same code runs on a private copy (tests
with fake clocks and fake processes) and on the shared segment (:mod:`arbiter`). Every
method expects the caller to hold the arbiter's lock and returns the worker slots it made
runnable (the caller posts their wake words). Times are integers in nanoseconds.
"""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from ..errors import ArbiterError
from .layout import (BLOCKED, CPU_DTYPE, FREE, HEADER_DTYPE, JOB_DTYPE, LAZY, MAGIC, RUNNING,  # noqa: F401
                     REVOKED, STATE_NAMES, VERSION, WAITING, WORKER_DTYPE, layout, nbytes,
                     views)


# The key of a job-table row that stands for an attached process, not a job (Arbiter):
# counted by participants(), so a segment is never reset or removed under it.
ATTACHED = -1


class State:
    """The rules over the regions of :func:`views` (shared or private)."""

    def __init__(self, regions: dict[str, np.ndarray], ops: "OwnerRules | None" = None):
        # the rules an owner applies (leave_worker, revoke_holder): numba's, or the shim's
        # (ops.ShimOps) in a process that loads no numba
        self.ops: OwnerRules = ops or CompiledRules()
        self.header = regions["header"]
        self.cpus = regions["cpus"]
        self.jobs = regions["jobs"]
        self.workers = regions["workers"]
        self.wake = regions["wake"]
        self.lock = regions["lock"]  # the arbiter's mutex (shared segment only)
        # int32 views for the lock-free compare-exchange and fetch-add of the lazy park
        self.hw = self.header.view(np.int32)
        self.ws = self.workers.view(np.int32)
        self._buf: bytearray | None = None  # the memory under the views, when ours (private)

    @classmethod
    def private(cls, cpus: list[int], quantum_ns: int, max_jobs: int = 16,
                max_workers: int = 256) -> "State":
        buf = bytearray(nbytes(len(cpus), max_jobs, max_workers))
        st = cls(views(buf, len(cpus), max_jobs, max_workers))
        st.initialise(cpus, quantum_ns)
        st._buf = buf  # keep the memory alive with the views
        return st

    def initialise(self, cpus: list[int], quantum_ns: int) -> None:
        h = self.header[0]
        for name in self.header.dtype.names or ():
            h[name] = 0
        h["ncpu"], h["max_jobs"], h["max_workers"] = len(self.cpus), len(self.jobs), len(self.workers)
        h["quantum_ns"] = quantum_ns
        self.cpus["cpu"] = cpus
        self.cpus["holder"] = -1
        self.cpus["job"] = -1
        self.cpus["since_ns"] = 0
        self.jobs[:] = 0
        self.workers[:] = 0
        self.workers["cpu"] = -1
        self.workers["last_cpu"] = -1
        self.wake[:] = 0
        h["version"] = VERSION
        h["magic"] = MAGIC  # last: a reader that sees the magic sees a whole table

    # --- membership -------------------------------------------------------------------

    def join_job(self, pid: int, key: int = 0) -> int:
        """A job-table row for ``pid`` (lowest free first), its counters at zero. ``key``
        names a job that others find (:meth:`find_job`: an unmodified command's processes
        under the shim), ATTACHED marks an attachment; 0 is nobody's."""
        free = np.flatnonzero(self.jobs["used"] == 0)
        if not len(free):
            raise ArbiterError(f"all {len(self.jobs)} job slots are in use")
        j = int(free[0])
        self.jobs[j] = 0
        self.jobs[j]["used"], self.jobs[j]["pid"], self.jobs[j]["key"] = 1, pid, key
        return j

    def find_job(self, key: int) -> int:
        """The row of the job registered under ``key`` (> 0), or -1."""
        hit = np.flatnonzero((self.jobs["used"] == 1) & (self.jobs["key"] == key))
        return int(hit[0]) if len(hit) and key > 0 else -1

    def join_worker(self, job: int, pid: int, tid: int = 0, thread: bool = False) -> int:
        """A worker slot of ``job`` (lowest free first), blocked. ``thread``: the slot is
        thread ``tid``'s and lives as long as that thread (the shim's), not as long as
        ``pid`` (a Python worker's, whose thread may change)."""
        if not (0 <= job < len(self.jobs)) or not self.jobs["used"][job]:
            raise ArbiterError(f"job {job} is not registered")
        free = np.flatnonzero(self.workers["used"] == 0)
        if not len(free):
            raise ArbiterError(f"all {len(self.workers)} worker slots are in use")
        w = int(free[0])
        row = self.workers[w]
        row["used"], row["pid"], row["job"], row["state"] = 1, pid, job, BLOCKED
        row["cpu"], row["last_cpu"], row["seq"], row["held_ns"] = -1, -1, 0, 0
        # Python workers: set by the thread that runs it (Worker.acquire); 0: never pinned
        row["tid"] = tid
        row["pinned"] = -1  # the CPU its thread is pinned to, as far as the arbiter knows
        row["thread"] = 1 if thread else 0
        self.wake[w] = 0
        if w >= self.header["hi"][0]:
            self.header["hi"][0] = w + 1
        return w

    def leave_worker(self, w: int, now: int) -> list[int]:
        return _one(self.ops.leave_worker(self, w, now))

    def leave_job(self, j: int) -> None:
        if (self.workers["used"].astype(bool) & (self.workers["job"] == j)).any():
            raise ArbiterError(f"job {j} still has workers")
        self.jobs[j]["used"] = 0

    def evict_job(self, j: int, now: int) -> list[int]:
        """Free job ``j``'s row and every worker slot of it, whether or not its processes
        still run (its owner is done with it: the shim's threads that outlive it find
        their slot gone and run unmanaged); the slots the freed tokens went to."""
        woken: list[int] = []
        for w in np.flatnonzero((self.workers["used"] == 1) & (self.workers["job"] == j)):
            woken += self.leave_worker(int(w), now)
        self.jobs[j]["used"] = 0
        return [w for w in woken if self.workers["used"][w]]

    def revoke_holder(self, w: int, now: int) -> list[int]:
        """Take the token of worker ``w``, RUNNING but asleep in a call nothing sees (see
        rules.revoke_holder); the slot it went to."""
        self._check(w)
        return _one(self.ops.revoke_holder(self, w, now))

    def participants(self) -> int:
        """Job-table rows in use: jobs and attached processes (ATTACHED)."""
        return int(self.jobs["used"].sum())

    # --- the rules (bodies compiled in :mod:`rules`) -------------------------------

    def rule_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """What every compiled rule takes first: the tables and the high-water slot."""
        return self.header, self.cpus, self.jobs, self.workers, self.wake, int(self.header["hi"][0])

    def acquire(self, w: int, now: int) -> list[int]:
        """Worker w wants to run: a free token (its last CPU if free) or the queue."""
        self._check(w)
        return _some(_rules().acquire(*self.rule_args(), w, now, self.hw, self.ws))

    def try_acquire(self, w: int, now: int) -> bool:
        """A free token for worker w if there is one and nobody queues for it (a BLAS call
        widening to the CPUs left idle); never queues."""
        self._check(w)
        return bool(_rules().try_acquire(self.header, self.cpus, self.workers, self.wake, w, now))

    def release(self, w: int, now: int) -> list[int]:
        """Worker w blocks: its token goes to its own job's first waiter (keeping the
        job's quantum), else to the next job with a waiter, else it is freed."""
        self._check(w)
        return _one(_rules().release(*self.rule_args(), w, now))

    def expired(self, w: int, now: int) -> bool:
        """Whether worker w's quantum has run out and someone waits: the lock-free test a
        worker makes at every chunk boundary before calling :meth:`boundary`."""
        return bool(_rules().expired(self.header, self.cpus, self.workers, w, now))

    def boundary(self, w: int, now: int) -> list[int]:
        """A chunk boundary of worker w: rotate the token if the quantum has expired (to
        the next job in round-robin order, to its own job again only if no other waits)."""
        self._check(w)
        return _some(_rules().boundary(*self.rule_args(), w, now, self.hw, self.ws))

    # --- the lazy park: lock-free, see :mod:`rules` -------------------------------------

    def lazy_park(self, w: int) -> bool:
        """Worker w is about to sleep in a primitive: keep its token (LAZY) if nobody
        waits. No lock. False: release it under the lock as usual (w may already have
        been revoked, BLOCKED, then)."""
        return bool(_rules().lazy_park(self.header, self.workers, self.wake, w, self.ws))

    def lazy_resume(self, w: int) -> bool:
        """A LAZY worker is wanted again: True if it still has its token (RUNNING now).
        No lock. False: it was revoked and must queue under the lock."""
        return bool(_rules().lazy_resume(self.workers, w, self.ws))

    def reclaim(self, alive: Callable[[int], bool], now: int,
                thread_alive: Callable[[int, int], bool] | None = None,
                stopped: Callable[[int, int], bool] | None = None) -> list[int]:
        """Free the slots (and pass on the tokens) of workers whose process is gone — or,
        for a ``thread`` slot, whose thread is gone (``thread_alive(pid, tid)``; without
        it a thread lives as long as its process) — and the job slots whose creator is
        gone with no worker left. Take the token of a holder that is stopped
        (``stopped(pid, tid)``, tid 0 for a process slot: Ctrl-Z, SIGSTOP, a debugger),
        which would keep it until continued; it queues again once continued: a shim
        thread when its nudge (reclaim.py) or its wait sees it BLOCKED, a Python worker
        when its wait sees its wake word REVOKED or its next boundary sees it BLOCKED."""
        woken: list[int] = []
        for w in map(int, np.flatnonzero(self.workers["used"] == 1)):
            row = self.workers[w]
            pid, tid = int(row["pid"]), int(row["tid"]) if row["thread"] else 0
            if not alive(pid) or (tid and thread_alive is not None
                                  and not thread_alive(pid, tid)):
                woken += self.leave_worker(w, now)
                self.header["reclaimed"][0] += 1
            elif (stopped is not None and row["cpu"] >= 0 and row["state"] == RUNNING
                  and stopped(pid, tid)):
                woken += self.revoke_holder(w, now)
                if not row["thread"] and row["state"] == BLOCKED:
                    self.wake[w] = REVOKED
                self.jobs["revoked"][int(row["job"])] += 1
        for j in map(int, np.flatnonzero(self.jobs["used"] == 1)):
            has = (self.workers["used"].astype(bool) & (self.workers["job"] == j)).any()
            if not has and not alive(int(self.jobs["pid"][j])):
                self.jobs[j]["used"] = 0
        return [w for w in woken if self.workers["used"][w]]

    # --- invariants (tests, and a check on attaching to a segment) ---------------------

    def check_invariants(self) -> list[str]:
        problems = []
        running = np.flatnonzero((self.workers["used"] == 1)
                                 & np.isin(self.workers["state"], (RUNNING, LAZY)))
        held = np.flatnonzero(self.cpus["holder"] >= 0)
        if len(running) != len(held):
            problems.append(f"{len(running)} running workers but {len(held)} tokens held")
        for ci in held:
            h = int(self.cpus["holder"][ci])
            if not (0 <= h < len(self.workers)) or self.workers["cpu"][h] != ci:
                problems.append(f"token {ci} held by slot {h}, which does not hold it")
        waiting = int(((self.workers["used"] == 1) & (self.workers["state"] == WAITING)).sum())
        if waiting != self.header["waiting"][0]:
            problems.append(f"{waiting} waiting workers, header says {self.header['waiting'][0]}")
        if waiting and (self.cpus["holder"] < 0).any():
            problems.append("a token is free while workers wait")
        return problems

    # --- internals ----------------------------------------------------------------------

    def _check(self, w: int) -> None:
        if not (0 <= w < len(self.workers)) or not self.workers["used"][w]:
            raise ArbiterError(f"worker slot {w} is not registered")


class OwnerRules(Protocol):
    """The rules the owner of jobs applies to the tables (ops.Ops has them too)."""

    def leave_worker(self, st: State, w: int, now: int) -> int: ...

    def revoke_holder(self, st: State, w: int, now: int) -> int: ...


class CompiledRules:
    """:mod:`rules`' (numba), loaded on first use."""

    def leave_worker(self, st: State, w: int, now: int) -> int:
        return int(_rules().leave_worker(*st.rule_args(), w, now, st.ws))

    def revoke_holder(self, st: State, w: int, now: int) -> int:
        return int(_rules().revoke_holder(*st.rule_args(), w, now, st.ws))


def _rules():
    """The compiled rules (numba), loaded by the first Python worker's call: an owner with
    the shim's rules (ops.ShimOps) never loads them."""
    from . import rules

    return rules


def _one(w: int) -> list[int]:
    return [] if w < 0 else [int(w)]


def _some(ws: tuple[int, int]) -> list[int]:
    return [int(w) for w in ws if w >= 0]
