"""The ``/colocate`` table of a study: one row per job and repetition, written and read
through the study store's side tables (one writer, always-complete snapshots)."""
from __future__ import annotations

from dataclasses import astuple, fields

import h5py
import numpy as np

from ..store import TableWriter, read_table
from .spec import JobRecord

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731

COLOCATE_DTYPE = np.dtype([
    ("workload", _S(16)), ("policy", _S(16)), ("barrier", _S(16)), ("jobs", "i4"), ("job", "i4"),
    ("workers", "i4"), ("rep", "i4"), ("step_us", "f8"), ("steps", "i8"), ("time_s", "f8"),
    ("makespan_s", "f8"), ("invol_ctx", "f8"), ("runq_wait_s", "f8"), ("spin_s", "f8"),
    ("switches", "f8"), ("verified", "?"), ("error", _S(240)), ("matrix", "i4"),
    ("scheduler", _S(64)),  # 24 bytes before format version 2
])
assert [f.name for f in fields(JobRecord)] == list(COLOCATE_DTYPE.names)


def _row(r: JobRecord) -> np.ndarray:
    vals = []
    for name, v in zip(COLOCATE_DTYPE.names, astuple(r)):
        if COLOCATE_DTYPE[name].kind in ("S", "O"):
            n = COLOCATE_DTYPE[name].itemsize if COLOCATE_DTYPE[name].kind == "S" else 240
            v = v.encode("utf-8")[:n].decode("utf-8", "ignore").encode("utf-8")
        vals.append(v)
    row = np.zeros(1, COLOCATE_DTYPE)
    row[0] = tuple(vals)
    return row


class ColocateWriter(TableWriter):
    """A new study with a ``/colocate`` table; a context manager."""

    def __init__(self, path: str, metadata: dict, spec: dict, overwrite: bool = False):
        super().__init__(path, "colocate", COLOCATE_DTYPE, metadata, spec, overwrite)

    def append(self, rec: JobRecord) -> int:
        return self.append_row(_row(rec))  # built completely before the table grows


def read_colocate(path: str) -> np.ndarray:
    """The ``/colocate`` rows of a study (strings decoded); empty if it has none."""
    return read_table(path, "colocate", COLOCATE_DTYPE)
