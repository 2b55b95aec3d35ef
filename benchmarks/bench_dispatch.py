"""Compiled dispatch (issue 12 item 5):  python benchmarks/bench_dispatch.py [--quick]

1. 50us  -- 20000 frames of 32x64 (~50 us each) at k = N: dynamic (chunk 1), guided and
            chunk through the Python loop and the compiled loop, against serial, with numba
            prange (numba's static split, and its dynamic one-frame hand-out under
            numba.parallel_chunksize(1)) and a plain Python lock-and-counter loop as
            peers (targets: compiled dynamic, guided, chunk sigma_E >= 0.97).
2. 7us   -- 200000 frames of 4x64 (~7 us each), the same variants (target: compiled
            dynamic sigma_E >= 0.95).
3. cost  -- the per-chunk dispatch cost: an empty numba kernel over one-byte frames (always
            sorted, so the run still verifies), one frame per chunk, at k = 1 and k = N:
            worker time per chunk T k / chunks in ns, and chunks claimed per second.
4. line  -- the hand-off of one cache line between two CPUs (two pinned workers taking
            turns on one counter): what a claim costs when the other worker claimed last.

Schedulers are timed by hybridsched.study.runner.timed_run on a workload.Slab with the trace
recorded, exactly as a study times them; --dispatch python|compiled is RunConfig.dispatch.
Variants run interleaved, rep by rep and in a new (seeded) order each rep, so a load change
on a shared machine hits all of them alike. sigma_E = T_serial / T / k (Eqs. 4-5); "mean" is
the mean over the reps (the issue's figure), "best" the fastest rep. On a busy machine the
figures mean nothing: the tables say so when serial got less than 90 % of its CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import numba
import numpy as np

from hybridsched import kernels
from hybridsched.backends import compiled
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.procfs import ForeignLoad
from hybridsched.oslayer.cpus import n_cpus, pin_current, usable_cpus
from hybridsched.workloads.slab import Slab

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_refs  # noqa: E402
from bench_core import Series, VerifyError, run_reference  # noqa: E402

N = n_cpus()
bench_cpus = usable_cpus()
POLICIES = ("dynamic", "guided", "chunk")
DISPATCH = ("python", "compiled")
PEERS = ("numba prange", "numba prange chunksize 1", "plain lock+counter")
COARSE_TARGETS = {f"{p} compiled": 0.97 for p in POLICIES}
FINE_TARGETS = {"dynamic compiled": 0.95}
BUSY_SHARE = 0.9  # serial's CPU share below which the machine is busy
# Per variant, the share of the N CPUs other processes took during each rep (ForeignLoad,
# as every study run records it): what a parallel run loses to them and serial does not,
# since serial leaves a CPU idle for them.
OTHERS: dict[str, list[float]] = {}


@numba.njit(nogil=True, cache=True)
def empty(t, first, count):
    """Does nothing: the run's time is the dispatch alone."""


@numba.njit(nogil=True)
def _ping(ctl, me, n):
    # take turns with the other worker: each turn moves the counter's line between CPUs
    for _ in range(n):
        while compiled.fetch_add(ctl, 0, 0) % 2 != me:
            pass
        compiled.fetch_add(ctl, 0, 1)


