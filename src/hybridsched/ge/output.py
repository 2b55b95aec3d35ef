"""The ONE module that writes and reads ``/ge`` (the adapter to port onto the new store).

store.py (the study format) is being rewritten (one-writer lock, SWMR, version 2); until
then this module writes ``/ge`` with plain h5py, with the same root attributes store.py
writes (``format="hybridsched"``, ``format_version``, ``created``, ``machine.*``) plus
``ge_spec`` (JSON of the sweep). PORT: replace the bodies of GeWriter and read_ge with the
new store's calls; nothing else in the package touches ``/ge``.

Layout: ``/ge``, a resizable 1-D compound dataset (GE_DTYPE), one row per run, appended
and flushed as each run completes. Readers open without HDF5's file lock, as store.py does.
"""
from __future__ import annotations

import json
import os
import time

import h5py
import numpy as np

from ..errors import NotOurFile, UsageError

FORMAT = "hybridsched"
FORMAT_VERSION = 1  # the version store.py writes today; PORT: the new store's
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
    for name in GE_DTYPE.names:
        if name == "run_id":
            row[name] = run_id
            continue
        v = getattr(r, name)
        row[name] = v.encode("utf-8")[:240].decode("utf-8", "ignore").encode() \
            if isinstance(v, str) else v
    return row


class GeWriter:
    """Create ``path`` (refusing an existing file unless ``overwrite``) and append runs."""

    def __init__(self, path: str, metadata: dict, spec: dict, overwrite: bool = False):
        if os.path.exists(path) and not overwrite:
            raise UsageError(f"--out {path}: file exists (use --overwrite to replace it)")
        self.path = path
        self.h5 = h5py.File(path, "w")
        a = self.h5.attrs
        a["format"] = FORMAT
        a["format_version"] = FORMAT_VERSION
        a["ge_version"] = GE_VERSION
        a["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        for key, val in metadata.items():
            a[f"machine.{key}"] = val
        a["ge_spec"] = json.dumps(spec, sort_keys=True)
        self.ds = self.h5.create_dataset("ge", shape=(0,), maxshape=(None,), dtype=GE_DTYPE,
                                         chunks=(64,))
        self.h5.flush()

    def append(self, record) -> int:
        i = int(self.ds.shape[0])
        self.ds.resize((i + 1,))
        self.ds[i] = _row(i, record)[0]
        self.h5.flush()
        return i

    def close(self) -> None:
        if self.h5 is not None:
            self.h5.close()
            self.h5 = None

    def __enter__(self) -> "GeWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def has_ge(path: str) -> bool:
    """True when ``path`` is a hybridsched file with a ``/ge`` dataset."""
    try:
        with h5py.File(path, "r", locking=False) as h5:
            return h5.attrs.get("format") == FORMAT and "ge" in h5
    except (OSError, ValueError):
        return False


def read_ge(path: str) -> np.ndarray:
    """The ``/ge`` rows, byte strings decoded to str."""
    if not has_ge(path):
        raise NotOurFile(f"{path}: no hybridsched /ge dataset")
    with h5py.File(path, "r", locking=False) as h5:
        raw = h5["ge"][()]
    descr = [(nm, f"U{raw.dtype[nm].itemsize}" if raw.dtype[nm].kind == "S" else raw.dtype[nm])
             for nm in raw.dtype.names]
    out = np.zeros(raw.shape, descr)
    for nm in raw.dtype.names:
        col = raw[nm]
        out[nm] = np.char.decode(col, "utf-8") if col.dtype.kind == "S" else col
    return out


def read_ge_attrs(path: str) -> dict:
    with h5py.File(path, "r", locking=False) as h5:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in h5.attrs.items()}
