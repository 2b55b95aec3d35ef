"""The ``/ge`` table of a study: one row per `hybridsched ge` run, written and read through
the study store's side tables (one writer, always-complete snapshots, checked reads)."""
from __future__ import annotations

import h5py
import numpy as np

from ..store import StudyFile, TableWriter, has_table, opened, read_attrs

GE_VERSION = 1      # the /ge row layout

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731

GE_DTYPE = np.dtype([
    ("run_id", "i8"), ("arch", _S(4)), ("algo", _S(8)), ("n", "i8"),
    ("threads", "i4"), ("threads_requested", "i4"), ("sched_threads", "i4"),
    ("rep", "i4"), ("seed", "i8"),
    ("t_create_s", "f8"), ("t_forward_s", "f8"), ("t_back_s", "f8"), ("t_total_s", "f8"),
    ("t_lapack_s", "f8"),
    ("blocks", "i8"), ("wakeups", "i8"), ("switches", "i8"), ("scans", "i8"),
    ("residual", "f8"), ("x_err", "f8"), ("verified", "?"), ("started_at", "f8"),
    ("error", _S(240)),
])


def _row(run_id: int, r) -> np.ndarray:
    row = np.zeros(1, GE_DTYPE)
    for name in GE_DTYPE.names or ():
        if name == "run_id":
            row[name] = run_id
            continue
        v = getattr(r, name)
        row[name] = v.encode("utf-8")[:240].decode("utf-8", "ignore").encode() \
            if isinstance(v, str) else v
    return row


class GeWriter(TableWriter):
    """Create ``path`` (refusing an existing file unless ``overwrite``) and append runs."""

    def __init__(self, path: str, metadata: dict, spec: dict, overwrite: bool = False):
        super().__init__(path, "ge", GE_DTYPE, metadata, spec, overwrite)
        self.writer.h5.attrs["ge_version"] = GE_VERSION

    def append(self, record) -> int:
        i = len(self.writer.h5["ge"]) if "ge" in self.writer.h5 else 0
        return self.append_row(_row(i, record))


def has_ge(path: str) -> bool:
    """True when ``path`` is a hybridsched study with a ``/ge`` table."""
    return has_table(path, "ge")


def read_ge(source: str | StudyFile) -> np.ndarray:
    """The ``/ge`` rows of a study (a path, or one open), byte strings decoded to str."""
    with opened(source) as study:
        return study.table("ge", GE_DTYPE)


def read_ge_attrs(path: str) -> dict:
    return read_attrs(path)
