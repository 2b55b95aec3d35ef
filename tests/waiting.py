"""Waiting for a state, never for a time: the tests run on fast and loaded machines alike.

Each helper polls a condition until it holds or a deadline passes; the deadline is only a
bound on a hang and fails the test with a message saying what never happened. Polling
sleeps a few milliseconds between looks so that a waiting test does not take a CPU from
the work it waits for on a 2-core machine.
"""
from __future__ import annotations

import signal
import subprocess
import time
from typing import Callable, TypeVar

import psutil

T = TypeVar("T")

# Generous: a deadline that is only reached when something hangs, never on a slow machine
# (a loaded 2-core VM takes several times a quiet one's time for a study's start-up).
DEADLINE_S = 120.0
# Short enough to catch a state within a few ms, long enough to leave the CPUs to the work.
POLL_S = 0.005


def wait_until(cond: Callable[[], T], what: str, timeout: float = DEADLINE_S,
               proc: subprocess.Popen | None = None) -> T:
    """Return ``cond()``'s first truthy value. Fail with ``what`` when ``timeout`` passes,
    or at once when ``proc`` (the process whose state is awaited) ends first."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}: "
                                 f"{(err or '')[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(POLL_S)


def rows_in(path: str, table: str = "runs") -> int:
    """How many rows the study at ``path`` holds in ``table`` (/runs, /ge, /colocate): 0
    before the file or the table exists."""
    from hybridsched.errors import NotOurFile
    from hybridsched.store.reader import check_ours, open_study

    try:
        check_ours(path)
        with open_study(path) as h5:
            return len(h5[table]) if table in h5 else 0
    except (NotOurFile, OSError):
        return 0  # not created yet, or being created


def wait_for_rows(path: str, n: int, proc: subprocess.Popen | None = None,
                  table: str = "runs", timeout: float = DEADLINE_S) -> None:
    """Until the study at ``path`` holds at least ``n`` committed rows in ``table``."""
    wait_until(lambda: rows_in(path, table) >= n, f"{n} row(s) in {path}:/{table}", timeout,
               proc)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def wait_for_descendants(pid: int, n: int, proc: subprocess.Popen | None = None,
                         timeout: float = DEADLINE_S) -> list[psutil.Process]:
    """Until process ``pid`` has at least ``n`` descendants; returns them."""
    return wait_until(lambda: (lambda d: d if len(d) >= n else None)(descendants(pid)),
                      f"{n} descendant process(es) of {pid}", timeout, proc)


def cpu_seconds(p: psutil.Process) -> float:
    """The CPU time ``p`` has used so far (0 once it is gone)."""
    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test will Ctrl-C: SIGINT at its default, whatever
    this process inherited (a background job's suite starts with it ignored, and an ignored
    signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def waits_in_kernel(pid: int, where: str, tid: int | None = None) -> bool:
    """True when thread ``tid`` of ``pid`` (its main thread by default: numpy's and numba's
    pools sleep in futexes of their own) sleeps in a kernel function whose name contains
    ``where`` (its /proc wchan, e.g. "futex" for a mutex or futex wait)."""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/wchan") as fh:
            return where in fh.read()
    except OSError:
        return False


def signalled(proc: subprocess.Popen, sig: int, timeout: float = 60.0) -> tuple[int, str]:
    """Send ``sig`` to ``proc`` and wait for its end: (its status, its stderr, if piped).
    Killed and reaped if it outlives ``timeout`` (the assertion on its status then fails)."""
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err or ""
