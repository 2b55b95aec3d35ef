"""Where the node's arbiter segment lives (one per user), known without loading the
arbiter."""
from __future__ import annotations

import os


def segment_path(uid: int | None = None) -> str:
    return f"/dev/shm/hybridsched-coop.{os.getuid() if uid is None else uid}"
