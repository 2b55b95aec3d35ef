"""Timed runs across P ranks: each rank runs the local scheduler with k workers on its own
node-local slab, and rank 0 combines the ranks into one RunRecord.

Two ways to split the L frames between ranks (``split``):

``static``
    Rank r owns the contiguous block ``policies.static_blocks(L, P)[r]`` and generates only
    those frames (frame0 = the block's first global frame) before the timed runs.
``dynamic``
    Inter-node self-scheduling: the chunk sequence of ``policies.guided_size`` (divisor
    2P, see DYNAMIC_DIVISOR_PER_RANK) is computed identically on every rank; ranks take
    chunk indices from an RMA ticket counter on rank 0 (rank 0 computes too) and run
    each claimed chunk with the local
    scheduler and k workers (hierarchical: guided between nodes, the chosen policy inside).
``<technique>`` (``fac2``, ``trapezoidal``, ... any of ``techniques.RULES``)
    As ``dynamic``, with the LB4OMP technique's chunk sequence over the P ranks instead
    of guided's (minimum chunk k): distributed chunk calculation as in DLS4LB, each rank
    computing chunk i from the shared step counter i alone -- the rule's size of step i,
    at the prefix sum of the sizes before it -- with no master.
    A rank has a slab sized for L but touches only the frames it claims. It materialises
    a claimed chunk by generating it into its work copy *inside* the timed region: that
    stands for the data movement a real dynamic split pays. The generation time (first
    touch of the pages included) is recorded per rank (``rank_gen_s``) together with
    ``compute_time_s`` = max over ranks of (rank time - generation) so it can be subtracted.

Timing: all ranks leave a barrier, read perf_counter (CLOCK_MONOTONIC, the clock the
backends stamp worker times with) and MPI.Wtime, and run. A rank's time runs from there to
the end of its last worker; the run's time is the maximum over ranks. Verification is
untimed and all-reduced (sum of bad rows over ranks).

Fork and pipe schedulers under MPI: their children inherit the MPI process image but only
sort shared memory and leave with os._exit, never calling MPI (nor Python's atexit, which
would run MPI_Finalize in the child). MPICH and Open MPI tolerate fork() under that rule;
Open MPI over InfiniBand may warn about fork and needs RDMAV_FORK_SAFE=1 (the Slurm
template in launch/ sets it).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from time import perf_counter
from typing import Callable, Iterable

import numpy as np

from .. import kernels
from ..core import policies, registry as schedulers
from ..backends import Job, get_backend
from ..backends.base import job_for
from ..study import profile
from ..errors import HybridschedError, UsageError
from ..records import TRACE_DTYPE, WORKER_DTYPE, RunConfig, RunRecord
from ..study.runner import warn_unverified
from ..study.session import Resources
from ..oslayer.procfs import ForeignLoad
from ..oslayer.cpus import usable_cpus
from ..workloads.slab import Slab, over_frames
from ..core.techniques.deterministic import RULES
from .ranks import local_cpus, maybe_corrupt, maybe_fail, slowdown

SPLIT_TECHNIQUES = tuple(RULES)  # deterministic: chunk i a function of (L, P, k, i) alone
SPLITS = ("static", "dynamic") + SPLIT_TECHNIQUES


def check_split(configs: list[RunConfig], P: int, split: str) -> None:
    """Raise UsageError for a split that cannot give every rank work."""
    if split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if any(c.chunk < 0 for c in configs):
        raise UsageError("--chunk auto is not supported under mpiexec (the search would run "
                         "inside the timed region on each rank); search on one node and pass "
                         "the chunk it reports")
    if any(c.input_hash or c.verify or c.kernel not in kernels.KERNELS for c in configs):
        raise UsageError("--input, --verify and --kernel MODULE:FUNCTION are not supported "
                         "under mpiexec yet; run them at P = 1")
    if split != "static" and any(c.workload != "uniform" for c in configs):
        raise UsageError("--workload under mpiexec needs --split static (each rank builds "
                         "its block's tasks)")
    profiled = sorted({c.scheduler for c in configs if schedulers.get(c.scheduler).profiled})
    if profiled and split != "static":
        raise UsageError(f"{', '.join(profiled)} need a profiling run of the loop, which a "
                         f"--split {split} chunk would pay inside the timed region; use "
                         "--split static")
    small = [c.frames for c in configs if c.frames < P]
    if small and split == "static":
        raise UsageError(f"--frames {min(small)} is smaller than the {P} MPI ranks: "
                         "every rank needs at least one frame")


def inter_node_min_chunk(k: int) -> int:
    """Smallest inter-node chunk: k frames, so a claimed chunk can occupy every local
    worker. Smaller chunks balance the ranks more finely but pay one RMA round trip and
    one local scheduler start per chunk; larger ones leave a long tail on one rank."""
    return max(1, k)


# Guided's divisor between ranks, per rank. Plain guided (divisor P) hands the first
# claimer 1/P of the tensor: if that rank is the slow one, the run is as long as static's
# worst case. Dividing by 2P (as factoring does) keeps every chunk at most half a fair
# share, so the others can take back up to half of a slow rank's share, for about twice
# as many claims (still only O(P log(L/P)) RMA operations in all).
DYNAMIC_DIVISOR_PER_RANK = 2


def dynamic_chunks(L: int, P: int, k: int, split: str = "dynamic") -> list[tuple[int, int]]:
    """The chunk sequence over P ranks that the ticket counter indexes: guided's, or an
    LB4OMP technique's (``split`` one of SPLIT_TECHNIQUES)."""
    c = inter_node_min_chunk(k)
    if split in SPLIT_TECHNIQUES:
        from ..core import techniques

        return techniques.sequence(split, L, P, c)
    d = DYNAMIC_DIVISOR_PER_RANK * P
    return list(policies.fcfs_chunks(L, lambda rem: policies.guided_size(rem, d, c)))


