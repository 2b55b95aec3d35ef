"""Start-up cost (issue 22 item 5):  python benchmarks/bench_startup.py [--reps R] [--quick]

What a user pays before any scheduler runs, each a fresh process timed from outside
(wall time of the whole command, interpreter start and exit included):

  import    python -c "import numba, h5py, numpy"               the issue's yardstick
  floor     the same plus one cached numba function loaded and called: what any program
            that runs numba code pays once (numba loads its target's registries and,
            through them, scipy.linalg)
  run       hybridsched run -s dynamic -k 2 -L 50 --height 64 --width 64 --reps 1
  api       the first hybridsched.parallel_for("quicksort", uint8[50, 64, 64],
            scheduler="dynamic", k=2) of a new Python process, imports included

The four run interleaved, in a new seeded order each rep; the table gives each command's
median and the median of the per-rep ratios run/import and api/import with their range
(target: both within 2.5x). The cache is warmed by one untimed round first.

Then, counted by numba's own compile events (numba.core.event "numba:compile", which fire
only when numba really compiles, never on a load from its on-disk cache):

  * the same run and API call in a fresh process: nothing compiled (the target);
  * the run with --dispatch python: the compiled loop is not even loaded;
  * cold: an empty NUMBA_CACHE_DIR, the run once (everything compiled, the time of a first
    run ever) and again (nothing compiled);
  * MPI (when mpiexec is found): two runs of 2 ranks in one empty cache directory,
    compiles per rank in each (target: none in the second).

Python bytecode is cached as a ``pip install`` leaves it (PYTHONDONTWRITEBYTECODE is dropped
from the children's environment, so an editable checkout measures the same thing).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TINY = ["run", "-s", "dynamic", "-k", "2", "-L", "50", "--height", "64", "--width", "64",
        "--reps", "1", "--overwrite"]

# A child that counts numba's compile events and reports them (and which package functions
# have compiled code loaded) as one JSON line on stderr, then runs what it is told.
COUNTER = r"""
import atexit, json, sys
from numba.core import event
compiled = []
class _Count(event.Listener):
    def on_start(self, ev):
        d = ev.data.get("dispatcher")
        f = getattr(d, "py_func", None)
        mod = getattr(f, "__module__", "") or ""
        compiled.append(f"{mod}.{f.__qualname__}" if mod.startswith("hybridsched") else "")
    def on_end(self, ev):
        pass
event.register("numba:compile", _Count())
def _report():
    from hybridsched import kernels
    loops = len(kernels.claim_loop.overloads)
    sys.stderr.write("COMPILES " + json.dumps({"compiled": compiled, "loops": loops}) + "\n")
atexit.register(_report)
what = sys.argv[1]
if what == "cli":
    from hybridsched.cli import main
    rc = main(sys.argv[2:])
    sys.exit(rc)
else:
    exec(sys.argv[2])
"""

API = ("import numpy as np, hybridsched\n"
       "a = np.random.default_rng(0).integers(0, 256, (50, 64, 64), dtype=np.uint8)\n"
       "r = hybridsched.parallel_for('quicksort', a, scheduler='dynamic', k=2)\n"
       "assert r.verified\n")
FLOOR = ("import numba, h5py, numpy as np\n"
         "from hybridsched.kernels import count_bad_rows\n"
         "a = np.zeros((1, 1, 2), np.uint8)\n"
         "count_bad_rows(a, a, 0, 1)\n")


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra or {})
    return env


def _run(cmd: list[str], env: dict, cwd: str) -> tuple[float, str]:
    """(wall seconds, stderr) of a command that must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, proc.stderr


def _timed(cmd: list[str], env: dict, cwd: str) -> float:
    return _run(cmd, env, cwd)[0]


def _counted(args: list[str], env: dict, cwd: str, launcher: list[str] | None = None) -> list[dict]:
    """Run the counter child (under ``launcher``, e.g. mpiexec); one report per process."""
    wall, stderr = _run((launcher or []) + [sys.executable, "-c", COUNTER, *args], env, cwd)
    out = [json.loads(line.split(" ", 1)[1]) for line in stderr.splitlines()
           if line.startswith("COMPILES ")]
    for o in out:
        o["wall_s"] = wall
    return out


