"""Hostile cases: mpi. `run` under `mpiexec -n 2` (README, "Distributed runs (MPI), fit,
merge"): every split and scheduler family, the documented refusals (one line from rank 0,
exit 2, no file), failing and killed ranks (exit not 0, the runs already written kept, no
lock, no /dev/shm segment of ours and no stray rank or watchdog left), MPMD launches whose
ranks disagree, and report/fit/merge/trace of an MPI study.

Every launch is SIGKILLed by ``common.mpi``/``common.mpmd`` after a short timeout (a hung
mpiexec ignores SIGTERM). MPICH's own /dev/shm/mpich_shm_* files are not counted (README).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import atexit
import time
from pathlib import Path

from .common import case, coop_segment, failed, foreign, hs, mpi, mpmd, ok, usage

SIZE = ["--height", "8", "--width", "16", "--reps", "1"]
TINY20 = ["-L", "20", *SIZE]
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
T_RUN = 90       # a launch that should finish (seconds; SIGKILL after)
T_REFUSE = 45    # a launch that should be refused at once


# --- checks -------------------------------------------------------------------------------


def _shm_ours() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("hybridsched") and not foreign(n)}
    except OSError:
        return set()


def _strays(tmp: Path) -> list[str]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if str(tmp) in cmd and p.pid != os.getpid():
            out.append(f"pid {p.pid} ({cmd[:80]})")
    return out


def _settled(tmp: Path, out: Path | None, shm_before: set[str], wait: float = 6.0) -> str | None:
    """After a launch: within ``wait`` s no lock beside ``out``, no new /dev/shm name of
    ours (hybridsched.*, the watchdogs' hybridsched-mpi.* marker), no process of this case."""
    deadline = time.monotonic() + wait
    while True:
        lock = out is not None and os.path.lexists(str(out) + ".lock")
        shm = sorted(_shm_ours() - shm_before)
        strays = _strays(tmp)
        if not (lock or shm or strays) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    problems = []
    if lock:
        problems.append(f"{out}.lock left after {wait:.0f} s")
    if shm:
        problems.append(f"/dev/shm: {', '.join(shm)}")
    if strays:
        problems.append(f"processes left: {'; '.join(strays[:3])}")
    return "; ".join(problems) or None


def _runs(out: Path):
    from hybridsched import store

    return store.read_runs(str(out))


def _mpi_ok(tmp: Path, *argv: str, want: int, env: dict | None = None, P: int = 2,
            check=None) -> str | None:
    """`mpiexec -n 2 hybridsched run ARGV -o tmp/mpi.h5`: exit 0, ``want`` runs, all at P = 2
    and verified, nothing left behind."""
    out = tmp / "mpi.h5"
    before = _shm_ours()
    p = mpi(2, "run", *argv, "-o", str(out), env=dict(ENV, **(env or {})), timeout=T_RUN, cwd=tmp)
    why = ok(p, out)
    if why:
        return why + ("" if p.returncode != 137 else " (SIGKILLed: hung?)")
    runs = _runs(out)
    if len(runs) != want:
        return f"{len(runs)} runs stored, not {want}"
    if set(runs["P"].tolist()) != {P}:
        return f"P stored as {sorted(set(runs['P'].tolist()))}, not {P}"
    if not runs["verified"].all():
        bad = runs[~runs["verified"]][0]
        return f"run {int(bad['run_id'])} ({bad['scheduler']}) unverified: {bad['error'][:120]}"
    if check is not None:
        why = check(out, runs, p)
        if why:
            return why
    return _settled(tmp, out, before)


def _mpi_refused(tmp: Path, *argv: str, env: dict | None = None, says: str = "",
                 extra_absent=()) -> str | None:
    """Refused under mpiexec -n 2: one line, exit 2, no file, nothing left."""
    out = tmp / "mpi.h5"
    before = _shm_ours()
    p = mpi(2, "run", *argv, "-o", str(out), env=dict(ENV, **(env or {})), timeout=T_REFUSE,
            cwd=tmp)
    if p.returncode == 137:
        return f"hung: SIGKILLed after {T_REFUSE} s"
    why = usage(p, out, Path(str(out) + ".lock"), *extra_absent, says=says)
    return why or _settled(tmp, out, before)


# --- splits and schedulers ----------------------------------------------------------------


def _split_case(scheduler: str, split: str, k: str = "2"):
    def fn(tmp: Path) -> str | None:
        return _mpi_ok(tmp, "-s", scheduler, "-k", k, *TINY20, "--split", split, want=1)

    fn.__name__ = f"run_{scheduler.replace('-', '_').replace(':', '_')}_split_{split}"
    fn.__doc__ = f"mpiexec -n 2 run -s {scheduler} --split {split}: one verified run at P = 2"
    return fn


for _sched, _split in [("dynamic", "static"), ("dynamic", "dynamic"), ("dynamic", "fac2"),
                       ("dynamic", "trapezoidal"), ("guided", "static"), ("guided", "dynamic"),
                       ("prolific", "static"), ("prolific", "dynamic"),
                       ("pipe-MtoM", "static"), ("pipe-MtoM", "fac2"),
                       ("serial", "static"), ("serial", "dynamic")]:
    case("mpi")(_split_case(_sched, _split, "1" if _sched == "serial" else "2"))


@case("mpi")
def run_many_schedulers_static(tmp: Path) -> str | None:
    """one launch of dynamic, guided, prolific, pipe-MtoM at k 1,2: 8 verified runs, the
    detail of every run holding both ranks (workers 0..2k-1, frames 0..19 once each)"""
    from hybridsched import store

    def check(out, runs, p):
        for r in runs:
            d = store.read_detail(str(out), int(r["run_id"]))
            k = int(r["k"])
            if "worker" in (d.workers.dtype.names or ()):
                got = sorted(set(d.workers["worker"].tolist()))
                if got != list(range(2 * k)):
                    return f"run {int(r['run_id'])} ({r['scheduler']} k={k}): workers {got}"
            frames = sorted(f for a, c in zip(d.trace["first"].tolist(), d.trace["count"].tolist())
                            for f in range(a, a + c))
            if frames != list(range(20)):
                return (f"run {int(r['run_id'])} ({r['scheduler']} k={k}): the trace covers "
                        f"frames {frames[:6]}... ({len(frames)}), not 0..19 once")
        return None

    return _mpi_ok(tmp, "-s", "dynamic,guided,prolific,pipe-MtoM", "-k", "1,2", *TINY20,
                   want=8, check=check)


@case("mpi")
def run_L1_split_dynamic(tmp: Path) -> str | None:
    """-L 1 with 2 ranks and --split dynamic: allowed (only static needs a frame per rank);
    one verified run"""
    return _mpi_ok(tmp, "-s", "dynamic", "-k", "1", "-L", "1", *SIZE, "--split", "dynamic",
                   want=1)


@case("mpi")
def run_workload_ramp_static(tmp: Path) -> str | None:
    """--workload ramp with --split static: allowed, stored as ramp"""
    def check(out, runs, p):
        return None if set(runs["workload"].tolist()) == {"ramp"} else \
            f"workload stored as {set(runs['workload'].tolist())}"
    return _mpi_ok(tmp, "-s", "dynamic", "-k", "2", *TINY20, "--workload", "ramp",
                   "--split", "static", want=1, check=check)


@case("mpi")
def run_workload_ramp_dynamic(tmp: Path) -> str | None:
    """--workload ramp with --split dynamic: refused (needs --split static)"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", *TINY20, "--workload", "ramp",
                        "--split", "dynamic", says="static")


@case("mpi")
def run_profiled_fac_split_dynamic(tmp: Path) -> str | None:
    """profiled technique fac with --split dynamic: refused"""
    return _mpi_refused(tmp, "-s", "fac", "-k", "2", *TINY20, "--split", "dynamic",
                        says="static")


@case("mpi")
def run_profiled_fac_split_fac2(tmp: Path) -> str | None:
    """profiled technique fac with --split fac2 (not static): refused"""
    return _mpi_refused(tmp, "-s", "fac", "-k", "2", *TINY20, "--split", "fac2",
                        says="static")


@case("mpi")
def run_profiled_fac_split_static(tmp: Path) -> str | None:
    """profiled technique fac with --split static: one verified run"""
    return _mpi_ok(tmp, "-s", "fac", "-k", "2", *TINY20, "--split", "static", want=1)


@case("mpi")
def run_resume_refused(tmp: Path) -> str | None:
    """--resume under mpiexec: refused, no file"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", *TINY20, "--resume", says="resume")


