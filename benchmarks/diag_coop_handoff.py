#!/usr/bin/env python3
"""Where coop's time goes under oversubscription (issue 10): the cost of one hand-off.

1. floor   -- two processes pinned to one CPU passing a futex word back and forth, with
              and without a 200 µs compute step between passes: what a hand-off costs at
              the least from Python on this machine;
2. coop    -- one job of two workers on ONE token (colocate bsp, block barrier, CPU 0):
              every barrier step is a hand-off, so (makespan - 2 x steps x S) / steps is
              coop's cost per hand-off; the same under plain Linux for comparison;
3. J = 2   -- the bench's case (2 jobs x N workers, spin-block, 200 µs): how often a
              worker lost its token (switches per worker against the steps): near one
              per two steps means each job runs its workers one after the other on one
              CPU, a hand-off at every step, instead of on all its CPUs at a time.

Usage: python benchmarks/diag_coop_handoff.py [--reps R]
"""
from __future__ import annotations

import argparse
import mmap
import os
import time

import numpy as np

from hybridsched.oslayer import futex
from hybridsched.colocate.experiment import run_colocate
from hybridsched.colocate.spec import ColocateSpec
from hybridsched.colocate.work import busy, iters_per_us
from hybridsched.oslayer.cpus import n_cpus

STEP_US = 200


def floor(passes: int, step_us: float) -> float:
    """µs per hand-off between two processes on CPU 0 (the steps' compute subtracted)."""
    m = mmap.mmap(-1, 64)
    w = np.frombuffer(m, np.int32, 2)
    addr = [futex.address(w, 0), futex.address(w, 1)]
    iters = int(step_us * iters_per_us())

    def loop(me: int, other: int, first: bool) -> None:
        os.sched_setaffinity(0, {0})
        if first:
            w[other] = 1
            futex.wake(addr[other], 1)
        for _ in range(passes):
            while w[me] == 0:
                futex.wait(addr[me], 0, 0.2)
            w[me] = 0
            busy(iters)
            w[other] = 1
            futex.wake(addr[other], 1)

    busy(10)
    mask = os.sched_getaffinity(0)
    pid = os.fork()
    if pid == 0:
        try:
            loop(1, 0, False)
        finally:
            os._exit(0)
    t0 = time.perf_counter()
    try:
        loop(0, 1, True)
    finally:
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, mask)
    dt = time.perf_counter() - t0
    return (dt - 2 * passes * iters / iters_per_us() * 1e-6) / (2 * passes) * 1e6


def one_token(steps: int, reps: int) -> dict[str, float]:
    """µs per barrier step beyond the compute, one job of 2 workers on CPU 0."""
    spec = ColocateSpec(workload="bsp", jobs=1, workers=2, policies=["linux", "coop"],
                        barrier="block", step_us=STEP_US, steps=steps, reps=reps)
    out: dict[str, list[float]] = {}
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # the jobs inherit it: Linux's workers on CPU 0 as well
    try:
        for r in run_colocate(spec, lambda r: None, cpus=[0]):
            if r.verified:
                ideal = 2 * steps * STEP_US * 1e-6
                out.setdefault(r.policy, []).append((r.makespan_s - ideal) / steps * 1e6)
    finally:
        os.sched_setaffinity(0, mask)
    return {p: float(np.median(v)) for p, v in out.items()}


def two_jobs(steps: int, reps: int) -> list[tuple[float, float]]:
    """(makespan, switches per worker) of each coop repetition at J = 2, spin-block."""
    spec = ColocateSpec(workload="bsp", jobs=2, workers=n_cpus(), policies=["coop"],
                        barrier="spin-block", step_us=STEP_US, steps=steps, reps=reps)
    spec.validate(n_cpus())
    recs = [r for r in run_colocate(spec, lambda r: None) if r.verified]
    return [(max(r.makespan_s for r in recs if r.rep == rep),
             float(np.mean([r.switches for r in recs if r.rep == rep])))
            for rep in sorted({r.rep for r in recs})]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"# coop hand-off diagnosis, N = {n_cpus()} ({time.strftime('%Y-%m-%d %H:%M')})\n")
    print(f"1. floor: futex hand-off between two processes on one CPU: "
          f"{floor(5000, 0):.1f} µs back to back, {floor(2000, STEP_US):.1f} µs with a "
          f"{STEP_US} µs step between")
    per = one_token(1000, a.reps)
    co, lx = per.get("coop", float("nan")), per.get("linux", float("nan"))
    print(f"2. one token, one job of 2 workers, block barrier, {STEP_US} µs steps: beyond "
          f"the calibrated compute, coop {co:.1f} µs per step (one hand-off), Linux "
          f"{lx:.1f} µs (its futex barrier on the same CPU): coop's excess {co - lx:.1f} µs "
          f"per hand-off (the calibration's error cancels in the difference)")
    steps = int(0.4e6 / STEP_US)
    for mk, sw in two_jobs(steps, a.reps):
        print(f"3. J = 2 x {n_cpus()} workers, spin-block, {steps} steps of {STEP_US} µs "
              f"(ideal {steps * STEP_US * 1e-6 * 2:.3f} s): coop makespan {mk:.3f} s, "
              f"{sw:.0f} token switches per worker ({sw / steps:.2f} per step)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
