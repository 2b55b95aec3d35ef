"""Performance figures of issue 13, from one run:  python benchmarks/bench_portfolio.py [--quick]

1. workloads -- on each workload at k = N: every fixed scheduler (the paper's thread
                schedulers and every LB4OMP technique on threads) and ``auto`` over enough
                repetitions to settle, in this process: auto's race
                (techniques.auto.race_length executions), then rounds of every fixed
                scheduler once and auto once; auto's settled time (its median over the
                rounds) against the best fixed technique's over the same rounds
                (medians; target: within 5 %), auto's mean over the
                workloads against every fixed technique's mean, and the best technique
                against the paper's best thread scheduler (dynamic/guided).
2. dispatch  -- dispatch cost per chunk of each technique, one worker: on threads the CPU
                time of its dispenser's claim (+ done) alone, no kernel, and for a fixed
                hand-out the compiled loop's ns per chunk; on pipe-MtoM the
                producer's round trip per chunk (chunk-1 pipe-MtoM on 1x1 frames, the
                fork and pipe setup subtracted) plus that claim.

"The best fixed technique" is chosen and timed on different rounds (two-fold: picked on
the even rounds and timed on the odd ones, and the other way round; the two held-out
medians averaged); the targets are decided against that. The plain minimum over the ~30
fixed medians is printed too, but it is biased low: with dozens of techniques within the
noise of each other (a 30 ms loop varies by ~5 % run to run here), the smallest of their
medians is smaller than any one technique's true time by chance alone — the minimum of
noisy estimates, measured against an auto that has committed to one technique. The same
two folds decide the aggregate (the best technique by its mean over the workloads).

The workload is a parameter (``--workload a,b,c``; default the API issue's six). The runs
are the study layer's own (StudySpec configurations run by run_configurations, as
`hybridsched run` does), in an order no study uses: interleaved, because the racer lives in
the process and because this VM's speed drifts between studies made minutes apart.
Timing claims need a quiet machine: on a shared one the tables say nothing.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numba
import numpy as np

from hybridsched.core import registry
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.study.session import run_configurations
from hybridsched.study.spec import StudySpec
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.core.techniques import auto
from hybridsched.workloads.slab import Slab

N = n_cpus()
API_WORKLOADS = ("uniform", "ramp", "skewed", "heavytail", "varying", "mandelbrot")
PAPER_BEST = ("dynamic", "guided")
SETTLE_WITHIN = 0.05


def interleaved(wl: str, fixed: list[str], reps: int, race: int,
                shape: tuple[int, int, int]) -> np.ndarray:
    """One workload in this process: auto's race (``race`` executions), then ``reps``
    rounds of every fixed scheduler once and auto once, so the settled auto and the
    techniques it is compared with share the same minutes of the machine (this VM's
    speed drifts by several percent between studies made minutes apart)."""
    L, H, W = shape

    def configs(names: list[str], r: int):
        return StudySpec(names, [N], [L], H, W, reps=r, workload=wl).configurations()
    fx, au = configs(fixed, reps), configs(["auto"], race + reps)
    order = au[:race]
    for r in range(reps):
        rnd = [x for x in fx if x.rep == r]
        at = (r * 7) % (len(rnd) + 1)  # auto's place rotates: no one predecessor every round
        order += rnd[:at] + [au[race + r]] + rnd[at:]
    recs = list(run_configurations(order, lambda rec: None))
    return np.array([(r.config.scheduler, r.config.rep, r.time_s, r.verified, r.technique)
                     for r in recs],
                    dtype=[("scheduler", "U32"), ("rep", int), ("time_s", float),
                           ("verified", bool), ("technique", "U32")])


def held_out(folds: list[dict[str, float]]) -> tuple[float, tuple[str, str]]:
    """The best fixed technique's time without the minimum's bias (module doc): the one
    fastest on each fold, timed on the other fold; the two averaged."""
    a, b = (min(f, key=f.get) for f in folds)
    return (folds[1][a] + folds[0][b]) / 2, (a, b)


def section_workloads(args) -> list[tuple[str, bool]]:
    names = args.workload.split(",") if args.workload else list(API_WORKLOADS)
    fixed = registry.names("thread", technique=False) + \
        [n for n in registry.names("thread", technique=True) if n != "auto"]
    shape = (args.frames, args.height, args.width)
    race = auto.race_length(len(auto.PORTFOLIO))
    checks, per_wl = [], {}
    for wl in names:
        runs = interleaved(wl, fixed, args.reps, race, shape)
        if not runs["verified"].all():
            bad = sorted(set(runs["scheduler"][~runs["verified"]]))
            raise SystemExit(f"{wl}: runs not verified: {', '.join(bad)}")
        # medians decide (a single disturbed run of a 30 ms loop moved a mean of 8 by 11 %:
        # auto's fac2a against the fixed fac2a, +1 % in a 20-round A/B of the two alone);
        # the means are shown beside them
        times = {s: runs["time_s"][runs["scheduler"] == s] for s in fixed}
        rep_of = {s: runs["rep"][runs["scheduler"] == s] for s in fixed}
        mean = {s: float(np.median(t)) for s, t in times.items()}
        folds = [{s: float(np.median(times[s][rep_of[s] % 2 == f])) for s in fixed} for f in (0, 1)]
        avg = {s: float(np.mean(t)) for s, t in times.items()}
        ar = runs[runs["scheduler"] == "auto"]
        ar = ar[np.argsort(ar["rep"], kind="stable")]
        tail = ar[race:]
        settled = str(tail["technique"][-1])
        if set(tail["technique"]) != {settled}:
            raise SystemExit(f"{wl}: auto had not settled after {race} executions")
        t_auto = float(np.median(tail["time_s"]))
        best = min(mean, key=mean.get)
        paper = min(PAPER_BEST, key=lambda s: mean.get(s, np.inf))
        per_wl[wl] = (mean, t_auto, folds)
        print(f"\n## workload {wl}: k = N = {N}, L x H x W = {shape}; auto's race of {race} "
              f"executions, then {args.reps} rounds of every fixed scheduler and auto\n")
        print("| scheduler | T median (ms) | vs best | T mean (ms) |\n|---|---|---|---|")
        for s, t in sorted(mean.items(), key=lambda kv: kv[1]):
            print(f"| {s} | {t * 1e3:.2f} | {(t / mean[best] - 1) * 100:+.1f} % | "
                  f"{avg[s] * 1e3:.2f} |")
        held, picks = held_out(folds)
        gap = t_auto / held - 1
        naive = t_auto / mean[best] - 1
        print(f"\nauto settled on {settled} ({(mean[settled] / mean[best] - 1) * 100:+.1f} % as a fixed "
              f"technique): {t_auto * 1e3:.2f} ms (median of its {len(tail)} rounds; mean "
              f"{float(np.mean(tail['time_s'])) * 1e3:.2f}), "
              f"{gap * 100:+.1f} % vs the best fixed held out ({held * 1e3:.2f} ms: "
              f"{picks[0]} picked on the even rounds, {picks[1]} on the odd), "
              f"{naive * 100:+.1f} % vs the minimum of the medians ({best}); the race: "
              f"{', '.join(str(t) for t in ar['technique'][:race])}")
        print(f"best technique {best} vs the paper's best thread scheduler {paper}: "
              f"{(mean[best] / mean[paper] - 1) * 100:+.1f} %")
        checks.append((f"{wl}: auto settled within {SETTLE_WITHIN:.0%} of the best fixed (held out)",
                       gap <= SETTLE_WITHIN))
    if len(per_wl) > 1:
        common = set.intersection(*(set(m) for m, _, _ in per_wl.values()))
        means = {s: statistics.fmean(m[s] for m, _, _ in per_wl.values()) for s in common}
        auto_mean = statistics.fmean(t for _, t, _ in per_wl.values())
        best_s = min(means, key=means.get)
        fold_means = [{s: statistics.fmean(fs[f][s] for _, _, fs in per_wl.values()) for s in common}
                      for f in (0, 1)]
        held, picks = held_out(fold_means)
        print(f"\nmean T over workloads: auto {auto_mean * 1e3:.2f} ms; best fixed mean held out "
              f"{held * 1e3:.2f} ms ({picks[0]} picked on the even rounds, {picks[1]} on the odd); "
              f"minimum of the fixed means {means[best_s] * 1e3:.2f} ms ({best_s})")
        checks.append(("auto's mean T over workloads beats the best fixed technique's mean "
                       "(held out)", auto_mean < held))
        # the mean of T / (the workload's best fixed T): each workload weighs the same,
        # where the plain mean is mostly the slowest workload's
        rel = {s: statistics.fmean(m[s] / min(m.values()) for m, _, _ in per_wl.values())
               for s in common}
        auto_rel = statistics.fmean(t / min(m.values()) for m, t, _ in per_wl.values())
        best_r = min(rel, key=rel.get)
        print(f"mean T / best fixed T over workloads: auto {auto_rel:.4f}; best fixed "
              f"{rel[best_r]:.4f} ({best_r}); dynamic {rel.get('dynamic', float('nan')):.4f}, "
              f"guided {rel.get('guided', float('nan')):.4f} (both sides against the minimum)")
    return checks


def claim_cost(name: str, frames: int, min_chunks: int = 20000) -> tuple[float, int]:
    """Threads: CPU µs per claim (+ done where the technique learns) of the technique's
    dispenser alone, one worker, no kernel: the GIL-held work its hot path adds per
    chunk. New dispensers are built until ``min_chunks`` chunks were handed out."""
    import time
    from dataclasses import replace

    from hybridsched.backends.base import Job
    from hybridsched.study import profile

    info = registry.get(name)
    with Slab(frames, 1, 1, seed=1) as slab:
        job = Job(info, slab.work, "quicksort", 1, info.resolve_chunk(0, frames), False,
                  original=slab.original)
        profile.prepare(job)
        chunks, spent = 0, 0.0
        while chunks < min_chunks:
            disp = info.dispenser(frames, 1, job.chunk, None, job=replace(job))
            c0 = time.thread_time()
            while (c := disp.claim(0)) is not None:
                chunks += 1
                if disp.feedback:
                    disp.done(0, c[1], 1e-6 * c[1])
            spent += time.thread_time() - c0
    return spent / chunks * 1e6, chunks


def pipe_cost(name: str, frames: int) -> tuple[float, int]:
    """pipe-MtoM: wall µs per chunk, (T(L) - T(1 frame)) / (chunks - 1) at one worker on
    1x1 frames (the kernel is ~nothing; the difference removes the fork and pipe setup)."""
    def best(L: int) -> tuple[float, int]:
        out = (np.inf, 0)
        with Slab(L, 1, 1, seed=1) as slab:
            for _ in range(3):  # each timed run with a memory of its own
                rec = timed_run(slab, RunConfig(name, 1, L, 1, 1, 0, False, 0))
                if rec.verified and rec.time_s < out[0]:
                    out = (rec.time_s, len(rec.trace))
        return out
    (t1, _), (t, n) = best(1), best(frames)
    return ((t - t1) / (n - 1) * 1e6 if n > 1 else float("nan")), n


@numba.njit(nogil=True, cache=True)
def _empty(t, first, count):
    """Does nothing: a compiled run's time is its dispatch alone."""


