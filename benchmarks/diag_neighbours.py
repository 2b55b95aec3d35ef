#!/usr/bin/env python3
"""Does chunk-1 dynamic lose on 7 µs tasks because neighbours run side by side? (issue 12)

Under dynamic with chunk 1, consecutive tickets go to different workers at nearly the same
moment, so k cores sort *neighbouring* 256-byte frames at once (a core's prefetcher pulls
lines of the frame the other core is writing); prange and guided give each worker long
runs of its own. This script runs the same compiled ticket loop (an atomic fetch-and-add
per frame, the kernel on one frame: backends/compiled.claim_loop without the trace) over
the same slab with three maps from ticket to frame:

  ident -- ticket i sorts frame i (dynamic's hand-out);
  gap   -- within each block of 16 frames the even ones first, then the odd ones: frames
           sorted at the same moment are two apart (512 bytes);
  far   -- ticket 2j sorts frame j, ticket 2j+1 frame L/2 + j: never neighbours;

and, as references, each worker a fixed interleave with no atomic (frames w, w+k, ...) and
each its own contiguous half. Workers are pinned to CPU w mod N, as in a study. Every
variant does the same work; only which frames run side by side differs. Rounds interleave
the variants (order rotating). If ident is not slower than far, neighbours cost nothing.

Usage: python benchmarks/diag_neighbours.py [--rounds R] [--frames L]
"""
from __future__ import annotations

import argparse
import threading
import time

import numba
import numpy as np

from hybridsched import kernels
from hybridsched.backends.compiled import fetch_add
from hybridsched.oslayer.cpus import n_cpus, usable_cpus
from hybridsched.workloads.slab import Slab

K = kernels.quicksort_frames


@numba.njit(nogil=True)
def tickets(data, ctl, perm):
    m = perm.shape[0]
    while True:
        i = fetch_add(ctl, 0, 1)
        if i >= m:
            return
        K(data, perm[i], 1)


@numba.njit(nogil=True)
def listed(data, frames):
    for f in frames:
        K(data, f, 1)


def team(fn, args_of, k: int) -> float:
    cpus = usable_cpus()

    def body(w):
        import os
        os.sched_setaffinity(0, {cpus[w % len(cpus)]})
        fn(*args_of(w))
    ts = [threading.Thread(target=body, args=(w,)) for w in range(k)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--frames", type=int, default=200000)
    args = ap.parse_args()
    k, L = n_cpus(), args.frames
    kernels.prepare("quicksort")
    with Slab(L, 4, 64, 0) as slab:
        orig = slab.original
        work = slab.work
        ident = np.arange(L)
        far = np.empty(L, np.int64)
        far[0::2], far[1::2] = np.arange(L // 2), np.arange(L // 2) + L // 2
        blk = np.arange(L - L % 16).reshape(-1, 16)
        gap = np.concatenate([np.concatenate([blk[:, 0::2], blk[:, 1::2]], axis=1).ravel(),
                              np.arange(L - L % 16, L)])
        inter = [np.arange(w, L, k) for w in range(k)]
        halves = [np.arange(w * L // k, (w + 1) * L // k) for w in range(k)]
        variants = {
            "serial (one worker, in order)": lambda: team(listed, lambda w: (work, ident), 1),
            "ident (dynamic's hand-out)": lambda: team(tickets, lambda w: (work, ctl, ident), k),
            "gap (concurrent frames 2 apart)": lambda: team(tickets, lambda w: (work, ctl, gap), k),
            "far (never neighbours)": lambda: team(tickets, lambda w: (work, ctl, far), k),
            "interleave, no atomic": lambda: team(listed, lambda w: (work, inter[w]), k),
            "contiguous halves, no atomic": lambda: team(listed, lambda w: (work, halves[w]), k),
        }
        names = list(variants)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds + 1):  # round 0 compiles and warms: not kept
            for n in names[r % len(names):] + names[:r % len(names)]:
                work[:] = orig
                ctl = np.zeros(16, np.int64)
                dt = variants[n]()
                if kernels.count_bad_rows(orig, work, 0, L):
                    raise SystemExit(f"{n}: output not sorted")
                if r:
                    times[n].append(dt)
    ser = float(np.mean(times[names[0]]))
    print(f"# neighbouring frames under chunk-1 tickets: {L} frames of 4x64, k = {k}, "
          f"{args.rounds} interleaved rounds ({time.strftime('%Y-%m-%d %H:%M')})\n")
    print("| variant | T mean (ms) | T median (ms) | σE of the mean (T_serial / T / k) |")
    print("|---|---:|---:|---:|")
    for n in names:
        v = times[n]
        kk = 1 if n == names[0] else k
        print(f"| {n} | {np.mean(v) * 1e3:.1f} | {np.median(v) * 1e3:.1f} | "
              f"{ser / np.mean(v) / kk:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