@case("mpi")
def run_resume_existing_untouched(tmp: Path) -> str | None:
    """--resume of an existing study under mpiexec: refused, the study unchanged"""
    out = tmp / "mpi.h5"
    p = hs("run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(out), env=ENV)
    if p.returncode != 0:
        return f"the P = 1 study failed: {p.stderr.strip()[-200:]}"
    data = out.read_bytes()
    q = mpi(2, "run", "-s", "dynamic", "-k", "2", *TINY20, "--resume", "-o", str(out), env=ENV,
            timeout=T_REFUSE)
    why = usage(q, Path(str(out) + ".lock"), says="resume")
    return why or (None if out.read_bytes() == data else "the study was changed")


@case("mpi")
def run_chunk_auto_refused(tmp: Path) -> str | None:
    """--chunk auto under mpiexec (a pipe scheduler): refused"""
    return _mpi_refused(tmp, "-s", "pipe-1to1", "-k", "2", *TINY20, "--chunk", "auto",
                        says="auto")


@case("mpi")
def run_input_refused(tmp: Path) -> str | None:
    """--input FILE.npy under mpiexec: refused"""
    import numpy as np

    npy = tmp / "in.npy"
    np.save(npy, np.random.default_rng(0).integers(0, 255, (20, 8, 16), dtype=np.uint8))
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", "--input", str(npy), "--reps", "1",
                        says="input")