def _job(cfg: RunConfig, work: np.ndarray, monitor, cpus: list[int], seat=None) -> tuple[Job, str]:
    job = job_for(cfg, work, monitor, cpus)
    if seat is not None:  # --coop: the ranks of a node share its arbiter's tokens
        job.coop, job.coop_job = seat
    return job, job.info.backend


@contextlib.contextmanager
def _seat(cfg: RunConfig, arbiter):
    """This rank's job in the node's arbiter for one run (None without --coop)."""
    if not cfg.coop:
        yield None
        return
    jid = arbiter.join_job()
    try:
        yield arbiter, jid
    finally:
        arbiter.leave_job(jid)


class _RankResult:
    """What one rank measured in one run (sent to rank 0 with gather)."""

    def __init__(self, rank: int, host: str):
        self.rank, self.host = rank, host
        self.time_s = 0.0
        self.wtime_s = 0.0
        self.gen_s = 0.0
        self.frames = 0
        self.chunks = 0
        self.bad_rows = 0
        self.error = ""
        self.notes = ""
        self.lost = 0
        self.chunk_used = 0
        self.technique = ""  # what auto chose (its last local execution)
        self.workers = np.zeros(0, WORKER_DTYPE)
        self.trace = np.zeros(0, TRACE_DTYPE)
        self.foreign = float("nan")  # share of this rank's CPUs other processes used


def _add_execution(res: _RankResult, ex, p0: float, k_offset: int) -> None:
    """Fold one local execution into the rank's tables (times relative to p0)."""
    w = ex.workers.copy()
    t = ex.trace.copy()
    for arr in (w, t):
        arr["start"] -= p0
        arr["end"] -= p0
        arr["worker"] += k_offset
    if len(res.workers) == 0:
        res.workers = w
    else:  # dynamic split: the same local workers ran several chunks
        acc = res.workers
        n = min(len(acc), len(w))
        acc["start"][:n] = np.minimum(acc["start"][:n], w["start"][:n])
        acc["end"][:n] = np.maximum(acc["end"][:n], w["end"][:n])
        for f in ("busy", "frames", "chunks", "user", "system", "iowait"):
            acc[f][:n] += w[f][:n]
        if len(w) > n:
            res.workers = np.concatenate([acc, w[n:]])
    res.trace = np.concatenate([res.trace, t])
    res.lost += ex.lost_workers
    res.chunk_used = ex.chunk_used or res.chunk_used
    res.technique = ex.technique or res.technique
    if ex.notes:
        res.notes = ex.notes


