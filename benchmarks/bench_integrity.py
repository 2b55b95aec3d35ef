"""Issue 9's closing measurement: is a study file ever lost or unreadable?

1. ``report`` called REPORTS times (in this process, as `hybridsched report` does) and a
   plain h5py open+read PLAIN times, against a study that `hybridsched run` writes at full
   speed (tiny runs); failures are counted.
2. KILLS kill -9 of the writer at random moments, each followed by `report` and by a
   `--resume` (which becomes the next writer to be killed); committed runs lost = runs a
   reader had seen before a kill and that are missing after it.

    PYTHONPATH=src python benchmarks/bench_integrity.py [--reports 1000] [--kills 20]

Prints one line per figure. A few minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import h5py

from hybridsched import cli
from hybridsched.store import read_runs

HS = [sys.executable, "-m", "hybridsched"]
FAST = ["-s", "serial,dynamic", "-k", "2", "-L", "4", "--height", "8", "--width", "8"]
WRITER_REPS = 250  # 500 runs per live study (~10 s of writing at full speed here)


def _runs(path: str) -> int:
    try:
        return len(read_runs(path))
    except Exception:  # noqa: BLE001 - not there yet
        return -1


def live_readers(d: str, reports: int, plain: int) -> None:
    failures, plain_failures, done, n_plain, writers = [], [], 0, 0, 0
    t0 = time.monotonic()
    writer = None
    path = ""
    quiet = io.StringIO()
    try:
        while done < reports:
            if writer is None or writer.poll() is not None:
                path = os.path.join(d, f"live{writers}.h5")
                # a few hundred runs per study: a report reads every run's detail, so it
                # gets slower as a study grows; a fresh writer keeps each report short
                writer = subprocess.Popen([*HS, "run", *FAST, "--reps", str(WRITER_REPS),
                                           "--out", path],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                writers += 1
                while _runs(path) < 1 and writer.poll() is None:
                    time.sleep(0.02)
            try:
                with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                    rc = cli.main(["report", path, "--no-plots", "--out-dir", os.path.join(d, "rep")])
                if rc != 0:
                    failures.append(f"rc {rc}")
            except BaseException as exc:  # noqa: BLE001 - count every failure
                failures.append(repr(exc))
            done += 1
            if done % 100 == 0:
                print(f"  {done} reports, {len(failures)} failures", file=sys.stderr, flush=True)
            quiet.seek(0)
            quiet.truncate()
            if n_plain < plain:
                try:
                    with h5py.File(path, "r") as h5:  # a user's own script, default options
                        h5["runs"][()]
                except Exception as exc:  # noqa: BLE001
                    plain_failures.append(repr(exc))
                n_plain += 1
    finally:
        if writer is not None and writer.poll() is None:
            writer.send_signal(signal.SIGINT)
            writer.wait(60)
    rate = sum(max(_runs(os.path.join(d, f"live{i}.h5")), 0) for i in range(writers))
    wall = time.monotonic() - t0
    print(f"live reading: {done} report calls in {wall:.0f} s against {writers} study file(s) "
          f"written at full speed ({rate / wall:.0f} runs/s): failures {len(failures)}"
          + (f" e.g. {failures[0]}" if failures else ""))
    print(f"live reading: {n_plain} plain h5py.File(path, 'r') reads: failures "
          f"{len(plain_failures)}" + (f" e.g. {plain_failures[0]}" if plain_failures else ""))


def kills(d: str, n: int, seed: int) -> None:
    rng = random.Random(seed)
    path = os.path.join(d, "killed.h5")
    argv = [*HS, "run", *FAST, "--reps", "1000", "--out", path]
    total = 2 * 1000  # ~35 s of runs: 20 kills land mid-study, not after it
    lost = report_fail = resume_fail = 0
    took_over = finished = 0
    for i in range(n):
        proc = subprocess.Popen(argv + (["--resume"] if i else []), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + rng.uniform(0.3, 3.0)
        seen = max(_runs(path), 0)
        while time.monotonic() < deadline and proc.poll() is None:
            seen = max(seen, _runs(path))
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        else:
            finished += 1
        err = proc.communicate()[1]
        took_over += "taking over the lock" in err
        if i and proc.returncode not in (-9, 0):
            resume_fail += 1
        after = max(_runs(path), 0)
        lost += max(0, seen - after)
        r = subprocess.run([*HS, "report", path, "--no-plots", "--out-dir",
                            os.path.join(d, "krep")], capture_output=True, text=True)
        if after > 0 and r.returncode != 0:
            report_fail += 1
            print(f"  report after kill {i + 1} failed: {r.stderr.strip()[-300:]}")
    final = subprocess.run(argv + ["--resume"], capture_output=True, text=True)
    stored = _runs(path)
    print(f"kill -9: {n} kills of the writer at random moments (0.3-3 s after its start); "
          f"committed runs lost: {lost}; report failures after a kill: {report_fail}; "
          f"resumes that failed: {resume_fail}; stale locks taken over: {took_over}; "
          f"writers that had finished before their kill: {finished}")
    print(f"kill -9: final --resume rc {final.returncode}, {stored} of {total} runs stored, "
          f"run ids {'contiguous' if stored > 0 and list(read_runs(path)['run_id']) == list(range(stored)) else 'NOT contiguous'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1000)
    ap.add_argument("--plain", type=int, default=200)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=9)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-integrity-") as d:
        t0 = time.monotonic()
        if a.reports:
            live_readers(d, a.reports, a.plain)
        if a.kills:
            kills(d, a.kills, a.seed)
        print(f"total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
