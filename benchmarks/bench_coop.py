#!/usr/bin/env python3
"""Cooperative scheduling against plain Linux on the same work (issue 10's figures).

1. `bsp`, J = 2 jobs x N workers, spin-block barrier, 200 us steps: makespan linux / coop
   (and partition), involuntary context switches per worker coop / linux;
2. the same at J = 4, and step sizes 20 us .. 10 ms at J = 2: where the gain fades;
3. `bsp` with a block barrier (coop within 5 % of Linux or better) and J = 1 (coop's cost);
4. `blas`, J = 2 and 4: coop vs oversubscribed Linux vs partition;
5. `run --coop` of prolific at k = 1.5 N and 16 N: sigma / N against pinned Linux.

Each row is one `colocate` experiment (policies interleaved per repetition, best-of and
mean reported); a timing counts only if every job verified (the barrier check).
Usage: python benchmarks/bench_coop.py [--reps R] [--quick]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hybridsched.coop.colocate import ColocateSpec, run_colocate
from hybridsched.sysinfo import n_cpus

N = n_cpus()


def experiment(jobs, workers, barrier, step_us, steps, reps, policies=("linux", "coop", "partition"),
               workload="bsp"):
    spec = ColocateSpec(workload=workload, jobs=jobs, workers=workers, policies=list(policies),
                        barrier=barrier, step_us=step_us, steps=steps, reps=reps)
    spec.validate(N)
    recs = run_colocate(spec, lambda r: None)
    out = {}
    for p in policies:
        mine = [r for r in recs if r.policy == p]
        reps_ok = sorted({r.rep for r in mine if all(x.verified for x in mine if x.rep == r.rep)})
        mk = [next(r.makespan_s for r in mine if r.rep == rep) for rep in reps_ok]
        ok = [r for r in mine if r.rep in reps_ok]
        out[p] = dict(mean=float(np.mean(mk)) if mk else math.nan, best=min(mk) if mk else math.nan,
                      invol=float(np.mean([r.invol_ctx for r in ok])) if ok else math.nan,
                      spin=float(np.mean([r.spin_s for r in ok])) if ok else math.nan,
                      reps=len(mk))
    ideal = max(steps * step_us * 1e-6, steps * step_us * 1e-6 * jobs * workers / N)
    return out, ideal


def line(label, res, ideal):
    lx, co = res["linux"], res["coop"]
    part = res.get("partition")
    gain = lx["mean"] / co["mean"]
    inv = co["invol"] / lx["invol"] if lx["invol"] else math.nan
    print(f"| {label} | {ideal:.3f} | {lx['mean']:.3f} | {co['mean']:.3f} | "
          f"{part['mean'] if part else math.nan:.3f} | **{gain:.2f}x** | "
          f"{lx['mean'] / ideal:.2f} | {co['invol']:.1f} / {lx['invol']:.1f} = {inv:.3f} | "
          f"{lx['spin']:.3f} / {co['spin']:.3f} |", flush=True)


def blas(reps, calls):
    """The seed's nested-BLAS case: J jobs, each calling numpy matrix products with its BLAS
    pool at N threads (linux: oversubscribed J x N; partition: N/J CPUs each; coop: c tokens
    before each call and the pool set to c through threadpoolctl)."""
    print(f"\n## blas: J jobs x {calls} products of {ColocateSpec().matrix}^2, BLAS pool N = {N} "
          f"threads per job, mean of {reps}\n")
    print("| J | linux (s) | coop (s) | partition (s) | linux/coop | partition/coop |")
    print("|---:|---:|---:|---:|---:|---:|")
    for jobs in (2, 4):
        res, _ = experiment(jobs, N, "block", 1, calls, reps, workload="blas")
        lx, co, pa = res["linux"]["mean"], res["coop"]["mean"], res["partition"]["mean"]
        print(f"| {jobs} | {lx:.3f} | {co:.3f} | {pa:.3f} | **{lx / co:.2f}x** | {pa / co:.2f}x |",
              flush=True)


def prolific(reps):
    from hybridsched import kernels, registry
    from hybridsched.backends import get_backend
    from hybridsched.coop.arbiter import Arbiter
    from hybridsched.records import RunConfig
    from hybridsched.workload import Slab

    kernels.prepare()
    L, H, W = 75 * N * 4, 256, 256
    print(f"\n## prolific, L = {L} frames of {H}x{W}, mean of {reps}\n")
    print("| k | T_serial (ms) | pinned Linux σ | σ/N | coop σ | σ/N (= ε(k_eff)) |")
    print("|---:|---:|---:|---:|---:|---:|")
    with Slab(L, H, W, 1) as slab:
        def timed(cfg, coop):
            ts = []
            for _ in range(reps):
                job = registry.job_for(cfg, slab.work, original=slab.original)
                slab.fresh_copy()
                if coop:
                    with Arbiter() as arb:
                        job.coop, job.coop_job = arb, arb.join_job()
                        ex = get_backend(job.info.backend)(job)
                        arb.leave_job(job.coop_job)
                else:
                    ex = get_backend(job.info.backend)(job)
                assert slab.bad_rows() == 0, "unverified run"
                ts.append(ex.seconds)
            return float(np.mean(ts))
        ser = timed(RunConfig("serial", 1, L, H, W), False)
        for k in sorted({-(-3 * N // 2), 16 * N}):
            cfg = RunConfig("prolific", k, L, H, W)
            lin, co = timed(cfg, False), timed(cfg, True)
            print(f"| {k} | {ser * 1e3:.1f} | {ser / lin:.3f} | {ser / lin / N:.3f} | {ser / co:.3f} | "
                  f"**{ser / co / N:.3f}** |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer step sizes")
    a = ap.parse_args()
    t0 = time.time()
    print(f"# coop vs Linux on N = {N} CPUs ({time.strftime('%Y-%m-%d %H:%M')})\n")
    print("| experiment | ideal (s) | linux (s) | coop (s) | partition (s) | linux/coop | linux/ideal | "
          "invol ctx per worker coop/linux | spin per worker linux/coop (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    steps_for = lambda us: max(20, int(0.4e6 / us))  # noqa: E731  ~0.4 s of compute per job
    res, ideal = experiment(2, N, "spin-block", 200, steps_for(200), a.reps)
    line("bsp J=2, spin-block, 200 µs", res, ideal)
    res, ideal = experiment(4, N, "spin-block", 200, steps_for(200), a.reps)
    line("bsp J=4, spin-block, 200 µs", res, ideal)
    for us in ([20, 2000] if a.quick else [20, 50, 1000, 10000]):
        res, ideal = experiment(2, N, "spin-block", us, steps_for(us), a.reps)
        line(f"bsp J=2, spin-block, {us} µs", res, ideal)
    res, ideal = experiment(2, N, "block", 200, steps_for(200), a.reps)
    line("bsp J=2, block, 200 µs", res, ideal)
    res, ideal = experiment(1, N, "block", 200, steps_for(200), a.reps, ("linux", "coop"))
    line("bsp J=1 (k = N), block, 200 µs", res, ideal)
    res, ideal = experiment(1, N, "spin-block", 200, steps_for(200), a.reps, ("linux", "coop"))
    line("bsp J=1 (k = N), spin-block, 200 µs", res, ideal)
    blas(a.reps, 20 if a.quick else 60)
    prolific(a.reps)
    print(f"\n(wall {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
