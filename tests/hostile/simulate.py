"""Hostile cases: simulate. `hybridsched simulate` and `calibrate` (docs/simulation.md) as a
hostile user drives them: every kind of bad `--costs` file, calibration files that are not
files, nested too deep, misspelt or out of range, `--from`/`--validate` of measured studies
(changed techniques, other cores, crafted rows), options the model does not simulate, and
user techniques that fail in simulation.

The contract: bad input is one line on stderr starting with "hybridsched", exit 2, nothing
written; a simulated run that fails is printed and stored unverified (exit 1); every
written row is marked simulated. Cases named ``i33_<n>_...`` repeat issue 33's defect n.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from .colocate import finish, start
from .common import case, failed, hs, ok, usage

A = "simulate"
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
SMALL = ["-s", "serial,dynamic,guided", "-k", "1,2", "-L", "60", "--height", "8", "--width",
         "32", "--reps", "1"]


def sim(tmp: Path, *argv, timeout: float = 300):
    return hs("simulate", *argv, env=ENV, cwd=tmp, timeout=timeout)


def _runs(path: Path):
    from hybridsched.store import read_runs

    return read_runs(str(path))


def _refused(tmp: Path, *argv, says: str = "", out: str = "s.h5") -> str | None:
    p = sim(tmp, *argv, "-o", out)
    return usage(p, tmp / out, tmp / (out + ".lock"), says=says)


def _measured(tmp: Path, *extra: str, name: str = "m.h5") -> Path:
    path = tmp / name
    p = hs("run", "-s", "serial,dynamic", "-k", "1,2", "-L", "30", "--height", "8", "--width",
           "16", "--reps", "1", *extra, "-o", str(path), env=ENV, cwd=tmp, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"could not measure a study: {p.stderr[-300:]}")
    return path


# --- what works ---------------------------------------------------------------------------

for _name, _argv in (("basic", SMALL),
                     ("grid_over_P", [*SMALL, "-P", "1,2", "--split", "dynamic"]),
                     ("technique_split", [*SMALL, "-P", "2", "--split", "fac2"]),
                     ("workload_heavytail", [*SMALL, "--workload", "heavytail"]),
                     ("workload_mandelbrot", ["-s", "dynamic", "-k", "2", "-L", "16", "--height",
                                              "4", "--width", "32", "--workload", "mandelbrot"]),
                     ("many_cores", ["-s", "dynamic,fac2", "-k", "256", "--cores", "256", "-L",
                                     "5000", "--height", "4", "--width", "16", "--reps", "1"]),
                     ("no_affinity", [*SMALL, "--no-affinity"]),
                     ("coop", [*SMALL, "--coop"])):
    def _make(argv=_argv):
        def fn(tmp: Path) -> str | None:
            p = sim(tmp, *argv, "-o", "s.h5")
            if (problem := ok(p, tmp / "s.h5")):
                return problem
            runs = _runs(tmp / "s.h5")
            if not runs["simulated"].all() or not runs["verified"].all():
                return "a row not simulated or not verified"
            return None
        return fn
    _fn = _make()
    _fn.__name__, _fn.__doc__ = f"ok_{_name}", f"simulate {' '.join(_argv)}: exit 0, all rows simulated"
    case(A)(_fn)


@case(A)
def ok_costs_file(tmp: Path) -> str | None:
    """--costs of 100 random task times: L = 100, exit 0"""
    np.save(tmp / "c.npy", np.random.default_rng(1).exponential(1e-4, 100))
    p = sim(tmp, "-s", "dynamic,guided", "-k", "2", "--costs", "c.npy", "-o", "s.h5")
    if (problem := ok(p, tmp / "s.h5")):
        return problem
    return None if (_runs(tmp / "s.h5")["L"] == 100).all() else "L is not the array's length"


# --- --costs files ----------------------------------------------------------------------------

_COSTS = {
    "empty": (np.zeros(0), "non-empty"),
    "nan": (np.array([1e-3, np.nan]), "finite"),
    "negative": (np.array([1e-3, -1e-3]), "finite"),
    "two_d": (np.zeros((3, 3)), "1-D"),
    "strings": (np.array(["a", "b"]), "1-D"),
    "all_zero": (np.zeros(5), "every cost is 0"),
    "i33_17_sum_overflows": (np.full(24, 1e308), "add up to more than"),
    "i33_17_sum_too_big": (np.full(10, 2e11), "add up to more than"),
    "object_pickle": (np.array([1, "x"], dtype=object), "cannot read"),
}
for _name, (_arr, _says) in _COSTS.items():
    def _make(arr=_arr, says=_says):
        def fn(tmp: Path) -> str | None:
            np.save(tmp / "c.npy", arr, allow_pickle=True)
            problem = _refused(tmp, "-s", "dynamic", "-k", "2", "--costs", "c.npy", says=says)
            p = sim(tmp, "-s", "dynamic", "-k", "2", "--costs", "c.npy", "-o", "s.h5")
            return problem or ("Warning" in p.stderr and "a numpy warning") or None
        return fn
    _fn = _make()
    _fn.__name__, _fn.__doc__ = f"costs_{_name}", f"--costs {_name}: one line ({_says}), exit 2"
    case(A)(_fn)


@case(A)
def costs_not_npy(tmp: Path) -> str | None:
    """--costs of a text file: one line"""
    (tmp / "c.npy").write_text("1 2 3\n")
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npy", says="cannot read")


@case(A)
def costs_npz(tmp: Path) -> str | None:
    """--costs of an .npz archive: one line"""
    np.savez(tmp / "c.npz", a=np.ones(3))
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npz", says="npz")


@case(A)
def costs_fifo(tmp: Path) -> str | None:
    """--costs of a FIFO: one line, never opened (it would block)"""
    os.mkfifo(tmp / "c.npy")
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npy", says="not a regular file")


@case(A)
def costs_directory(tmp: Path) -> str | None:
    """--costs of a directory: one line"""
    (tmp / "c.npy").mkdir()
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npy", says="not a regular file")


@case(A)
def costs_frames_mismatch(tmp: Path) -> str | None:
    """--costs of 10 tasks with -L 20: one line"""
    np.save(tmp / "c.npy", np.ones(10) * 1e-4)
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npy", "-L", "20", says="--frames")


@case(A)
def i33_11_costs_with_workload(tmp: Path) -> str | None:
    """--costs with --workload skewed: refused (rows were stored as skewed)"""
    np.save(tmp / "c.npy", np.ones(24) * 1e-4)
    return _refused(tmp, "-s", "dynamic", "--costs", "c.npy", "--workload", "skewed",
                    says="one or the other")


# --- what the model does not simulate ---------------------------------------------------

for _name, _argv, _says in (
        ("i33_10_input_and_kernel", ["--input", "t.npy", "--kernel", "mine:f"], "--input"),
        ("i33_10_user_kernel", ["--kernel", "mine:f"], "--kernel mine:f"),
        ("i33_10_builtin_other_kernel", ["--kernel", "counting"], "--kernel counting"),
        ("i33_10_verify", ["--verify", "none"], "--verify"),
        ("chunk_auto", ["--chunk", "auto", "-s", "pipe-1to1"], "--chunk auto"),
        ("pipe_batch", ["--pipe-batch", "8", "-s", "pipe-1to1"], "--pipe-batch"),
        ("inflight", ["--inflight", "2", "-s", "pipe-MtoM"], "--inflight"),
        ("cores_zero", ["--cores", "0"], "--cores"),
        ("cores_too_many", ["--cores", str(2 ** 21)], "--cores"),
        ("split_learner", ["-P", "2", "--split", "tq:Learner"], "deterministic"),
        ("split_unknown", ["-P", "2", "--split", "nosuch"], "--split")):
    def _make(argv=_argv, says=_says):
        def fn(tmp: Path) -> str | None:
            np.save(tmp / "t.npy", np.zeros((24, 4)))
            (tmp / "mine.py").write_text("def f(data, first, count):\n    pass\n")
            (tmp / "tq.py").write_text(_TQ)
            args = [a for a in argv]
            if "-s" not in args:
                args = ["-s", "dynamic", "-k", "2", "-L", "24", *args]
            return _refused(tmp, *args, says=says)
        return fn
    _fn = _make()
    _fn.__name__, _fn.__doc__ = f"refused_{_name}", f"simulate {' '.join(_argv)}: one line ({_says})"
    case(A)(_fn)

_TQ = """
from hybridsched import Technique


