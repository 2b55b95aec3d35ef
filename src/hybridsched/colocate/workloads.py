"""The workloads of `hybridsched colocate`: what one job's processes do between the common
start and their end, how that is verified, and what interference is counted.

``bsp``   T forked workers per job: S-microsecond compute steps (nogil numba) separated by
          the job's barrier (:mod:`barrier`), the quantum checked at every step;
``blas``  one process per job running numpy matrix products with its BLAS pool at T
          threads (a real third-party runtime: OpenBLAS, busy-waiting between calls).
          Under coop the job takes as many tokens as are idle (at least one) before each
          call and sets the pool to that many threads through threadpoolctl, confining the
          pool to the tokens' CPUs (the seed's "manual integration"); under partition it is
          pinned to its N/J CPUs with a pool that size.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import replace
from typing import Callable, Protocol

import numpy as np

from ..kernels import prepare as load_kernels
from ..backends import compiled
from ..coop.barrier import TeamBarrier
from ..coop.seat import Seated
from ..errors import HybridschedError
from ..records import RunConfig
from ..study.resources import Resources
from ..study.runner import TimedRun
from ..workloads.build import build
from ..oslayer.cpus import allow_all_threads
from ..oslayer.procfs import process_counters, thread_counters
from .work import busy, iters_per_us


def _thread_counters() -> tuple[int, int]:
    inv, wait_ns, _ = thread_counters()
    return inv, wait_ns


class Workload(Protocol):
    """What an experiment needs of a workload kind (each kind is a class of static
    methods): its processes per job, the context prepared before the fork and closed
    after, each worker's ``run()`` (checksum, switches), the checks and the counters."""

    sets_times: bool  # whether run() writes its row's start and end itself

    def counters(self) -> tuple[int, int]: ...

    def processes_per_job(self, spec) -> int: ...

    def prepare(self, spec, jobs: int, per_job: int) -> dict: ...

    def worker(self, spec, ctx, policy, cpus, j, t, w, sh, seat) -> Callable[[], tuple[float, int]]: ...

    def verify(self, spec, ctx, sh, j, sl) -> bool: ...

    def spin_s(self, ctx, sh, j, sl, T) -> float: ...

    def close(self, ctx) -> None: ...


class Bsp:
    counters = staticmethod(_thread_counters)
    sets_times = False

    @staticmethod
    def processes_per_job(spec) -> int:
        return spec.workers

    @staticmethod
    def prepare(spec, jobs: int, per_job: int):
        return {"barriers": [TeamBarrier(per_job) for _ in range(jobs)],
                "iters": max(1, int(round(spec.step_us * iters_per_us())))}

    @staticmethod
    def worker(spec, ctx, policy, cpus, j, t, w, sh, seat):
        wk = seat[0].worker(seat[1]) if seat is not None else None
        bar = ctx["barriers"][j]
        if wk is not None:
            bar.slot[t] = wk.slot
        iters, steps, barrier = ctx["iters"], spec.steps, spec.barrier
        arr, dep = sh.arrive[w], sh.depart[w]

        def run():
            from time import perf_counter

            acc = 0.0
            with Seated(wk) as seat:
                boundary = seat.boundary
                for s in range(steps):
                    acc += busy(iters)
                    if boundary is not None:
                        boundary()
                    arr[s] = perf_counter()
                    bar.wait(t, s + 1, barrier, wk)
                    dep[s] = perf_counter()
            return acc, (wk.switches if wk is not None else 0)
        return run

    @staticmethod
    def verify(spec, ctx, sh, j, sl) -> bool:
        """No worker left step s before every partner had arrived at it, and every worker
        computed the same."""
        arrive, depart = sh.arrive[sl], sh.depart[sl]
        rows = sh.rows[sl]
        return bool((depart.min(axis=0) >= arrive.max(axis=0)).all()
                    and np.all(rows["checksum"] == rows["checksum"][0]))

    @staticmethod
    def spin_s(ctx, sh, j, sl, T) -> float:
        return float(ctx["barriers"][j].spin_s.mean())

    @staticmethod
    def close(ctx) -> None:
        for b in ctx["barriers"]:
            b.close()


