"""Side tables of a study: a 1-D compound dataset beside ``/runs`` (``/ge`` of `hybridsched
ge`, ``/colocate`` of `hybridsched colocate`), one row per record, written through the same
one-writer, always-complete :class:`writer.StudyWriter` and read through the same checks.
"""
from __future__ import annotations

import json
from typing import TypeVar

import h5py
import numpy as np

from ..errors import BadStudy, UsageError
from .format import decode
from .reader import FIELD_KINDS, H5_ERRORS, open_ours, reading
from .writer import open_new

_Writer = TypeVar("_Writer", bound="TableWriter")  # a subclass's `with` gives the subclass


class TableWriter:
    """A new study whose records go to side table ``table`` (rows of ``dtype``); ``spec``
    is kept as the JSON attribute ``<table>_spec``. A context manager: the lock is taken
    before anything is looked at, an existing file is replaced only with ``overwrite`` and
    only once the new study is published."""

    def __init__(self, path: str, table: str, dtype: np.dtype, metadata: dict, spec: dict,
                 overwrite: bool = False):
        self.table, self.dtype = table, np.dtype(dtype)
        self.writer = open_new(path, metadata, {}, overwrite=overwrite)
        self.writer.h5.attrs[f"{table}_spec"] = json.dumps(spec, sort_keys=True)

    def append_row(self, row: np.ndarray) -> int:
        """Add one row (a 1-element array of ``dtype``, built completely by the caller) and
        publish; returns its index."""
        return self.writer.append_row(self.table, row)

    def append_rows(self, rows: np.ndarray) -> int:
        """Add ``rows`` (an array of ``dtype``) together: a snapshot holds all or none of
        them; returns the first's index."""
        return self.writer.append_rows(self.table, rows)

    def close(self, failed: bool = False) -> None:
        self.writer.close(failed)

    def __enter__(self: _Writer) -> _Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)


def has_table(path: str, table: str) -> bool:
    """Whether ``path`` is a study with a ``/<table>`` dataset (False for anything else)."""
    try:
        with open_ours(path) as h5:
            return table in h5
    except (UsageError, *H5_ERRORS):
        return False


def read_table(path: str, table: str, dtype: np.dtype | None = None) -> np.ndarray:
    """The rows of ``/<table>`` (strings decoded); empty when the study has none. With
    ``dtype`` every field it names must be present (BadStudy otherwise)."""
    with open_ours(path) as h5, reading(path, f"/{table}"):
        return table_rows(path, h5, table, dtype)


def table_rows(path: str, h5: h5py.File, table: str, dtype: np.dtype | None = None) -> np.ndarray:
    """:func:`read_table` from a study already open as ``h5``."""
    if table not in h5:
        return np.zeros(0, dtype) if dtype is not None else np.zeros(0)
    ds = h5[table]
    if not hasattr(ds, "dtype") or ds.dtype.names is None or ds.ndim != 1:
        raise BadStudy(f"{path}: /{table} is not a table")
    raw = ds[()]
    if dtype is not None:
        raw = _conformed(path, table, raw, np.dtype(dtype))
    try:
        return decode(raw)
    except UnicodeDecodeError:
        raise BadStudy(f"{path}: /{table} holds text that is not UTF-8") from None


def _conformed(path: str, table: str, raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``raw`` with every field ``dtype`` names present, of a compatible kind (as /runs'
    fields are checked) and cast to its type; BadStudy otherwise (a field dropped or
    retyped with h5py would fail later, in a report, with a traceback)."""
    names, stored = dtype.names or (), raw.dtype.names or ()
    missing = [n for n in names if n not in stored]
    if missing:
        raise BadStudy(f"{path}: /{table} lacks the fields {', '.join(missing)}")
    for name in names:
        want, got = dtype[name], raw.dtype[name]
        if got.kind not in FIELD_KINDS.get(want.kind, want.kind) or got.shape != want.shape:
            raise BadStudy(f"{path}: /{table} field {name} is stored as {got}, not as {want}")
    # text keeps its stored width (never cut); numbers take the type the readers expect
    fields = [(n, dtype[n] if n in names and dtype[n].kind != "S" else raw.dtype[n])
              for n in stored]
    out = np.zeros(raw.shape, fields)
    for name in stored:
        out[name] = raw[name]
    return out
