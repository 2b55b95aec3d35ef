"""What every case module uses: the registry (:func:`case`) and the checks of the contract."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HS = [sys.executable, "-m", "hybridsched"]
TINY = ["-k", "2", "-L", "8", "--height", "8", "--width", "16", "--reps", "1"]


class Skip(Exception):
    """The case cannot run here (no mpiexec, not root, ...)."""


def mpi_launch() -> tuple[list[str], dict]:
    """The launcher (its argv before ``-n``) and the environment of the MPI the cases use:
    the first implementation the tests find (tests/mpiimpls.py), MPICH where both wheels
    are installed, where a plain `mpiexec` is Open MPI's, which refuses to run as root
    without its own flags."""
    import mpiimpls  # tests/ is on the path (pyproject.toml: pytest's pythonpath)

    found = next((f for f in mpiimpls.available() if not f.missing), None)
    if found is None:
        raise Skip("no MPI implementation found (mpiexec)")
    return list(found.launcher), dict(os.environ, **found.env)


def coop_segment() -> str:
    """The coop segment the commands a case starts will use: the node's, or the one the test
    suite names for itself (tests/conftest.py sets HYBRIDSCHED_COOP_SEGMENT for the session,
    after the cases are collected: asked at run time, never kept in a constant)."""
    from hybridsched.coop.paths import segment_path

    return segment_path()


def foreign(name: str) -> bool:
    """Whether a /dev/shm name of ours was made by a live process outside this process's tree
    (another test worker's, another session's on this machine): no case of this process
    made it. The rule of tests/conftest.py's leak check; a dead creator's name still counts."""
    import psutil

    m = re.match(r"hybridsched\.(\d+)\.", name) or re.search(r"(\d+)$", name)
    if not m:
        return False
    pid = int(m.group(1))
    try:
        proc = psutil.Process(pid)
        return pid != os.getpid() and os.getpid() not in {p.pid for p in proc.parents()}
    except psutil.Error:
        return False


@dataclass
class Case:
    area: str
    name: str
    doc: str
    fn: Callable[[Path], "str | None"]


CASES: list[Case] = []


def case(area: str):
    """Register ``fn(tmp) -> None (as the contract says) | str (what went wrong)``."""
    def add(fn):
        CASES.append(Case(area, fn.__name__, (fn.__doc__ or "").strip().splitlines()[0]
                          if fn.__doc__ else "", fn))
        return fn
    return add


def hs(*argv, env: dict | None = None, timeout: float = 120, cwd=None,
       stdin=None) -> subprocess.CompletedProcess:
    """`python -m hybridsched ARGV` (killed after ``timeout``; rc -9 then)."""
    e = dict(os.environ, **(env or {}))
    try:
        return subprocess.run([*HS, *argv], capture_output=True, text=True, timeout=timeout,
                              env=e, cwd=cwd, stdin=stdin)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, -9, exc.stdout or "", f"TIMEOUT {timeout}s")


def mpi(n: int, *argv, env: dict | None = None, timeout: int = 120,
        cwd=None) -> subprocess.CompletedProcess:
    """`mpiexec -n N python -m hybridsched ARGV`, SIGKILLed after ``timeout`` (a hung mpiexec
    ignores SIGTERM)."""
    launcher, e = mpi_launch()
    e.update(env or {})
    return subprocess.run(["timeout", "-s", "KILL", str(timeout), *launcher, "-n", str(n),
                           *HS, *argv], capture_output=True, text=True, env=e, cwd=cwd)


def mpmd(first: list[str], second: list[str], timeout: int = 120, cwd=None):
    """Two ranks launched with different command lines."""
    launcher, e = mpi_launch()
    return subprocess.run(["timeout", "-s", "KILL", str(timeout), *launcher, "-n", "1", *HS,
                           *first, ":", "-n", "1", *HS, *second], capture_output=True,
                          text=True, cwd=cwd, env=e)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def usage(p: subprocess.CompletedProcess, *absent: Path, says: str = "") -> str | None:
    """Bad input: exit 2, one line on stderr starting with "hybridsched", no traceback,
    nothing left at ``absent``; ``says``: a word the line must hold."""
    err = _lines(p.stderr)
    if p.returncode != 2:
        return f"exit {p.returncode}, not 2: {' | '.join(err[-3:])[:300]}"
    if len(err) != 1 or not err[0].startswith("hybridsched"):
        return f"stderr is not one line: {' | '.join(err[:4])[:300]}"
    if says and says.lower() not in err[0].lower():
        return f"the line does not say {says!r}: {err[0][:200]}"
    left = [str(a) for a in absent if os.path.lexists(a)]
    return f"left behind: {', '.join(left)}" if left else None


def ok(p: subprocess.CompletedProcess, *present: Path) -> str | None:
    """Everything ran: exit 0, no traceback, the files at ``present`` exist."""
    if p.returncode != 0:
        return f"exit {p.returncode}, not 0: {' | '.join(_lines(p.stderr)[-3:])[:300]}"
    if "Traceback" in p.stderr:
        return "a traceback on stderr"
    missing = [str(a) for a in present if not os.path.exists(a)]
    return f"missing: {', '.join(missing)}" if missing else None


def failed(p: subprocess.CompletedProcess, says: str = "") -> str | None:
    """A run, job or rank failed: exit 1, said why (``says``), no traceback."""
    if p.returncode != 1:
        return f"exit {p.returncode}, not 1: {' | '.join(_lines(p.stderr)[-3:])[:300]}"
    if "Traceback" in p.stderr:
        return "a traceback on stderr"
    if says and says.lower() not in p.stderr.lower():
        return f"stderr does not say {says!r}: {' | '.join(_lines(p.stderr)[-2:])[:200]}"
    return None


def api_usage(fn: Callable[[], object], says: str = "") -> str | None:
    """The API refuses with one UsageError line."""
    from hybridsched.errors import UsageError

    try:
        fn()
    except UsageError as exc:
        text = str(exc)
        if "\n" in text:
            return f"the UsageError has several lines: {text[:200]!r}"
        if says and says.lower() not in text.lower():
            return f"the UsageError does not say {says!r}: {text[:200]}"
        return None
    except BaseException as exc:  # noqa: BLE001
        return f"{type(exc).__name__} instead of UsageError: {str(exc)[:200]}"
    return "accepted"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
