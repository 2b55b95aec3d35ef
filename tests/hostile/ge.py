"""Hostile cases: ge.

Good sweeps (every arch x algo at n = 32), edge shapes, bad values, output paths, the
injected user-thread fault (HYBRIDSCHED_GE_FAULT), report, and SIGINT/SIGTERM mid-sweep.
"""
from __future__ import annotations

import math
import os
import signal
from pathlib import Path

from .colocate import children_of, finish, start  # noqa: F401  (shared helpers)
from .common import case, failed, hs, ok, usage

ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
FAULT = "HYBRIDSCHED_GE_FAULT"


def ge(tmp: Path, *argv, env: dict | None = None, out: Path | None = None, timeout: float = 180):
    out = out or tmp / "g.h5"
    return hs("ge", *argv, "-o", str(out), env={**ENV, **(env or {})}, timeout=timeout), out


def _stored(path: Path) -> bool:
    """Whether the study at ``path`` holds a run yet (published snapshots only)."""
    try:
        return path.exists() and len(rows(path)) > 0
    except Exception:  # noqa: BLE001 - not a readable study yet
        return False


def rows(path: Path):
    from hybridsched.store import read_table

    return read_table(str(path), "ge")


def _grid(t: int) -> int:
    g = int(round(math.sqrt(t)))
    return max(g, 1)


def check_ge(out: Path, archs: list[str], algos: list[str], n: int, threads: list[int],
             reps: int = 1, seed: int | None = None) -> str | None:
    """Every (arch, algo, threads, rep) once, verified, residual and x error within bounds."""
    try:
        t = rows(out)
    except Exception as exc:  # noqa: BLE001
        return f"/ge unreadable: {type(exc).__name__}: {str(exc)[:150]}"
    want = sorted((a, g, th, r) for a in archs for g in algos for th in threads
                  for r in range(reps))
    got = sorted((str(x["arch"]), str(x["algo"]), int(x["threads_requested"]), int(x["rep"]))
                 for x in t)
    if got != want:
        return f"/ge rows {got[:6]}... ({len(got)}) are not one per arch, algo, threads, rep " \
               f"({len(want)})"
    for x in t:
        tag = f"{x['arch']} {x['algo']} T={x['threads_requested']} rep {x['rep']}"
        if not bool(x["verified"]) or str(x["error"]):
            return f"{tag}: not verified: {x['error']}"
        if int(x["n"]) != n:
            return f"{tag}: n stored {x['n']}, not {n}"
        if seed is not None and int(x["seed"]) != seed:
            return f"{tag}: seed stored {x['seed']}, not {seed}"
        want_t = _grid(int(x["threads_requested"])) ** 2 if str(x["algo"]) == "tiles" \
            else int(x["threads_requested"])
        if int(x["threads"]) != want_t:
            return f"{tag}: threads stored {x['threads']}, want {want_t}"
        if not (float(x["residual"]) < 1e-10 and float(x["x_err"]) < 1e-8):
            return f"{tag}: residual {x['residual']} x_err {x['x_err']} out of bounds"
        times = [float(x[k]) for k in ("t_create_s", "t_forward_s", "t_back_s", "t_total_s")]
        if not all(math.isfinite(v) and v >= 0 for v in times):
            return f"{tag}: stage times {times}"
        if times[3] + 1e-9 < times[1]:
            return f"{tag}: t_total_s {times[3]} below t_forward_s {times[1]}"
        if str(x["arch"]) == "A0" and int(x["switches"]) != 0:
            return f"{tag}: A0 has switches {x['switches']} (documented 0)"
    return None


# ------------------------------------------------------------------ good runs

@case("ge")
def all_archs_both_algos(tmp: Path) -> str | None:
    """--arch A0,A1,A2 --algo rows,tiles --n 32 --threads 4,16: 12 verified runs."""
    p, out = ge(tmp, "--arch", "A0,A1,A2", "--algo", "rows,tiles", "--n", "32",
                "--threads", "4,16")
    return ok(p, out) or check_ge(out, ["A0", "A1", "A2"], ["rows", "tiles"], 32, [4, 16])


def _one_arch(arch: str):
    def fn(tmp: Path) -> str | None:
        p, out = ge(tmp, "--arch", arch, "--algo", "rows,tiles", "--n", "32", "--threads", "4,16")
        return ok(p, out) or check_ge(out, [arch], ["rows", "tiles"], 32, [4, 16])
    fn.__name__ = f"arch_{arch}_alone"
    fn.__doc__ = f"--arch {arch}: verified runs of both algorithms"
    case("ge")(fn)


