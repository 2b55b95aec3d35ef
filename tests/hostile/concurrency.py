"""Hostile cases: concurrency.

Two writers of one study, readers while a study is written, SIGKILL/SIGINT/SIGTERM of a
running study then --resume, parallel_for from several Python threads at once, several
cooperative (coop) commands on one node at once, a stale or foreign coop segment.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from .colocate import (
    ENV,
    HS,
    check_table,
    children_of,
    finish,
    shm_left,
    shm_now,
    start,
)
from .common import Skip, case, coop_segment, hs, ok, usage

# a study that runs ~10 s or more: stopped early by the cases that need it running
LONG = ["-s", "serial,dynamic", "-k", "1,2", "-L", "200", "--height", "64", "--width", "64",
        "--reps", "50"]
# the same shape, short enough to be finished by --resume in a few seconds
RESUMABLE = ["-s", "serial,dynamic", "-k", "1,2", "-L", "200", "--height", "64", "--width",
             "64", "--reps", "25"]
RESUMABLE_RUNS = 3 * 25  # serial at k=1, dynamic at k=1,2
SMALL_RUN = ["-s", "dynamic", "-k", "2", "-L", "8", "--height", "8", "--width", "16", "--reps",
             "1"]


def runs(path: Path):
    from hybridsched.store import read_runs

    return read_runs(str(path))


def wait_runs(p: subprocess.Popen, out: Path, at_least: int, timeout: float = 60) -> int:
    """Wait until ``out`` holds ``at_least`` runs (or ``p`` ended); returns how many."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline and p.poll() is None:
        if out.exists():
            try:
                n = len(runs(out))
            except Exception:  # noqa: BLE001 - not a study yet
                n = 0
            if n >= at_least:
                return n
        time.sleep(0.1)
    return n


