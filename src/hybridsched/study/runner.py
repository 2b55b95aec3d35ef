"""One timed run: fresh work copy (untimed), the scheduler (timed), verification (untimed)."""
from __future__ import annotations

import gc
import sys
import time
from contextlib import contextmanager

from ..core import registry as schedulers
from ..backends import get_backend
from ..backends.base import job_for
from . import profile
from ..errors import HybridschedError
from ..records import RunConfig, RunRecord, relative
from ..oslayer.procfs import ForeignLoad


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


def timed_run(slab, config: RunConfig, monitor=None, cpus: list[int] | None = None,
              arbiter=None) -> RunRecord:
    """Run one configuration on ``slab`` (a workload.Slab or any workspace of
    :mod:`workloads.space`: work, original, fresh_copy, bad_rows, kernel) and verify it.

    A scheduler failure (a lost worker, say) is returned as a record with ``error`` set
    and ``verified=False`` rather than raised, so a sweep can go on with the next
    configuration. Ctrl-C and SystemExit propagate.
    """
    info = schedulers.get(config.scheduler)
    job = job_for(config, slab.work, monitor, cpus, original=slab.original)
    if slab.kernel is not None:  # the workspace's own kernel (irregular, Mandelbrot, user's)
        job.kernel = slab.kernel
    chunk = job.chunk
    started = time.time()
    try:
        profile.prepare(job)  # untimed: e.g. a technique's profiling run (on the slab)
    except HybridschedError as exc:
        return RunRecord(config, info.family, float("nan"), False, chunk_used=chunk,
                         error=f"profiling run: {exc}", started_at=started)
    slab.fresh_copy()
    if config.coop:
        if arbiter is None:
            raise ValueError("a --coop run needs the study's arbiter")
        job.coop, job.coop_job = arbiter, arbiter.join_job()  # untimed: the job registers once
    probe = ForeignLoad(job.cpus)  # outside the timed region: two reads of /proc/stat
    if monitor is not None and info.needs_monitor:
        monitor.reset()  # this run's utilisation history only (monitor.py says why)
    try:
        with gc_paused():
            ex = get_backend(info.backend)(job)
    except HybridschedError as exc:
        return RunRecord(config, info.family, float("nan"), False, chunk_used=chunk,
                         error=str(exc), started_at=started, notes=getattr(exc, "notes", ""))
    except Exception as exc:
        if slab.kernel is None:
            raise  # a built-in kernel does not raise: this is a bug, not a failed run
        # a workspace's or user's kernel raised on the calling thread (serial): a failed run
        return RunRecord(config, info.family, float("nan"), False, chunk_used=chunk,
                         error=f"kernel raised {type(exc).__name__}: {exc}", started_at=started)
    finally:
        if job.coop is not None:
            arbiter.leave_job(job.coop_job)
    foreign = probe.share()
    bad = slab.bad_rows()  # NOT_CHECKED (-1): --verify none, accepted by choice
    workers, trace, series = relative(ex)
    extra = dict(job.extra)
    if foreign == foreign:
        extra["foreign_cpu"] = round(foreign, 4)
    return RunRecord(config, info.family, ex.seconds, bad <= 0, bad_rows=bad,
                     chunk_used=ex.chunk_used or chunk, workers_used=len(ex.workers),
                     lost_workers=ex.lost_workers, notes=ex.notes, started_at=started,
                     workers=workers, trace=trace, series=series, extra=extra,
                     technique=ex.technique)


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
