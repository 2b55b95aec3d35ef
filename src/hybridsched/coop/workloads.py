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

import math
import os

import numpy as np

from .barrier import TeamBarrier
from ..oslayer.cpus import allow_all_threads
from ..oslayer.procfs import process_counters, thread_counters
from .work import busy, iters_per_us


def _thread_counters() -> tuple[int, int]:
    inv, wait_ns, _ = thread_counters()
    return inv, wait_ns


class Bsp:
    counters = staticmethod(_thread_counters)

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

            if wk is not None:
                wk.acquire()
            acc = 0.0
            for s in range(steps):
                acc += busy(iters)
                if wk is not None:
                    wk.boundary()
                arr[s] = perf_counter()
                bar.wait(t, s + 1, barrier, wk)
                dep[s] = perf_counter()
            switches = 0
            if wk is not None:
                switches = wk.switches
                wk.leave()
            return acc, switches
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
    aimd jobs (AIMD was designed for shared machines, §6.2). The job's time is the
    scheduler's own timed region; the run is verified as in `run`."""

    counters = staticmethod(process_counters)

    @staticmethod
    def processes_per_job(spec) -> int:
        return 1

    @staticmethod
    def prepare(spec, jobs: int, per_job: int):
        from .. import kernels

        kernels.prepare()  # before any fork
        return {}

    @staticmethod
    def worker(spec, ctx, policy, cpus, j, t, w, sh, seat):
        from ..core import registry
        from ..backends import get_backend
        from ..backends.base import job_for
        from ..core.monitor import UtilisationMonitor
        from ..records import RunConfig
        from ..workloads.slab import Slab

        cfg = RunConfig(spec.scheduler, spec.workers, spec.steps, spec.height, spec.width,
                        seed=j, coop=seat is not None)
        slab = Slab(cfg.frames, cfg.height, cfg.width, cfg.seed)
        info = registry.get(cfg.scheduler)
        monitor = UtilisationMonitor().start() if info.needs_monitor else None
        job = job_for(cfg, slab.work, monitor, original=slab.original)
        mine = sorted({policy.place(j, i, spec.jobs, cpus) for i in range(spec.workers)} - {-1})
        if mine:
            job.cpus = mine  # partition: the job's workers round-robin over its own CPUs
        else:
            job.affinity = False  # linux: let the kernel place them; coop: the tokens do
        if seat is not None:
            job.coop, job.coop_job = seat
        slab.fresh_copy()
        if monitor is not None:
            monitor.reset()

        def run():
            try:
                ex = get_backend(info.backend)(job)
                row = sh.rows[w]
                ok = slab.bad_rows() == 0
                row["start"], row["end"] = ex.t_begin, ex.t_end  # the scheduler's timed region
                return (1.0 if ok else 0.0), 0
            finally:
                if monitor is not None:
                    monitor.stop()
                slab.close()
        run.sets_times = True
        return run

    @staticmethod
    def verify(spec, ctx, sh, j, sl) -> bool:
        return bool(sh.rows[sl]["checksum"][0] == 1.0)

    @staticmethod
    def spin_s(ctx, sh, j, sl, T) -> float:
        return math.nan

    @staticmethod
    def close(ctx) -> None:
        pass


WORKLOADS = {"bsp": Bsp, "blas": Blas, "run": Run}
