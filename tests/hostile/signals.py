"""Hostile cases: signals. One SIGINT or SIGTERM at several moments of every command: at its
start (the interpreter, imports and numba's cache), once its work is under way (a state of
the process: a run stored, a progress line, CPU time spent, a big /runs being read), and
late in it. Every moment is a state waited for, never a fixed delay.

The contract (docs/reliability.md): the first signal ends the command with 130 (SIGINT) or
143 (SIGTERM) -- before Python's handler exists the process dies of the signal itself,
which a shell shows as the same status -- with no traceback, every completed run kept and
readable, no lock or temporary file beside the output, and nothing left in /dev/shm. A
command that ignores the signal and ends 0 has lost it. Cases named ``i33_<n>_...`` repeat
issue 33's defect n.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import atexit
import time
from pathlib import Path
from typing import Callable

from .common import HS, case

A = "signals"
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}


class Watched:
    """A command in the background whose stderr is read line by line as it comes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict | None = None):
        import psutil

        self.p = subprocess.Popen([*HS, *argv], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, cwd=cwd,
                                  env=dict(os.environ, **ENV, **(env or {})),
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.proc = psutil.Process(self.p.pid)
        self.t0 = time.monotonic()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stderr:
            self.lines.append(line)

    def cpu(self) -> float:
        try:
            t = self.proc.cpu_times()
            return t.user + t.system
        except Exception:  # noqa: BLE001 - gone
            return 0.0

    def wait_for(self, state: Callable[["Watched"], bool], timeout: float = 120) -> bool:
        """True once ``state(self)`` holds while the command still runs."""
        deadline = time.monotonic() + timeout
        while self.p.poll() is None and time.monotonic() < deadline:
            if state(self):
                return self.p.poll() is None
            time.sleep(0.01)
        return False

    def end(self, timeout: float = 60) -> tuple[int, str]:
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            self._reader.join(5)
            return -9, "TIMEOUT " + "".join(self.lines)
        self._reader.join(5)
        return rc, "".join(self.lines)


def _in_python_start_up(err: str) -> bool:
    """Whether ``err`` is CPython's report of a KeyboardInterrupt raised before any module
    of ours ran (in `site` and the `.pth` files it runs, `os`, `runpy`: no frame in a file
    of the package). Under
    `python -m` the interpreter then prints the traceback and exits 1; from our first
    module on, hybridsched itself says one line and exits 130."""
    import hybridsched

    ours = os.path.dirname(hybridsched.__file__)
    return "Traceback" in err and "KeyboardInterrupt" in err and ours not in err


def interrupted(argv: list[str], cwd: Path, sig: int, state, outputs: tuple[str, ...] = (),
                env: dict | None = None, stored: str | None = None) -> str | None:
    """Start ``argv``, wait for ``state``, send ``sig``: the contract above."""
    w = Watched(argv, cwd, env)
    if not w.wait_for(state):
        rc, err = w.end(120)
        return f"the state never came while it ran (exit {rc}): {err[-200:]}"
    w.p.send_signal(sig)
    rc, err = w.end()
    code = 128 + sig
    if state is at_start and rc == 1 and _in_python_start_up(err):
        return None  # CPython's own start-up took it: none of our code had run
    if rc not in (code, -sig):
        return f"exit {rc}, not {code}: {err.strip()[-240:]}"
    if "Traceback" in err:
        return "a traceback: " + err.strip()[-240:]
    left = sorted(n for n in os.listdir(cwd) if n.endswith((".lock", ".tmp")) or
                  (n.startswith(".") and n.endswith(".tmp")) or "tmp" in n.rsplit(".", 1)[-1])
    if left:
        return f"left beside the output: {left}"
    if stored and (cwd / stored).exists():  # absent: the signal came before any run ended
        from hybridsched.store import read_runs

        try:
            runs = read_runs(str(cwd / stored))
        except Exception as exc:  # noqa: BLE001
            return f"{stored} unreadable after the signal: {exc}"
        if len(runs) and not all(bool(v) for v in runs["verified"]):
            return "a kept run is not verified"
    return None


# --- the states ------------------------------------------------------------------------------

def at_start(w: Watched) -> bool:
    return True  # at once: the interpreter is still starting


def after_cpu(seconds: float):
    def state(w: Watched) -> bool:
        return w.cpu() >= seconds
    state.__name__ = f"after {seconds:g} s of CPU"
    return state


def after_lines(text: str, n: int = 1):
    def state(w: Watched) -> bool:
        return sum(text in ln for ln in w.lines) >= n
    state.__name__ = f"after {n} line(s) with {text!r}"
    return state


def after_runs(path: Path, n: int):
    """Once the study at ``path`` holds ``n`` runs (or table rows)."""
    def state(w: Watched) -> bool:
        import h5py

        try:
            with h5py.File(path, "r", locking=False) as h5:
                return any(t in h5 and h5[t].shape[0] >= n for t in ("runs", "ge", "colocate"))
        except (OSError, KeyError):
            return False
    state.__name__ = f"after {n} stored"
    return state


# --- a big study, built once ---------------------------------------------------------------

_CACHE: list[Path] = []


def big_study() -> Path:
    """A real study with /runs tiled to 110,005 rows (as issue 33's): reading it takes
    seconds, so a signal lands while it is read and decoded."""
    if _CACHE and _CACHE[0].exists():
        return _CACHE[0]
    import h5py
    import numpy as np

    d = Path(tempfile.mkdtemp(prefix="hostile-signals-"))
    atexit.register(shutil.rmtree, d, True)
    small, big = d / "small.h5", d / "big.h5"
    subprocess.run([*HS, "run", "-s", "serial,dynamic,guided", "-k", "1,2", "-L", "24",
                    "--height", "32", "--width", "64", "--reps", "2", "-o", str(small)],
                   env=dict(os.environ, **ENV), capture_output=True, check=True)
    with h5py.File(small, "r") as src, h5py.File(big, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        rows = np.resize(src["runs"][()], 110_005)
        rows["run_id"] = np.arange(len(rows))
        dst.create_dataset("runs", data=rows, maxshape=(None,), chunks=(64,))
        src.copy(src["detail"], dst, name="detail")
    _CACHE.append(big)
    return big


def _copy_big(tmp: Path) -> Path:
    dst = tmp / "big.h5"
    shutil.copy(big_study(), dst)
    return dst


# --- the commands ---------------------------------------------------------------------------

RUN_LONG = ["-k", "1,2", "-L", "200", "--height", "64", "--width", "64", "--reps", "40"]
COMMANDS: dict[str, tuple[Callable[[Path], list[str]], dict[str, Callable], str | None]] = {
    "run_threads": (lambda t: ["run", "-s", "serial,dynamic,guided", *RUN_LONG, "-o", "o.h5"],
                    {"working": lambda t: after_runs(t / "o.h5", 2),
                     "late": lambda t: after_runs(t / "o.h5", 30)}, "o.h5"),
    "run_forks": (lambda t: ["run", "-s", "prolific,collective", *RUN_LONG, "-o", "o.h5"],
                  {"working": lambda t: after_runs(t / "o.h5", 2)}, "o.h5"),
    "run_pipes": (lambda t: ["run", "-s", "pipe-1to1,pipe-MtoM", *RUN_LONG, "-o", "o.h5"],
                  {"working": lambda t: after_runs(t / "o.h5", 2)}, "o.h5"),
    "run_coop": (lambda t: ["run", "-s", "dynamic,prolific", "--coop", *RUN_LONG, "-o", "o.h5"],
                 {"working": lambda t: after_runs(t / "o.h5", 2)}, "o.h5"),
    "run_auto": (lambda t: ["run", "-s", "auto,fac2,awf_b", *RUN_LONG, "-o", "o.h5"],
                 {"working": lambda t: after_runs(t / "o.h5", 2)}, "o.h5"),
    "report_big": (lambda t: ["report", str(_copy_big(t)), "--no-plots", "--out-dir", "rep"],
                   {"i33_4_reading": lambda t: after_cpu(2.0),
                    "i33_4_deep_in": lambda t: after_cpu(4.0)}, None),
    "merge_big": (lambda t: ["merge", str(_copy_big(t)), "-o", "m.h5"],
                  {"i33_4_reading": lambda t: after_cpu(2.0),
                   "i33_4_deep_in": lambda t: after_cpu(4.0)}, None),
    "trace_big": (lambda t: ["trace", str(_copy_big(t)), "--run", "3"],
                  {"i33_4_reading": lambda t: after_cpu(2.0)}, None),
    "fit_big": (lambda t: ["fit", str(_copy_big(t)), "--model", "amdahl"],
                {"i33_4_reading": lambda t: after_cpu(2.0)}, None),
    "simulate": (lambda t: ["simulate", "-s", "dynamic,guided,fac2,awf_b", "-k", "1,2,4,8",
                            "-L", "200000", "--height", "4", "--width", "16", "--reps", "20",
                            "-o", "s.h5"],
                 {"working": lambda t: after_cpu(2.5)}, None),
    "calibrate": (lambda t: ["calibrate", "-o", "cal.json"],
                  {"working": lambda t: after_lines("calibrating", 2)}, None),
    "ge": (lambda t: ["ge", "--arch", "A0,A1,A2", "--n", "256", "--threads", "64", "--reps", "50",
                      "-o", "g.h5"],
           {"working": lambda t: after_runs(t / "g.h5", 1)}, None),
    "colocate": (lambda t: ["colocate", "--jobs", "2", "--workers", "1", "--steps", "40000",
                            "--step-us", "50", "--reps", "5", "--policy", "linux", "-o", "c.h5"],
                 {"working": lambda t: after_lines("rep 0 job 1")}, None),
    # check runs under a second; 0.2 s of CPU is past the imports, into its probes
    "check": (lambda t: ["check", "-L", "20000"], {"working": lambda t: after_cpu(0.2)}, None),
}

for _cmd, (_argv, _moments, _stored) in COMMANDS.items():
    for _moment, _state in [("start", lambda t: at_start), *_moments.items()]:
        for _sig in (signal.SIGINT, signal.SIGTERM):
            def _make(argv=_argv, state=_state, sig=_sig, stored=_stored):
                def fn(tmp: Path) -> str | None:
                    return interrupted(argv(tmp), tmp, sig, state(tmp), stored=stored)
                return fn
            _fn = _make()
            tag = "i33_4_" if _moment.startswith("i33_4") else ""
            moment = _moment.replace("i33_4_", "")
            _fn.__name__ = f"{tag}{_cmd}_{moment}_{_sig.name.lower()}"
            _fn.__doc__ = (f"{_sig.name} {moment} of `{_cmd.split('_')[0]}`: exit {128 + _sig}, "
                           "nothing lost or left")
            case(A)(_fn)