def _dilate(ex, factor: float) -> None:
    """Benchmark hook (mpi.ranks.slowdown): idle (factor - 1) x the execution's time and
    move its end, so this rank looks like a node that much slower."""
    if factor > 1.0:
        time.sleep((factor - 1.0) * (ex.t_end - ex.t_begin))
        ex.t_end = perf_counter()


def _run_static(w, cfg: RunConfig, slab: Slab, monitor, cpus, seat=None) -> _RankResult:
    res = _RankResult(w.rank, w.host)
    job, backend = _job(cfg, slab.work, monitor, cpus, seat)
    job.original = slab.original  # pipe-MtoM restores a lost worker's chunk from it
    if slab.kernel is not None:  # a workload's kernel, built for this rank's block
        job.kernel = slab.kernel
    profile.prepare(job)  # untimed: a technique's profiling run
    slab.fresh_copy()
    if monitor is not None and job.info.needs_monitor:
        monitor.reset()  # this run's utilisation history only (monitor.py)
    w.barrier()
    p0, w0 = perf_counter(), w.wtime()
    try:
        ex = get_backend(backend)(job)
    except HybridschedError as exc:
        res.error = f"rank {w.rank} on {w.host}: {exc}"
        res.time_s = float("nan")
        return res
    _dilate(ex, slowdown(w.rank))
    res.wtime_s = w.wtime() - w0
    res.time_s = ex.t_end - p0
    res.frames, res.chunks = slab.frames, 1
    ex.trace["first"] += slab.frame0  # the rank's local frame ids -> global ids
    _add_execution(res, ex, p0, w.rank * cfg.k)
    maybe_corrupt(w.rank, slab.work)
    res.bad_rows = slab.bad_rows()
    return res


def _run_dynamic(w, cfg: RunConfig, slab: Slab, monitor, cpus, counter, seat=None,
                 split: str = "dynamic") -> _RankResult:
    res = _RankResult(w.rank, w.host)
    chunks = dynamic_chunks(cfg.frames, w.size, cfg.k, split)
    work = slab.work
    gen_threads = max(1, min(cfg.k, len(cpus)))
    mine: list[tuple[int, int]] = []
    slow = slowdown(w.rank)
    if monitor is not None and schedulers.get(cfg.scheduler).needs_monitor:
        monitor.reset()
    counter.reset()
    p0, w0 = perf_counter(), w.wtime()
    t_last = p0
    while res.error == "":
        ticket = counter.take()
        if ticket >= len(chunks):
            break
        first, count = chunks[ticket]
        g0 = perf_counter()
        over_frames(lambda a, n: kernels.generate_frames(work[first + a:first + a + n], slab.seed,
                                                         first + a), count, gen_threads)
        res.gen_s += perf_counter() - g0
        job, backend = _job(cfg, work[first:first + count], monitor, cpus, seat)
        try:
            ex = get_backend(backend)(job)
        except HybridschedError as exc:
            res.error = f"rank {w.rank} on {w.host}: {exc}"
            break
        _dilate(ex, slow)
        ex.trace["first"] += first  # local frame ids of the chunk -> global ids
        _add_execution(res, ex, p0, w.rank * cfg.k)
        t_last = ex.t_end
        mine.append((first, count))
        res.frames += count
        res.chunks += 1
    res.wtime_s = w.wtime() - w0
    res.time_s = float("nan") if res.error else t_last - p0
    # untimed: make the original of the claimed frames and check them
    if mine:
        maybe_corrupt(w.rank, work[mine[0][0]:])
    for first, count in mine:
        slab.generate(first, count)
        res.bad_rows += slab.bad_rows(first, count)
    return res


