"""The segment left behind when every participant of the arbiter died without leaving."""
from __future__ import annotations

import os

from ..errors import ResourceError, UsageError
from .paths import segment_path, unfinished


def sweep(path: str | None = None) -> None:
    """Remove this user's segment when every participant died without leaving (a
    SIGKILLed run, a killed MPI job): attaching reclaims the dead and the last one to
    leave removes the segment. Also what a creator killed while it made the segment left:
    its lock file and its unfinished ``.new.<pid>`` file (the attach removes those of dead
    creators). A segment still in use, or one that cannot be attached, is left alone,
    silently. Costs nothing (no arbiter code loaded) when there is none."""
    path = path or segment_path()
    if not (os.path.exists(path) or os.path.exists(path + ".lock") or unfinished(path)):
        return
    from .arbiter import Arbiter

    try:
        with Arbiter(path=path):
            pass
    except (UsageError, ResourceError, OSError):
        pass

