"""Where the node's arbiter segment lives (one per user), known without loading the
arbiter."""
from __future__ import annotations

import os

from ..errors import UsageError

# Jobs cooperate when they share one segment: the node's, by default. An experiment (or a
# test suite) that must not meet the node's other cooperating jobs names a segment of its
# own here; a name outside /dev/shm is refused (the segment is memory, not a file on disk).
SEGMENT_ENV = "HYBRIDSCHED_COOP_SEGMENT"
UNFINISHED = ".new."  # a segment being made: <path>.new.<creator's pid>
# What a refusal for another run's CPUs or tables names as the way out
OWN_ARBITER = (f"jobs on other CPUs need an arbiter of their own: set {SEGMENT_ENV}="
               "/dev/shm/hybridsched-coop.<uid>.<name>, or `coop exec --segment` it")


def unfinished(path: str) -> list[tuple[str, int]]:
    """The unfinished copies of segment ``path`` in its folder, each with its creator's
    pid; none where the folder cannot be listed."""
    folder, base = os.path.split(path)
    prefix = base + UNFINISHED
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    return [(os.path.join(folder, n), int(n[len(prefix):])) for n in names
            if n.startswith(prefix) and n[len(prefix):].isdigit()]


def segment_path(uid: int | None = None) -> str:
    """The arbiter segment of this user (of ``uid``: the node's, ignoring the variable)."""
    own = os.environ.get(SEGMENT_ENV) if uid is None else None
    if own:
        if os.path.dirname(own) != "/dev/shm" or not os.path.basename(own).strip("."):
            raise UsageError(f"{SEGMENT_ENV}={own!r}: name a file directly in /dev/shm, "
                             f"e.g. /dev/shm/hybridsched-coop.mine")
        return own
    return f"/dev/shm/hybridsched-coop.{os.getuid() if uid is None else uid}"