for _a in ("A0", "A1", "A2"):
    _one_arch(_a)


def _shape(name: str, n: int, threads: list[int], algos=("rows", "tiles"), archs=("A0", "A1", "A2"),
           extra: tuple = (), reps: int = 1, seed: int | None = None):
    def fn(tmp: Path) -> str | None:
        p, out = ge(tmp, "--arch", ",".join(archs), "--algo", ",".join(algos), "--n", str(n),
                    "--threads", ",".join(map(str, threads)), *extra)
        return ok(p, out) or check_ge(out, list(archs), list(algos), n, threads, reps=reps,
                                      seed=seed)
    fn.__name__ = name
    fn.__doc__ = f"ge --n {n} --threads {threads} {' '.join(algos)} {' '.join(extra)}: verified"
    case("ge")(fn)


_shape("one_thread", 32, [1])
_shape("n_1_one_thread", 1, [1])
_shape("rows_threads_equal_n", 32, [32], algos=("rows",))
_shape("n_not_multiple_of_threads", 33, [4, 5], algos=("rows",))
_shape("tiles_non_square_threads", 32, [5, 7], algos=("tiles",))
_shape("tiles_grid_equal_n", 8, [64], algos=("tiles",), archs=("A1", "A2"))
_shape("reps_2_seed_7", 32, [4], extra=("--reps", "2", "--seed", "7"), reps=2, seed=7)
_shape("seed_max", 16, [4], archs=("A2",), extra=("--seed", str(2**63 - 1)), seed=2**63 - 1)
_shape("many_user_threads_A1_A2", 64, [1024], algos=("tiles",), archs=("A1", "A2"))


@case("ge")
def duplicate_arch_once(tmp: Path) -> str | None:
    """--arch A0,A0: A0 runs once per configuration."""
    p, out = ge(tmp, "--arch", "A0,A0", "--algo", "rows", "--n", "16", "--threads", "4")
    return ok(p, out) or check_ge(out, ["A0"], ["rows"], 16, [4])


@case("ge")
def duplicate_threads_once(tmp: Path) -> str | None:
    """--threads 4,4: each configuration once (as --arch A0,A0 is), no duplicate rows."""
    p, out = ge(tmp, "--arch", "A1", "--algo", "rows", "--n", "16", "--threads", "4,4")
    return ok(p, out) or check_ge(out, ["A1"], ["rows"], 16, [4])


@case("ge")
def report_on_study(tmp: Path) -> str | None:
    """report on a ge study: exit 0, the tables, ge_summary.csv and a plot."""
    p, out = ge(tmp, "--arch", "A0,A1,A2", "--algo", "rows,tiles", "--n", "32", "--threads", "4,16")
    if ok(p, out):
        return "ge: " + ok(p, out)
    r = hs("report", str(out), "--out-dir", str(tmp / "rep"))
    problem = ok(r, tmp / "rep" / "ge_summary.csv")
    if problem:
        return problem
    if "A2" not in r.stdout or "A0" not in r.stdout:
        return "report stdout does not show the architectures"
    pngs = [f for f in os.listdir(tmp / "rep") if f.endswith(".png")]
    return None if pngs else f"no plot in {os.listdir(tmp / 'rep')}"


@case("ge")
def report_no_plots(tmp: Path) -> str | None:
    """report --no-plots on a ge study: exit 0, no PNG written."""
    p, out = ge(tmp, "--arch", "A2", "--algo", "rows", "--n", "16", "--threads", "4")
    if ok(p, out):
        return "ge: " + ok(p, out)
    r = hs("report", str(out), "--no-plots", "--out-dir", str(tmp / "rep"))
    problem = ok(r)
    if problem:
        return problem
    pngs = [f for f in os.listdir(tmp / "rep")] if (tmp / "rep").exists() else []
    pngs = [f for f in pngs if f.endswith(".png")]
    return f"PNG written despite --no-plots: {pngs}" if pngs else None


# ------------------------------------------------------------------ bad values

def _bad(name: str, argv: list[str], says: str = ""):
    def fn(tmp: Path) -> str | None:
        out = tmp / "bad.h5"
        p = hs("ge", *argv, "-o", str(out), env=ENV, timeout=60)
        problem = usage(p, out, says=says)
        if problem:
            return problem
        return f"left in the directory: {os.listdir(tmp)}" if os.listdir(tmp) else None
    fn.__name__ = name
    fn.__doc__ = f"ge {' '.join(argv)}: one line, exit 2, nothing written"
    case("ge")(fn)