class Learner(Technique):
    def chunk(self, remaining, request, worker):
        return 1

    def record(self, worker, first, count, seconds):
        pass


class Size(Technique):
    deterministic = True
    SIZE = 2

    def chunk(self, remaining, request, worker):
        return int(self.params.get("size", self.SIZE))


class Neg(Technique):
    def chunk(self, remaining, request, worker):
        return -3
"""


@case(A)
def i33_8_split_technique_takes_param(tmp: Path) -> str | None:
    """simulate -P 2 --split tq:Size --param size=7: the split's chunks are of 7 frames"""
    (tmp / "tq.py").write_text(_TQ)
    p = sim(tmp, "-s", "dynamic", "-k", "1", "-L", "48", "--reps", "1", "-P", "2", "--split",
            "tq:Size", "--param", "size=7", "-o", "s.h5")
    if (problem := ok(p, tmp / "s.h5")):
        return problem
    from hybridsched.store import read_detail

    trace = read_detail(str(tmp / "s.h5"), 0).trace
    return None if sorted(set(trace["count"].tolist())) == [6, 7] else f"chunks {trace['count']}"


@case(A)
def i33_16_failed_simulated_run_is_printed_and_identified(tmp: Path) -> str | None:
    """simulate -s tq:Neg,dynamic: exit 1, 'FAILED: simulated: technique neg', its hash kept"""
    (tmp / "tq.py").write_text(_TQ)
    p = sim(tmp, "-s", "tq:Neg,dynamic", "-k", "2", "-L", "24", "--reps", "1", "-o", "s.h5")
    if (problem := failed(p, "FAILED: simulated: technique neg")):
        return problem
    row = _runs(tmp / "s.h5")[0]
    return None if row["technique"] == "tq:Neg" and len(row["technique_hash"]) == 64 else \
        f"stored technique {row['technique']!r}, hash {row['technique_hash']!r}"


