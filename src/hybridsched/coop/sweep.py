"""The segment left behind when every participant of the arbiter died without leaving."""
from __future__ import annotations

import os

from ..errors import ResourceError, UsageError
from .arbiter import Arbiter, segment_path


def sweep() -> None:
    """Remove this user's segment when every participant died without leaving (a
    SIGKILLed run, a killed MPI job): attaching reclaims the dead and the last one to
    leave removes the segment. A segment still in use, or one that cannot be attached, is
    left alone, silently."""
    if not os.path.exists(segment_path()):
        return
    try:
        with Arbiter():
            pass
    except (UsageError, ResourceError, OSError):
        pass
