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

from ..kernels import KERNELS, generate_frames
from ..backends import get_backend
from ..backends.base import Job
from ..core import policies, registry as schedulers
from ..core.splits import SPLITS, dynamic_chunks, handout_digest, split_technique
from ..errors import UsageError
from ..oslayer.cpus import usable_cpus
from ..oslayer.shm import available_memory
from ..records import RunConfig, RunRecord
from ..study.measure import Measured
from ..study.runner import Body
from ..study.session import study_loop
from ..study.world import World
from ..workloads.build import build
from ..workloads.slab import Slab, tensor_bytes
from ..workloads.space import Workspace, over_frames
from .ranks import local_cpus, maybe_corrupt, maybe_fail, slowdown
from .rma import TicketCounter



def check_split(configs: list[RunConfig], P: int, split: str, local_ranks: int = 1) -> None:
    """Raise UsageError for a split that cannot give every rank work, or whose slabs would
    not fit in the memory of a node running ``local_ranks`` of the ranks."""
    if split not in SPLITS and not (":" in split and split_technique(split)):
        raise UsageError(f"--split must be one of {', '.join(SPLITS)} or a deterministic "
                         f"technique package.module:Class, got {split!r}")
    if any(c.chunk < 0 for c in configs):
        raise UsageError("--chunk auto is not supported under mpiexec (the search would run "
                         "inside the timed region on each rank); search on one node and pass "
                         "the chunk it reports")
    if any(c.input_hash or c.verify or c.kernel not in KERNELS for c in configs):
        raise UsageError("--input, --verify and --kernel MODULE:FUNCTION are not supported "
                         "under mpiexec yet; run them at P = 1")
    if split != "static" and any(c.workload != "uniform" for c in configs):
        raise UsageError("--workload under mpiexec needs --split static (each rank builds "
                         "its block's tasks)")
    profiled = sorted({c.scheduler for c in configs if schedulers.get(c.scheduler).profiled})
    if profiled and split != "static":
        raise UsageError(f"{', '.join(profiled)} {'needs' if len(profiled) == 1 else 'need'} "
                         "a profiling run of the loop, which a "
                         f"--split {split} chunk would pay inside the timed region; use "
                         "--split static")
    small = [c.frames for c in configs if c.frames < P]
    if small and split == "static":
        raise UsageError(f"--frames {min(small)} is smaller than the {P} MPI ranks: "
                         "every rank needs at least one frame")
    if split != "static" and local_ranks > 1 and configs:
        # a rank of a dynamic split may claim any frame, so each holds a slab for all L
        # (the single copy that build_spec's check allowed for is a static split's whole)
        big = max(configs, key=lambda c: tensor_bytes(c.frames, c.height, c.width))
        need = 2 * local_ranks * tensor_bytes(big.frames, big.height, big.width)
        have = available_memory()
        if need > have:
            raise UsageError(
                f"--split {split}: each of the {local_ranks} ranks on this node holds the "
                f"whole {big.frames}x{big.height}x{big.width} tensor (original + work copy), "
                f"{_size(need)} in all, but only {_size(have)} is available; use --split "
                "static (a rank holds its block) or fewer ranks per node")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _dilate(ex, factor: float) -> None:
    """Benchmark hook (mpi.ranks.slowdown): idle (factor - 1) x the execution's time and
    move its end, so this rank looks like a node that much slower."""
    if factor > 1.0:
        time.sleep((factor - 1.0) * (ex.t_end - ex.t_begin))
        ex.t_end = perf_counter()


class StaticSplit:
    """Each rank runs the local scheduler over its own block of frames, from the barrier's
    exit to the end of its last worker."""

    fresh = True

    def __init__(self, w: World, slab: Workspace):
        self.w, self.slab = w, slab
        self.prefix = f"rank {w.rank} on {w.host}: "

    def run(self, job: Job, m: Measured) -> None:
        w = self.w
        w.barrier()
        p0, w0 = perf_counter(), w.wtime()
        ex = get_backend(job.info.backend)(job)
        _dilate(ex, slowdown(w.rank))
        m.wtime_s = w.wtime() - w0
        m.time_s = ex.t_end - p0
        m.frames, m.chunks = job.frames, 1
        ex.trace["first"] += self.slab.frame0  # the rank's local frame ids -> global ids
        m.add(ex, p0, w.rank * job.k)

    def verify(self, space: Workspace, m: Measured) -> int:
        maybe_corrupt(self.w.rank, space.work)
        return space.bad_rows()