@case("mpi")
def run_L1_static_refused(tmp: Path) -> str | None:
    """-L 1 with 2 ranks and --split static: refused (a rank would have no frame)"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "1", "-L", "1", *SIZE, "--split", "static")


@case("mpi")
def run_split_unknown(tmp: Path) -> str | None:
    """--split bogus: refused"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", *TINY20, "--split", "bogus")


@case("mpi")
def run_existing_out_refused(tmp: Path) -> str | None:
    """mpiexec run -o an existing file without --overwrite: refused, file untouched"""
    out = tmp / "mpi.h5"
    out.write_bytes(b"precious")
    p = mpi(2, "run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(out), env=ENV,
            timeout=T_REFUSE)
    why = usage(p, Path(str(out) + ".lock"))
    return why or (None if out.read_bytes() == b"precious" else "the file was changed")


@case("mpi")
def run_out_directory_refused(tmp: Path) -> str | None:
    """mpiexec run -o a directory: refused, nothing written into it"""
    d = tmp / "mpi.h5"
    d.mkdir()
    p = mpi(2, "run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(d), env=ENV,
            timeout=T_REFUSE)
    why = usage(p)
    return why or (f"wrote into it: {os.listdir(d)}" if os.listdir(d) else None)


@case("mpi")
def run_overwrite_existing(tmp: Path) -> str | None:
    """mpiexec run --overwrite of an existing P = 1 study: replaced by the P = 2 study"""
    out = tmp / "mpi.h5"
    p = hs("run", "-s", "serial", "-k", "1", *TINY20, "-o", str(out), env=ENV)
    if p.returncode != 0:
        return f"the P = 1 study failed: {p.stderr.strip()[-200:]}"
    return _mpi_ok(tmp, "-s", "dynamic", "-k", "2", *TINY20, "--overwrite", want=1)


@case("mpi")
def run_coop(tmp: Path) -> str | None:
    """--coop under mpiexec: the ranks share the node's arbiter; verified runs stored with
    coop = true, the coop segment removed at the end"""
    def check(out, runs, p):
        if not runs["coop"].all():
            return "runs not stored with coop = true"
        seg = coop_segment()
        return f"{seg} left" if os.path.exists(seg) else None
    return _mpi_ok(tmp, "-s", "dynamic,prolific", "-k", "2", *TINY20, "--coop", want=2,
                   check=check)


