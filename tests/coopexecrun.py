"""What the tests of `hybridsched coop exec` share: the command line, a run of it, and
the processes of its command."""
from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys

import psutil

CLI = [sys.executable, "-m", "hybridsched", "coop", "exec"]


def command_group(pid: int) -> list[psutil.Process]:
    """The processes of coop exec ``pid``'s command: its descendants but its guardian (a
    fork of coop exec itself, in a group of its own)."""
    me = psutil.Process(pid)
    return [c for c in me.children(recursive=True) if c.exe() != me.exe()]


def coop_exec(seg, *argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "--segment", seg, *argv], capture_output=True, text=True,
                          timeout=300, **kw)


def _die_with_us() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def spawn(seg, *argv, **kw) -> subprocess.Popen:
    """coop exec started in the background, SIGKILLed should the test's process die
    before its ``finally`` ran (coop exec's guardian then ends the command): a test's
    command that waits for a signal once ran on under init for 15 minutes."""
    return subprocess.Popen([*CLI, "--segment", seg, *argv], preexec_fn=_die_with_us, **kw)


@contextlib.contextmanager
def spawned(seg, *argv, **kw):
    """:func:`spawn`'s coop exec, killed, reaped and its pipes closed on every exit."""
    p = spawn(seg, *argv, **kw)
    try:
        yield p
    finally:
        p.kill()
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def state_of(p: psutil.Process) -> str:
    """A process's state, "" once it is gone."""
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return ""


def name_of(p: psutil.Process) -> str:
    """A process's name, "" once it is gone."""
    try:
        return p.name()
    except psutil.NoSuchProcess:
        return ""
