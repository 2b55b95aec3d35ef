"""A segment file already at the arbiter's path, looked at before it is used: whether it
was made for other tables (other CPUs), and whether one that was may be reset (nobody
left using it) or must be refused. Under the flock that orders attaching (Arbiter)."""
from __future__ import annotations

import mmap
import os

import numpy as np

from ..errors import ArbiterInUse, UsageError
from .layout import HEADER_DTYPE, MAGIC, VERSION, views
from .ops import Ops, now_ns
from .paths import OWN_ARBITER
from .reclaim import reclaim
from .state import State


def _cpus(n: int) -> str:
    return f"{n} CPU{'s' * (n != 1)}"


def header(fd: int):
    """A segment file's header record, or None when the file is shorter than one."""
    buf = os.pread(fd, HEADER_DTYPE.itemsize, 0)
    return np.frombuffer(buf, HEADER_DTYPE)[0] if len(buf) == HEADER_DTYPE.itemsize else None


def other_tables(fd: int, tables: tuple[int, int, int]) -> bool:
    """Whether a segment of our size was made for other ``tables`` (CPUs, jobs, workers;
    sizes are padded: 1 and 2 CPUs take the same bytes), so that it must be refused or
    reset, not read."""
    h = header(fd)
    if h is None or bytes(h["magic"]) != MAGIC or int(h["version"]) != VERSION:
        return False  # the checks that follow refuse it
    return (int(h["ncpu"]), int(h["max_jobs"]), int(h["max_workers"])) != tables


def refuse_unless_unused(path: str, fd: int, have: int, tables: tuple[int, int, int],
                         ops: Ops) -> None:
    """A segment of another size (``have`` bytes), or made for other ``tables`` (CPUs,
    jobs, workers). Reusable (the call returns) only when nobody is using it any more;
    else UsageError."""
    if have < HEADER_DTYPE.itemsize:
        raise UsageError(f"{path}: not a hybridsched coop segment ({have} bytes; remove "
                         "it if no coop run is active): refusing it")
    h = header(fd)
    if bytes(h["magic"]) != MAGIC:
        raise UsageError(f"{path}: not a hybridsched coop segment (remove it if no "
                         "coop run is active): refusing it")
    if int(h["version"]) != VERSION:  # its tables cannot be read: never reset blindly
        raise UsageError(f"{path}: coop segment version {int(h['version'])} (another "
                         f"hybridsched), this one speaks {VERSION}: refusing it (remove it "
                         "if no coop run is active)")
    # the same version for other CPUs: see whether its workers live, under its lock
    try:
        m = mmap.mmap(fd, have)
        s = State(views(m, int(h["ncpu"]), int(h["max_jobs"]), int(h["max_workers"])), ops)
        held = np.zeros(1, np.int8)
        try:
            ops.lock(s.lock, held)
            reclaim(s, now_ns())
            busy = s.participants()
            users = len({int(p) for p in s.jobs["pid"][s.jobs["used"] == 1]})
        finally:
            ops.unlock(s.lock, held)
        del s
        m.close()
    except (ValueError, OSError):  # its tables do not fit its header: never reset blindly
        raise UsageError(f"{path}: a coop segment whose tables cannot be read "
                         "(remove it if no coop run is active): refusing it") from None
    if busy:
        theirs = (int(h["ncpu"]), int(h["max_jobs"]), int(h["max_workers"]))
        if theirs[0] != tables[0]:
            raise ArbiterInUse(f"{path}: a coop segment for {_cpus(theirs[0])} is in use by "
                             f"{_processes(users)}; this run wants {_cpus(tables[0])}: "
                             f"{OWN_ARBITER}")
        raise ArbiterInUse(f"{path}: a coop segment with tables of {theirs[1]} jobs and "
                         f"{theirs[2]} workers (another hybridsched build's) is in use by "
                         f"{_processes(users)}; this one's are {tables[1]} and {tables[2]}")


def _processes(n: int) -> str:
    return f"{n} hybridsched process{'es' if n != 1 else ''}"