def no_procs_on(marker: str, timeout: float = 5.0) -> str:
    """Processes whose command line names ``marker`` (our output file): none after ``timeout``."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        left = []
        for pr in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if pr.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if any(marker in a for a in (pr.info["cmdline"] or [])):
                    left.append(pr.info["pid"])
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            return ", ".join(map(str, left))
        time.sleep(0.1)


def only(tmp: Path, *names: str) -> str | None:
    extra = sorted(set(os.listdir(tmp)) - set(names))
    return f"left in the directory: {extra}" if extra else None


def run_bg(tmp: Path, out: Path, *argv, cwd=None) -> subprocess.Popen:
    return start("run", *argv, "-o", str(out), cwd=cwd)


# ------------------------------------------------------------------ one writer per study

def _second_writer(name: str, second: list[str], doc: str, needs_input: bool = False):
    def fn(tmp: Path) -> str | None:
        out = tmp / "w.h5"
        if needs_input:
            r = hs("run", *SMALL_RUN, "-o", str(tmp / "a.h5"), env=ENV)
            if ok(r, tmp / "a.h5"):
                return "setup: " + ok(r, tmp / "a.h5")
        p = run_bg(tmp, out, *LONG)
        try:
            if wait_runs(p, out, 1) < 1:
                return "the first run stored nothing"
            before = runs(out)
            q = hs(*[a.replace("{OUT}", str(out)).replace("{TMP}", str(tmp)) for a in second],
                   env=ENV, timeout=60)
            problem = usage(q, says="is being written by")
            if problem:
                return problem
            if str(p.pid) not in q.stderr:
                return f"the line does not name the writer's pid {p.pid}: {q.stderr.strip()}"
            if p.poll() is not None:
                return f"the first writer died (exit {p.returncode})"
            after = runs(out)
            if len(after) < len(before):
                return "the live study lost runs"
        finally:
            p.send_signal(signal.SIGINT)
            r = finish(p, 60)
        if r.returncode != 130:
            return f"the first writer, interrupted: exit {r.returncode}, not 130"
        return None
    fn.__name__ = name
    fn.__doc__ = doc
    case("concurrency")(fn)


_second_writer("two_runs_same_out", ["run", *SMALL_RUN, "-o", "{OUT}"],
               "a second run on the --out being written: exit 2, 'is being written by' PID")
_second_writer("second_run_resume_same_out", ["run", *LONG, "-o", "{OUT}", "--resume"],
               "run --resume on a study being written: refused")
_second_writer("second_run_overwrite_same_out", ["run", *SMALL_RUN, "-o", "{OUT}", "--overwrite"],
               "run --overwrite on a study being written: refused, the live study intact")
_second_writer("merge_into_study_being_written", ["merge", "{TMP}/a.h5", "-o", "{OUT}"],
               "merge -o a study being written: refused", needs_input=True)
_second_writer("ge_onto_study_being_written", ["ge", "--arch", "A1", "--algo", "rows", "--n",
                                               "16", "--threads", "4", "-o", "{OUT}",
                                               "--overwrite"],
               "ge --overwrite onto a run study being written: refused")
_second_writer("colocate_onto_study_being_written",
               ["colocate", "--jobs", "2", "--workers", "1", "--steps", "5", "--step-us", "50",
                "--reps", "1", "-o", "{OUT}", "--overwrite"],
               "colocate --overwrite onto a run study being written: refused")


@case("concurrency")
def second_writer_via_other_spelling(tmp: Path) -> str | None:
    """The same study named through a symlinked directory and a relative path: refused."""
    real = tmp / "real"
    real.mkdir()
    (tmp / "link").symlink_to(real)
    out = real / "w.h5"
    p = run_bg(tmp, out, *LONG)
    try:
        if wait_runs(p, out, 1) < 1:
            return "the first run stored nothing"
        q1 = hs("run", *SMALL_RUN, "-o", str(tmp / "link" / "w.h5"), "--overwrite", env=ENV)
        q2 = hs("run", *SMALL_RUN, "-o", "./w.h5", "--overwrite", env=ENV, cwd=real)
        for what, q in (("via the symlinked dir", q1), ("relative", q2)):
            problem = usage(q, says="is being written by")
            if problem:
                return f"{what}: {problem}"
    finally:
        p.send_signal(signal.SIGINT)
        finish(p, 60)
    return None


@case("concurrency")
def two_runs_started_together(tmp: Path) -> str | None:
    """Two runs of one --out started at the same instant: one writes (exit 0), one refused:
    the file is being written, or, where the machine's load let the first end before the
    second looked, it exists (seen under 3 busy loops, 2 tries of 6)."""
    out = tmp / "w.h5"
    ps = [run_bg(tmp, out, *SMALL_RUN) for _ in range(2)]
    rs = [finish(p, 120) for p in ps]
    codes = sorted(r.returncode for r in rs)
    if codes != [0, 2]:
        return f"exits {codes}, want [0, 2]: {[r.stderr.strip()[-120:] for r in rs]}"
    loser = [r for r in rs if r.returncode == 2][0]
    says = "file exists" if "file exists" in loser.stderr else "is being written by"
    problem = usage(loser, says=says)
    if problem:
        return "the refused one: " + problem
    return (None if len(runs(out)) == 1 else f"{len(runs(out))} runs stored, not 1") or \
        only(tmp, "w.h5")


@case("concurrency")
def two_merges_same_output(tmp: Path) -> str | None:
    """Two merges into one -o at once: both exit 0 one after another, or one refused (exit 2)."""
    a, b = tmp / "a.h5", tmp / "b.h5"
    for f, seed in ((a, "1"), (b, "1")):
        r = hs("run", "-s", "dynamic", "-k", "1,2", "-L", "8", "--height", "8", "--width", "16",
               "--reps", "3", "--seed", seed, "-o", str(f), env=ENV)
        if ok(r, f):
            return "setup: " + ok(r, f)
    out = tmp / "m.h5"
    ps = [start("merge", str(a), str(b), "-o", str(out)) for _ in range(2)]
    rs = [finish(p, 120) for p in ps]
    for r in rs:
        if r.returncode == 2:
            problem = usage(r)
            if problem:
                return "refused merge: " + problem
        elif ok(r):
            return ok(r)
    if 0 not in [r.returncode for r in rs]:
        return "neither merge wrote the file"
    n = len(runs(out))
    return None if n == len(runs(a)) + len(runs(b)) else f"merged study holds {n} runs"


# ------------------------------------------------------------------ readers while writing

@case("concurrency")
def report_loop_while_writing(tmp: Path) -> str | None:
    """report in a loop while run writes: every report exit 0 or one clean refusal line."""
    out = tmp / "w.h5"
    p = run_bg(tmp, out, *LONG)
    seen = []
    try:
        if wait_runs(p, out, 1) < 1:
            return "the run stored nothing"
        t_end = time.monotonic() + 8
        i = 0
        while time.monotonic() < t_end and p.poll() is None:
            r = hs("report", str(out), "--no-plots", "--out-dir", str(tmp / f"rep{i % 2}"),
                   timeout=60)
            seen.append(r.returncode)
            if "Traceback" in r.stderr:
                return "report traceback: " + r.stderr.strip().splitlines()[-1][:200]
            if r.returncode not in (0, 2):
                return f"report exit {r.returncode}: {r.stderr.strip()[-200:]}"
            if r.returncode == 2 and usage(r):
                return "report refusal: " + usage(r)
            i += 1
    finally:
        p.send_signal(signal.SIGINT)
        finish(p, 60)
    if len(seen) < 2:
        return f"only {len(seen)} reports ran while the study was written"
    return None if 0 in seen else f"no report succeeded: {seen}"


@case("concurrency")
def read_runs_loop_while_writing(tmp: Path) -> str | None:
    """read_runs in a loop while run writes: never fails, never shrinks, run_ids 0..n-1."""
    out = tmp / "w.h5"
    p = run_bg(tmp, out, *LONG)
    last, reads = 0, 0
    try:
        if wait_runs(p, out, 1) < 1:
            return "the run stored nothing"
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end and p.poll() is None:
            try:
                r = runs(out)
            except Exception as exc:  # noqa: BLE001
                return f"read {reads}: {type(exc).__name__}: {str(exc)[:150]}"
            reads += 1
            if len(r) < last:
                return f"the study shrank from {last} to {len(r)} runs"
            if sorted(int(x) for x in r["run_id"]) != list(range(len(r))):
                return "run_ids are not 0..n-1"
            if not all(bool(v) for v in r["verified"]):
                return "an unverified run"
            last = len(r)
    finally:
        p.send_signal(signal.SIGINT)
        finish(p, 60)
    return None if reads > 5 else f"only {reads} reads"


@case("concurrency")
def h5_handle_held_while_writing(tmp: Path) -> str | None:
    """An h5py handle held open while run writes: the reader's view stays, the writer goes on."""
    import h5py

    out = tmp / "w.h5"
    p = run_bg(tmp, out, *LONG)
    try:
        if wait_runs(p, out, 2) < 2:
            return "the run stored nothing"
        with h5py.File(out, "r") as h5:
            n0 = h5["runs"].shape[0]
            n1 = wait_runs(p, out, n0 + 3, timeout=30)
            if n1 < n0 + 3:
                return f"the writer stalled while a reader held the file ({n0} -> {n1})"
            if h5["runs"].shape[0] != n0:
                return "the open reader's view changed under it"
            h5["runs"][()]
    finally:
        p.send_signal(signal.SIGINT)
        r = finish(p, 60)
    return None if r.returncode == 130 else f"writer exit {r.returncode}"