def compiled_cost(name: str, frames: int, min_chunks: int = 1_000_000) -> tuple[float, float]:
    """Threads, compiled dispatch, one worker, empty kernel: (ns per chunk of the claim
    loop, µs per execution to build the technique's hand-out for k = N). The hand-out is
    precomputed, so the loop's cost per chunk (ticket, two clock reads, one record) is the
    same whatever the sizes: it is measured on the technique's own sizes repeated to
    ``min_chunks`` chunks, the one run's fixed cost then negligible. (NaN, NaN) for a
    technique whose hand-out is not fixed (it keeps the Python loop)."""
    import time

    from hybridsched.backends import compiled

    info = registry.get(name)
    if info.sequence is None:
        return float("nan"), float("nan")
    chunk = info.resolve_chunk(0, frames)
    build = []
    for _ in range(5):
        t0 = time.perf_counter()
        bounds = info.sequence(frames, N, chunk, None)
        build.append(time.perf_counter() - t0)
    sizes = np.diff(bounds)
    reps = -(-min_chunks // len(sizes))
    long = np.concatenate([[0], np.cumsum(np.tile(sizes, reps))]).astype(np.int64)
    data = np.zeros((1, 1, 1), np.int64)
    compiled.CompiledTickets(long[:2], 1).runner(_empty, data)(0)  # compile, untimed
    best = np.inf
    for _ in range(3):
        run = compiled.CompiledTickets(long, 1).runner(_empty, data)
        t0 = time.perf_counter()
        run(0)
        best = min(best, time.perf_counter() - t0)
    return best / (len(long) - 1) * 1e9, min(build) * 1e6


def section_dispatch(args) -> list[tuple[str, bool]]:
    names = [n for n in registry.names("thread", technique=True)]
    # the producer's IPC round trip per chunk does not depend on the technique (it claims
    # from the same dispenser the threads use): measure it once on chunk-1 pipe-MtoM,
    # where every frame is a chunk, and add each technique's claim cost to it
    ipc, ipc_n = pipe_cost("pipe-MtoM", max(2, args.dispatch_frames // 10))
    print(f"\n## dispatch cost per chunk (one worker)\n\npipe-MtoM round trip per chunk "
          f"(chunk 1, {ipc_n} chunks, T(L) - T(1) over the chunks): {ipc:.1f} µs\n")
    print("| technique | threads, Python loop: CPU µs/claim | chunks | threads, compiled: "
          "ns/chunk | compiled: µs to build the hand-out | pipe-MtoM: µs/chunk |")
    print("|---|---|---|---|---|---|")
    for n in names:  # each claim_cost's job has a memory of its own
        t, tc = claim_cost(n, args.dispatch_frames)
        ns, build = compiled_cost(n, args.dispatch_frames)
        cells = ("— (Python loop)", "—") if ns != ns else (f"{ns:.0f}", f"{build:.0f}")
        print(f"| {n} | {t:.2f} | {tc} | {cells[0]} | {cells[1]} | {ipc + t:.1f} |")
    print(f"\n(threads, Python loop: the technique's dispenser alone, thread CPU time, the "
          f"GIL-held work per chunk; compiled: the claim loop over the technique's hand-out "
          f"(its sizes repeated to 10^6 chunks) with an empty kernel, wall time per chunk, "
          f"trace recorded, and the time to build the hand-out of {args.dispatch_frames} "
          f"frames at k = {N} once per execution; pipes: the round trip plus the claim, "
          f"made by the producer)")
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: about 3 minutes on 2 cores")
    ap.add_argument("--workload", help="comma-separated workloads (default: the API issue's six)")
    ap.add_argument("--only", choices=["workloads", "dispatch"])
    ap.add_argument("--rounds", type=int, help="rounds of every fixed scheduler and the "
                    "settled auto (default 5, --quick 2); more: less noise, longer")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.height, args.width, args.reps = 400, 8, 64, args.rounds or 2
        args.dispatch_frames = 2000
        if not args.workload:
            args.workload = "uniform,skewed"
    else:
        args.frames, args.height, args.width, args.reps = 4000, 32, 128, args.rounds or 5
        args.dispatch_frames = 20000
    checks = []
    if args.only in (None, "workloads"):
        checks += section_workloads(args)
    if args.only in (None, "dispatch"):
        checks += section_dispatch(args)
    if checks:
        print("\n## targets\n")
        for what, ok in checks:
            print(f"- {'met' if ok else 'NOT met'}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
