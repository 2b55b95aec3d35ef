"""Performance figures of issue 13, from one run:  python benchmarks/bench_portfolio.py [--quick]

1. workloads -- on each workload at k = N: every fixed scheduler (the paper's thread
                schedulers and every LB4OMP technique on threads) and ``auto`` over enough
                repetitions to settle; auto's settled time (median of the last half of its
                repetitions that chose its settled technique) against the best fixed
                technique of the same run (target: within 5 %), auto's mean over the
                workloads against every fixed technique's mean, and the best technique
                against the paper's best thread scheduler (dynamic/guided).
2. dispatch  -- dispatch cost per chunk of each technique, one worker: on threads the CPU
                time of its dispenser's claim (+ done) alone, no kernel; on pipe-MtoM the
                producer's round trip per chunk (chunk-1 pipe-MtoM on 1x1 frames, the
                fork and pipe setup subtracted) plus that claim.

The workload is a parameter (``--workload a,b,c``). The API issue's workloads (uniform,
ramp, skewed, heavytail, varying, mandelbrot) are used where `hybridsched run` has a
``--workload`` option; without it, this falls back to today's one workload (uniform
random rows to sort) and says so. Studies are made by `hybridsched run` in subprocesses
(so a figure is exactly what a study measures) and read back with the package's reader.
Timing claims need a quiet machine: on a shared one the tables say nothing.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from hybridsched import registry
from hybridsched.records import RunConfig
from hybridsched.store import read_runs
from hybridsched.study.runner import timed_run
from hybridsched.sysinfo import n_cpus
from hybridsched.techniques import auto
from hybridsched.workload import Slab

N = n_cpus()
API_WORKLOADS = ("uniform", "ramp", "skewed", "heavytail", "varying", "mandelbrot")
PAPER_BEST = ("dynamic", "guided")
SETTLE_WITHIN = 0.05


def has_workload_option() -> bool:
    out = subprocess.run([sys.executable, "-m", "hybridsched", "run", "--help"],
                         capture_output=True, text=True).stdout
    return "--workload" in out


def run_study(path: str, names: list[str], reps: int, shape: tuple[int, int, int],
              workload: str | None) -> np.ndarray:
    L, H, W = shape
    cmd = [sys.executable, "-m", "hybridsched", "run", "-s", ",".join(names), "-k", str(N),
           "--frames", str(L), "--height", str(H), "--width", str(W), "--reps", str(reps),
           "--out", path, "--overwrite"]
    if workload is not None:
        cmd += ["--workload", workload]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"hybridsched run failed: {p.stderr.strip()}")
    return read_runs(path)


def section_workloads(args, tmp: str) -> list[tuple[str, bool]]:
    use_opt = has_workload_option()
    names = args.workload.split(",") if args.workload else list(API_WORKLOADS)
    if not use_opt:
        print("\n(`hybridsched run` has no --workload option in this tree: only today's "
              "uniform sort workload is measured)")
        names = ["uniform"]
    fixed = ["serial"] + registry.names("thread", technique=False) + \
        [n for n in registry.names("thread", technique=True) if n != "auto"]
    shape = (args.frames, args.height, args.width)
    checks, per_wl = [], {}
    for wl in names:
        f_runs = run_study(f"{tmp}/{wl}-fixed.h5", fixed, args.reps, shape, wl if use_opt else None)
        a_runs = run_study(f"{tmp}/{wl}-auto.h5", ["auto"], args.auto_reps, shape,
                           wl if use_opt else None)
        ok = f_runs[f_runs["verified"] & (f_runs["k"] == N)]
        mean = {s: float(np.mean(ok["time_s"][ok["scheduler"] == s]))
                for s in dict.fromkeys(str(x) for x in ok["scheduler"]) if s != "serial"}
        ar = a_runs[a_runs["verified"]]
        ar = ar[np.argsort(ar["rep"], kind="stable")]
        tail = ar[len(ar) // 2:]
        techs = [str(t) for t in tail["technique"]]
        settled = max(set(techs), key=techs.count)
        t_auto = float(np.median(tail["time_s"][tail["technique"] == settled]))
        best = min(mean, key=mean.get)
        paper = min(PAPER_BEST, key=lambda s: mean.get(s, np.inf))
        per_wl[wl] = (mean, t_auto)
        print(f"\n## workload {wl}: k = N = {N}, L x H x W = {shape}, {args.reps} reps fixed, "
              f"{args.auto_reps} reps auto\n")
        print("| scheduler | T mean (ms) | vs best |\n|---|---|---|")
        for s, t in sorted(mean.items(), key=lambda kv: kv[1]):
            print(f"| {s} | {t * 1e3:.2f} | {(t / mean[best] - 1) * 100:+.1f} % |")
        gap = t_auto / mean[best] - 1
        print(f"\nauto settled on {settled}: {t_auto * 1e3:.2f} ms, {gap * 100:+.1f} % vs the best "
              f"fixed ({best}); choices: {', '.join(str(t) for t in ar['technique'])}")
        print(f"best technique {best} vs the paper's best thread scheduler {paper}: "
              f"{(mean[best] / mean[paper] - 1) * 100:+.1f} %")
        checks.append((f"{wl}: auto settled within {SETTLE_WITHIN:.0%} of the best fixed",
                       gap <= SETTLE_WITHIN))
    if len(per_wl) > 1:
        common = set.intersection(*(set(m) for m, _ in per_wl.values()))
        means = {s: statistics.fmean(m[s] for m, _ in per_wl.values()) for s in common}
        auto_mean = statistics.fmean(t for _, t in per_wl.values())
        print(f"\nmean over workloads: auto {auto_mean * 1e3:.2f} ms; best fixed mean "
              f"{min(means.values()) * 1e3:.2f} ms ({min(means, key=means.get)})")
        checks.append(("auto's mean over workloads beats every fixed technique's mean",
                       auto_mean < min(means.values())))
    return checks


def claim_cost(name: str, frames: int, min_chunks: int = 20000) -> tuple[float, int]:
    """Threads: CPU µs per claim (+ done where the technique learns) of the technique's
    dispenser alone, one worker, no kernel: the GIL-held work its hot path adds per
    chunk. New dispensers are built until ``min_chunks`` chunks were handed out."""
    import time
    from dataclasses import replace

    from hybridsched.backends.base import Job

    info = registry.get(name)
    with Slab(frames, 1, 1, seed=1) as slab:
        job = Job(info, slab.work, "quicksort", 1, info.resolve_chunk(0, frames), False,
                  original=slab.original)
        registry.prepare(job)
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
            for _ in range(3):
                auto.reset_state()
                rec = timed_run(slab, RunConfig(name, 1, L, 1, 1, 0, False, 0))
                if rec.verified and rec.time_s < out[0]:
                    out = (rec.time_s, len(rec.trace))
        return out
    (t1, _), (t, n) = best(1), best(frames)
    return ((t - t1) / (n - 1) * 1e6 if n > 1 else float("nan")), n


def section_dispatch(args) -> list[tuple[str, bool]]:
    names = [n for n in registry.names("thread", technique=True)]
    # the producer's IPC round trip per chunk does not depend on the technique (it claims
    # from the same dispenser the threads use): measure it once on chunk-1 pipe-MtoM,
    # where every frame is a chunk, and add each technique's claim cost to it
    ipc, ipc_n = pipe_cost("pipe-MtoM", max(2, args.dispatch_frames // 10))
    print(f"\n## dispatch cost per chunk (one worker)\n\npipe-MtoM round trip per chunk "
          f"(chunk 1, {ipc_n} chunks, T(L) - T(1) over the chunks): {ipc:.1f} µs\n")
    print("| technique | threads: CPU µs/claim | chunks | pipe-MtoM: µs/chunk |")
    print("|---|---|---|---|")
    for n in names:
        auto.reset_state()
        t, tc = claim_cost(n, args.dispatch_frames)
        print(f"| {n} | {t:.2f} | {tc} | {ipc + t:.1f} |")
    print("\n(threads: the technique's dispenser alone, thread CPU time, the GIL-held work "
          "per chunk; pipes: the round trip plus that claim, made by the producer)")
    return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: about 3 minutes on 2 cores")
    ap.add_argument("--workload", help="comma-separated workloads (default: the API issue's six)")
    ap.add_argument("--only", choices=["workloads", "dispatch"])
    args = ap.parse_args()
    if args.quick:
        args.frames, args.height, args.width, args.reps, args.auto_reps = 400, 8, 64, 2, 30
        args.dispatch_frames = 2000
        if not args.workload:
            args.workload = "uniform,skewed"
    else:
        args.frames, args.height, args.width, args.reps, args.auto_reps = 4000, 32, 128, 5, 60
        args.dispatch_frames = 20000
    checks = []
    with tempfile.TemporaryDirectory(prefix="bench-portfolio-") as tmp:
        if args.only in (None, "workloads"):
            checks += section_workloads(args, tmp)
        if args.only in (None, "dispatch"):
            checks += section_dispatch(args)
    if checks:
        print("\n## targets\n")
        for what, ok in checks:
            print(f"- {'met' if ok else 'NOT met'}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