@case("concurrency")
def trace_and_merge_read_study_being_written(tmp: Path) -> str | None:
    """trace and merge reading a study being written: exit 0 on a complete snapshot."""
    b = tmp / "b.h5"
    r = hs("run", *LONG[:-1], "1", "-o", str(b), env=ENV)
    if ok(r, b):
        return "setup: " + ok(r, b)
    out = tmp / "w.h5"
    p = run_bg(tmp, out, *LONG)
    try:
        if wait_runs(p, out, 2) < 2:
            return "the run stored nothing"
        t = hs("trace", str(out), "--run", "0", "--png", str(tmp / "t.png"),
               "--perfetto", str(tmp / "t.json"))
        if ok(t, tmp / "t.png", tmp / "t.json"):
            return "trace: " + ok(t, tmp / "t.png", tmp / "t.json")
        m = hs("merge", str(out), str(b), "-o", str(tmp / "m.h5"))
        if ok(m, tmp / "m.h5"):
            return "merge: " + ok(m, tmp / "m.h5")
        if len(runs(tmp / "m.h5")) < len(runs(b)) + 2:
            return "the merge lost runs"
    finally:
        p.send_signal(signal.SIGINT)
        finish(p, 60)
    return None


# ------------------------------------------------------------------ kill, interrupt, resume