def commands(work: str) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "import": [py, "-c", "import numba, h5py, numpy"],
        "floor": [py, "-c", FLOOR],
        "run": [py, "-m", "hybridsched", *TINY, "--out", os.path.join(work, "tiny.h5")],
        "api": [py, "-c", API],
    }


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"


def timings(reps: int, work: str) -> None:
    env = _env()
    cmds = commands(work)
    for name, cmd in cmds.items():  # warm numba's cache and the bytecode
        _timed(cmd, env, work)
    times: dict[str, list[float]] = {n: [] for n in cmds}
    rng = random.Random(22)
    for _ in range(reps):
        order = list(cmds)
        rng.shuffle(order)
        for name in order:
            times[name].append(_timed(cmds[name], env, work))
    print(f"## Start-up, warm cache ({reps} interleaved reps, wall s of a fresh process)\n")
    print("| command | median s | min | max |")
    print("|---|---:|---:|---:|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} |")
    ratios = {n: [t / i for t, i in zip(times[n], times["import"])] for n in ("floor", "run", "api")}
    print()
    for n, rs in ratios.items():
        target = "" if n == "floor" else ("  (target <= 2.5x: " + ("met" if statistics.median(rs) <= 2.5
                                                                    else "NOT met") + ")")
        print(f"- {n} / import, median of paired ratios (range): {_spread(rs)}{target}")
    print()


def _describe(reports: list[dict]) -> str:
    """Per process: functions compiled (the package's own named, numba's internals counted)."""
    out = []
    for r in reports:
        ours = sorted({c.rsplit(".", 1)[-1] for c in r["compiled"] if c})
        text = f"{len(r['compiled'])} compiled"
        if r["compiled"]:
            text += f" ({len(ours)} of the package's: {', '.join(ours)})"
        out.append(text + f"; dispatch loop loaded for {r['loops']} array type(s)")
    return " / ".join(out)


def compiles(work: str, mpi: bool) -> None:
    env = _env()
    out = os.path.join(work, "c.h5")
    print("## What a fresh process compiles (numba:compile events)\n")
    rows = [
        ("run, warm cache", _counted(["cli", *TINY, "--out", out], env, work)),
        ("run --dispatch python, warm cache",
         _counted(["cli", *TINY, "--dispatch", "python", "--out", out], env, work)),
        ("first parallel_for, warm cache", _counted(["api", API], env, work)),
    ]
    cold = tempfile.mkdtemp(prefix="hs-numba-cache-")
    try:
        cenv = _env({"NUMBA_CACHE_DIR": cold})
        first = _counted(["cli", *TINY, "--out", out], cenv, work)
        second = _counted(["cli", *TINY, "--out", out], cenv, work)
        rows.append((f"run, empty cache: first ({first[0]['wall_s']:.2f} s)", first))
        rows.append((f"run, same cache: second ({second[0]['wall_s']:.2f} s)", second))
    finally:
        shutil.rmtree(cold, ignore_errors=True)
    mpiexec = shutil.which("mpiexec")
    if mpi and mpiexec:
        cold = tempfile.mkdtemp(prefix="hs-numba-cache-")
        try:
            menv = _env({"NUMBA_CACHE_DIR": cold})
            launcher = [mpiexec, "-n", "2"]
            for label in ("MPI 2 ranks, empty cache: first run", "MPI 2 ranks, second run"):
                rows.append((label, _counted(["cli", *TINY, "--out", out], menv, work, launcher)))
        finally:
            shutil.rmtree(cold, ignore_errors=True)
    elif mpi:
        rows.append(("MPI", [{"compiled": ["(mpiexec not found: skipped)"], "loops": 0}]))
    print("| process | compiles, per process |")
    print("|---|---|")
    for label, reports in rows:
        print(f"| {label} | {_describe(reports)} |")
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="interleaved reps (default 10)")
    ap.add_argument("--quick", action="store_true", help="3 reps, no MPI")
    args = ap.parse_args(argv)
    reps = 3 if args.quick else args.reps
    print(f"# bench_startup: {time.strftime('%Y-%m-%d %H:%M')}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    with tempfile.TemporaryDirectory(prefix="hs-startup-") as work:
        timings(reps, work)
        compiles(work, mpi=not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