def section_line(turns: int, reps: int) -> list[tuple[str, bool]]:
    """What one claim of a shared ticket costs when the other CPU claimed last: two
    workers pinned to CPUs 0 and 1 increment one counter in turn; the time per turn is one
    hand-off of its cache line. A chunk-1 claim pays it whenever the other worker claimed
    in between (at k = 2, about every claim)."""
    if N < 2:
        return []
    buf = np.zeros(16, np.int64)
    ctl = buf[(-buf.ctypes.data % 64) // 8:][:8]
    _ping(ctl, 0, 1)
    per = []
    for _ in range(reps):
        ctl[0] = 0
        go = [threading.Thread(target=lambda w: (pin_current(bench_cpus[w]), _ping(ctl, w, turns)),
                               args=(w,)) for w in range(2)]
        t0 = time.perf_counter()
        for t in go:
            t.start()
        for t in go:
            t.join()
        per.append((time.perf_counter() - t0) / (2 * turns) * 1e9)
    print(f"\n## cache-line hand-off between CPUs {bench_cpus[0]} and {bench_cpus[1]}\n")
    print(f"{statistics.fmean(per):.0f} ns per hand-off (mean of {reps}; {min(per):.0f} .. "
          f"{max(per):.0f} ns), {2 * turns} turns each: a chunk-1 claim's floor when the other "
          "worker claimed last")
    return []


def run_variant(slab: Slab, scheduler: str, k: int, series: Series, dispatch: str = "auto",
                kernel: str = "quicksort", label: str | None = None) -> None:
    L, H, W = slab.shape
    cfg = RunConfig(scheduler, k, L, H, W, affinity=bench_refs.PIN, kernel=kernel, dispatch=dispatch)
    rec = timed_run(slab, cfg)
    if not rec.verified:
        raise VerifyError(f"{scheduler} {dispatch}: run not verified ({rec.error or rec.bad_rows})")
    if scheduler != "serial" and (rec.dispatch == "compiled") != (dispatch == "compiled"):
        raise VerifyError(f"{scheduler}: asked for {dispatch} dispatch, the {rec.dispatch} loop ran")
    cpu = float((rec.workers["user"] + rec.workers["system"]).sum())
    series.add(label or scheduler, k, rec.time_s, len(rec.trace), cpu)
    OTHERS.setdefault(label or scheduler, []).append(rec.extra.get("foreign_cpu", math.nan))


def run_peer(slab: Slab, name: str, k: int, series: Series) -> None:
    probe = ForeignLoad(usable_cpus())
    run_reference(slab, name, k, series)
    OTHERS.setdefault(name, []).append(probe.share())


def section_grain(title: str, shape: tuple[int, int, int], reps: int, how: str, seed: int,
                  targets: dict[str, float]) -> list[tuple[str, bool]]:
    series = Series()
    variants = [("serial", lambda slab: run_variant(slab, "serial", 1, series))]
    variants += [(f"{p} {d}", lambda slab, p=p, d=d: run_variant(slab, p, N, series, d,
                                                                 label=f"{p} {d}"))
                 for p in POLICIES for d in DISPATCH]
    variants += [(peer, lambda slab, peer=peer: run_peer(slab, peer, N, series))
                 for peer in PEERS]
    # A fresh order every rep (seeded): in a fixed order each variant always follows the
    # same one, and whatever that one leaves behind (its garbage, a vCPU the host just
    # slowed) would be charged to the same variant every time.
    order = random.Random(seed)
    with Slab(*shape, seed) as slab:
        for _ in range(reps):
            for _, run in order.sample(variants, len(variants)):
                run(slab)
    L, H, W = shape
    per_task = series.t("serial", "mean") / L * 1e6
    print(f"\n## {title}: {L} frames of {H}x{W} (~{per_task:.1f} µs each), k = N = {N}\n")
    print("| variant | chunks | T mean (ms) | T best (ms) | σE mean | σE best | CPU share | "
          "others' CPU | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, _ in variants:
        goal = targets.get(name)
        cell = ""
        if goal is not None:
            ok = series.sigma_e(name, how) >= goal
            cell = f"≥ {goal}: {'PASS' if ok else 'FAIL'}"
            verdicts.append((f"{title}: {name} σE({how}) {series.sigma_e(name, how):.3f} >= {goal}", ok))
        print(f"| {name} | {series.chunks[name]} | {series.t(name, 'mean') * 1e3:.1f} | "
              f"{series.t(name, 'best') * 1e3:.1f} | {series.sigma_e(name, 'mean'):.3f} | "
              f"{series.sigma_e(name, 'best'):.3f} | {series.best_share(name):.2f} | "
              f"{statistics.fmean(OTHERS[name]):.1%} | {cell} |")
    return _busy(series, verdicts, reps)


def _busy(series: Series, verdicts, reps: int):
    print(f"\n(reps per variant: {reps}; CPU share = worker CPU time / (T k) in the fastest rep; "
          "others' CPU = the mean share of the N CPUs other processes used during a rep, from "
          "/proc/stat in 10 ms ticks)")
    share = max(series.shares["serial"]) if "serial" in series.shares else 1.0
    if share < BUSY_SHARE:
        what = f"serial got at most {share:.0%} of its CPU"
        print(f"\n**WARNING: {what}: the machine is busy; re-run on a quiet machine.**")
        verdicts = [(f"{text} [machine busy: {what}]", ok) for text, ok in verdicts]
    return verdicts


def section_cost(frames: int, reps: int) -> list[tuple[str, bool]]:
    kernels.KERNELS["empty"] = (empty, "benchmark: no work")
    series = Series()
    ks = sorted({1, N})
    with Slab(frames, 1, 1, 0) as slab:  # one-byte frames: sorted already, so verified
        for _ in range(reps):
            for k in ks:
                for d in DISPATCH:
                    run_variant(slab, "dynamic", k, series, d, kernel="empty", label=f"dynamic {d} k={k}")
    print(f"\n## dispatch cost: empty kernel, {frames} one-frame chunks\n")
    print("| variant | ns/chunk mean (T k / chunks) | ns/chunk best | chunks/s mean (all workers) |")
    print("|---|---|---|---|")
    for name in series.times:
        k, c = series.k[name], series.chunks[name]
        per = [t * k / c * 1e9 for t in series.times[name]]
        rate = statistics.fmean(c / t for t in series.times[name])
        print(f"| {name} | {statistics.fmean(per):.0f} | {min(per):.0f} | {rate:,.0f} |")
    print(f"\n(reps per variant: {reps}; the trace of every chunk is recorded, as in a study)")
    return []


SECTIONS = ("50us", "7us", "cost", "line")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="2 reps and a quarter of the frames (under a minute or two; noisier)")
    ap.add_argument("--reps", type=int, help="reps per variant (default 5, quick 2)")
    ap.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    ap.add_argument("--estimator", choices=("mean", "best"), default="mean",
                    help="which statistic the PASS/FAIL lines use (default: mean of the reps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--affinity", action=argparse.BooleanOptionalAction, default=True,
                    help="pin worker w to CPU w mod N, as the study does by default")
    args = ap.parse_args(argv)
    bench_refs.PIN = args.affinity
    reps = args.reps or (2 if args.quick else 5)
    scale = 4 if args.quick else 1
    sections = args.only or list(SECTIONS)
    how = args.estimator

    print(f"# hybridsched dispatch benchmark ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})\n")
    print(f"N = {N} usable CPUs, load average {os.getloadavg()[0]:.2f} at start, numba "
          f"{numba.__version__}, numpy {np.__version__}, Python {sys.version.split()[0]}; "
          f"PASS/FAIL on the {how} of {reps} reps{' (--quick)' if args.quick else ''}")
    kernels.prepare("quicksort")
    tiny = np.zeros((2, 2, 2), np.uint8)
    bench_refs.prange_frames(tiny)  # compile outside the timing
    t0 = time.perf_counter()
    verdicts: list[tuple[str, bool]] = []
    if "50us" in sections:
        verdicts += section_grain("50 µs tasks", (20000 // scale, 32, 64), reps, how, args.seed,
                                  COARSE_TARGETS)
    if "7us" in sections:
        verdicts += section_grain("7 µs tasks", (200000 // scale, 4, 64), reps, how, args.seed,
                                  FINE_TARGETS)
    if "cost" in sections:
        verdicts += section_cost(1_000_000 // scale, reps)
    if "line" in sections:
        verdicts += section_line(200_000 // scale, reps)
    print("\n## targets\n")
    for text, ok in verdicts:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; {time.perf_counter() - t0:.0f} s in all")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