def _kill_resume(name: str, extra: list[str], sched: list[str] | None = None):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        out = tmp / "r.h5"
        argv = list(RESUMABLE)
        if sched:
            argv[1] = ",".join(sched)
        total = RESUMABLE_RUNS if not sched else None
        p = run_bg(tmp, out, *argv, *extra)
        n = wait_runs(p, out, 5)
        if p.poll() is not None:
            finish(p)
            return "the study ended before the kill (make it longer)"
        p.kill()
        finish(p, 30)
        left = no_procs_on(str(out))
        if left:
            return f"worker processes outlive the SIGKILLed run: {left}"
        kept = runs(out)
        if len(kept) < n:
            return f"{len(kept)} runs kept, {n} were committed"
        kept_keys = {(str(x["scheduler"]), int(x["k"]), int(x["rep"])) for x in kept}
        r = hs("run", *argv, *extra, "-o", str(out), "--resume", env=ENV, timeout=300)
        problem = ok(r, out)
        if problem:
            return "resume: " + problem
        done = runs(out)
        keys = [(str(x["scheduler"]), int(x["k"]), int(x["rep"])) for x in done]
        if len(keys) != len(set(keys)):
            return "a configuration stored twice after the resume"
        if not kept_keys <= set(keys):
            return "the resume lost committed runs"
        if total is not None and len(done) != total:
            return f"{len(done)} runs after the resume, not {total}"
        if not all(bool(v) for v in done["verified"]):
            return "unverified runs after the resume"
        left = shm_left(before, settle=1.0)
        if left:
            return f"left in /dev/shm after the resume: {left}"
        return only(tmp, "r.h5")
    fn.__name__ = name
    fn.__doc__ = f"SIGKILL a running `run {' '.join(extra)}`, then --resume: committed runs " \
                 "kept, the rest run once, nothing left in /dev/shm"
    case("concurrency")(fn)


_kill_resume("sigkill_then_resume_threads", [])
_kill_resume("sigkill_then_resume_forks", [], sched=["prolific", "pipe-MtoM"])
_kill_resume("sigkill_then_resume_coop", ["--coop"], sched=["dynamic", "collective"])


def _interrupt(name: str, sig: int, code: int, sched: list[str] | None = None,
               resume: bool = False):
    def fn(tmp: Path) -> str | None:
        before = shm_now()
        out = tmp / "r.h5"
        argv = list(RESUMABLE)
        if sched:
            argv[1] = ",".join(sched)
        p = run_bg(tmp, out, *argv)
        n = wait_runs(p, out, 4)
        if p.poll() is not None:
            finish(p)
            return "the study ended before the signal (make it longer)"
        p.send_signal(sig)
        r = finish(p, 60)
        if r.returncode != code:
            return f"exit {r.returncode}, not {code}: {r.stderr.strip()[-200:]}"
        if "Traceback" in r.stderr:
            return "a traceback on stderr"
        left = no_procs_on(str(out))
        if left:
            return f"worker processes outlive the run: {left}"
        kept = runs(out)
        if len(kept) < n or not all(bool(v) for v in kept["verified"]):
            return f"{len(kept)} runs kept ({n} committed before the signal), or unverified"
        problem = only(tmp, "r.h5")
        if problem:
            return problem
        left = shm_left(before, settle=1.0)
        if left:
            return f"left in /dev/shm: {left}"
        if resume:
            r = hs("run", *argv, "-o", str(out), "--resume", env=ENV, timeout=300)
            problem = ok(r, out)
            if problem:
                return "resume: " + problem
            if not sched and len(runs(out)) != RESUMABLE_RUNS:
                return f"{len(runs(out))} runs after the resume, not {RESUMABLE_RUNS}"
        return None
    fn.__name__ = name
    fn.__doc__ = f"signal {int(sig)} mid-study: exit {code}, completed runs kept and verified" + \
        (", then --resume completes" if resume else "")
    case("concurrency")(fn)


_interrupt("sigint_mid_study", signal.SIGINT, 130)
_interrupt("sigterm_mid_study", signal.SIGTERM, 143)
_interrupt("sigint_then_resume", signal.SIGINT, 130, resume=True)
_interrupt("sigint_mid_study_forks", signal.SIGINT, 130, sched=["prolific", "collective"])
_interrupt("sigterm_mid_study_pipes", signal.SIGTERM, 143, sched=["pipe-1to1", "pipe-MtoM"])


