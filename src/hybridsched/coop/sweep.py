"""The segment left behind when every participant of the arbiter died without leaving."""
from __future__ import annotations

import fcntl
import os

from ..errors import ResourceError, UsageError
from .ops import Ops
from .paths import segment_path, unfinished


def sweep(path: str | None = None, ops: Ops | None = None) -> None:
    """Remove this user's segment when every participant died without leaving (a
    SIGKILLed run, a killed MPI job): attaching reclaims the dead and the last one to
    leave removes the segment. Also what a creator killed while it made the segment left:
    its lock file and its unfinished ``.new.<pid>`` file (the attach removes those of dead
    creators). A segment still in use, or one that cannot be attached, is left alone,
    silently; so is a segment variable naming no file of /dev/shm (a command that uses the
    arbiter refuses it, one that does not runs on: the review). Costs nothing (no arbiter code loaded) when there is none. ``ops``: the
    arbiter's (ops.ShimOps where the caller loads no numba: coop exec and its guardian)."""
    if path is None:
        try:
            path = segment_path()
        except UsageError:  # a bad HYBRIDSCHED_COOP_SEGMENT: nothing of ours to sweep there;
            return          # refused where the arbiter is used (`run` without --coop ran on)
    path = os.path.abspath(path)
    if not (os.path.exists(path) or os.path.exists(path + ".lock") or unfinished(path)):
        return
    if _in_use_now(path + ".lock"):
        return
    from .arbiter import Arbiter

    try:
        with Arbiter(path=path, ops=ops):
            pass
    except (UsageError, ResourceError, OSError):
        pass


def _in_use_now(lock: str) -> bool:
    """Whether a participant is attaching to the segment or leaving it right now (the
    flock of its lock file held): it is in use then, and a sweep that waited for the flock
    would wait as long as a participant stopped inside that section stays stopped (an MPI
    rank's watchdog so kept its job's launcher from ending)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # with our shared flock, if we got it
    return False
