"""The one loader of a study for the readers that take several things from it: the report,
``fit``, ``simulate --from/--validate`` and ``run --resume``. The file is checked and
opened once; the runs, attributes, side tables and per-run detail are read from that one
open, each on first use and with the same checks as :mod:`store.reader`'s functions, so a
reader meets a malformed part where it first asks for it.
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import h5py
import numpy as np

from ..oslayer.closing import Closing
from .metadata import typed
from .reader import (Detail, _attrs, _checked_detail, _details, _rows, machine_n,
                     open_ours, reading, study_spec)
from .tables import table_rows


class StudyFile(Closing):
    """A study opened read-only for reading (a context manager that closes it)."""

    def __init__(self, path: str):
        self.path = path
        self._h5: h5py.File = open_ours(path)
        self._runs: np.ndarray | None = None
        self._attrs: dict | None = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (h5py's handle is then invalid)."""
        return not self._h5.id.valid

    @property
    def runs(self) -> np.ndarray:
        """``/runs``, every field checked, strings decoded (read once)."""
        if self._runs is None:
            with reading(self.path, "/runs"):
                self._runs = _rows(self.path, self._h5)
        return self._runs

    @property
    def attrs(self) -> dict:
        """The root attributes, byte strings decoded (read once)."""
        if self._attrs is None:
            with reading(self.path, "its attributes"):
                self._attrs = _attrs(self.path, self._h5)
        return self._attrs

    @property
    def machine(self) -> dict:
        """The machine's metadata, each declared key as a value of its type
        (:mod:`store.metadata`; BadStudy for one that is not)."""
        return typed(self.path, self.attrs)

    @property
    def n(self) -> int:
        """N: the usable CPUs when the study ran (a simulated study's virtual cores per
        node); 0 when not recorded."""
        return machine_n(self.path, self.attrs)

    def spec(self, key: str = "study") -> dict:
        """The JSON object in attribute ``key`` (:func:`reader.study_spec`)."""
        return study_spec(self.path, self.attrs, key)

    def has_table(self, table: str) -> bool:
        """Whether the study holds a ``/<table>`` (a side table: ``ge``, ``colocate``)."""
        with reading(self.path, f"/{table}"):
            return table in self._h5

    def details(self, run_ids: Iterable[int]) -> Iterator[tuple[int, Detail | None]]:
        """(run_id, Detail) of each run, None where its detail is missing or malformed
        (:func:`reader.iter_details`)."""
        return _details(self._h5, run_ids)

    def table(self, table: str, dtype: np.dtype | None = None) -> np.ndarray:
        """The rows of side table ``/<table>`` (:func:`tables.read_table`)."""
        with reading(self.path, f"/{table}"):
            return table_rows(self.path, self._h5, table, dtype)

    def detail(self, run_id: int) -> Detail:
        """One run's detail, empty where none is stored; BadStudy where it is malformed
        (:func:`reader.read_detail`)."""
        return _checked_detail(self.path, self._h5, run_id)

    def close(self) -> None:
        self._h5.close()


@contextlib.contextmanager
def opened(source: str | StudyFile) -> Iterator[StudyFile]:
    """``source`` itself when it is a StudyFile still open (left open: its owner closes it),
    otherwise the study at that path opened for the ``with`` block."""
    if isinstance(source, StudyFile) and not source.closed:
        yield source
        return
    with StudyFile(source.path if isinstance(source, StudyFile) else source) as study:
        yield study