class DynamicSplit:
    """Ranks take chunks of the frames from an RMA ticket counter and run the local
    scheduler over each, generating the chunk first (inside the timed region: it stands
    for the data movement a real dynamic split pays, measured as ``gen_s``)."""

    fresh = False  # a rank materialises only the frames it claims

    def __init__(self, w: World, slab, counter, cpus: list[int], split: str,
                 params: dict | None = None):
        self.w, self.slab, self.counter, self.split = w, slab, counter, split
        self.params = params
        self.gen_threads = max(1, len(cpus))
        self.prefix = f"rank {w.rank} on {w.host}: "
        self.mine: list[tuple[int, int]] = []

    def run(self, job: Job, m: Measured) -> None:
        w, work, slab = self.w, job.work, self.slab
        chunks = dynamic_chunks(job.frames, w.size, job.k, self.split, self.params)
        m.handout = handout_digest(chunks)  # rank 0 checks that every rank used the same
        threads = min(job.k, self.gen_threads)
        slow = slowdown(w.rank)
        self.counter.reset()
        p0, w0 = perf_counter(), w.wtime()
        t_last = p0
        try:
            while (ticket := self.counter.take()) < len(chunks):
                first, count = chunks[ticket]
                g0 = perf_counter()
                over_frames(lambda a, n: generate_frames(
                    work[first + a:first + a + n], slab.seed, first + a), count, threads)
                m.gen_s += perf_counter() - g0
                # no original for the chunk: this rank makes it only when it verifies
                chunk_job = replace(job, work=work[first:first + count], original=None)
                ex = get_backend(job.info.backend)(chunk_job)
                _dilate(ex, slow)
                ex.trace["first"] += first  # local frame ids of the chunk -> global ids
                m.add(ex, p0, w.rank * job.k)
                t_last = ex.t_end
                self.mine.append((first, count))
                m.frames += count
                m.chunks += 1
        finally:
            m.wtime_s = w.wtime() - w0
            m.time_s = t_last - p0

    def verify(self, space, m: Measured) -> int:
        """Untimed: make the original of the claimed frames and check them."""
        if self.mine:
            maybe_corrupt(self.w.rank, space.work[self.mine[0][0]:])
        bad = 0
        for first, count in self.mine:
            self.slab.generate(first, count)
            bad += self.slab.bad_rows(first, count)
        return bad


def run_split(w: World, configs: Iterable[RunConfig],
              on_record: Callable[[RunRecord], None], split: str = "static",
              split_params: dict | None = None) -> int:
    """Run every configuration on all ranks; rank 0 gets each combined record through
    ``on_record`` (which writes and flushes it). Returns the number of failed or
    unverified runs (on every rank). ``split_params``: what a user technique that splits
    the frames is given (the study's --param)."""
    configs = [replace(c, P=w.size) for c in configs]
    check_split(configs, w.size, split)
    cpus = local_cpus(usable_cpus(), w.local_rank, w.local_size)
    with contextlib.ExitStack() as stack:
        counter = stack.enter_context(TicketCounter(w)) if split != "static" else None

        def body(cfg: RunConfig, slab: Workspace) -> Body:
            return StaticSplit(w, slab) if split == "static" else \
                DynamicSplit(w, slab, counter, cpus, split, split_params)
        loop = study_loop(w, configs, on_record, lambda cfg: _slab(w, cfg, split), cpus=cpus,
                          body_for=body, split=split, split_params=split_params, before_run=lambda i: maybe_fail(w.rank, i))
        return sum(not ok for _, ok in loop)


def _slab(w: World, cfg: RunConfig, split: str) -> Workspace:
    slab: Workspace
    if split != "static":
        slab = Slab(cfg.frames, cfg.height, cfg.width, cfg.seed, frame0=0, generate=False)
    else:
        first, count = policies.static_blocks(cfg.frames, w.size)[w.rank][0]
        # only this rank's tasks, global ids frame0.. (a Slab for the paper's workload)
        slab = build(cfg, frames=count, frame0=first)
    # When one rank aborts, mpiexec SIGKILLs the others while they wait in a collective, so
    # no exit path of theirs runs: drop the /dev/shm names now and the kernel frees the
    # memory with the last mapping (backends inherit mappings across fork, never open names).
    slab.unlink_names()
    return slab
