"""Performance figures of issue 12 items 1-4, from one run:
    PYTHONPATH=src python benchmarks/bench_api.py [--quick] [--reps 5] [--json OUT.json]

1. overhead -- the API's overhead over the CLI path on the paper slice (640x640 frames,
               quicksort, k = N): hybridsched.parallel_for against study.runner.timed_run
               on a workload.Slab, dynamic (threads, in place) and prolific (forks, copied
               into a segment and back). Target: timed overhead <= 1 %. The untimed extra
               of one API call (input hash, copies, verification) is shown beside it.
2. irregular -- for each workload, sigma_E at k = N of static, dynamic and guided against
               serial (trace recorded, as in every run): the ranking the paper predicts
               (dynamic/guided ahead when costs are irregular) measured, not assumed.

Variants run interleaved, rep by rep (the API and the CLI path each first on every other
rep), so a load change hits all of them alike; each figure is the mean over the reps. sigma = T_serial / T (Eq. 4), sigma_E = sigma / k (Eq. 5). On a
busy machine (the share of CPU the runs got is printed) the figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import hybridsched
from hybridsched import kernels
from hybridsched.workloads import catalogue as workloads
from hybridsched.workloads.build import build
from hybridsched.records import RunConfig
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.workloads.slab import Slab

N = n_cpus()
OVERHEAD_TARGET = 0.01
IRREGULAR = ["static", "dynamic", "guided"]


def _cpu_share(rec) -> float:
    w = rec.workers
    cpu = float((w["user"] + w["system"]).sum())
    return cpu / (rec.time_s * max(1, len(w))) if rec.time_s > 0 else float("nan")


def overhead(frames: int, side: int, reps: int) -> list[dict]:
    """Timed seconds of the API and of the CLI path, interleaved, per scheduler."""
    out = []
    with Slab(frames, side, side, seed=1) as slab:
        src = np.array(slab.original)
        for s in ("dynamic", "prolific"):
            cfg = RunConfig(s, N, frames, side, side)
            cli_t, api_t, api_wall, cli_wall, shares = [], [], [], [], []
            def cli():
                t0 = time.perf_counter()
                rec = timed_run(slab, cfg)
                cli_wall.append(time.perf_counter() - t0)
                assert rec.verified, rec.error
                cli_t.append(rec.time_s)

            def api():
                data = src.copy()
                t0 = time.perf_counter()
                res = hybridsched.parallel_for("quicksort", data, scheduler=s, k=N)
                api_wall.append(time.perf_counter() - t0)
                assert res.verified, res.record.error
                api_t.append(res.time_s)
                shares.append(_cpu_share(res.record))

            for i in range(reps):  # each path first on every other rep: neither always follows
                for run in ((cli, api), (api, cli))[i % 2]:
                    run()
            c, a = statistics.mean(cli_t), statistics.mean(api_t)
            out.append({"scheduler": s, "k": N, "L": frames, "side": side, "cli_s": c,
                        "api_s": a, "overhead": a / c - 1.0,
                        "api_wall_s": statistics.mean(api_wall),
                        "cli_wall_s": statistics.mean(cli_wall),
                        "cpu_share": statistics.mean(shares)})
    return out


def irregular(sizes: dict, reps: int) -> list[dict]:
    """sigma_E of static/dynamic/guided at k = N per workload (serial as T_serial)."""
    rows = []
    for name in workloads.WORKLOADS:
        L, H, W, params = sizes["mandelbrot" if name == "mandelbrot" else "sort"]
        info = workloads.get(name)
        p = dict(info.params, **(params if name == "mandelbrot" else {}))
        base = RunConfig("serial", 1, L, H, W, workload=name, workload_params=workloads.params_json(p))
        times: dict[str, list[float]] = {s: [] for s in ["serial", *IRREGULAR]}
        shares: list[float] = []
        with build(base) as space:
            for _ in range(reps):
                for s in times:
                    cfg = RunConfig(s, 1 if s == "serial" else N, L, H, W, workload=name,
                                    workload_params=base.workload_params)
                    rec = timed_run(space, cfg)
                    if not rec.verified:
                        raise SystemExit(f"{name} {s}: not verified: {rec.error or rec.bad_rows}")
                    times[s].append(rec.time_s)
                    shares.append(_cpu_share(rec))
        ts = statistics.mean(times["serial"])
        row = {"workload": name, "L": L, "H": H, "W": W, "params": p, "serial_ms": ts * 1e3,
               "cpu_share": min(shares)}
        for s in IRREGULAR:
            row[s] = ts / statistics.mean(times[s]) / N
        row["ranking"] = " > ".join(sorted(IRREGULAR, key=lambda s: -row[s]))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (well under 3 minutes)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per variant (default 5)")
    ap.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    kernels.prepare()
    if args.quick:
        paper = (4 * N, 320)
        sizes = {"sort": (2000, 32, 64, {}), "mandelbrot": (128, 2, 256, {"iters": 128})}
    else:
        paper = (8 * N, 640)   # the paper slice: 640x640 frames, 8 per core
        # the issue's ~50 us frames (20000 of 32x64); Mandelbrot 512 bands of 4 x 512 pixels
        sizes = {"sort": (20000, 32, 64, {}), "mandelbrot": (512, 4, 512, {"iters": 256})}
    print(f"# bench_api: N = {N}, reps = {args.reps}{' (quick)' if args.quick else ''}\n")
    ov = overhead(*paper, args.reps)
    print(f"## API overhead over the CLI path (L = {paper[0]} frames of {paper[1]}x{paper[1]}, "
          f"k = N, quicksort; target <= {OVERHEAD_TARGET:.0%})\n")
    print("| scheduler | CLI T (ms) | API T (ms) | overhead | API call wall (ms) | CLI run wall (ms) | CPU share |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in ov:
        print(f"| {r['scheduler']} | {r['cli_s'] * 1e3:.2f} | {r['api_s'] * 1e3:.2f} | "
              f"{r['overhead'] * 100:+.2f} % | {r['api_wall_s'] * 1e3:.1f} | "
              f"{r['cli_wall_s'] * 1e3:.1f} | {r['cpu_share']:.2f} |")
    irr = irregular(sizes, args.reps)
    print("\n## sigma_E at k = N per workload (mean of reps; trace recorded)\n")
    print("| workload | L x H x W | T_serial (ms) | static | dynamic | guided | ranking | min CPU share |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in irr:
        print(f"| {r['workload']} | {r['L']}x{r['H']}x{r['W']} | {r['serial_ms']:.1f} | "
              f"{r['static']:.3f} | {r['dynamic']:.3f} | {r['guided']:.3f} | {r['ranking']} | "
              f"{r['cpu_share']:.2f} |")
    ahead = [r["workload"] for r in irr if r["workload"] != "uniform"
             and max(r["dynamic"], r["guided"]) > r["static"]]
    print(f"\ndynamic or guided ahead of static on {len(ahead)} of {len(irr) - 1} irregular "
          f"workloads ({', '.join(ahead) or 'none'}).")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"N": N, "reps": args.reps, "quick": args.quick, "overhead": ov,
                       "irregular": irr}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