class Blas:
    counters = staticmethod(process_counters)
    sets_times = False

    @staticmethod
    def processes_per_job(spec) -> int:
        return 1

    @staticmethod
    def prepare(spec, jobs: int, per_job: int):
        from threadpoolctl import ThreadpoolController

        n = spec.matrix
        rng = np.random.default_rng(12345)
        a = rng.standard_normal((n, n))
        b = rng.standard_normal((n, n))
        ctl = ThreadpoolController()
        with ctl.limit(limits=1, user_api="blas"):
            ref = float((a @ b).sum())
        return {"a": a, "b": b, "ref": ref}

    @staticmethod
    def worker(spec, ctx, policy, cpus, j, t, w, sh, seat):
        from threadpoolctl import ThreadpoolController

        T, J = spec.workers, spec.jobs
        mine = sorted({policy.place(j, i, J, cpus) for i in range(T)} - {-1})
        pool = len(mine) if mine else T
        if mine:
            os.sched_setaffinity(0, set(mine))  # the pool, created below, inherits it
        slots = [seat[0].worker(seat[1]) for _ in range(T)] if seat is not None else []
        ctl = ThreadpoolController()
        a, b, calls = ctx["a"], ctx["b"], spec.steps
        with ctl.limit(limits=pool, user_api="blas"):
            a[:2] @ b  # start the pool now, not inside the timed region

        def run():
            acc = 0.0
            switches = 0
            for _ in range(calls):
                if slots:
                    slots[0].acquire()
                    held = [slots[0]]
                    for s in slots[1:]:
                        if not s.try_acquire():
                            break
                        held.append(s)
                    allow_all_threads({s.cpu for s in held})
                    for s in held:
                        s.repinned()
                    with ctl.limit(limits=len(held), user_api="blas"):
                        acc += float((a @ b).sum())
                    for s in held:
                        s.block()
                else:
                    with ctl.limit(limits=pool, user_api="blas"):
                        acc += float((a @ b).sum())
            for s in slots:
                switches += s.switches
                s.leave()
            return acc, switches
        return run

    @staticmethod
    def verify(spec, ctx, sh, j, sl) -> bool:
        got = float(sh.rows[sl]["checksum"][0])
        return math.isclose(got, spec.steps * ctx["ref"], rel_tol=1e-9, abs_tol=1e-6)

    @staticmethod
    def spin_s(ctx, sh, j, sl, T) -> float:
        return math.nan  # OpenBLAS spins inside its own threads: not visible to us

    @staticmethod
    def close(ctx) -> None:
        pass


class Run:
    """Each job is one ordinary scheduler run (``--scheduler``, k = --workers) on its own
    L x H x W tensor: the paper's schedulers co-located, e.g. two dynamic jobs against two
    aimd jobs (AIMD was designed for shared machines, §6.2). The job is the study's own
    timed run (:class:`study.runner.TimedRun`): prepared (a technique's profile, a fresh
    copy) before the common start, its time the scheduler's timed region, verified as in
    `run`. The jobs' tensors are made by the parent before it forks and their /dev/shm
    names dropped at once, so a job killed outright leaves no segment behind."""

    counters = staticmethod(process_counters)
    sets_times = True  # the scheduler's timed region, not the worker's

    @staticmethod
    def processes_per_job(spec) -> int:
        return 1

    @staticmethod
    def config(spec, j: int, coop: bool = False) -> RunConfig:
        return RunConfig(spec.scheduler, spec.workers, spec.steps, spec.height, spec.width,
                         seed=j, coop=coop)

    @staticmethod
    def prepare(spec, jobs: int, per_job: int):
        configs = [Run.config(spec, j) for j in range(jobs)]
        load_kernels(configs[0].kernel, loop=compiled.wanted(configs))  # before any fork
        spaces = []
        try:
            for cfg in configs:
                space = build(cfg)
                spaces.append(space)
                space.unlink_names()  # the mappings live on in the jobs; no name is left
        except BaseException:
            Run.close({"spaces": spaces})
            raise
        return {"spaces": spaces}

    @staticmethod
    def worker(spec, ctx, policy, cpus, j, t, w, sh, seat):
        cfg = Run.config(spec, j, coop=seat is not None)
        mine = sorted({policy.place(j, i, spec.jobs, cpus) for i in range(spec.workers)} - {-1})
        # this job's resources (its own monitor: threads do not cross a fork), held from
        # here, before the common start, until the job's run has ended
        stack = contextlib.ExitStack()
        with stack:
            # its monitor only: the job's seat on the arbiter is the experiment's (coop)
            res = stack.enter_context(Resources([replace(cfg, coop=False)]))
            run = TimedRun(ctx["spaces"][j], cfg, res, cpus=mine or None, seat=seat)
            if not mine:
                run.job.affinity = False  # linux: let the kernel place them; coop: the tokens
            prepared = run.prepare()  # untimed, before the common start
            stack = stack.pop_all()

        def go():
            try:
                if prepared:
                    run.execute()
                    run.verify()
                m = run.m
                if m.error:
                    raise HybridschedError(m.error)
                if m.lost:  # pipe-MtoM recovered: the job verified, but say so, as `run` does
                    print(f"hybridsched: colocate job {j}: {cfg.scheduler} lost {m.lost} "
                          f"worker(s) and completed on the others ({m.notes})", file=sys.stderr)
                row = sh.rows[w]
                row["start"], row["end"] = m.t_begin, m.t_end  # the scheduler's timed region
                return (1.0 if m.bad_rows == 0 else 0.0), 0
            finally:
                stack.close()
        return go

    @staticmethod
    def verify(spec, ctx, sh, j, sl) -> bool:
        return bool(sh.rows[sl]["checksum"][0] == 1.0)

    @staticmethod
    def spin_s(ctx, sh, j, sl, T) -> float:
        return math.nan

    @staticmethod
    def close(ctx) -> None:
        for space in ctx.get("spaces", []):
            space.close()


WORKLOADS: dict[str, Workload] = {"bsp": Bsp, "blas": Blas, "run": Run}