_G = ["--n", "32", "--threads", "4"]
_bad("bad_arch_empty", [*_G, "--arch", ""], "arch")
_bad("bad_arch_A3", [*_G, "--arch", "A3"], "A3")
_bad("bad_arch_lowercase", [*_G, "--arch", "a0"], "a0")
_bad("bad_arch_one_of_two_unknown", [*_G, "--arch", "A1,A9"], "A9")
_bad("bad_algo_empty", [*_G, "--algo", ""], "algo")
_bad("bad_algo_cols", [*_G, "--algo", "cols"], "cols")
_bad("bad_n_0", ["--n", "0", "--threads", "4"], "n")
_bad("bad_n_negative", ["--n", "-3", "--threads", "4"], "n")
_bad("bad_n_x", ["--n", "x", "--threads", "4"], "n")
_bad("bad_n_huge", ["--n", "65537", "--threads", "4"], "n")
_bad("bad_threads_0", ["--n", "32", "--threads", "0"], "threads")
_bad("bad_threads_7937", ["--n", "32", "--threads", "7937"], "threads")
_bad("bad_threads_empty", ["--n", "32", "--threads", ""], "threads")
_bad("bad_threads_empty_item", ["--n", "32", "--threads", "4,,8"], "threads")
_bad("bad_threads_float", ["--n", "32", "--threads", "1.5"], "threads")
_bad("bad_rows_more_threads_than_n", ["--n", "32", "--threads", "64", "--algo", "rows"], "n")
_bad("bad_tiles_grid_over_n", ["--n", "32", "--threads", "7936", "--algo", "tiles"], "n")
_bad("bad_one_config_refused_refuses_all", ["--n", "32", "--threads", "4,64", "--algo", "rows"],
     "threads")
_bad("bad_reps_0", [*_G, "--reps", "0"], "reps")
_bad("bad_seed_negative", [*_G, "--seed", "-1"], "seed")
_bad("bad_seed_2_63", [*_G, "--seed", str(2**63)], "seed")


# ------------------------------------------------------------------ output paths

_SMALL = ["--arch", "A1", "--algo", "rows", "--n", "16", "--threads", "4"]


@case("ge")
def out_exists_without_overwrite(tmp: Path) -> str | None:
    """An existing --out without --overwrite: exit 2, the file untouched."""
    out = tmp / "g.h5"
    out.write_bytes(b"precious")
    p = hs("ge", *_SMALL, "-o", str(out), env=ENV)
    return usage(p, says="exists") or (None if out.read_bytes() == b"precious"
                                       else "the existing file was changed")


@case("ge")
def out_overwrite_replaces(tmp: Path) -> str | None:
    """--overwrite an existing ge study: exit 0, only the new runs in the file."""
    p, out = ge(tmp, *_SMALL)
    if ok(p, out):
        return "first: " + ok(p, out)
    p, out = ge(tmp, "--arch", "A2", "--algo", "tiles", "--n", "16", "--threads", "4",
                "--overwrite")
    return ok(p, out) or check_ge(out, ["A2"], ["tiles"], 16, [4])


@case("ge")
def out_overwrite_bad_start_keeps_old(tmp: Path) -> str | None:
    """--overwrite with bad input: exit 2, the old study as it was."""
    p, out = ge(tmp, *_SMALL)
    if ok(p, out):
        return "first: " + ok(p, out)
    old = out.read_bytes()
    p = hs("ge", "--arch", "A7", "--n", "16", "-o", str(out), "--overwrite", env=ENV)
    return usage(p) or (None if out.read_bytes() == old else "the old study was changed")


@case("ge")
def out_symlink(tmp: Path) -> str | None:
    """--out a symlink to a file, with --overwrite: refused, the target untouched."""
    target = tmp / "t.h5"
    target.write_bytes(b"keep")
    link = tmp / "l.h5"
    link.symlink_to(target)
    p = hs("ge", *_SMALL, "-o", str(link), "--overwrite", env=ENV)
    return usage(p, says="link") or (None if target.read_bytes() == b"keep"
                                     and link.is_symlink() else "the link or target changed")


@case("ge")
def out_fifo(tmp: Path) -> str | None:
    """--out a FIFO with --overwrite: refused at once."""
    f = tmp / "f.h5"
    os.mkfifo(f)
    p = hs("ge", *_SMALL, "-o", str(f), "--overwrite", env=ENV, timeout=60)
    return usage(p, says="fifo")


