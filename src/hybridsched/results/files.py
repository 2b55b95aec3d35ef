"""Where a report's files go and how they are written (by rename: a planted symlink is
replaced, never written through)."""
from __future__ import annotations

import csv
import os

from ..store import write_text


def write_csv(path: str, records: list[dict]) -> None:
    if not records:
        return
    def write(fh) -> None:
        w = csv.DictWriter(fh, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
    write_text(path, write)  # by rename: a planted symlink is replaced, not written through


def default_out_dir(path: str) -> str:
    """``<dir>/<stem>_report`` beside the study file."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.join(os.path.dirname(os.path.abspath(path)), f"{stem}_report")