@case("mpi")
def run_corrupt_rank_unverified(tmp: Path) -> str | None:
    """HYBRIDSCHED_CORRUPT_RANK=1: verification summed over the ranks: the run is stored
    unverified with bad rows, exit 1"""
    out = tmp / "mpi.h5"
    before = _shm_ours()
    p = mpi(2, "run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(out),
            env=dict(ENV, HYBRIDSCHED_CORRUPT_RANK="1"), timeout=T_RUN)
    why = failed(p)
    if why:
        return why
    runs = _runs(out)
    if len(runs) != 1 or runs["verified"].any() or not (runs["bad_rows"] > 0).all():
        return (f"stored {len(runs)} runs, verified {runs['verified'].tolist()}, bad_rows "
                f"{runs['bad_rows'].tolist()}")
    return _settled(tmp, out, before)


# --- failing ranks ------------------------------------------------------------------------


def _fail_case(spec: str, kept: int, says: str):
    def fn(tmp: Path) -> str | None:
        out = tmp / "mpi.h5"
        before = _shm_ours()
        p = mpi(2, "run", "-s", "dynamic,guided", "-k", "2", *TINY20, "-o", str(out),
                env=dict(ENV, HYBRIDSCHED_FAIL_RANK=spec), timeout=T_RUN)
        if p.returncode == 137:
            return f"hung: SIGKILLed after {T_RUN} s"
        if p.returncode == 0:
            return "exit 0 although a rank failed"
        if "Traceback" in p.stderr:
            return "a traceback on stderr"
        if says.lower() not in p.stderr.lower():
            return f"stderr does not say {says!r}: {' | '.join(p.stderr.strip().splitlines()[-3:])[:300]}"
        if os.path.exists(out):
            try:
                runs = _runs(out)
            except Exception as exc:  # noqa: BLE001 - the study left must read back
                return f"the study left does not read back: {str(exc)[:160]}"
            if len(runs) != kept or not runs["verified"].all():
                return f"{len(runs)} runs kept (verified {runs['verified'].tolist()}), not {kept}"
        elif kept:
            return f"no study left, though {kept} run(s) completed before the failure"
        return _settled(tmp, out, before)

    tag = spec.replace(":", "_")
    fn.__name__ = f"fail_rank_{tag}"
    fn.__doc__ = (f"HYBRIDSCHED_FAIL_RANK={spec}: exit not 0, {says!r} said, {kept} run(s) "
                  "kept, no lock, shm or rank left")
    return fn


for _spec, _kept, _says in [("1:0", 0, "rank 1"), ("1:1", 1, "rank 1"), ("0:1", 1, "rank 0"),
                            ("1:1:kill", 1, "killed"), ("0:0:kill", 0, "killed"),
                            ("0:1:kill", 1, "killed")]:
    case("mpi")(_fail_case(_spec, _kept, _says))