@case("concurrency")
def double_sigint(tmp: Path) -> str | None:
    """Two Ctrl-C 50 ms apart: $? 130 (exit 130 or death by SIGINT), no traceback, the study
    readable, nothing beside it."""
    out = tmp / "r.h5"
    p = run_bg(tmp, out, *LONG)
    if wait_runs(p, out, 3) < 3:
        finish(p)
        return "the run stored nothing"
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    r = finish(p, 60)
    # a second Ctrl-C during the cleanup may end it by SIGINT itself: the shell's $? is 130
    # either way (exit(130) or killed by signal 2)
    if r.returncode not in (130, -signal.SIGINT):
        return f"exit {r.returncode}, not 130: {r.stderr.strip()[-200:]}"
    if "Traceback" in r.stderr:
        return "a traceback: " + r.stderr.strip().splitlines()[-1][:150]
    if not all(bool(v) for v in runs(out)["verified"]):
        return "unverified runs kept"
    return only(tmp, "r.h5")


@case("concurrency")
def sigkill_during_resume_then_resume(tmp: Path) -> str | None:
    """SIGKILL the run, SIGKILL its --resume, resume again: completes with every run once."""
    out = tmp / "r.h5"
    p = run_bg(tmp, out, *RESUMABLE)
    n = wait_runs(p, out, 3)
    p.kill()
    finish(p)
    q = start("run", *RESUMABLE, "-o", str(out), "--resume")
    wait_runs(q, out, n + 5)
    q.kill()
    finish(q)
    r = hs("run", *RESUMABLE, "-o", str(out), "--resume", env=ENV, timeout=300)
    problem = ok(r, out)
    if problem:
        return problem
    done = runs(out)
    keys = [(str(x["scheduler"]), int(x["k"]), int(x["rep"])) for x in done]
    if len(done) != RESUMABLE_RUNS or len(set(keys)) != len(keys):
        return f"{len(done)} runs ({len(set(keys))} distinct), want {RESUMABLE_RUNS}"
    return only(tmp, "r.h5")


@case("concurrency")
def sigkill_then_overwrite(tmp: Path) -> str | None:
    """SIGKILL a run, then a new run --overwrite on its file: takes the lock over, exit 0."""
    out = tmp / "r.h5"
    p = run_bg(tmp, out, *LONG)
    wait_runs(p, out, 2)
    p.kill()
    finish(p)
    r = hs("run", *SMALL_RUN, "-o", str(out), "--overwrite", env=ENV)
    problem = ok(r, out)
    if problem:
        return problem
    return (None if len(runs(out)) == 1 else f"{len(runs(out))} runs, not 1") or only(tmp, "r.h5")


# ------------------------------------------------------------------ parallel_for from threads

