"""Performance figures of issue 2, from one run:  python benchmarks/bench_core.py [--quick]

0. hotpath -- Python CPU time per chunk of the thread backend's worker loop, now and
              before this benchmark's changes (one thread, empty frames; noise-free).
1. paper   -- a slice of the paper's workload (640x640 frames) at k = N: sigma_E of every
              thread scheduler against `serial` (target >= 0.97 for dynamic, guided,
              adaptive, chunk-steal).
2. fine    -- 20000 frames of 32x64 (~40 us each) at k = N: the schedulers, the per-chunk
              dispatch cost, and references run the same way on the same slab: a plain
              lock-and-counter loop, the thread backend's previous worker loop (with
              today's kernel), ThreadPoolExecutor.map, numba prange, and the compiled
              ticket loop on bare threads (target: dynamic >= 0.95). The schedulers run
              with the default --dispatch auto, so dynamic/guided/chunk are compiled;
              benchmarks/bench_dispatch.py sets the Python and compiled loops side by side.
3. kernel  -- serial per-row time of each kernel against C++ std::sort on the same rows
              (benchmarks/stdsort.cpp, built with g++ -O3 into a temp dir; target <= 1.25x).
4. smoke   -- wall time of `hybridsched run --preset smoke` in a subprocess, warm and with an
              empty numba cache (targets < 5 s and < 20 s).

Every scheduler is timed by hybridsched.study.runner.timed_run on a workload.Slab, so a figure
includes exactly what the study times; the references are timed the same way (a fresh work
copy before, untimed; the output verified after). Variants run interleaved, rep by rep, so
a load change on a shared machine hits all of them alike. sigma = T_serial / T (Eq. 4),
sigma_E = sigma / k (Eq. 5); "best" uses the fastest rep of each variant, "mean" the mean.
On a busy machine the sigma_E figures mean nothing; the tables say so when serial or static
got less than 90 % of their CPUs.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numba
import numpy as np

from hybridsched import kernels
from hybridsched.core.monitor import UtilisationMonitor
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.workloads.slab import Slab

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_refs  # noqa: E402
from bench_refs import (REFERENCES, loop_aimd, loop_current, loop_plain,  # noqa: E402
                        loop_previous, nogil_tickets, prange_frames)

HERE = Path(__file__).resolve().parent
N = n_cpus()
THREAD_SCHEDULERS = ["static", "dynamic", "guided", "chunk", "chunk-steal", "aimd", "adaptive"]
PAPER_TARGETS = {"dynamic": 0.97, "guided": 0.97, "adaptive": 0.97, "chunk-steal": 0.97}
FINE_TARGETS = {"dynamic": 0.95}
KERNEL_TARGET = 1.25            # quicksort per row / std::sort per row
SMOKE_WARM_S, SMOKE_FRESH_S = 5.0, 20.0
PER_CHUNK_MIN = 1000            # chunks below which the per-chunk cost is not shown
BUSY_SHARE = 0.9                # CPU share of serial/static below which the machine is busy


class VerifyError(RuntimeError):
    pass


# --- timing --------------------------------------------------------------------------------


class Series:
    """Times of each variant over the reps, plus its chunk count and the CPU share its
    workers got (CPU seconds / (T * k)): serial or static below 0.9 means a busy machine."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.shares: dict[str, list[float]] = {}
        self.chunks: dict[str, int] = {}
        self.k: dict[str, int] = {}

    def add(self, name: str, k: int, seconds: float, chunks: int, cpu_seconds: float) -> None:
        self.times.setdefault(name, []).append(seconds)
        self.shares.setdefault(name, []).append(cpu_seconds / (seconds * k))
        self.k[name], self.chunks[name] = k, chunks

    def best_share(self, name: str) -> float:
        """CPU share of the fastest rep."""
        v = self.times[name]
        return self.shares[name][v.index(min(v))]

    def t(self, name: str, how: str) -> float:
        v = self.times[name]
        return min(v) if how == "best" else statistics.fmean(v)

    def sigma_e(self, name: str, how: str) -> float:
        return self.t("serial", how) / self.t(name, how) / self.k[name]

    def per_chunk_us(self, name: str, how: str) -> float:
        """Dispatch cost: (T_k * k - T_serial) / chunks, the worker time per chunk beyond
        the kernel itself, in microseconds."""
        return (self.t(name, how) * self.k[name] - self.t("serial", how)) / self.chunks[name] * 1e6