@case("mpi")
def fail_rank_malformed(tmp: Path) -> str | None:
    """HYBRIDSCHED_FAIL_RANK=x: refused before any run (one line, exit 2, no file)"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", *TINY20,
                        env={"HYBRIDSCHED_FAIL_RANK": "x"}, says="HYBRIDSCHED_FAIL_RANK")


@case("mpi")
def fail_rank_half_formed(tmp: Path) -> str | None:
    """HYBRIDSCHED_FAIL_RANK=1:x:kill: refused before any run"""
    return _mpi_refused(tmp, "-s", "dynamic", "-k", "2", *TINY20,
                        env={"HYBRIDSCHED_FAIL_RANK": "1:x:kill"}, says="HYBRIDSCHED_FAIL_RANK")


# --- ranks that disagree ------------------------------------------------------------------


def _mpmd_case(name: str, differ: list[str], says: str = ""):
    def fn(tmp: Path) -> str | None:
        out = tmp / "mpi.h5"
        base = ["run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(out)]
        before = _shm_ours()
        p = mpmd(base, base + differ, timeout=T_REFUSE, cwd=tmp)
        if p.returncode == 137:
            return f"hung: SIGKILLed after {T_REFUSE} s"
        why = usage(p, out, Path(str(out) + ".lock"), says=says)
        return why or _settled(tmp, out, before)

    fn.__name__ = f"mpmd_{name}"
    fn.__doc__ = f"MPMD launch, rank 1 given {' '.join(differ)}: one line, exit 2, no file"
    return fn


# appended: argparse keeps the last of a repeated option, so rank 1's differs
for _name, _differ, _says in [("other_L", ["-L", "24"], "different"),
                              ("other_seed", ["--seed", "7"], "different"),
                              ("other_reps", ["--reps", "2"], "different"),
                              ("other_k", ["-k", "1"], "different"),
                              ("other_scheduler", ["-s", "guided"], "different"),
                              ("other_split", ["--split", "dynamic"], "different"),
                              ("bad_option_rank1", ["--bogus-option"], ""),
                              ("bad_value_rank1", ["-k", "0"], ""),
                              ("unknown_scheduler_rank1", ["-s", "nosuch"], "")]:
    case("mpi")(_mpmd_case(_name, _differ, _says))


@case("mpi")
def mpmd_bad_option_rank0(tmp: Path) -> str | None:
    """MPMD launch, rank 0 given --bogus-option: one line, exit 2, no file"""
    out = tmp / "mpi.h5"
    base = ["run", "-s", "dynamic", "-k", "2", *TINY20, "-o", str(out)]
    p = mpmd(base[:1] + ["--bogus-option"] + base[1:], base, timeout=T_REFUSE, cwd=tmp)
    if p.returncode == 137:
        return f"hung: SIGKILLed after {T_REFUSE} s"
    return usage(p, out, Path(str(out) + ".lock"))


@case("mpi")
def mpmd_other_out(tmp: Path) -> str | None:
    """MPMD launch, the ranks given different -o: one line, exit 2, neither file"""
    a, b = tmp / "a.h5", tmp / "b.h5"
    base = ["run", "-s", "dynamic", "-k", "2", *TINY20]
    p = mpmd(base + ["-o", str(a)], base + ["-o", str(b)], timeout=T_REFUSE, cwd=tmp)
    if p.returncode == 137:
        return f"hung: SIGKILLed after {T_REFUSE} s"
    return usage(p, a, b)


# --- the MPI study read back --------------------------------------------------------------

_CACHE: dict[str, Path] = {}


def _studies() -> tuple[Path, Path]:
    """A P = 2 study (dynamic, k 1,2) and a P = 1 study (serial, dynamic, k 1,2) of the same
    tensor, built once."""
    if "mpi" in _CACHE and _CACHE["mpi"].exists() and _CACHE["p1"].exists():
        return _CACHE["mpi"], _CACHE["p1"]
    d = Path(tempfile.mkdtemp(prefix="hostile-mpi-cache-"))
    atexit.register(shutil.rmtree, str(d), True)
    m, one = d / "mpi.h5", d / "p1.h5"
    p = mpi(2, "run", "-s", "dynamic", "-k", "1,2", *TINY20, "-o", str(m), env=ENV,
            timeout=T_RUN)
    if p.returncode != 0:
        raise RuntimeError(f"the P = 2 study failed: exit {p.returncode}: {p.stderr.strip()[-200:]}")
    p = hs("run", "-s", "serial,dynamic", "-k", "1,2", *TINY20, "-o", str(one), env=ENV)
    if p.returncode != 0:
        raise RuntimeError(f"the P = 1 study failed: {p.stderr.strip()[-200:]}")
    _CACHE.update(mpi=m, p1=one)
    return m, one


def _merged(tmp: Path) -> tuple[Path, str | None]:
    m, one = _studies()
    a, b = tmp / "mpi.h5", tmp / "p1.h5"
    shutil.copyfile(m, a)
    shutil.copyfile(one, b)
    out = tmp / "all.h5"
    return out, ok(hs("merge", str(a), str(b), "-o", str(out)), out)


@case("mpi")
def merge_mpi_with_p1(tmp: Path) -> str | None:
    """merge of the P = 2 study and a P = 1 study: 2 + 3 runs, P 2 and 1, every detail kept"""
    from hybridsched import store

    out, why = _merged(tmp)
    if why:
        return why
    runs = store.read_runs(str(out))
    if len(runs) != 5 or sorted(runs["P"].tolist()) != [1, 1, 1, 2, 2]:
        return f"merged runs: P {sorted(runs['P'].tolist())}"
    for r in runs:
        d = store.read_detail(str(out), int(r["run_id"]))
        if len(d.trace) == 0:
            return f"run {int(r['run_id'])} (P={int(r['P'])}) lost its trace in the merge"
        if int(r["P"]) == 2 and not d.extra:
            return f"run {int(r['run_id'])}: the MPI extra (per-rank times) was lost"
    return None


@case("mpi")
def fit_usl_mpi_with_p1(tmp: Path) -> str | None:
    """fit --model usl --json of the merged P x k study: exit 0, strict JSON, N = 1, 2, 4"""
    out, why = _merged(tmp)
    if why:
        return why
    plot = tmp / "usl.png"
    p = hs("fit", str(out), "--model", "usl", "--json", "--plot", str(plot))
    why = ok(p, plot)
    if why:
        return why
    try:
        res = json.loads(p.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as exc:
        return f"not strict JSON: {exc}"
    return None if isinstance(res, dict) and "alpha" in res else f"no alpha in {str(res)[:120]}"


@case("mpi")
def fit_mpi_study_alone(tmp: Path) -> str | None:
    """fit of the P = 2 study alone (no P = 1 serial runs): one line, exit 2"""
    m, _ = _studies()
    a = tmp / "mpi.h5"
    shutil.copyfile(m, a)
    plot = tmp / "fit.png"
    return usage(hs("fit", str(a), "--model", "amdahl", "--plot", str(plot)), plot,
                 says="serial")


@case("mpi")
def report_mpi_with_p1(tmp: Path) -> str | None:
    """report of the merged study: exit 0, P×k rows, summary.csv"""
    out, why = _merged(tmp)
    if why:
        return why
    d = tmp / "rep"
    p = hs("report", str(out), "--no-plots", "--out-dir", str(d))
    why = ok(p, d / "summary.csv")
    if why:
        return why
    # its own table for P = 2, with σ from the merged-in P = 1 serial runs of the same L
    text = p.stdout.split("P = 2 ranks", 1)
    if len(text) < 2:
        return "no table for the P = 2 runs in the report"
    rows = [ln for ln in text[1].split("\n\n", 2)[1].splitlines() if ln.startswith("| ") and
            ln.split("|")[1].strip().isdigit()]
    blank = [ln for ln in rows if ln.split("|")[4].strip() in ("—", "")]
    if len(rows) != 2 or blank:
        return f"P = 2 rows {rows!r}: σ blank although the P = 1 serial runs were merged in"
    return None


@case("mpi")
def report_mpi_study_alone(tmp: Path) -> str | None:
    """report of the P = 2 study alone: exit 0 (σ left blank), summary.csv"""
    m, _ = _studies()
    a = tmp / "mpi.h5"
    shutil.copyfile(m, a)
    d = tmp / "rep"
    return ok(hs("report", str(a), "--out-dir", str(d)), d / "summary.csv")


@case("mpi")
def trace_mpi_run(tmp: Path) -> str | None:
    """trace of a P = 2, k = 2 run: PNG and Perfetto JSON, one process per rank, 4 lanes"""
    from hybridsched import store

    m, _ = _studies()
    a = tmp / "mpi.h5"
    shutil.copyfile(m, a)
    runs = store.read_runs(str(a))
    rid = int(runs["run_id"][runs["k"] == 2][0])
    png, js = tmp / "t.png", tmp / "t.json"
    p = hs("trace", str(a), "--run", str(rid), "--png", str(png), "--perfetto", str(js))
    why = ok(p, png, js)
    if why:
        return why
    if "on 4 workers" not in p.stdout:
        return f"not 4 lanes: {p.stdout.strip().splitlines()[:1]}"
    events = json.loads(js.read_text())
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    pids = {e.get("pid") for e in events if e.get("ph") == "X"}
    return None if len(pids) == 2 else f"chunk slices in {len(pids)} processes, not 2 ranks"
