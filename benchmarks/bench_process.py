"""Benchmark of the fork and pipe schedulers (issue 3). Prints tables of measured figures.

    python benchmarks/bench_process.py [--frames 100] [--reps 3] [--quick]

1. >= 100 frames of 640x640 at k = N: sigma and sigma_E of the five process schedulers vs
   serial (Eqs. 4-5).
2. k = 1.5 N with affinity: sigma of prolific vs pipe-MtoM vs dynamic threads (pinned
   oversubscription).
3. Dispatch cost per chunk (us) of the three pipe schedulers on tiny frames (1 x 8).
4. Fine-grained case, 20000 frames of 32x64 at k = N: sigma_E of the pipe schedulers with
   chunk 1 and with --chunk auto, against multiprocessing.Pool.imap (chunksize 1 and 16)
   over the same kernel on the same shared slab, in the same run.

Every run is verified (unverified runs abort the benchmark). Times are means over --reps;
the serial reference is re-measured between the runs of each scheduler (the machine may be
shared, and a load change would otherwise skew sigma).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time

import numpy as np

from hybridsched import kernels
from hybridsched.core import policies as pol
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.workloads.slab import Slab

PROCESS = ["prolific", "collective", "pipe-1to1", "pipe-1toN", "pipe-MtoM"]
PIPES = ["pipe-1to1", "pipe-1toN", "pipe-MtoM"]
KERNEL = "quicksort"


def measure(slab: Slab, name: str, k: int, chunk: int = 0, reps: int = 3, affinity: bool = True):
    """Mean time (s) over reps, plus the last record."""
    L, H, W = slab.shape
    times, rec = [], None
    for rep in range(reps):
        cfg = RunConfig(name, k, L, H, W, chunk, affinity, rep, KERNEL, slab.seed)
        rec = timed_run(slab, cfg)
        if not rec.verified:
            sys.exit(f"{name} k={k} chunk={chunk}: run not verified: {rec.error or rec.bad_rows}")
        times.append(rec.time_s)
    return statistics.mean(times), rec


def cpu_share(rec) -> float:
    """CPU time the workers got over their wall time (user + system over end - start): 1.0
    per worker on an idle machine; lower means other processes took the CPU."""
    w = rec.workers
    wall = float((w["end"] - w["start"]).sum())
    return float((w["user"] + w["system"]).sum()) / wall if wall > 0 else float("nan")


def paired(slab: Slab, name: str, k: int, chunk: int = 0, reps: int = 3, affinity: bool = True):
    """Serial and ``name`` interleaved rep by rep, so a load change on a shared machine hits
    both: (mean T_serial, mean T_name, last record of name, "share serial/name")."""
    ts, tk, rec, shares = [], [], None, ([], [])
    for _ in range(reps):
        t, srec = measure(slab, "serial", 1, reps=1)
        ts.append(t)
        shares[0].append(cpu_share(srec))
        t, rec = measure(slab, name, k, chunk, reps=1, affinity=affinity)
        tk.append(t)
        shares[1].append(cpu_share(rec))
    share = f"{statistics.mean(shares[0]):.2f}/{statistics.mean(shares[1]):.2f}"
    return statistics.mean(ts), statistics.mean(tk), rec, share


def table(title: str, head: list[str], rows: list[list]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    sys.stdout.flush()


def section_k_equals_n(frames: int, reps: int, n: int) -> None:
    with Slab(frames, 640, 640, seed=1) as slab:
        rows = []
        for s in PROCESS:
            t1, t, _, share = paired(slab, s, n, reps=reps)
            rows.append([s, n, f"{t1 * 1e3:.1f}", f"{t * 1e3:.1f}", t1 / t, t1 / t / n, share])
    table(f"1. L={frames} frames of 640x640, k = N = {n}, affinity on (mean of {reps}, "
          "serial interleaved)", ["scheduler", "k", "T_serial (ms)", "T (ms)", "σ", "σE",
                                  "CPU share serial/sched"], rows)


def section_oversubscribed(frames: int, reps: int, n: int) -> None:
    k = max(n + 1, (3 * n) // 2)
    with Slab(frames, 640, 640, seed=1) as slab:
        rows = []
        for s in ("prolific", "pipe-MtoM", "dynamic"):
            t1, t, rec, share = paired(slab, s, k, reps=reps)
            per_cpu = np.bincount(rec.workers["cpu"], weights=rec.workers["frames"])
            rows.append([s, k, f"{t1 * 1e3:.1f}", f"{t * 1e3:.1f}", t1 / t, t1 / t / k,
                         "/".join(str(int(x)) for x in per_cpu), share])
    table(f"2. pinned oversubscription: L={frames} of 640x640, k = {k} on N = {n} (mean of {reps}, "
          "serial interleaved)", ["scheduler", "k", "T_serial (ms)", "T (ms)", "σ", "σE",
                                  "frames per CPU (last rep)", "CPU share serial/sched"], rows)


def section_dispatch(reps: int, n: int) -> None:
    L = 20000
    rows = []
    with Slab(L, 1, 8, seed=2) as slab:
        for s in PIPES:
            for k in (1, n):
                t, rec = measure(slab, s, k, chunk=1, reps=reps)
                chunks = len(rec.trace)
                busy = float(rec.workers["busy"].sum())
                rows.append([s, k, chunks, f"{t / chunks * 1e6:.2f}",
                             f"{(k * t - busy) / chunks * 1e6:.2f}"])
    table(f"3. dispatch cost, {L} frames of 1x8, chunk 1 (mean of {reps})",
          ["scheduler", "k", "chunks", "wall per chunk (µs)", "non-kernel worker time per chunk (µs)"],
          rows)


_POOL_WORK = None


def _pool_sort(i: int) -> int:
    kernels.get_kernel(KERNEL)(_POOL_WORK, i, 1)
    return i


def pool_imap(slab: Slab, k: int, chunksize: int, reps: int) -> float:
    """multiprocessing.Pool(k).imap over frame ids, timed from pool creation to the last
    result (pool start-up included, as fork and pipe creation are for ours)."""
    global _POOL_WORK
    _POOL_WORK = slab.work
    ctx = mp.get_context("fork")
    times = []
    for _ in range(reps):
        slab.fresh_copy()
        t0 = time.perf_counter()
        pool = ctx.Pool(k)
        try:
            for _ in pool.imap(_pool_sort, range(slab.frames), chunksize):
                pass
            t = time.perf_counter() - t0
        finally:
            pool.terminate()
            pool.join()
        if slab.bad_rows():
            sys.exit("Pool.imap run not verified")
        times.append(t)
    return statistics.mean(times)


def section_fine_grained(reps: int, n: int) -> None:
    L = 20000
    rows = []
    with Slab(L, 32, 64, seed=3) as slab:
        for s in PIPES:
            for c in (1, pol.AUTO_CHUNK):
                t1, t, rec, share = paired(slab, s, n, chunk=c, reps=reps)
                label = "1" if c == 1 else f"auto → {rec.chunk_used}"
                rows.append([s, n, label, f"{t1 * 1e3:.1f}", f"{t * 1e3:.1f}", t1 / t, t1 / t / n,
                             share])
        for s in ("dynamic", "prolific"):
            t1, t, _, share = paired(slab, s, n, reps=reps)
            rows.append([s, n, "1", f"{t1 * 1e3:.1f}", f"{t * 1e3:.1f}", t1 / t, t1 / t / n, share])
        for cs in (1, 16):
            ts, tk = [], []
            for _ in range(reps):
                ts.append(measure(slab, "serial", 1, reps=1)[0])
                tk.append(pool_imap(slab, n, cs, 1))
            t1, t = statistics.mean(ts), statistics.mean(tk)
            rows.append(["Pool.imap", n, f"chunksize {cs}", f"{t1 * 1e3:.1f}", f"{t * 1e3:.1f}",
                         t1 / t, t1 / t / n, "-"])
    table(f"4. fine-grained: {L} frames of 32x64, k = N = {n} (mean of {reps}, serial interleaved; "
          "auto search untimed)", ["scheduler", "k", "chunk", "T_serial (ms)", "T (ms)", "σ", "σE",
                                  "CPU share serial/sched"],
          rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=100, help="frames of 640x640 (>= 100)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20 frames, 1 rep")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.reps = 20, 1
    n = n_cpus()
    kernels.prepare(KERNEL)  # compile before any fork
    print(f"# bench_process: N = {n} usable CPUs, kernel {KERNEL}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    section_k_equals_n(args.frames, args.reps, n)
    section_oversubscribed(args.frames, args.reps, n)
    section_dispatch(args.reps, n)
    section_fine_grained(args.reps, n)


if __name__ == "__main__":
    main()