# --- calibration files --------------------------------------------------------------------

def _calibration(overheads: dict | None = None, **top) -> str:
    data = {"format": "hybridsched-calibration", "version": 1,
            "overheads": overheads if overheads is not None else {"fork_s": 1e-4}}
    data.update(top)
    return json.dumps(data)


_CALIBRATIONS = {
    "i33_12_nested_deep": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    "i33_18_unknown_key": (_calibration({"forks_s": 1e-4}), "unknown overhead 'forks_s'"),
    "negative": (_calibration({"fork_s": -1.0}), "fork_s"),
    "boolean": (_calibration({"fork_s": True}), "fork_s"),
    "infinite": ('{"format": "hybridsched-calibration", "version": 1, "overheads": {"fork_s": 1e999}}', "fork_s"),
    "zero_slice": (_calibration({"slice_s": 0}), "above 0"),
    "newer_version": (_calibration(version=99), "newer"),
    "wrong_format": (json.dumps({"format": "other", "overheads": {}}), "not a hybridsched"),
    "no_overheads": (json.dumps({"format": "hybridsched-calibration", "version": 1}), "overheads"),
    "not_json": ("{not json", "not a calibration file"),
    "not_utf8": (b"\xff\xfe{}", "not a calibration file"),
    "list_of_text": (_calibration({"worker_starts_s": ["a"]}), "worker_starts_s"),
}
for _name, (_text, _says) in _CALIBRATIONS.items():
    def _make(text=_text, says=_says):
        def fn(tmp: Path) -> str | None:
            path = tmp / "cal.json"
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
            return _refused(tmp, "-s", "dynamic", "-k", "2", "-L", "24", "--calibration",
                            "cal.json", says=says)
        return fn
    _fn = _make()
    _fn.__name__, _fn.__doc__ = f"calibration_{_name}", f"--calibration ({_name}): one line ({_says})"
    case(A)(_fn)


