"""auto-sim against fixed techniques (issue 25 item 6):  python benchmarks/bench_autosim.py [--reps R]

On `skewed` and `heavytail` at k = N: static, dynamic, guided, trapezoidal, fac2, awf_b, af
and auto-sim, R repetitions each (default 6), the variants in a new seeded order every
repetition, timed and verified by hybridsched.study.runner.timed_run as a study times them
(auto-sim's profiling run and simulations are untimed, as in a study). The figure is
auto-sim's median time over all its repetitions -- the first included -- against the best
median among the others (target: at most 1.05 x).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

from hybridsched.oslayer.cpus import n_cpus
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.workloads.build import build
from hybridsched.workloads.catalogue import params_json, parse

PEERS = ("static", "dynamic", "guided", "trapezoidal", "fac2", "awf_b", "af")
TARGET = 1.05


def section(workload: str, shape: tuple[int, int, int], reps: int, order: random.Random):
    N = n_cpus()
    L, H, W = shape
    name, params = parse(workload)
    base = RunConfig("serial", 1, L, H, W, workload=name, workload_params=params_json(params))
    times: dict[str, list[float]] = {s: [] for s in (*PEERS, "auto-sim")}
    chose: list[str] = []
    space = build(base)
    try:
        for rep in range(reps):
            for s in order.sample(list(times), len(times)):
                cfg = RunConfig(s, N, L, H, W, rep=rep, workload=name,
                                workload_params=params_json(params))
                rec = timed_run(space, cfg)
                if not rec.verified:
                    raise SystemExit(f"{s} on {workload}: not verified ({rec.error})")
                times[s].append(rec.time_s)
                if s == "auto-sim":
                    chose.append(rec.technique)
    finally:
        space.close()
    med = {s: statistics.median(v) for s, v in times.items()}
    best = min(PEERS, key=med.get)
    ratio = med["auto-sim"] / med[best]
    print(f"\n## {workload}: {L} frames of {H}x{W}, k = N = {N}, {reps} reps\n")
    print("| scheduler | median T (ms) | min | max |")
    print("|---|---:|---:|---:|")
    for s, v in times.items():
        print(f"| {s} | {med[s] * 1e3:.2f} | {min(v) * 1e3:.2f} | {max(v) * 1e3:.2f} |")
    print(f"\nauto-sim chose, rep by rep: {', '.join(chose)}; its median / the best fixed "
          f"({best}): {ratio:.3f}")
    return [(f"{workload}: auto-sim median {ratio:.3f} x the best fixed ({best}) <= {TARGET}",
             ratio <= TARGET)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    order = random.Random(args.seed)
    print(f"# auto-sim benchmark ({time.strftime('%Y-%m-%d %H:%M:%S %Z')}), load average "
          f"{os.getloadavg()[0]:.2f} at start")
    verdicts = []
    for wl in ("skewed", "heavytail"):
        verdicts += section(wl, (4000, 32, 128), args.reps, order)
    print("\n## targets\n")
    for text, ok in verdicts:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