@case("ge")
def out_directory(tmp: Path) -> str | None:
    """--out a directory with --overwrite: refused, kept."""
    d = tmp / "d.h5"
    d.mkdir()
    p = hs("ge", *_SMALL, "-o", str(d), "--overwrite", env=ENV)
    return usage(p, says="directory") or (None if d.is_dir() else "the directory went")


@case("ge")
def out_missing_parent(tmp: Path) -> str | None:
    """--out in a missing directory: refused, nothing created."""
    p = hs("ge", *_SMALL, "-o", str(tmp / "no" / "g.h5"), env=ENV)
    return usage(p, tmp / "no")


@case("ge")
def out_empty_name(tmp: Path) -> str | None:
    """--out '': refused with one line, nothing created."""
    p = hs("ge", *_SMALL, "-o", "", env=ENV, cwd=tmp)
    return usage(p) or (f"created {os.listdir(tmp)}" if os.listdir(tmp) else None)


@case("ge")
def out_default_name(tmp: Path) -> str | None:
    """No --out: hybridsched-ge-<time>.h5 in the current directory, a readable study."""
    p = hs("ge", *_SMALL, env=ENV, cwd=tmp)
    if ok(p):
        return ok(p)
    made = [f for f in os.listdir(tmp) if f.startswith("hybridsched-ge-") and f.endswith(".h5")]
    if len(made) != 1:
        return f"default file not found: {os.listdir(tmp)}"
    return check_ge(tmp / made[0], ["A1"], ["rows"], 16, [4])


@case("ge")
def out_is_run_study_overwrite(tmp: Path) -> str | None:
    """--overwrite a `run` study with a ge study: exit 0, the file now a ge study."""
    out = tmp / "g.h5"
    r = hs("run", "-s", "dynamic", "-k", "1", "-L", "4", "--height", "8", "--width", "16",
           "--reps", "1", "-o", str(out), env=ENV)
    if ok(r, out):
        return "run: " + ok(r, out)
    p, out = ge(tmp, *_SMALL, "--overwrite")
    return ok(p, out) or check_ge(out, ["A1"], ["rows"], 16, [4])


# ------------------------------------------------------------------ injected faults

def _fault(name: str, fault: str, argv: list[str], nfail: int, ntotal: int, says: str):
    def fn(tmp: Path) -> str | None:
        p, out = ge(tmp, *argv, env={FAULT: fault}, timeout=120)
        problem = failed(p, says=says)
        if problem:
            return problem
        lines = [ln for ln in p.stderr.splitlines() if says in ln]
        if len(lines) != nfail:
            return f"{len(lines)} failure lines naming {says}, not {nfail}: {lines[:3]}"
        if not out.exists():
            return "no study written"
        t = rows(out)
        if len(t) != ntotal:
            return f"/ge holds {len(t)} rows, not {ntotal}"
        bad = [x for x in t if not bool(x["verified"])]
        if len(bad) != nfail or any(says not in str(x["error"]) for x in bad):
            return f"{len(bad)} failed rows (want {nfail}); errors {[str(x['error']) for x in bad][:2]}"
        if any(str(x["error"]) for x in t if bool(x["verified"])):
            return "a verified row carries an error"
        r = hs("report", str(out), "--out-dir", str(tmp / "rep"))
        problem = ok(r)
        return "report on the study: " + problem if problem else None
    fn.__name__ = name
    fn.__doc__ = f"{FAULT}={fault} ge {' '.join(argv)}: exit 1, one line per failed run, " \
                 "study and report written"
    case("ge")(fn)


_fault("fault_row5_all_archs", "row5",
       ["--arch", "A0,A1,A2", "--algo", "rows", "--n", "32", "--threads", "8"], 3, 3, "row5")
_fault("fault_row5_rows_and_tiles", "row5",
       ["--arch", "A0,A1,A2", "--algo", "rows,tiles", "--n", "32", "--threads", "8"], 3, 6, "row5")
_fault("fault_row0_pivot_owner", "row0",
       ["--arch", "A0,A1,A2", "--algo", "rows", "--n", "32", "--threads", "4"], 3, 3, "row0")
_fault("fault_last_row", "row3",
       ["--arch", "A0,A1,A2", "--algo", "rows", "--n", "32", "--threads", "4"], 3, 3, "row3")