def _threads(name: str, scheds: list[str], kernel: str = "quicksort"):
    def fn(tmp: Path) -> str | None:
        import numpy as np

        import hybridsched as h

        results: dict[int, object] = {}
        barrier = threading.Barrier(len(scheds))

        def one(i: int, sched: str) -> None:
            rng = np.random.default_rng(100 + i)
            d = rng.integers(0, 256, (24, 8, 16 + i), dtype=np.uint8)
            ref = np.sort(d, axis=-1)
            try:
                barrier.wait(timeout=30)
                r = h.parallel_for(kernel, d, scheduler=sched, k=2)
                results[i] = (bool(r.verified), bool((d == ref).all()))
            except BaseException as exc:  # noqa: BLE001
                results[i] = f"{type(exc).__name__}: {str(exc)[:120]}"

        ts = [threading.Thread(target=one, args=(i, s), daemon=True) for i, s in enumerate(scheds)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        if any(t.is_alive() for t in ts):
            return "a parallel_for call hung (120 s)"
        bad = {scheds[i]: v for i, v in sorted(results.items()) if v != (True, True)}
        return f"wrong results: {bad}" if bad else None
    fn.__name__ = name
    fn.__doc__ = f"parallel_for from {len(scheds)} Python threads at once ({', '.join(scheds)}): " \
                 "each result verified and sorted"
    case("concurrency")(fn)


_threads("parallel_for_4_threads_dynamic", ["dynamic"] * 4)
_threads("parallel_for_4_threads_thread_schedulers", ["dynamic", "guided", "static", "aimd"])
_threads("parallel_for_4_threads_forks_and_pipes", ["prolific", "collective", "pipe-1to1",
                                                    "pipe-MtoM"])
_threads("parallel_for_4_threads_mixed", ["dynamic", "prolific", "fac2", "pipe-1toN"])
_threads("parallel_for_4_threads_numpy_kernel", ["dynamic", "chunk", "guided", "static"],
         kernel="numpy")


# ------------------------------------------------------------------ several coop commands

_CO = ["--jobs", "2", "--workers", "2", "--reps", "1", "--policy", "coop"]
_CO_BSP = [*_CO, "--steps", "600", "--step-us", "500"]


@case("concurrency")
def two_colocate_coop_at_once(tmp: Path) -> str | None:
    """Two colocate --policy coop at once (one arbiter): both exit 0, every job verified."""
    before = shm_now()
    ps = [start("colocate", *_CO_BSP, "-o", str(tmp / f"c{i}.h5")) for i in range(2)]
    rs = [finish(p, 300) for p in ps]
    for i, r in enumerate(rs):
        problem = ok(r, tmp / f"c{i}.h5") or check_table(tmp / f"c{i}.h5", "bsp", ["coop"])
        if problem:
            return f"command {i}: {problem}"
    left = shm_left(before)
    return f"left in /dev/shm: {left}" if left else None


@case("concurrency")
def three_colocate_coop_mixed_workloads(tmp: Path) -> str | None:
    """bsp, blas and run colocate --policy coop at once: all exit 0, every job verified."""
    before = shm_now()
    cmds = {"bsp": ["--steps", "300", "--step-us", "500"],
            "blas": ["--matrix", "128", "--steps", "40"],
            "run": ["--steps", "200", "--height", "64", "--width", "64"]}
    ps = {w: start("colocate", "--workload", w, *_CO, *a, "-o", str(tmp / f"{w}.h5"))
          for w, a in cmds.items()}
    for w, p in ps.items():
        r = finish(p, 300)
        problem = ok(r, tmp / f"{w}.h5") or check_table(tmp / f"{w}.h5", w, ["coop"])
        if problem:
            return f"{w}: {problem}"
    left = shm_left(before)
    return f"left in /dev/shm: {left}" if left else None


@case("concurrency")
def run_coop_while_colocate_coop(tmp: Path) -> str | None:
    """hybridsched run --coop while a colocate --policy coop runs: both exit 0, verified."""
    before = shm_now()
    c = start("colocate", *_CO_BSP, "-o", str(tmp / "c.h5"))
    children_of(c.pid, 4, settle=0.3)
    r = hs("run", "-s", "dynamic,prolific,pipe-MtoM", "-k", "2,4", "-L", "64", "--height", "32",
           "--width", "64", "--reps", "2", "--coop", "-o", str(tmp / "r.h5"), env=ENV, timeout=300)
    rc = finish(c, 300)
    problem = ok(r, tmp / "r.h5")
    if problem:
        return "run --coop: " + problem
    rr = runs(tmp / "r.h5")
    if not all(bool(v) for v in rr["verified"]) or not all(bool(v) for v in rr["coop"]):
        return "run --coop: unverified runs or coop=false"
    problem = ok(rc, tmp / "c.h5") or check_table(tmp / "c.h5", "bsp", ["coop"])
    if problem:
        return "colocate: " + problem
    left = shm_left(before)
    return f"left in /dev/shm: {left}" if left else None


@case("concurrency")
def two_run_coop_at_once(tmp: Path) -> str | None:
    """Two run --coop studies at once on one arbiter: both exit 0, every run verified."""
    before = shm_now()
    argv = ["-s", "dynamic,collective", "-k", "2,3", "-L", "64", "--height", "32", "--width",
            "64", "--reps", "3", "--coop"]
    ps = [run_bg(tmp, tmp / f"r{i}.h5", *argv) for i in range(2)]
    for i, p in enumerate(ps):
        r = finish(p, 300)
        problem = ok(r, tmp / f"r{i}.h5")
        if problem:
            return f"run {i}: {problem}"
        if not all(bool(v) for v in runs(tmp / f"r{i}.h5")["verified"]):
            return f"run {i}: unverified runs"
    left = shm_left(before)
    return f"left in /dev/shm: {left}" if left else None


@case("concurrency")
def sigkill_one_coop_command_other_finishes(tmp: Path) -> str | None:
    """SIGKILL a whole colocate coop command (its jobs too) while another runs: the other
    exits 0 verified in well under its deadline; the next hybridsched run sweeps the rest."""
    before = shm_now()
    e = dict(os.environ, **ENV)
    victim = subprocess.Popen([*HS, "colocate", *_CO, "--steps", "3000", "--step-us", "1000",
                               "-o", str(tmp / "v.h5")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=e, start_new_session=True)
    other = start("colocate", *_CO_BSP, "-o", str(tmp / "c.h5"))
    children_of(victim.pid, 4, settle=0.5)
    children_of(other.pid, 4, settle=0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    r = finish(other, 120)
    problem = ok(r, tmp / "c.h5") or check_table(tmp / "c.h5", "bsp", ["coop"])
    if problem:
        return "the survivor: " + problem
    # the next run sweeps what the killed command could not remove
    s = hs("colocate", *_CO, "--steps", "5", "--step-us", "50", "-o", str(tmp / "n.h5"), env=ENV)
    problem = ok(s, tmp / "n.h5")
    if problem:
        return "the next colocate: " + problem
    left = shm_left(before)
    return f"left in /dev/shm after the next run: {left}" if left else None


@case("concurrency")
def stale_coop_segment_reinitialised(tmp: Path) -> str | None:
    """A coop segment left by a SIGKILLed command (all participants dead): the next colocate
    coop reinitialises it, exits 0, and removes it at its end."""
    before = shm_now()
    e = dict(os.environ, **ENV)
    victim = subprocess.Popen([*HS, "colocate", *_CO, "--steps", "3000", "--step-us", "1000",
                               "-o", str(tmp / "v.h5")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=e, start_new_session=True)
    children_of(victim.pid, 4, settle=0.5)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    had = os.path.exists(coop_segment())
    r = hs("colocate", *_CO, "--steps", "20", "--step-us", "200", "-o", str(tmp / "c.h5"),
           env=ENV, timeout=120)
    problem = ok(r, tmp / "c.h5") or check_table(tmp / "c.h5", "bsp", ["coop"])
    if problem:
        return problem + ("" if had else " (no stale segment was there)")
    if os.path.exists(coop_segment()):
        return "the coop segment is still there after the last participant"
    left = shm_left(before)
    return f"left in /dev/shm: {left}" if left else None


@case("concurrency")
def foreign_coop_segment_refused(tmp: Path) -> str | None:
    """A coop segment with a wrong magic: colocate coop refuses (exit 2, one line), keeps it."""
    if os.path.exists(coop_segment()):
        raise Skip("a coop segment is in use")
    try:
        fd = os.open(coop_segment(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, b"NOT-OURS" * 1024)
        os.close(fd)
        r = hs("colocate", *_CO, "--steps", "5", "--step-us", "50", "-o", str(tmp / "c.h5"),
               env=ENV, timeout=60)
        problem = usage(r, tmp / "c.h5")
        if problem:
            return problem
        with open(coop_segment(), "rb") as f:
            if f.read(8) != b"NOT-OURS":
                return "the foreign segment was overwritten"
        q = hs("run", *SMALL_RUN, "--coop", "-o", str(tmp / "r.h5"), env=ENV, timeout=60)
        return ("run --coop: " + usage(q, tmp / "r.h5")) if usage(q, tmp / "r.h5") else None
    finally:
        for f in (coop_segment(), coop_segment() + ".lock"):
            if os.path.exists(f):
                os.unlink(f)


@case("concurrency")
def world_readable_coop_segment_refused(tmp: Path) -> str | None:
    """A coop segment with group/world access (0644): refused with one line, exit 2."""
    if os.path.exists(coop_segment()):
        raise Skip("a coop segment is in use")
    try:
        fd = os.open(coop_segment(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.fchmod(fd, 0o644)
        os.write(fd, b"\0" * 65536)
        os.close(fd)
        r = hs("colocate", *_CO, "--steps", "5", "--step-us", "50", "-o", str(tmp / "c.h5"),
               env=ENV, timeout=60)
        return usage(r, tmp / "c.h5")
    finally:
        for f in (coop_segment(), coop_segment() + ".lock"):
            if os.path.exists(f):
                os.unlink(f)


# ------------------------------------------------------------------ other pairs at once

@case("concurrency")
def two_ge_same_out(tmp: Path) -> str | None:
    """Two ge sweeps on one --out at once: one writes (exit 0), the other refused (exit 2)."""
    out = tmp / "g.h5"
    argv = ["ge", "--arch", "A1,A2", "--algo", "rows", "--n", "128", "--threads", "16", "--reps",
            "10", "-o", str(out)]
    ps = [start(*argv) for _ in range(2)]
    rs = [finish(p, 300) for p in ps]
    codes = sorted(r.returncode for r in rs)
    if codes != [0, 2]:
        return f"exits {codes}, want [0, 2]: {[r.stderr.strip()[-120:] for r in rs]}"
    problem = usage([r for r in rs if r.returncode == 2][0], says="being written")
    if problem:
        return problem
    from hybridsched.store import read_table

    n = len(read_table(str(out), "ge"))
    return (None if n == 20 else f"/ge holds {n} rows, not 20") or only(tmp, "g.h5")


@case("concurrency")
def two_colocate_same_out(tmp: Path) -> str | None:
    """Two colocate commands on one --out at once: one writes, the other refused (exit 2)."""
    out = tmp / "c.h5"
    argv = ["colocate", "--jobs", "2", "--workers", "1", "--steps", "300", "--step-us", "1000",
            "--reps", "1", "--policy", "linux", "-o", str(out)]
    ps = [start(*argv) for _ in range(2)]
    rs = [finish(p, 300) for p in ps]
    codes = sorted(r.returncode for r in rs)
    if codes != [0, 2]:
        return f"exits {codes}, want [0, 2]: {[r.stderr.strip()[-120:] for r in rs]}"
    problem = usage([r for r in rs if r.returncode == 2][0], says="being written")
    return problem or check_table(out, "bsp", ["linux"]) or only(tmp, "c.h5")


@case("concurrency")
def report_on_colocate_being_written(tmp: Path) -> str | None:
    """report on a colocate study while it is written: exit 0 or one clean line, no traceback."""
    out = tmp / "c.h5"
    p = start("colocate", "--jobs", "2", "--workers", "1", "--steps", "200", "--step-us", "1000",
              "--reps", "6", "--policy", "linux,coop", "-o", str(out))
    codes = []
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        while p.poll() is None and len(codes) < 4:
            r = hs("report", str(out), "--no-plots", "--out-dir", str(tmp / "rep"), timeout=60)
            codes.append(r.returncode)
            if "Traceback" in r.stderr:
                return "report traceback: " + r.stderr.strip().splitlines()[-1][:150]
            if r.returncode not in (0, 2) or (r.returncode == 2 and usage(r)):
                return f"report exit {r.returncode}: {r.stderr.strip()[-200:]}"
    finally:
        r = finish(p, 300)
    problem = ok(r, out)
    if problem:
        return "colocate: " + problem
    return None if codes else "the colocate ended before any report"


@case("concurrency")
def api_parallel_for_while_cli_coop(tmp: Path) -> str | None:
    """parallel_for in this process while a colocate coop command runs: both verified."""
    import numpy as np

    import hybridsched as h

    c = start("colocate", *_CO_BSP, "-o", str(tmp / "c.h5"))
    children_of(c.pid, 4, settle=0.2)
    try:
        d = np.random.default_rng(3).integers(0, 256, (64, 16, 32), dtype=np.uint8)
        ref = np.sort(d, axis=-1)
        res = h.parallel_for("quicksort", d, scheduler="pipe-MtoM", k=3)
        if not res.verified or not (d == ref).all():
            return "parallel_for result wrong"
    finally:
        r = finish(c, 300)
    return ok(r, tmp / "c.h5") or check_table(tmp / "c.h5", "bsp", ["coop"])


@case("concurrency")
def sigkill_run_coop_while_colocate(tmp: Path) -> str | None:
    """SIGKILL a run --coop while colocate coop runs: colocate exits 0, all jobs verified."""
    before = shm_now()
    c = start("colocate", *_CO_BSP, "-o", str(tmp / "c.h5"))
    out = tmp / "r.h5"
    p = run_bg(tmp, out, *LONG, "--coop")
    wait_runs(p, out, 2)
    p.kill()
    finish(p)
    r = finish(c, 300)
    problem = ok(r, tmp / "c.h5") or check_table(tmp / "c.h5", "bsp", ["coop"])
    if problem:
        return "colocate: " + problem
    s = hs("run", *SMALL_RUN, "-o", str(tmp / "s.h5"), env=ENV)  # sweeps the dead run's segments
    if ok(s):
        return "the next run: " + ok(s)
    left = no_procs_on(str(out)) or shm_left(before)
    return f"left behind: {left}" if left else None
