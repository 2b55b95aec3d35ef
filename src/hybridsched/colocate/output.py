"""The ``/colocate`` table of a study: one row per job and repetition, written and read
through the study store's side tables (one writer, always-complete snapshots)."""
from __future__ import annotations

import math
from dataclasses import astuple, fields

import h5py
import numpy as np

from ..errors import BadStudy
from ..store import MAX_TIME_S, StudyFile, TableWriter, numbers_object, opened
from .spec import JobRecord

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731

COLOCATE_DTYPE = np.dtype([
    ("workload", _S(16)), ("policy", _S(16)), ("barrier", _S(16)), ("jobs", "i4"), ("job", "i4"),
    ("workers", "i4"), ("rep", "i4"), ("step_us", "f8"), ("steps", "i8"), ("time_s", "f8"),
    ("makespan_s", "f8"), ("invol_ctx", "f8"), ("runq_wait_s", "f8"), ("spin_s", "f8"),
    ("switches", "f8"), ("verified", "?"), ("error", _S(240)), ("matrix", "i4"),
    ("scheduler", _S(64)),  # 24 bytes before format version 2
    # format version 3: unmodified commands (--cmd)
    ("command", _S(512)), ("experiment", _S(16)), ("exit_status", "i4"), ("cpu_s", "f8"),
    ("nivcsw", "f8"), ("counters", _S(240)), ("out_tail", _S(1000)), ("err_tail", _S(1000)),
])
assert [f.name for f in fields(JobRecord)] == list(COLOCATE_DTYPE.names or ())

# What the fields added in format version 3 hold in the rows of older files (built-in
# workloads only): what the code of their day would have written for them.
COLOCATE_DEFAULTS = {"command": "", "experiment": "", "exit_status": 0, "cpu_s": math.nan,
                     "nivcsw": math.nan, "counters": "", "out_tail": "", "err_tail": ""}


def _row(r: JobRecord) -> np.ndarray:
    vals = []
    for name, v in zip(COLOCATE_DTYPE.names or (), astuple(r)):
        if COLOCATE_DTYPE[name].kind in ("S", "O"):
            n = COLOCATE_DTYPE[name].itemsize if COLOCATE_DTYPE[name].kind == "S" else 240
            raw = v.encode("utf-8")
            # a tail keeps its end, every other text its beginning
            raw = raw[-n:] if name.endswith("_tail") else raw[:n]
            v = raw.decode("utf-8", "ignore").encode("utf-8")
        vals.append(v)
    row = np.zeros(1, COLOCATE_DTYPE)
    row[0] = tuple(vals)
    return row


class ColocateWriter(TableWriter):
    """A new study with a ``/colocate`` table; a context manager."""

    def __init__(self, path: str, metadata: dict, spec: dict, overwrite: bool = False):
        super().__init__(path, "colocate", COLOCATE_DTYPE, metadata, spec, overwrite)

    def append(self, recs: list[JobRecord]) -> int:
        """One repetition of one policy, its J rows together: an interrupted run leaves
        that repetition absent, never some of its jobs (which `report` would have taken for
        the whole)."""
        return self.append_rows(np.concatenate([_row(r) for r in recs]))  # built completely


def conform(rows: np.ndarray, dtype: np.dtype = COLOCATE_DTYPE) -> np.ndarray:
    """Rows of any stored ``/colocate`` layout in ``dtype`` (today's; decoded or not), the
    fields an older file lacks at :data:`COLOCATE_DEFAULTS`."""
    names = rows.dtype.names or ()
    missing = [n for n in dtype.names or () if n not in names and n not in COLOCATE_DEFAULTS]
    if missing:
        raise BadStudy(f"/colocate lacks the fields {', '.join(missing)}")
    out = np.zeros(len(rows), dtype)
    for name in dtype.names or ():
        out[name] = rows[name] if name in names else COLOCATE_DEFAULTS[name]
    return out


def _decoded(dtype: np.dtype) -> np.dtype:
    return np.dtype([(n, f"U{dtype[n].itemsize}" if dtype[n].kind == "S" else dtype[n])
                     for n in dtype.names or ()])


def read_colocate(source: str | StudyFile) -> np.ndarray:
    """The ``/colocate`` rows of a study (a path, or one open; strings decoded, any format
    version in today's layout); empty if it has none."""
    with opened(source) as study:
        raw, path = study.table("colocate"), study.path
    if raw.dtype.names is None:  # no table
        return np.zeros(0, _decoded(COLOCATE_DTYPE))
    try:
        rows = conform(raw, _decoded(COLOCATE_DTYPE))
    except BadStudy as exc:
        raise BadStudy(f"{path}: {exc}") from None
    _check_values(path, rows)
    return rows


def _check_values(path: str, rows: np.ndarray) -> None:
    """What no colocate run stores, refused in one line rather than shown (a job time of
    inf) or met as a traceback in a report (counters that are not JSON): damage, or an
    edit."""
    def bad(i: int, what: str) -> BadStudy:
        r = rows[i]
        return BadStudy(f"{path}: /colocate row {i} ({r['policy']} rep {r['rep']} job "
                        f"{r['job']}): {what}")

    odd = np.flatnonzero((rows["jobs"] < 1) | (rows["job"] < 0) | (rows["job"] >= rows["jobs"])
                         | (rows["rep"] < 0))
    if len(odd):
        i = odd[0]
        raise bad(i, f"job {rows['job'][i]} of {rows['jobs'][i]}, rep {rows['rep'][i]}")
    # a verified job's makespan is NaN where another job of its repetition failed: the
    # repetition has none worth a number (colocate.cmdrun)
    for name, none in (("time_s", ""), ("makespan_s", "NaN, another job failed, or ")):
        t = rows[name]
        fine = np.isfinite(t) & (t >= 0) & (t <= MAX_TIME_S)
        wrong = np.flatnonzero(rows["verified"] & ~(fine | (np.isnan(t) if none else False)))
        if len(wrong):
            raise bad(wrong[0], f"verified with {name} = {t[wrong[0]]} (must be {none}0 to "
                      f"{MAX_TIME_S:.0e} s)")
    cpu = rows["cpu_s"]
    wrong = np.flatnonzero(~np.isnan(cpu) & ~((cpu >= 0) & (cpu <= MAX_TIME_S)))
    if len(wrong):
        raise bad(wrong[0], f"cpu_s = {cpu[wrong[0]]} (must be NaN, not measured, or 0 to "
                  f"{MAX_TIME_S:.0e} s)")
    for i, text in enumerate(rows["counters"].tolist()):
        if text and not numbers_object(text):
            raise bad(i, f"counters {text[:60]!r} is not a JSON object of numbers")
