"""Hostile cases: colocate.

Every workload under every policy at tiny sizes, the run workload's schedulers, every
barrier, bad values, output paths, and a job SIGKILLed / the command interrupted mid-run.
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from pathlib import Path

from .common import HS, case, coop_segment, failed, foreign, hs, ok, usage

SMALL = {
    "bsp": ["--steps", "5", "--step-us", "50"],
    "blas": ["--matrix", "32", "--steps", "3"],
    "run": ["--steps", "8", "--height", "8", "--width", "16"],
}
BASE = ["--jobs", "2", "--workers", "1", "--reps", "1"]
# long enough (~3 s or more on 2 shared CPUs) to be hit by a signal mid-run
LONG = {
    "bsp": ["--steps", "3000", "--step-us", "1000"],
    "blas": ["--matrix", "384", "--steps", "600"],
    "run": ["--steps", "2000", "--height", "256", "--width", "256"],
}
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}


# ------------------------------------------------------------------ helpers (shared)

def shm_now() -> set[str]:
    """Our /dev/shm entries now, the coop segment and its lock included."""
    from hybridsched.oslayer.shm import our_shm_entries

    names = {n for n in our_shm_entries() if not foreign(n)}
    coop = os.path.basename(coop_segment())
    for n in (coop, coop + ".lock"):
        if os.path.exists(f"/dev/shm/{n}"):
            names.add(n)
    return names


def shm_left(before: set[str], settle: float = 1.0) -> str:
    """New /dev/shm entries since ``before`` (given ``settle`` s to go away)."""
    deadline = time.monotonic() + settle
    while True:
        new = sorted(shm_now() - before)
        if not new or time.monotonic() > deadline:
            return ", ".join(f"/dev/shm/{n}" for n in new)
        time.sleep(0.05)


def start(*argv, env: dict | None = None, cwd=None) -> subprocess.Popen:
    """`python -m hybridsched ARGV` in the background."""
    e = dict(os.environ, **ENV, **(env or {}))
    return subprocess.Popen([*HS, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e, cwd=cwd)


def finish(p: subprocess.Popen, timeout: float = 120) -> subprocess.CompletedProcess:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return subprocess.CompletedProcess(p.args, -9, out, f"TIMEOUT {timeout}s\n" + err)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def children_of(pid: int, want: int, timeout: float = 30.0, settle: float = 0.8):
    """Wait until ``pid`` has at least ``want`` live children, let them run ``settle`` s;
    returns them (psutil.Process), or [] after ``timeout``."""
    import psutil

    deadline = time.monotonic() + timeout
    proc = psutil.Process(pid)
    while time.monotonic() < deadline:
        try:
            kids = [c for c in proc.children() if c.is_running()
                    and c.status() != psutil.STATUS_ZOMBIE]
        except psutil.NoSuchProcess:
            return []
        if len(kids) >= want:
            time.sleep(settle)
            try:
                return [c for c in proc.children() if c.is_running()]
            except psutil.NoSuchProcess:
                return []
        time.sleep(0.05)
    return []


def table(path: Path):
    from hybridsched.store import read_table

    return read_table(str(path), "colocate")


def check_table(out: Path, workload: str, policies: list[str], jobs: int = 2, reps: int = 1,
                scheduler: str | None = None, barrier: str | None = None) -> str | None:
    """Every (policy, rep, job) row is there once, verified, with its times."""
    try:
        t = table(out)
    except Exception as exc:  # noqa: BLE001
        return f"/colocate unreadable: {type(exc).__name__}: {str(exc)[:150]}"
    want = len(policies) * jobs * reps
    if len(t) != want:
        return f"/colocate holds {len(t)} rows, not {want}"
    keys = sorted((str(r["policy"]), int(r["rep"]), int(r["job"])) for r in t)
    exp = sorted((p, r, j) for p in policies for r in range(reps) for j in range(jobs))
    if keys != exp:
        return f"/colocate rows are not one per policy, rep and job: {keys[:6]}"
    bad = [f"{r['policy']} job {r['job']}: {r['error'] or 'not verified'}" for r in t
           if not bool(r["verified"]) or str(r["error"])]
    if bad:
        return "unverified rows: " + "; ".join(bad)[:250]
    if any(str(r["workload"]) != workload for r in t):
        return f"workload field is not {workload!r}: {set(str(r['workload']) for r in t)}"
    for r in t:
        ts, ms = float(r["time_s"]), float(r["makespan_s"])
        if not (math.isfinite(ts) and ts > 0 and math.isfinite(ms) and ms >= ts * 0.999):
            return f"bad times in a row: time_s={ts} makespan_s={ms}"
        if int(r["jobs"]) != jobs:
            return f"jobs field {r['jobs']} != {jobs}"
    if scheduler is not None and any(str(r["scheduler"]) != scheduler for r in t):
        return f"scheduler field is not {scheduler!r}: {set(str(r['scheduler']) for r in t)}"
    if barrier is not None and any(str(r["barrier"]) != barrier for r in t):
        return f"barrier field is not {barrier!r}: {set(str(r['barrier']) for r in t)}"
    return None


def colocate(tmp: Path, *argv, out: Path | None = None, timeout: float = 180):
    out = out or tmp / "c.h5"
    return hs("colocate", *argv, "-o", str(out), env=ENV, timeout=timeout), out


# ------------------------------------------------------------------ good runs

def _good(workload: str, policy: str, extra: tuple = (), name: str | None = None,
          report: bool = False, scheduler: str | None = None, barrier: str | None = None,
          workers: str = "1"):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        p, out = colocate(tmp, "--workload", workload, "--policy", policy, "--jobs", "2",
                          "--workers", workers, "--reps", "1", *SMALL[workload], *extra)
        problem = ok(p, out) or check_table(out, workload, policy.split(","),
                                            scheduler=scheduler, barrier=barrier)
        if problem:
            return problem
        left = shm_left(before)
        if left:
            return f"left in /dev/shm: {left}"
        if report:
            r = hs("report", str(out), "--out-dir", str(tmp / "rep"), timeout=120)
            problem = ok(r, tmp / "rep")
            if problem:
                return "report: " + problem
            if "Co-located" not in r.stdout or workload not in r.stdout:
                return "report: no co-located table for the study"
        return None
    fn.__name__ = name or f"{workload}_{policy}"
    fn.__doc__ = f"colocate --workload {workload} --policy {policy} {' '.join(extra)}: exit 0, " \
                 "every job verified"
    case("colocate")(fn)


for _w in ("bsp", "blas", "run"):
    for _p in ("linux", "coop", "partition"):
        _good(_w, _p, report=(_p == "coop"))
    _good(_w, "linux,coop,partition", name=f"{_w}_all_policies")

for _s in ("fac", "fsc", "auto", "aimd", "prolific", "pipe-MtoM", "pipe-MtoM:fac"):
    _good("run", "linux,coop", ("-s", _s), name=f"run_s_{_s}", scheduler=_s)

for _b in ("block", "spin", "spin-block"):
    _good("bsp", "linux,coop,partition", ("--barrier", _b), name=f"bsp_barrier_{_b}",
          barrier=_b, workers="2")

_good("run", "coop", ("-s", "prolific"), name="run_prolific_coop_2workers", scheduler="prolific",
      workers="2")
_good("blas", "coop", ("--quantum-ms", "1"), name="blas_coop_quantum_1ms", workers="2")


@case("colocate")
def bsp_three_reps_interleaved(tmp: Path) -> str | None:
    """--reps 3 with two policies: 12 rows, one per policy, rep and job."""
    p, out = colocate(tmp, "--policy", "coop,linux", "--reps", "3", "--jobs", "2", "--workers",
                      "1", *SMALL["bsp"])
    return ok(p, out) or check_table(out, "bsp", ["coop", "linux"], reps=3)


@case("colocate")
def bsp_one_job(tmp: Path) -> str | None:
    """--jobs 1: one job alone, still verified."""
    p, out = colocate(tmp, "--policy", "linux,coop,partition", "--jobs", "1", "--workers", "1",
                      "--reps", "1", *SMALL["bsp"])
    return ok(p, out) or check_table(out, "bsp", ["linux", "coop", "partition"], jobs=1)


@case("colocate")
def bsp_jobs_64_coop(tmp: Path) -> str | None:
    """--jobs 64 (the documented maximum) under coop: runs, or is refused up front (exit 2)."""
    p, out = colocate(tmp, "--policy", "coop", "--jobs", "64", "--workers", "1", "--reps", "1",
                      *SMALL["bsp"])
    if p.returncode == 2:
        return usage(p, out)
    return ok(p, out) or check_table(out, "bsp", ["coop"], jobs=64)


@case("colocate")
def partition_more_jobs_than_cpus(tmp: Path) -> str | None:
    """partition with more jobs than CPUs (N/J < 1): runs (or is refused with one line)."""
    p, out = colocate(tmp, "--policy", "partition", "--jobs", str((os.cpu_count() or 2) + 1),
                      "--workers", "1", "--reps", "1", *SMALL["bsp"])
    if p.returncode == 2:
        return usage(p, out)
    return ok(p, out) or check_table(out, "bsp", ["partition"], jobs=(os.cpu_count() or 2) + 1)


@case("colocate")
def duplicate_policy_once(tmp: Path) -> str | None:
    """--policy linux,linux: linux runs once per rep and job."""
    p, out = colocate(tmp, "--policy", "linux,linux", *BASE, *SMALL["bsp"])
    return ok(p, out) or check_table(out, "bsp", ["linux"])


# ------------------------------------------------------------------ bad values

def _bad(name: str, argv: list[str], says: str = ""):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        out = tmp / "bad.h5"
        p = hs("colocate", *argv, "-o", str(out), env=ENV, timeout=60)
        problem = usage(p, out, says=says)
        if problem:
            return problem
        if os.listdir(tmp):
            return f"left in the directory: {os.listdir(tmp)}"
        left = shm_left(before)
        return f"left in /dev/shm: {left}" if left else None
    fn.__name__ = name
    fn.__doc__ = f"colocate {' '.join(argv)}: one line, exit 2, nothing written"
    case("colocate")(fn)


_B = ["--workers", "1", "--reps", "1"]
_bad("bad_jobs_0", ["--jobs", "0", *_B, *SMALL["bsp"]], "jobs")
_bad("bad_jobs_65", ["--jobs", "65", *_B, *SMALL["bsp"]], "jobs")
_bad("bad_jobs_x", ["--jobs", "x", *_B, *SMALL["bsp"]], "jobs")
_bad("bad_workers_0", ["--jobs", "2", "--workers", "0", "--reps", "1", *SMALL["bsp"]], "workers")
_bad("bad_workers_huge", ["--jobs", "2", "--workers", "100000", "--reps", "1", *SMALL["bsp"]],
     "workers")
_bad("bad_steps_0", [*BASE, "--steps", "0", "--step-us", "50"], "steps")
_bad("bad_step_us_0", [*BASE, "--steps", "5", "--step-us", "0"], "step-us")
_bad("bad_step_us_negative", [*BASE, "--steps", "5", "--step-us", "-1"], "step-us")
_bad("bad_step_us_1e9", [*BASE, "--steps", "5", "--step-us", "1e9"], "step-us")
_bad("bad_step_us_nan", [*BASE, "--steps", "5", "--step-us", "nan"], "step-us")
_bad("bad_matrix_8", [*BASE, "--workload", "blas", "--matrix", "8", "--steps", "3"], "matrix")
_bad("bad_quantum_0", [*BASE, *SMALL["bsp"], "--policy", "coop", "--quantum-ms", "0"], "quantum")
_bad("bad_quantum_tiny", [*BASE, *SMALL["bsp"], "--policy", "coop", "--quantum-ms", "0.000001"],
     "quantum")
_bad("bad_quantum_negative", [*BASE, *SMALL["bsp"], "--policy", "coop", "--quantum-ms", "-5"],
     "quantum")
_bad("bad_reps_0", ["--jobs", "2", "--workers", "1", "--reps", "0", *SMALL["bsp"]], "reps")
_bad("bad_policy_bogus", [*BASE, *SMALL["bsp"], "--policy", "bogus"], "policy")
_bad("bad_policy_empty", [*BASE, *SMALL["bsp"], "--policy", ""], "policy")
_bad("bad_policy_uppercase", [*BASE, *SMALL["bsp"], "--policy", "LINUX"], "policy")
_bad("bad_barrier_bogus", [*BASE, *SMALL["bsp"], "--barrier", "bogus"], "barrier")
_bad("bad_workload_bogus", [*BASE, "--workload", "bogus"], "workload")
_bad("bad_run_scheduler_nope", [*BASE, "--workload", "run", *SMALL["run"][:2], "-s", "nope"],
     "nope")
_bad("bad_run_scheduler_two", [*BASE, "--workload", "run", "--steps", "8", "-s",
                               "dynamic,guided"])
_bad("bad_run_mtom_unknown_technique", [*BASE, "--workload", "run", "--steps", "8", "-s",
                                        "pipe-MtoM:bogus"])
_bad("bad_run_height_0", [*BASE, "--workload", "run", "--steps", "8", "--height", "0"], "height")
_bad("bad_run_steps_huge", [*BASE, "--workload", "run", "--steps", "100000000"], "steps")
_bad("bad_scheduler_with_bsp", [*BASE, *SMALL["bsp"], "-s", "dynamic"], "run")
_bad("bad_scheduler_with_blas", [*BASE, "--workload", "blas", "--matrix", "32", "-s", "dynamic"],
     "run")
_bad("bad_height_with_bsp", [*BASE, *SMALL["bsp"], "--height", "8"], "run")
_bad("bad_width_with_blas", [*BASE, "--workload", "blas", "--matrix", "32", "--width", "8"], "run")
_bad("bad_matrix_with_bsp", [*BASE, *SMALL["bsp"], "--matrix", "64"], "blas")
_bad("bad_matrix_with_run", [*BASE, "--workload", "run", "--steps", "8", "--matrix", "64"],
     "blas")


@case("colocate")
def bad_run_scheduler_paper(tmp: Path) -> str | None:
    """-s paper with --workload run: refused, and the line does not offer 'paper' as a choice."""
    out = tmp / "bad.h5"
    p = hs("colocate", *BASE, "--workload", "run", "--steps", "8", "-s", "paper",
           "-o", str(out), env=ENV, timeout=60)
    problem = usage(p, out)
    if problem:
        return problem
    line = p.stderr.strip()
    if "paper or all" in line or "techniques," in line:
        return f"refuses 'paper' but its line offers paper/all/techniques as choices: " \
               f"...{line[-90:]}"
    return None


# ------------------------------------------------------------------ output paths

def _args_small() -> list[str]:
    return [*BASE, *SMALL["bsp"], "--policy", "linux"]


@case("colocate")
def out_exists_without_overwrite(tmp: Path) -> str | None:
    """An existing --out without --overwrite: exit 2, the file untouched."""
    out = tmp / "c.h5"
    out.write_bytes(b"precious")
    p = hs("colocate", *_args_small(), "-o", str(out), env=ENV)
    return usage(p, says="exists") or (None if out.read_bytes() == b"precious"
                                       else "the existing file was changed")


@case("colocate")
def out_overwrite_replaces(tmp: Path) -> str | None:
    """--overwrite over an existing study: exit 0, the new study alone in the file."""
    p, out = colocate(tmp, *_args_small())
    if ok(p, out):
        return "first run: " + ok(p, out)
    p, out = colocate(tmp, *BASE, *SMALL["bsp"], "--policy", "coop", "--overwrite")
    return ok(p, out) or check_table(out, "bsp", ["coop"])


@case("colocate")
def out_overwrite_bad_start_keeps_old(tmp: Path) -> str | None:
    """--overwrite with bad input: exit 2 and the old study left as it was."""
    p, out = colocate(tmp, *_args_small())
    if ok(p, out):
        return "first run: " + ok(p, out)
    old = out.read_bytes()
    p = hs("colocate", "--jobs", "0", "--workers", "1", "--reps", "1", *SMALL["bsp"], "-o",
           str(out), "--overwrite", env=ENV)
    return usage(p) or (None if out.read_bytes() == old else "the old study was changed")


@case("colocate")
def out_symlink_to_file(tmp: Path) -> str | None:
    """--out a symlink to a file (even with --overwrite): refused, the target untouched."""
    target = tmp / "target.h5"
    target.write_bytes(b"keep")
    link = tmp / "link.h5"
    link.symlink_to(target)
    p = hs("colocate", *_args_small(), "-o", str(link), "--overwrite", env=ENV)
    problem = usage(p, says="link")
    if problem:
        return problem
    if target.read_bytes() != b"keep" or not link.is_symlink():
        return "the link or its target was changed"
    return None


@case("colocate")
def out_dangling_symlink(tmp: Path) -> str | None:
    """--out a dangling symlink: refused, nothing created at its target."""
    link = tmp / "link.h5"
    link.symlink_to(tmp / "nowhere.h5")
    p = hs("colocate", *_args_small(), "-o", str(link), env=ENV)
    return usage(p, tmp / "nowhere.h5")


@case("colocate")
def out_fifo(tmp: Path) -> str | None:
    """--out a FIFO (--overwrite): refused at once, never blocks on it."""
    fifo = tmp / "f.h5"
    os.mkfifo(fifo)
    p = hs("colocate", *_args_small(), "-o", str(fifo), "--overwrite", env=ENV, timeout=60)
    return usage(p, says="fifo")


@case("colocate")
def out_directory(tmp: Path) -> str | None:
    """--out a directory (--overwrite): refused, the directory kept."""
    d = tmp / "d.h5"
    d.mkdir()
    (d / "inside").write_text("x")
    p = hs("colocate", *_args_small(), "-o", str(d), "--overwrite", env=ENV)
    return usage(p, says="directory") or (None if (d / "inside").exists() else "dir emptied")


@case("colocate")
def out_missing_parent(tmp: Path) -> str | None:
    """--out in a directory that does not exist: refused, nothing created."""
    p = hs("colocate", *_args_small(), "-o", str(tmp / "no" / "c.h5"), env=ENV)
    return usage(p, tmp / "no")


@case("colocate")
def out_empty_name(tmp: Path) -> str | None:
    """--out '': refused with one line."""
    p = hs("colocate", *_args_small(), "-o", "", env=ENV, cwd=tmp)
    return usage(p) or (f"created {os.listdir(tmp)}" if os.listdir(tmp) else None)


@case("colocate")
def out_unwritable_dir(tmp: Path) -> str | None:
    """--out under /proc: refused with one line."""
    p = hs("colocate", *_args_small(), "-o", "/proc/hostile-colocate.h5", env=ENV)
    return usage(p)


@case("colocate")
def out_default_name_in_cwd(tmp: Path) -> str | None:
    """No --out: hybridsched-colocate-<time>.h5 in the current directory."""
    p = hs("colocate", *_args_small(), env=ENV, cwd=tmp)
    made = [f for f in os.listdir(tmp) if f.startswith("hybridsched-colocate-") and
            f.endswith(".h5")]
    if ok(p):
        return ok(p)
    return None if len(made) == 1 else f"default file not found: {os.listdir(tmp)}"


# ------------------------------------------------------------------ faults and signals

def _kill_one_job(policy: str, workload: str, workers: int = 1):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        out = tmp / "k.h5"
        p = start("colocate", "--workload", workload, "--policy", policy, "--jobs", "2",
                  "--workers", str(workers), "--reps", "1", *LONG[workload], "-o", str(out))
        want = 2 * workers if workload == "bsp" else 2
        kids = children_of(p.pid, want)
        if not kids:
            finish(p, 5)
            return "no job processes appeared"
        victim = kids[0]
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            finish(p)
            return "the job ended before it could be killed (make it longer)"
        r = finish(p, 180)
        problem = failed(r)
        if problem:
            return problem
        if not out.exists():
            return "no study written after a job was killed"
        t = table(out)
        if len(t) != 2:
            return f"/colocate holds {len(t)} rows, not 2"
        good = [x for x in t if bool(x["verified"])]
        bad = [x for x in t if not bool(x["verified"])]
        if len(good) != 1 or len(bad) != 1:
            return f"verified {len(good)}, failed {len(bad)}; want 1 and 1"
        if not str(bad[0]["error"]):
            return "the failed job has no error"
        left = shm_left(before, settle=2.0)
        return f"left in /dev/shm: {left}" if left else None
    fn.__name__ = f"sigkill_job_{workload}_{policy}" + (f"_{workers}workers" if workers > 1 else "")
    fn.__doc__ = f"SIGKILL one {workload} job under {policy}: exit 1, the other job verified, " \
                 "nothing left in /dev/shm"
    case("colocate")(fn)


_kill_one_job("linux", "bsp")
_kill_one_job("coop", "bsp")
_kill_one_job("partition", "bsp")
_kill_one_job("coop", "bsp", workers=2)
_kill_one_job("coop", "run")
_kill_one_job("coop", "blas")


def _signal_mid_run(sig: int, code: int, policy: str, workload: str):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        out = tmp / "s.h5"
        p = start("colocate", "--workload", workload, "--policy", policy, "--jobs", "2",
                  "--workers", "1", "--reps", "1", *LONG[workload], "-o", str(out))
        if not children_of(p.pid, 2):
            finish(p, 5)
            return "no job processes appeared"
        p.send_signal(sig)
        r = finish(p, 60)
        if r.returncode != code:
            return f"exit {r.returncode}, not {code}: {r.stderr.strip()[-200:]}"
        if "Traceback" in r.stderr:
            return "a traceback on stderr"
        if out.exists():
            try:
                table(out)
            except Exception as exc:  # noqa: BLE001
                return f"the file left is not a readable study: {exc}"
        tmps = [f for f in os.listdir(tmp) if f != "s.h5"]
        if tmps:
            return f"left in the directory: {tmps}"
        left = shm_left(before, settle=2.0)
        return f"left in /dev/shm: {left}" if left else None
    name = {signal.SIGINT: "sigint", signal.SIGTERM: "sigterm"}[sig]
    fn.__name__ = f"{name}_{workload}_{policy}"
    fn.__doc__ = f"{name.upper()} mid-run ({workload}, {policy}): exit {code}, nothing left"
    case("colocate")(fn)


_signal_mid_run(signal.SIGINT, 130, "coop", "bsp")
_signal_mid_run(signal.SIGINT, 130, "linux", "run")
_signal_mid_run(signal.SIGTERM, 143, "coop", "bsp")
_signal_mid_run(signal.SIGTERM, 143, "partition", "blas")
