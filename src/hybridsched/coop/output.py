"""The ``/colocate`` table of a study file: one row per job and repetition.

A narrow adapter over h5py: :class:`ColocateWriter` appends rows and flushes each one;
:func:`read_colocate` reads them back. Root attributes follow the study format of
:mod:`hybridsched.store` (``format``, ``format_version``, ``machine.*``, ``colocate`` spec).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import astuple, fields

import h5py
import numpy as np

from ..errors import NotOurFile, UsageError
from .colocate import JobRecord

FORMAT = "hybridsched"
FORMAT_VERSION = 1

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731

COLOCATE_DTYPE = np.dtype([
    ("workload", _S(16)), ("policy", _S(16)), ("barrier", _S(16)), ("jobs", "i4"), ("job", "i4"),
    ("workers", "i4"), ("rep", "i4"), ("step_us", "f8"), ("steps", "i8"), ("time_s", "f8"),
    ("makespan_s", "f8"), ("invol_ctx", "f8"), ("runq_wait_s", "f8"), ("spin_s", "f8"),
    ("switches", "f8"), ("verified", "?"), ("error", _S(240)), ("matrix", "i4"),
    ("scheduler", _S(24)),
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


class ColocateWriter:
    """Writes a new study file with a ``/colocate`` table; a context manager."""

    def __init__(self, path: str, metadata: dict, spec: dict, overwrite: bool = False):
        if os.path.lexists(path) and not overwrite:
            raise UsageError(f"--out {path}: file exists (use --overwrite to replace it)")
        self.path = path
        tmp = f"{path}.part-{os.getpid()}"
        self._tmp = tmp
        self.h5 = h5py.File(tmp, "x")
        a = self.h5.attrs
        a["format"], a["format_version"] = FORMAT, FORMAT_VERSION
        a["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        for k, v in metadata.items():
            a[f"machine.{k}"] = v
        a["colocate"] = json.dumps(spec, sort_keys=True)
        self.rows = self.h5.create_dataset("colocate", shape=(0,), maxshape=(None,),
                                           dtype=COLOCATE_DTYPE, chunks=(64,))
        self.h5.flush()
        os.replace(tmp, path)  # complete enough to be a study: it has its table

    def append(self, rec: JobRecord) -> None:
        n = self.rows.shape[0]
        row = _row(rec)  # built completely before the table grows
        self.rows.resize((n + 1,))
        self.rows[n] = row[0]
        self.h5.flush()

    def close(self) -> None:
        if self.h5 is not None:
            self.h5.close()
            self.h5 = None

    def __enter__(self) -> "ColocateWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_colocate(path: str) -> np.ndarray:
    """The ``/colocate`` rows of a study (strings decoded); empty if it has none."""
    try:
        with h5py.File(path, "r", locking=False) as h5:
            if h5.attrs.get("format") != FORMAT:
                raise NotOurFile(f"{path}: not a hybridsched study file")
            if "colocate" not in h5:
                return np.zeros(0, COLOCATE_DTYPE)
            raw = h5["colocate"][()]
    except (OSError, KeyError) as exc:
        raise NotOurFile(f"{path}: not a hybridsched study file ({exc.__class__.__name__})") from None
    out = np.zeros(raw.shape, [(n, f"U{raw.dtype[n].itemsize}" if raw.dtype[n].kind == "S" else raw.dtype[n])
                               for n in raw.dtype.names])
    for n in raw.dtype.names:
        out[n] = np.char.decode(raw[n], "utf-8") if raw[n].dtype.kind == "S" else raw[n]
    return out
