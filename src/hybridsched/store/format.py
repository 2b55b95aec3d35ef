"""The layout of a study file (format_version 4; DESIGN.md §6) and the row codec.

Layout::

    /                 attrs: format="hybridsched", format_version, created, machine.*, study
    /runs             1-D compound dataset, one row per timed run (RUN_DTYPE), resizable
    /detail/<run_id>/workers   WORKER_DTYPE, times relative to the run start
    /detail/<run_id>/trace     TRACE_DTYPE, the chunk trace
    /detail/<run_id>/<series>  optional time series (e.g. aimd_window, WINDOW_DTYPE)

The layout did not change when live reading became safe: safety comes from how the file is
published (writer.py: a complete snapshot renamed into place), not from what is in it, so
files written before and after read the same and older hybridsched versions still read
new files.

Version 2 (users' techniques and simulation, issues 24-25): ``scheduler`` widened from 24 to
64 bytes (a user technique's name, ``pipe-MtoM:<name>``), ``technique`` from 24 to 120
(``module:qualname``), and three new fields: ``technique_hash`` (sha256 of a user technique's
source, so runs of two versions are never pooled), ``simulated`` (a row of `hybridsched
simulate`) and ``portfolio`` (the techniques ``auto`` raced, "" for its default). Version-1 files read as version 2 with those fields empty/false; a version-1
study continued with ``--resume`` is rewritten as version 2.

Version 3 (unmodified commands under `colocate --cmd`, issue 32): ``/runs`` is unchanged;
the ``/colocate`` side table gains ``command``, ``experiment``, ``exit_status``, ``cpu_s``,
``nivcsw``, ``counters``, ``out_tail`` and ``err_tail`` (colocate/output.py). Version-2
``/colocate`` tables read with those fields empty, 0 or NaN (what the built-in workloads'
rows mean by them).

Version 4 (typed measured facts, issue 36): ``/runs`` gains ``dispatch`` (which chunk loop
ran: "python", "compiled", "" where no thread loop ran), ``producer_cpu_s`` (pipe-MtoM's
producer CPU seconds, -1 where not measured) and how the worker that broke a failed run
ended: ``failed_worker`` (-1: none), ``failed_pid``, ``failed_signal``, ``failed_status``
(-1: none) and ``failed_exception``. ``notes`` stays text for people that no code reads.
Older files kept the first two facts in their notes only: rows without those fields get
them from their notes once, as they are read (:mod:`store.legacy`), and the failure fields
at "none broke it". ``params`` and ``portfolio`` keep their text form in the file
(:func:`records.params_text`); a record holds them typed. The machine's attributes are
declared with their types in :mod:`store.metadata` (unchanged in the file).
"""
from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..errors import HybridschedError
from ..oslayer.signals import signals_held
from ..records import RunRecord, fit_text, params_text  # noqa: F401  (fit_text: store's name for it)
from .legacy import FROM_NOTES

FORMAT = "hybridsched"
FORMAT_VERSION = 4
# Versions this hybridsched reads (older ones through conform())
READABLE_VERSIONS = (1, 2, 3, 4)

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731  fixed-length UTF-8 fields

RUN_DTYPE = np.dtype([
    ("run_id", "i8"),
    ("scheduler", _S(64)), ("family", _S(8)), ("kernel", _S(120)),
    ("P", "i4"), ("k", "i4"), ("L", "i8"), ("H", "i4"), ("W", "i4"),
    ("chunk", "i8"), ("chunk_used", "i8"), ("affinity", "?"), ("rep", "i4"), ("seed", "i8"),
    ("time_s", "f8"), ("verified", "?"), ("bad_rows", "i8"),
    ("workers", "i4"), ("lost_workers", "i4"), ("started_at", "f8"),
    ("error", _S(240)), ("notes", _S(240)),
    ("pipe_batch", "i4"), ("inflight", "i4"), ("coop", "?"),
    # issue 12: what the tasks were ("" verify = the workload's own check; bad_rows -1 =
    # not checked, by --verify none); kernel widened from 16 bytes for module:function
    ("workload", _S(16)), ("workload_params", _S(240)), ("verify", _S(120)),
    ("input_hash", _S(80)),
    ("technique", _S(120)), ("params", _S(64)),
    # version 2
    ("technique_hash", _S(64)), ("simulated", "?"), ("portfolio", _S(240)),
    # version 4: the measured facts that code reads back (records.RunRecord)
    ("dispatch", _S(8)), ("producer_cpu_s", "f8"),
    ("failed_worker", "i4"), ("failed_pid", "i8"), ("failed_signal", _S(16)),
    ("failed_status", "i4"), ("failed_exception", _S(64)),
])