@case(A)
def i33_18_calibration_directory(tmp: Path) -> str | None:
    """--calibration of a directory: 'not a regular file' (was 'no such file')"""
    (tmp / "cal.json").mkdir()
    return _refused(tmp, "-s", "dynamic", "--calibration", "cal.json", says="not a regular file")


@case(A)
def i33_18_calibration_fifo(tmp: Path) -> str | None:
    """--calibration of a FIFO: 'not a regular file', never opened"""
    os.mkfifo(tmp / "cal.json")
    return _refused(tmp, "-s", "dynamic", "--calibration", "cal.json", says="not a regular file")


@case(A)
def calibration_missing(tmp: Path) -> str | None:
    """--calibration of a file that does not exist: 'no such file'"""
    return _refused(tmp, "-s", "dynamic", "--calibration", "nope.json", says="no such file")


@case(A)
def calibrate_then_simulate(tmp: Path) -> str | None:
    """calibrate -o cal.json, then simulate --calibration cal.json: both exit 0"""
    p = hs("calibrate", "-o", "cal.json", env=ENV, cwd=tmp, timeout=300)
    if (problem := ok(p, tmp / "cal.json")):
        return "calibrate: " + problem
    return ok(sim(tmp, *SMALL, "--calibration", "cal.json", "-o", "s.h5"), tmp / "s.h5")


@case(A)
def calibrate_onto_directory(tmp: Path) -> str | None:
    """calibrate -o a directory: one line, nothing measured into it"""
    (tmp / "d").mkdir()
    return usage(hs("calibrate", "-o", "d", env=ENV, cwd=tmp), says="d")


@case(A)
def calibrate_onto_symlink(tmp: Path) -> str | None:
    """calibrate -o a dangling symlink: one line, the target never created"""
    (tmp / "l.json").symlink_to(tmp / "target.json")
    p = hs("calibrate", "-o", "l.json", env=ENV, cwd=tmp)
    return usage(p, tmp / "target.json")


# --- --from and --validate ----------------------------------------------------------------

@case(A)
def from_round_trip(tmp: Path) -> str | None:
    """simulate --from a measured study: exit 0, the same configurations, simulated"""
    meas = _measured(tmp)
    if (problem := ok(sim(tmp, "--from", str(meas), "-o", "s.h5"), tmp / "s.h5")):
        return problem
    a, b = _runs(meas), _runs(tmp / "s.h5")
    return None if list(a["k"]) == list(b["k"]) and b["simulated"].all() else "other rows"


@case(A)
def validate_round_trip(tmp: Path) -> str | None:
    """simulate --validate a measured study: exit 0, a comparison printed"""
    meas = _measured(tmp)
    p = sim(tmp, "--validate", str(meas))
    return ok(p) or (None if "|error| over" in p.stdout else "no comparison printed")


@case(A)
def i33_9_validate_on_other_cores(tmp: Path) -> str | None:
    """simulate --validate a 2-core study --cores 1 (and the study's N + 1): refused"""
    from hybridsched.store import machine_n, read_attrs

    meas = _measured(tmp)
    n = machine_n(str(meas), read_attrs(str(meas)))
    for other in sorted({1, n + 1} - {n}):
        p = sim(tmp, "--validate", str(meas), "--cores", str(other))
        if (problem := usage(p, says=f"measured on {n} cores")):
            return f"--cores {other}: {problem}"
    return None