def run_scheduler(slab: Slab, name: str, k: int, series: Series, label: str | None = None,
                  monitor=None) -> None:
    L, H, W = slab.shape
    rec = timed_run(slab, RunConfig(name, k, L, H, W, affinity=bench_refs.PIN), monitor)
    if not rec.verified:
        raise VerifyError(f"{name}: run not verified ({rec.error or rec.bad_rows})")
    cpu = float((rec.workers["user"] + rec.workers["system"]).sum())
    series.add(label or name, k, rec.time_s, len(rec.trace), cpu)


def run_reference(slab: Slab, name: str, k: int, series: Series) -> None:
    slab.fresh_copy()
    c0, t0 = time.process_time(), time.perf_counter()
    chunks = REFERENCES[name](slab.work, k)
    t, c1 = time.perf_counter() - t0, time.process_time()
    if slab.bad_rows():
        raise VerifyError(f"{name}: output not verified")
    series.add(name, k, t, chunks, c1 - c0)


def table(title: str, series: Series, targets: dict[str, float], how: str,
          per_chunk: bool = False) -> list[tuple[str, bool]]:
    print(f"\n## {title}\n")
    head = "| variant | k | chunks | T best (ms) | T mean (ms) | σE best | σE mean | CPU share |"
    rule = "|---|---|---|---|---|---|---|---|"
    if per_chunk:
        head += " µs/chunk best | µs/chunk mean |"
        rule += "---|---|"
    print(head + " target |\n" + rule + "---|")
    verdicts = []
    for name in series.times:
        row = (f"| {name} | {series.k[name]} | {series.chunks[name]} | {series.t(name, 'best') * 1e3:.1f} | "
               f"{series.t(name, 'mean') * 1e3:.1f} | {series.sigma_e(name, 'best'):.3f} | "
               f"{series.sigma_e(name, 'mean'):.3f} | {series.best_share(name):.2f} |")
        if per_chunk:
            # only where chunks are many: with a few big chunks the figure is load imbalance
            many = series.chunks[name] >= PER_CHUNK_MIN
            row += (f" {series.per_chunk_us(name, 'best'):.2f} | {series.per_chunk_us(name, 'mean'):.2f} |"
                    if many and name != "serial" else " | |")
        goal = targets.get(name)
        if goal is None:
            row += " |"
        else:
            ok = series.sigma_e(name, how) >= goal
            verdicts.append((f"{title}: {name} σE({how}) {series.sigma_e(name, how):.3f} >= {goal}", ok))
            row += f" ≥ {goal}: {'PASS' if ok else 'FAIL'} |"
        print(row)
    print(f"\n(reps per variant: {len(series.times['serial'])}; CPU share = worker CPU time / "
          "(T k) in the fastest rep)")
    # serial and static (no dispatch, no GIL waits) get ~100 % of their CPUs on a quiet machine
    busy = {name: max(series.shares[name]) for name in ("serial", "static") if name in series.shares}
    busy = {name: v for name, v in busy.items() if v < BUSY_SHARE}
    if busy:
        what = ", ".join(f"{name} got at most {v:.0%} of its CPUs" for name, v in busy.items())
        print(f"\n**WARNING: {what}: the machine is busy and the σE figures above are not "
              "meaningful; re-run on a quiet machine.**")
        verdicts = [(f"{text} [machine busy: {what}]", ok) for text, ok in verdicts]
    return verdicts


# --- sections ------------------------------------------------------------------------------


def section_paper(frames: int, reps: int, how: str, seed: int) -> list[tuple[str, bool]]:
    series = Series()
    with UtilisationMonitor() as monitor, Slab(frames, 640, 640, seed) as slab:
        for _ in range(reps):
            run_scheduler(slab, "serial", 1, series)
            for s in THREAD_SCHEDULERS:
                run_scheduler(slab, s, N, series, monitor=monitor)
    return table(f"paper slice: {frames} frames of 640x640, k = N = {N}", series, PAPER_TARGETS, how)


def section_fine(frames: int, reps: int, how: str, seed: int) -> list[tuple[str, bool]]:
    series = Series()
    with UtilisationMonitor() as monitor, Slab(frames, 32, 64, seed) as slab:
        tiny = np.zeros((2, 2, 2), np.uint8)
        prange_frames(tiny)  # compile outside the timing
        nogil_tickets(tiny, 1)
        for _ in range(reps):
            run_scheduler(slab, "serial", 1, series)
            for s in THREAD_SCHEDULERS:
                run_scheduler(slab, s, N, series, monitor=monitor)
            for name in REFERENCES:
                run_reference(slab, name, N, series)
    title = f"fine-grained: {frames} frames of 32x64, k = N = {N}"
    out = table(title, series, FINE_TARGETS, how, per_chunk=True)
    print(f"numba threading layer: {numba.threading_layer()}")
    return out