_fault("fault_tile", "tile1.1",
       ["--arch", "A0,A1,A2", "--algo", "tiles", "--n", "32", "--threads", "4"], 3, 3, "tile1.1")
_fault("fault_row5_reps_2", "row5",
       ["--arch", "A2", "--algo", "rows", "--n", "32", "--threads", "8", "--reps", "2"], 2, 2,
       "row5")


@case("ge")
def report_all_runs_failed_quiet(tmp: Path) -> str | None:
    """report on a ge study whose runs all failed: exit 0, says so, no Python warning noise."""
    p, out = ge(tmp, "--arch", "A1,A2", "--algo", "rows", "--n", "32", "--threads", "8",
                env={FAULT: "row5"})
    problem = failed(p, says="row5")
    if problem:
        return "ge: " + problem
    r = hs("report", str(out), "--out-dir", str(tmp / "rep"))
    problem = ok(r)
    if problem:
        return problem
    noise = [ln for ln in r.stderr.splitlines() if "Warning" in ln or "warn(" in ln]
    return f"report prints a Python warning: {noise[0][:200]}" if noise else None


@case("ge")
def fault_names_no_thread(tmp: Path) -> str | None:
    """HYBRIDSCHED_GE_FAULT naming no thread (row99 with 4 rows): every run verified, exit 0."""
    p, out = ge(tmp, "--arch", "A0,A1,A2", "--algo", "rows", "--n", "32", "--threads", "4",
                env={FAULT: "row99"})
    return ok(p, out) or check_ge(out, ["A0", "A1", "A2"], ["rows"], 32, [4])


# ------------------------------------------------------------------ signals

_LONG = ["--arch", "A1,A2", "--algo", "rows", "--n", "256", "--threads", "64", "--reps", "200"]


def _signal(sig: int, code: int):
    def fn(tmp: Path) -> str | None:
        import time

        out = tmp / "s.h5"
        p = start("ge", *_LONG, "-o", str(out))
        deadline = time.monotonic() + 120  # bounds a failure only
        while time.monotonic() < deadline and p.poll() is None and not _stored(out):
            time.sleep(0.05)  # until a run is stored: the sweep is inside its runs
        if p.poll() is not None:
            r = finish(p)
            return f"the sweep ended (exit {r.returncode}) before the signal: make it longer"
        p.send_signal(sig)
        r = finish(p, 60)
        if r.returncode != code:
            return f"exit {r.returncode}, not {code}: {r.stderr.strip()[-200:]}"
        if "Traceback" in r.stderr:
            return "a traceback on stderr"
        try:
            t = rows(out)
        except Exception as exc:  # noqa: BLE001
            return f"the study left is not readable: {type(exc).__name__}: {str(exc)[:150]}"
        if len(t) == 0:
            return "no run kept"
        if not all(bool(x["verified"]) for x in t):
            return "an unverified run kept after the signal: " + \
                   "; ".join(str(x["error"]) for x in t if not bool(x["verified"]))[:200]
        others = [f for f in os.listdir(tmp) if f != "s.h5"]
        return f"left in the directory: {others}" if others else None
    n = {signal.SIGINT: "sigint", signal.SIGTERM: "sigterm"}[sig]
    fn.__name__ = f"{n}_mid_sweep"
    fn.__doc__ = f"{n.upper()} mid-sweep: exit {code}, the finished runs kept, verified"
    case("ge")(fn)


_signal(signal.SIGINT, 130)
_signal(signal.SIGTERM, 143)


@case("ge")
def sigint_during_startup(tmp: Path) -> str | None:
    """SIGINT at 0.3..1.1 s after start (imports, compile, first run): each time exit 130,
    no traceback, no temp files."""
    import time

    out = tmp / "s.h5"
    for i in range(9):
        delay = 0.3 + 0.1 * i
        for f in os.listdir(tmp):
            os.unlink(tmp / f)
        p = start("ge", *_LONG, "-o", str(out))
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        r = finish(p, 60)
        if r.returncode != 130:
            return f"SIGINT {delay:.1f} s after start: exit {r.returncode}, not 130 " \
                   f"(stderr: {r.stderr.strip()[-80:]!r})"
        if "Traceback" in r.stderr:
            return f"SIGINT {delay:.1f} s after start: a traceback: " + \
                r.stderr.strip().splitlines()[-1][:150]
        others = [f for f in os.listdir(tmp) if f != "s.h5"]
        if others:
            return f"SIGINT {delay:.1f} s after start: left {others}"
    return None