# Values of fields that older files of the same version lack: what those runs did (the
# pipe variants were added later; files written before them ran the defaults stated here).
RUN_DEFAULTS = {"pipe_batch": 1, "inflight": 1, "coop": False, "workload": b"uniform",
                "workload_params": b"", "verify": b"", "input_hash": b"", "technique": b"",
                "params": b"", "technique_hash": b"", "simulated": False,
                "portfolio": b"", "failed_worker": -1, "failed_pid": 0, "failed_signal": b"",
                "failed_status": -1, "failed_exception": b""}

# Largest value of an int32 field (H, W, P, k, rep, ...): inputs are bounded by this before
# any work starts, so that no run is done that could not be stored.
INT32_MAX = 2**31 - 1

# Rows per HDF5 chunk of /runs: small enough that a snapshot per run stays cheap, large
# enough that a 2000-run paper study does not fragment into thousands of chunks.
RUNS_CHUNK = 64


def conform(raw: np.ndarray) -> np.ndarray:
    """Rows of any stored /runs dtype in RUN_DTYPE, missing fields at RUN_DEFAULTS, or, for
    the facts a file before version 4 kept in its notes, from those notes (store.legacy)."""
    rows = np.zeros(len(raw), RUN_DTYPE)
    for name in RUN_DTYPE.names or ():
        if raw.dtype.names and name in raw.dtype.names:
            rows[name] = raw[name]
        elif name in RUN_DEFAULTS:
            rows[name] = RUN_DEFAULTS[name]
        elif name in FROM_NOTES and raw.dtype.names and "notes" in raw.dtype.names:
            rows[name] = FROM_NOTES[name](raw["notes"])
    return rows


def _clip(s: str, n: int) -> bytes:
    b = s.encode("utf-8")[:n]
    return b.decode("utf-8", "ignore").encode("utf-8")


# String fields that name what ran: never clipped (record_row refuses instead).
_IDENTITY = ("scheduler", "kernel", "workload", "workload_params", "verify", "input_hash",
             "params", "technique", "technique_hash", "portfolio")


def record_row(run_id: int, r: RunRecord) -> np.ndarray:
    """The /runs row of one run, built completely (and range-checked) before the table grows:
    a value that does not fit its field raises here, never after a resize."""
    c = r.config
    values: tuple[Any, ...] = (run_id, c.scheduler.encode(), r.family.encode(), c.kernel.encode(),
              c.P, c.k, c.frames, c.height, c.width, c.chunk, r.chunk_used, c.affinity, c.rep,
              c.seed, r.time_s, r.verified, r.bad_rows, r.workers_used, r.lost_workers,
              r.started_at, _clip(r.error, 240), _clip(r.notes, 240), c.pipe_batch, c.inflight,
              c.coop, c.workload.encode(), c.workload_params.encode(), c.verify.encode(),
              c.input_hash.encode(), r.technique.encode(), params_text(c.params).encode(),
              r.technique_hash.encode(), r.simulated, ",".join(c.portfolio).encode(),
              r.dispatch.encode(), r.producer_cpu_s, r.failure.worker, r.failure.pid,
              r.failure.signal.encode(), r.failure.status, r.failure.exception.encode())
    row = np.zeros(1, RUN_DTYPE)
    for name, v in zip(RUN_DTYPE.names or (), values):
        kind = RUN_DTYPE[name].kind
        if kind in "iu":
            info = np.iinfo(RUN_DTYPE[name])
            if not info.min <= int(v) <= info.max:
                raise HybridschedError(f"run {run_id}: {name} = {v} does not fit the study "
                                       f"file's {RUN_DTYPE[name]} field")
        elif kind == "S" and len(v) > RUN_DTYPE[name].itemsize:
            if name in _IDENTITY:  # clipped, the run could not be told from another
                raise HybridschedError(f"run {run_id}: {name} {v.decode()[:40]!r}... is longer "
                                       f"than the study file's {RUN_DTYPE[name].itemsize} bytes")
            v = _clip(v.decode(), RUN_DTYPE[name].itemsize)
        row[name] = v
    return row


def decode(raw: np.ndarray, errors: str = "strict") -> np.ndarray:
    """Turn the fixed-length byte-string fields into numpy unicode fields (UnicodeDecodeError
    on bytes that are not UTF-8 unless ``errors`` says otherwise).

    numpy's element-wise decode drops an exception raised inside it, so a Ctrl-C/SIGTERM
    handler that ran there was lost (a `report` of a 110,000-run study ran to its end in 6
    of 17 tries): each column is decoded with the signals held, and the first one that
    came meanwhile is delivered when the column is done."""
    descr = []
    for name in raw.dtype.names or ():
        dt = raw.dtype[name]
        descr.append((name, f"U{dt.itemsize}" if dt.kind == "S" else dt))
    out = np.zeros(raw.shape, descr)
    for name in raw.dtype.names or ():
        col = raw[name]
        if col.dtype.kind != "S":
            out[name] = col
            continue
        with signals_held():
            out[name] = np.char.decode(col, "utf-8", errors)
    return out