def combine(cfg: RunConfig, family: str, results: list[_RankResult], total_bad: int,
            split: str, started: float) -> RunRecord:
    """One RunRecord from every rank's result (rank 0 only)."""
    errors = [r.error for r in results if r.error]
    times = [r.time_s for r in results]
    time_s = float("nan") if errors else max(times)
    extra = {
        "split": split,
        "rank_host": [r.host for r in results],
        "rank_time_s": times,
        "rank_wtime_s": [r.wtime_s for r in results],
        "rank_frames": [r.frames for r in results],
        "rank_chunks": [r.chunks for r in results],
        "rank_bad_rows": [r.bad_rows for r in results],
    }
    shares = [round(r.foreign, 4) for r in results if r.foreign == r.foreign]
    if shares:  # the most disturbed rank: the run's time is the slowest rank's
        extra["rank_foreign_cpu"] = [round(r.foreign, 4) if r.foreign == r.foreign else None
                                     for r in results]
        extra["foreign_cpu"] = max(shares)
    if split != "static":
        extra["rank_gen_s"] = [r.gen_s for r in results]
        extra["compute_time_s"] = (float("nan") if errors else
                                   max(r.time_s - r.gen_s for r in results))
    workers = np.concatenate([r.workers for r in results]) if results else np.zeros(0, WORKER_DTYPE)
    trace = np.concatenate([r.trace for r in results])
    trace = trace[np.argsort(trace["start"], kind="stable")]
    notes = f"split={split}" + "".join(f"; rank {r.rank}: {r.notes}" for r in results if r.notes)
    return RunRecord(cfg, family, time_s, not errors and total_bad == 0, bad_rows=total_bad,
                     chunk_used=max(r.chunk_used for r in results), workers_used=len(workers),
                     lost_workers=sum(r.lost for r in results), error="; ".join(errors),
                     notes=notes, started_at=started, workers=workers, trace=trace, extra=extra,
                     technique=results[0].technique if results else "")


def run_configurations(w, configs: Iterable[RunConfig], on_record: Callable[[RunRecord], None],
                       split: str = "static") -> int:
    """Run every configuration on all ranks; rank 0 gets each combined record through
    ``on_record`` (which writes and flushes it). Returns the number of failed or
    unverified runs (on every rank)."""
    configs = [replace(c, P=w.size) for c in configs]
    check_split(configs, w.size, split)
    cpus = local_cpus(usable_cpus(), w.local_rank, w.local_size)
    failed = 0
    with contextlib.ExitStack() as stack:
        shared = stack.enter_context(Resources(configs, lambda cfg: _slab(w, cfg, split)))
        monitor = shared.monitor
        counter = None
        if split != "static":
            from .rma import TicketCounter

            counter = stack.enter_context(TicketCounter(w))
        for i, cfg in enumerate(configs):
            maybe_fail(w.rank, i)
            slab = shared.slab(cfg)
            started = time.time()
            probe = ForeignLoad(cpus)  # outside the timed region, as on one node
            with _seat(cfg, shared.arbiter) as seat:
                if split == "static":
                    res = _run_static(w, cfg, slab, monitor, cpus, seat)
                else:
                    res = _run_dynamic(w, cfg, slab, monitor, cpus, counter, seat, split)
            res.foreign = probe.share()
            total_bad = w.allreduce_sum(res.bad_rows)
            results = w.gather(res)
            ok = None
            if w.rank == 0:
                record = combine(cfg, schedulers.get(cfg.scheduler).family, results, total_bad,
                                 split, started)
                if not record.verified or record.lost_workers:
                    warn_unverified(record)
                on_record(record)
                ok = record.verified
            # nobody starts the next run (where it might fail and abort the job) before
            # rank 0 has flushed this one
            failed += not w.bcast(ok)
    return failed


def _slab(w, cfg: RunConfig, split: str) -> Slab:
    if split != "static":
        slab = Slab(cfg.frames, cfg.height, cfg.width, cfg.seed, frame0=0, generate=False)
    else:
        from ..workloads.build import build

        first, count = policies.static_blocks(cfg.frames, w.size)[w.rank][0]
        # only this rank's tasks, global ids frame0.. (a Slab for the paper's workload)
        slab = build(cfg, frames=count, frame0=first)
    # When one rank aborts, mpiexec SIGKILLs the others while they wait in a collective, so
    # no exit path of theirs runs: drop the /dev/shm names now and the kernel frees the
    # memory with the last mapping (backends inherit mappings across fork, never open names).
    slab.unlink_names()
    return slab