@case(A)
def i33_6_from_a_technique_changed_since(tmp: Path) -> str | None:
    """simulate --from / --validate after editing the technique's module: refused"""
    (tmp / "tq.py").write_text(_TQ)
    meas = _measured(tmp, "-s", "serial,tq:Size")
    (tmp / "tq.py").write_text(_TQ.replace("SIZE = 2", "SIZE = 5"))
    for opt in ("--from", "--validate"):
        p = sim(tmp, opt, str(meas), "-o", "s.h5")
        if (problem := usage(p, tmp / "s.h5", says="changed since its stored runs")):
            return f"{opt}: {problem}"
    return None


@case(A)
def from_with_a_shape_option(tmp: Path) -> str | None:
    """simulate --from STUDY -s guided: refused (the study's own configurations)"""
    meas = _measured(tmp)
    return _refused(tmp, "--from", str(meas), "-s", "guided", says="own configurations")


@case(A)
def from_itself(tmp: Path) -> str | None:
    """simulate --from m.h5 -o m.h5 --overwrite: refused, the study untouched"""
    meas = _measured(tmp)
    before = meas.read_bytes()
    p = sim(tmp, "--from", str(meas), "-o", str(meas), "--overwrite")
    return usage(p, says="also the --from study") or (None if meas.read_bytes() == before else "changed")


@case(A)
def from_a_ge_study(tmp: Path) -> str | None:
    """simulate --from a ge study (no runs): one line"""
    p = hs("ge", "--arch", "A0", "--n", "32", "--threads", "2", "--reps", "1", "-o", "g.h5",
           env=ENV, cwd=tmp)
    if p.returncode != 0:
        return f"ge: exit {p.returncode}"
    return _refused(tmp, "--from", "g.h5")


@case(A)
def from_a_study_with_an_unknown_workload(tmp: Path) -> str | None:
    """simulate --from a study whose rows name an unknown workload: one line"""
    import h5py

    meas = _measured(tmp)
    with h5py.File(meas, "r+") as h5:
        rows = h5["runs"][()]
        rows["workload"] = b"nosuch"
        h5["runs"][...] = rows
    return _refused(tmp, "--from", str(meas), says="nosuch")


@case(A)
def from_a_missing_file(tmp: Path) -> str | None:
    """simulate --from nope.h5: one line"""
    return _refused(tmp, "--from", "nope.h5", says="nope.h5")


# --- signals --------------------------------------------------------------------------------

def _signalled(name: str, argv: list[str], sig: int, code: int, cpu_s: float = 2.5):
    def fn(tmp: Path) -> str | None:
        import psutil

        p = start(*argv, cwd=tmp)
        proc = psutil.Process(p.pid)
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            try:
                if sum(proc.cpu_times()[:2]) > cpu_s:  # past start-up, into its work
                    break
            except psutil.Error:
                break
            time.sleep(0.05)
        if p.poll() is not None:
            return "ended before the signal (make it longer)"
        p.send_signal(sig)
        r = finish(p, 60)
        if r.returncode not in (code, -sig):
            return f"exit {r.returncode}, not {code}: {r.stderr[-200:]}"
        if "Traceback" in r.stderr:
            return "a traceback"
        left = [n for n in os.listdir(tmp) if n.endswith((".lock", ".tmp"))]
        return f"left: {left}" if left else None
    fn.__name__, fn.__doc__ = name, f"signal {int(sig)} during `{' '.join(argv[:3])} ...`: exit {code}"
    case(A)(fn)


_LONG_SIM = ["simulate", "-s", "dynamic,guided,fac2,awf_b", "-k", "1,2,4,8", "-L", "200000",
             "--height", "4", "--width", "16", "--reps", "20", "-o", "s.h5"]
_signalled("sigint_during_simulate", _LONG_SIM, signal.SIGINT, 130)
_signalled("sigterm_during_simulate", _LONG_SIM, signal.SIGTERM, 143)
