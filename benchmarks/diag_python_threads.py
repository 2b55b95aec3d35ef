#!/usr/bin/env python3
"""Many Python threads under `hybridsched coop exec`: T threads wait on one
`threading.Event`, are released at once and joined. Their GIL waits are timed (5 ms), so
this measures how the arbiter's queue treats polls: each timed-out waiter queues for a
token ahead of the thread that could go on (3-5 s against 0.18-0.25 s plain for 1000
threads). Three rules that let woken threads pass the timed-out ones were tried and reverted,
one bounded in tickets (2026-12-07), two in time (2026-12-08): each slowed short
polls or GIL waits beside computing threads far more than it sped this up
(docs/results/2core-unmodified.md, twenty-eighth and twenty-ninth sessions).

Arms, interleaved per round (their order reversed every other round): the program plain,
and under `coop exec` with each shim build given (`--shim NAME=PATH`, repeatable; default:
the current build). Wall time of the whole command (coop exec's own start, ~0.1 s here,
included) and the hand-offs `coop exec --counters` reports; medians, min and max over the
rounds. A run counts only if the program printed "ok".

A shim of another segment layout needs its own `coop exec`: `--tree NAME=DIR` runs the arm
with the hybridsched of the source tree DIR (its `src` first on PYTHONPATH) and the shim
that tree builds.

Usage: python benchmarks/diag_python_threads.py [--rounds 4] [--threads 300,1000]
       [--shim old=/path/to/coopshim.so --shim new=/path/to/other.so]
       [--tree base=/path/to/checkout --tree new=/path/to/other]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """import sys, threading
e = threading.Event()
ts = [threading.Thread(target=e.wait) for _ in range(int(sys.argv[1]))]
[t.start() for t in ts]
e.set()
[t.join() for t in ts]
print("ok")
"""


def one(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    dt = time.perf_counter() - t
    if p.returncode != 0 or p.stdout != "ok\n":
        sys.exit(f"diag_python_threads: a run failed ({p.returncode}): {p.stderr[-300:]}")
    m = re.search(r"grants (\d+)", p.stderr)
    return dt, int(m[1]) if m else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", default="300,1000")
    ap.add_argument("--shim", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    a = ap.parse_args()
    shims = {n: ("shim", p) for n, p in (s.split("=", 1) for s in a.shim)}
    shims.update({n: ("tree", p) for n, p in (s.split("=", 1) for s in a.tree)})
    shims = shims or {"coop": ("shim", "")}
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "many.py")
        with open(prog, "w") as fh:
            fh.write(PROGRAM)
        # a private arbiter per arm (not the node's): trees of two layouts cannot share one
        segs = {arm: os.path.join(tmp, f"seg-{arm}") for arm in shims}
        res: dict[tuple[int, str], list[tuple[float, int]]] = {}
        for r in range(a.rounds):
            for n in [int(x) for x in a.threads.split(",")]:
                arms = ["plain", *shims]
                for arm in arms if r % 2 == 0 else arms[::-1]:
                    env = dict(os.environ)
                    argv = [sys.executable, prog, str(n)]
                    if arm != "plain":
                        kind, path = shims[arm]
                        if kind == "shim" and path:
                            env["HYBRIDSCHED_COOP_SHIM"] = path
                        elif kind == "tree":
                            env["PYTHONPATH"] = os.pathsep.join(
                                filter(None, [os.path.join(path, "src"), env.get("PYTHONPATH")]))
                        argv = [sys.executable, "-m", "hybridsched", "coop", "exec", "--segment",
                                segs[arm], "--counters", "--", *argv]
                    res.setdefault((n, arm), []).append(one(argv, env))
    print(f"{a.rounds} rounds, interleaved; wall s and hand-offs: median (min-max)\n")
    print("| threads | arm | wall s | hand-offs |\n|---:|---|---:|---:|")
    for (n, arm), v in res.items():
        ts, gs = sorted(x[0] for x in v), sorted(x[1] for x in v)
        print(f"| {n} | {arm} | {statistics.median(ts):.3f} ({ts[0]:.3f}-{ts[-1]:.3f}) | "
              f"{statistics.median(gs):.0f} ({gs[0]}-{gs[-1]}) |")


if __name__ == "__main__":
    main()