def section_kernel(frames: int, reps: int, how: str, seed: int) -> list[tuple[str, bool]]:
    """Per-row time of each kernel and of C++ std::sort on the same rows. The ratio uses CPU
    time of the sorting thread (CLOCK_THREAD_CPUTIME_ID on both sides), which other load on
    a shared machine does not inflate; wall-clock figures are shown beside it."""
    print(f"\n## kernels: serial time per 640-byte row, {frames} frames of 640x640\n")
    gxx = shutil.which("g++")
    n_rows = frames * 640
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hybridsched-bench-") as tmp, \
            Slab(frames, 640, 640, seed) as slab:
        rows = Path(tmp, "rows.bin")
        np.ascontiguousarray(slab.original).tofile(rows)
        exe = Path(tmp, "stdsort")
        if gxx:
            subprocess.run([gxx, "-O3", "-o", str(exe), str(HERE / "stdsort.cpp")], check=True)
        for _ in range(reps):
            for name in kernels.KERNELS:
                slab.fresh_copy()
                kernel = kernels.get_kernel(name)
                c0, t0 = time.thread_time(), time.perf_counter()
                kernel(slab.work, 0, frames)
                t1, c1 = time.perf_counter(), time.thread_time()
                wall.setdefault(name, []).append((t1 - t0) / n_rows * 1e9)
                cpu.setdefault(name, []).append((c1 - c0) / n_rows * 1e9)
                if slab.bad_rows():
                    raise VerifyError(f"kernel {name}: output not verified")
            if gxx:
                out = subprocess.run([str(exe), str(rows), "640", "1"], check=True,
                                     capture_output=True, text=True).stdout.split()
                wall.setdefault("C++ std::sort", []).append(float(out[0]))
                cpu.setdefault("C++ std::sort", []).append(float(out[1]))
    if not gxx:
        print("g++ not found: the std::sort reference is skipped\n")
    ref = "C++ std::sort"
    pick = min if how == "best" else statistics.fmean

    def ratio(d, name, f):
        return f(d[name]) / f(d[ref]) if gxx else float("nan")

    print("| kernel | CPU ns/row best | CPU ratio best | CPU ratio mean | wall ns/row best | "
          "wall ratio best | target |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for name in cpu:
        cell = ""
        if name == "quicksort" and gxx:
            r = ratio(cpu, name, pick)
            ok = r <= KERNEL_TARGET
            verdicts.append((f"kernel: quicksort / std::sort per row, CPU time ({how}) {r:.2f} <= {KERNEL_TARGET}", ok))
            cell = f"≤ {KERNEL_TARGET}: {'PASS' if ok else 'FAIL'}"
        print(f"| {name} | {min(cpu[name]):.0f} | {ratio(cpu, name, min):.2f} | "
              f"{ratio(cpu, name, statistics.fmean):.2f} | {min(wall[name]):.0f} | "
              f"{ratio(wall, name, min):.2f} | {cell} |")
    print(f"\n(reps: {reps}; each rep sorts a fresh copy of the same {n_rows} rows; g++ -O3, "
          "libstdc++ std::sort; ratio = kernel / std::sort)")
    return verdicts


def section_hotpath(reps: int) -> list[tuple[str, bool]]:
    """Python work per chunk of each worker loop: one thread, frames with no rows, so the
    kernel call is only its entry and GIL release/reacquire. Thread CPU time, so other load
    does not count. This is the GIL-held time per chunk that k threads contend for."""
    n = 200_000
    work = np.zeros((n, 0, 4), np.uint8)
    kernels.quicksort_frames(work, 0, 1)
    loops = {
        "previous hot path (9cb7c10)": loop_previous,
        "current hot path": loop_current,
        "current, numba dispatcher instead of entry point": partial(loop_current, entry=False),
        "current, locked counter instead of tickets": partial(loop_current, tickets=False),
        "plain lock+counter, no trace (reference)": loop_plain,
        "aimd claim+run+done": loop_aimd,
    }
    us: dict[str, list[float]] = {}
    for _ in range(reps):
        for name, loop in loops.items():
            c0 = time.thread_time()
            loop(work, n)
            us.setdefault(name, []).append((time.thread_time() - c0) / n * 1e6)
    print("\n## hot path: CPU µs per chunk of the worker loop (one thread, empty frames)\n")
    print("| loop | µs/chunk best | µs/chunk mean |\n|---|---|---|")
    for name, v in us.items():
        print(f"| {name} | {min(v):.3f} | {statistics.fmean(v):.3f} |")
    print(f"\n(reps: {reps}; {n} one-frame chunks per rep; thread CPU time)")
    return []


def _smoke_once(env: dict) -> float:
    with tempfile.TemporaryDirectory(prefix="hybridsched-smoke-") as tmp:
        cmd = [sys.executable, "-m", "hybridsched", "run", "--preset", "smoke", "--out",
               str(Path(tmp, "smoke.h5"))]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        t = time.perf_counter() - t0
    if proc.returncode != 0:
        raise VerifyError(f"smoke run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return t


def section_smoke(reps: int, how: str) -> list[tuple[str, bool]]:
    print("\n## `hybridsched run --preset smoke`: wall time of the command in a subprocess\n")
    warm_env = dict(os.environ)
    _smoke_once(warm_env)  # make sure the numba cache is populated
    warm, fresh = [], []
    for _ in range(reps):
        warm.append(_smoke_once(warm_env))
        # fresh install: an empty numba cache. NUMBA_CACHE_DIR takes precedence over the
        # __pycache__ next to the sources, so nothing shared has to be deleted.
        with tempfile.TemporaryDirectory(prefix="hybridsched-numba-cache-") as cache:
            fresh.append(_smoke_once(dict(warm_env, NUMBA_CACHE_DIR=cache)))
    pick = min if how == "best" else statistics.fmean
    print("| state | best (s) | mean (s) | target |\n|---|---|---|---|")
    verdicts = []
    for label, v, goal in (("warm (numba cache filled)", warm, SMOKE_WARM_S),
                           ("fresh (empty NUMBA_CACHE_DIR)", fresh, SMOKE_FRESH_S)):
        ok = pick(v) < goal
        verdicts.append((f"smoke {label}: {pick(v):.2f} s ({how}) < {goal} s", ok))
        print(f"| {label} | {min(v):.2f} | {statistics.fmean(v):.2f} | < {goal}: {'PASS' if ok else 'FAIL'} |")
    print(f"\n(reps: {reps})")
    return verdicts


SECTIONS = ("hotpath", "paper", "fine", "kernel", "smoke")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="fewer reps and a smaller paper slice (about a minute; noisier)")
    ap.add_argument("--reps", type=int, help="reps per variant (default 5, quick 2)")
    ap.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    ap.add_argument("--estimator", choices=("best", "mean"), default="best",
                    help="which statistic the PASS/FAIL lines use (default best-of-reps)")
    ap.add_argument("--paper-frames", type=int, help="frames of the paper slice (default 100, quick 40)")
    ap.add_argument("--fine-frames", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--affinity", action=argparse.BooleanOptionalAction, default=True,
                    help="pin worker w to CPU w mod N, as the study does by default; "
                         "--no-affinity can help on a machine shared with pinned jobs")
    args = ap.parse_args(argv)
    bench_refs.PIN = args.affinity
    reps = args.reps or (2 if args.quick else 5)
    paper_frames = args.paper_frames or (40 if args.quick else 100)
    sections = args.only or list(SECTIONS)
    how = args.estimator

    print(f"# hybridsched core benchmark ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})\n")
    print(f"N = {N} usable CPUs, load average {os.getloadavg()[0]:.2f} at start, numba "
          f"{numba.__version__}, numpy {np.__version__}, Python {sys.version.split()[0]}; "
          f"PASS/FAIL on the {how} of {reps} reps")
    kernels.prepare()
    t0 = time.perf_counter()
    verdicts: list[tuple[str, bool]] = []
    if "hotpath" in sections:
        verdicts += section_hotpath(max(reps, 3))
    if "paper" in sections:
        verdicts += section_paper(paper_frames, reps, how, args.seed)
    if "fine" in sections:
        verdicts += section_fine(args.fine_frames, reps, how, args.seed)
    if "kernel" in sections:
        verdicts += section_kernel(16 if args.quick else 32, max(reps, 3), how, args.seed)
    if "smoke" in sections:
        verdicts += section_smoke(max(1, reps // 2), how)
    print("\n## targets\n")
    for text, ok in verdicts:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; {time.perf_counter() - t0:.0f} s in all")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
