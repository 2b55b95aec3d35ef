#!/usr/bin/env python3
"""Where the cooperative shim's cost goes for one job alone (J = 1) on a machine shared with
other work: one 2-thread OpenMP barrier loop under `env` (the wait policies only), the
shim as built, and a shim built for this diagnosis only, one that never pins a thread to
its token's CPU. (A second variant, the threads left SCHED_OTHER instead of SCHED_BATCH,
became the shim itself.)
Interleaved, --reps repetitions, the mean and every run printed.

Usage: python benchmarks/diag_shim_pin.py [--reps 4] [--steps 500] [--step-us 400]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import bench_shim as B  # noqa: E402

from hybridsched.coop import shimbuild  # noqa: E402
from hybridsched.coop.arbiter import Arbiter  # noqa: E402
from hybridsched.coop.shimjob import WAIT_POLICY_ENV, ShimJob  # noqa: E402

# the lines each variant takes out of runtime.c
VARIANTS = {
    "no pin": [("        hs_real_setaffinity(0, sizeof s, &s);\n", ""),
               ("            if (hs_real_setaffinity(r->tid, sizeof s, &s) == 0)\n"
                "                r->pinned = c;", "            (void)s;")],
}


def variant(edits, cache: str) -> str:
    files = shimbuild.sources()
    for old, new in edits:
        assert old in files["runtime.c"], old
        files["runtime.c"] = files["runtime.c"].replace(old, new)
    out = os.path.join(cache, f"variant-{abs(hash(tuple(edits)))}.so")
    shimbuild._compile(shimbuild.compiler(), files, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--step-us", type=float, default=400.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="diag-shim-") as folder:
        libs = {"shim": shimbuild.shim_library()}
        libs.update({name: variant(edits, folder) for name, edits in VARIANTS.items()})
        exe = B.compile_c(folder, "omp_barrier", B.OMP_BARRIER, "-fopenmp")
        times = {k: [] for k in ("env", *libs)}
        print(f"load average {os.getloadavg()[0]:.2f} at start")
        for _ in range(args.reps):
            for name in times:
                env = dict(B.clean_env(), **WAIT_POLICY_ENV)
                with Arbiter(path=os.path.join(folder, "seg")) as a, ShimJob(a) as job:
                    if name != "env":
                        job.library = libs[name]
                        env.update(job.env(env))
                    t0 = time.perf_counter()
                    rc = subprocess.run([exe, str(args.steps), str(args.step_us)], env=env).returncode
                    times[name].append(time.perf_counter() - t0 if rc == 0 else float("nan"))
        for name, ts in times.items():
            print(f"{name:>9}: mean {np.mean(ts):.3f} s, runs {' '.join(f'{t:.3f}' for t in ts)}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
