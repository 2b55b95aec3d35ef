"""Folders made for a path (as `mkdir -p` makes them), and their removal when what they
were made for failed: the shim's cache, a report's output folder."""
from __future__ import annotations

import os


def first_missing(path: str) -> str | None:
    """The outermost folder of ``path`` that does not exist yet (None: it exists)."""
    missing = None
    while not os.path.isdir(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def remove_made(path: str, made: str | None) -> None:
    """The folders from ``path`` up to ``made`` removed, while they are empty."""
    while made is not None:
        try:
            os.rmdir(path)
        except OSError:
            return
        if path == made:
            return
        path = os.path.dirname(path)
