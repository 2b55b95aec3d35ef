"""One timed run, the only one: a single-node run, each rank's share of an MPI run, a
co-located job and ``parallel_for`` all go through :class:`TimedRun`.

Untimed before: the scheduler's preparation (a technique's profiling run), a fresh work
copy, the run's seat on the cooperative arbiter, the foreign-load probe and the AIMD
monitor's reset. Timed: the *body* (:class:`Single`: one backend execution; the MPI splits
bring theirs), with the garbage collector paused. Untimed after: verification. A failure
of the scheduler (a lost worker, a raising kernel of the workspace) is a failed
measurement, not an exception, so a sweep goes on; Ctrl-C, SystemExit and anything
else (a bug) propagate.
"""
from __future__ import annotations

import gc
import sys
import time
from contextlib import contextmanager
from typing import Protocol

from ..backends import get_backend
from ..backends.base import Job, job_for
from ..core import registry
from ..core.policies import check_trace
from ..errors import BrokenRun, HybridschedError
from ..oslayer.procfs import ForeignLoad
from ..records import RunConfig, RunRecord
from ..workloads.space import Workspace
from . import profile
from .measure import Measured, single_record
from .resources import Resources, Seat


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside the timed region (as timeit does).

    A collection holds the GIL for its whole pass, stalling every thread worker (and the
    pipe producer's loop) that needs it meanwhile: a thread run of 20000 one-frame chunks
    triggered a full collection of the ~110k objects numba and h5py keep alive, 0.05-0.2 s
    of a 0.45-0.9 s run. The scheduling loops make no reference cycles, so nothing is lost
    by collecting after the run instead.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Body(Protocol):
    """What runs inside the timed region, and how its result is checked."""

    fresh: bool      # the whole work copy is restored from the original before the run
    prefix: str      # put before a failure's message ("rank 1 on node7: ")

    def run(self, job: Job, m: Measured) -> None:
        """Execute; fold the executions and the time into ``m``."""

    def verify(self, space: Workspace, m: Measured) -> int:
        """Bad rows (tasks) after the run; -1 = not checked by choice."""


class Single:
    """One backend execution, timed by the backend itself: from just before its entry point
    (fork, pipe set-up, thread start included) to the end of its last worker (§4)."""

    fresh = True
    prefix = ""

    def run(self, job: Job, m: Measured) -> None:
        ex = get_backend(job.info.backend)(job)
        # after the backend's clock stopped: what ran was every task once, in every mode
        # (--verify none checks nothing else), or the run fails
        check_trace(ex.trace, job.frames, job.scheduler)
        m.add(ex, ex.t_begin)
        m.time_s = ex.seconds

    def verify(self, space: Workspace, m: Measured) -> int:
        return space.bad_rows()


class TimedRun:
    """One configuration on a workspace, in three steps that a caller may separate (a
    co-located job prepares before the common start): :meth:`prepare`, :meth:`execute`,
    :meth:`verify`; :meth:`run` does all three."""

    def __init__(self, space: Workspace, config: RunConfig, res: Resources,
                 cpus: list[int] | None = None, body: Body | None = None,
                 seat: Seat | None = None, rank: int = 0, host: str = ""):
        self.space, self.config, self.res = space, config, res
        self.body = body if body is not None else Single()
        self.info = registry.get(config.scheduler)
        self.job = job_for(config, space.work, res.monitor, cpus, original=space.original,
                           memory=res.memory)
        if space.kernel is not None:  # the workspace's own kernel (irregular, user's)
            self.job.kernel = space.kernel
        self.seat = seat
        self.m = Measured(config, str(self.info.family), time.time(), rank=rank, host=host,
                          chunk_used=self.job.chunk)

    def prepare(self) -> bool:
        """Untimed: the entry's preparation, then a fresh work copy. False if it failed."""
        try:
            profile.prepare(self.job)  # e.g. a technique's profiling run (on the workspace)
        except HybridschedError as exc:
            self.m.failed(f"{self.body.prefix}{exc}")
            return False
        self.m.extra = dict(self.job.extra)
        if self.body.fresh:
            self.space.fresh_copy()
        return True

    def execute(self) -> None:
        """The timed region, between its untimed probes."""
        job, m = self.job, self.m
        with self.res.seat(self.config, self.seat) as seat:
            if seat is not None:
                job.coop, job.coop_job = seat
            probe = ForeignLoad(job.cpus)  # outside the timed region: two reads of /proc/stat
            if job.monitor is not None and self.info.needs_monitor:
                job.monitor.reset()  # this run's utilisation history only (core/monitor.py)
            try:
                with gc_paused():
                    self.body.run(job, m)
            except BrokenRun as exc:  # a lost worker, a worker that raised
                m.broken(f"{self.body.prefix}{exc}", exc)
            except HybridschedError as exc:  # a kernel that raised, a technique's fault
                m.failed(f"{self.body.prefix}{exc}")
        m.foreign = probe.share()

    def verify(self) -> None:
        """Untimed: check the result (NOT_CHECKED, -1, for --verify none)."""
        if not self.m.error:
            self.m.bad_rows = self.body.verify(self.space, self.m)

    def run(self) -> Measured:
        if self.prepare():
            self.execute()
            self.verify()
        return self.m


def timed_run(space: Workspace, config: RunConfig, monitor=None, cpus: list[int] | None = None,
              arbiter=None) -> RunRecord:
    """Run one configuration on ``space`` on this node and verify it: its ``/runs`` record.
    ``monitor`` and ``arbiter``: the study's, when the scheduler needs them."""
    return single_record(TimedRun(space, config, Resources.given(monitor, arbiter), cpus).run())


def warn_unverified(record: RunRecord, stream=None) -> None:
    """Say loudly that a run's output was wrong or the run failed; it is never a timing.
    A run that lost a worker but completed and verified (pipe-MtoM) is reported too."""
    stream = sys.stderr if stream is None else stream  # looked up now: stderr may be redirected
    c = record.config
    if record.verified:
        if record.lost_workers:
            print(f"hybridsched: {c.scheduler} lost {record.lost_workers} worker(s) and "
                  f"completed on the others ({record.notes}) [k={c.k} L={c.frames} rep={c.rep}]; "
                  "verified, stored with lost_workers set", file=stream)
        return
    what = (f"FAILED: {record.error}" if record.error else
            f"UNVERIFIED: {record.bad_rows} rows not sorted or not a permutation of the input"
            if c.verify == "" else f"UNVERIFIED: --verify {c.verify} rejected the result")
    print(f"hybridsched: {what} [{c.scheduler} k={c.k} L={c.frames} rep={c.rep}]; "
          "stored with verified=false and excluded from every table", file=stream)
