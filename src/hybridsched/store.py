"""The HDF5 study file (a versioned format; DESIGN.md §6).

Layout::

    /                 attrs: format="hybridsched", format_version, created, machine.*, study
    /runs             1-D compound dataset, one row per timed run (RUN_DTYPE), resizable
    /detail/<run_id>/workers   WORKER_DTYPE, times relative to the run start
    /detail/<run_id>/trace     TRACE_DTYPE, the chunk trace
    /detail/<run_id>/<series>  optional time series (e.g. aimd_window, WINDOW_DTYPE)

Each run is appended and the file flushed as soon as the run completes, so an interrupted
study keeps every completed run.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import h5py
import numpy as np

from .errors import NotOurFile, UsageError
from .records import RunRecord

FORMAT = "hybridsched"
FORMAT_VERSION = 1

_S = lambda n: h5py.string_dtype("utf-8", n)  # noqa: E731  fixed-length UTF-8 fields

RUN_DTYPE = np.dtype([
    ("run_id", "i8"),
    ("scheduler", _S(24)), ("family", _S(8)), ("kernel", _S(16)),
    ("P", "i4"), ("k", "i4"), ("L", "i8"), ("H", "i4"), ("W", "i4"),
    ("chunk", "i8"), ("chunk_used", "i8"), ("affinity", "?"), ("rep", "i4"), ("seed", "i8"),
    ("time_s", "f8"), ("verified", "?"), ("bad_rows", "i8"),
    ("workers", "i4"), ("lost_workers", "i4"), ("started_at", "f8"),
    ("error", _S(240)), ("notes", _S(240)),
    ("pipe_batch", "i4"), ("inflight", "i4"),
])

# Values of fields that older files of the same version lack: what those runs did (the
# pipe variants were added later; files written before them ran the defaults stated here).
RUN_DEFAULTS = {"pipe_batch": 1, "inflight": 1}


def conform(raw: np.ndarray) -> np.ndarray:
    """Rows of any stored /runs dtype in RUN_DTYPE, missing fields at RUN_DEFAULTS."""
    rows = np.zeros(len(raw), RUN_DTYPE)
    for name in RUN_DTYPE.names:
        if raw.dtype.names and name in raw.dtype.names:
            rows[name] = raw[name]
        elif name in RUN_DEFAULTS:
            rows[name] = RUN_DEFAULTS[name]
    return rows

# Rows per HDF5 chunk of /runs: small enough that a flush per run stays cheap, large enough
# that a 2000-run paper study does not fragment into thousands of chunks.
_RUNS_CHUNK = 64


def _clip(s: str, n: int) -> bytes:
    b = s.encode("utf-8")[:n]
    return b.decode("utf-8", "ignore").encode("utf-8")


def record_row(run_id: int, r: RunRecord) -> np.ndarray:
    c = r.config
    row = np.zeros(1, RUN_DTYPE)
    row[0] = (run_id, c.scheduler.encode(), r.family.encode(), c.kernel.encode(),
              c.P, c.k, c.frames, c.height, c.width, c.chunk, r.chunk_used, c.affinity, c.rep,
              c.seed, r.time_s, r.verified, r.bad_rows, r.workers_used, r.lost_workers,
              r.started_at, _clip(r.error, 240), _clip(r.notes, 240), c.pipe_batch, c.inflight)
    return row


class StudyWriter:
    """Appends runs to a study file; a context manager that closes the file on every path."""

    def __init__(self, path: str, metadata: dict | None = None, study: dict | None = None,
                 append: bool = False):
        self.path = path
        if append:
            check_ours(path)
            self.h5 = h5py.File(path, "a")
        else:
            self.h5 = h5py.File(path, "w")
            a = self.h5.attrs
            a["format"] = FORMAT
            a["format_version"] = FORMAT_VERSION
            a["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            for key, val in (metadata or {}).items():
                a[f"machine.{key}"] = val
            a["study"] = json.dumps(study or {}, sort_keys=True)
            self.h5.create_dataset("runs", shape=(0,), maxshape=(None,), dtype=RUN_DTYPE,
                                   chunks=(_RUNS_CHUNK,))
            self.h5.create_group("detail")
            self.h5.flush()
        self.runs = self.h5["runs"]

    def append(self, record: RunRecord) -> int:
        """Store one run (detail, then its /runs row) and flush. Ctrl-C or SIGTERM arriving
        meanwhile is held until the run is complete on disk, then acted upon."""
        with _signals_held():
            return self._append(record)

    def _append(self, record: RunRecord) -> int:
        run_id = int(self.runs.shape[0])
        name = f"{run_id:06d}"
        if name in self.h5["detail"]:
            del self.h5["detail"][name]  # a crash between detail and row left a half run
        g = self.h5["detail"].create_group(name)
        g.create_dataset("workers", data=record.workers)
        if len(record.trace):
            g.create_dataset("trace", data=record.trace, compression="gzip", compression_opts=1,
                             shuffle=True)
        else:
            g.create_dataset("trace", data=record.trace)
        if record.extra:
            g.attrs["extra"] = json.dumps(record.extra, sort_keys=True)
        for key, series in record.series.items():
            g.create_dataset(key, data=series)
        self.runs.resize((run_id + 1,))
        self.runs[run_id] = record_row(run_id, record)[0]
        self.h5.flush()
        return run_id

    def close(self) -> None:
        if self.h5 is not None:
            self.h5.close()
            self.h5 = None

    def __enter__(self) -> "StudyWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the duration of the block, then replay the first one to the
    handler that was installed. Python handlers always run in the main thread, so swapping
    them (unlike masking, which other threads would bypass) holds the signal everywhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            handler = old.get(got[0])
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), got[0])


def open_study(path: str) -> h5py.File:
    """Open a study file read-only without taking HDF5's file lock, so that its runs can be
    read (``report``, a second script) while ``hybridsched run`` is still appending to it:
    the writer flushes after every run, and with the lock the reader would be refused."""
    return h5py.File(path, "r", locking=False)


def check_ours(path: str) -> None:
    """Raise NotOurFile unless ``path`` is a readable hybridsched study of a known version."""
    if not os.path.exists(path):
        raise NotOurFile(f"{path}: no such file")
    try:
        with open_study(path) as h5:
            if h5.attrs.get("format") != FORMAT or "runs" not in h5:
                raise NotOurFile(f"{path}: not a hybridsched study file")
            version = int(h5.attrs.get("format_version", -1))
    except NotOurFile:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise NotOurFile(f"{path}: not a hybridsched study file ({exc.__class__.__name__})") from None
    if version != FORMAT_VERSION:
        raise NotOurFile(f"{path}: format_version {version} is not supported "
                         f"(this hybridsched reads {FORMAT_VERSION})")


def read_runs(path: str) -> np.ndarray:
    """The ``/runs`` table of a study as a numpy structured array (strings decoded to str)."""
    check_ours(path)
    with open_study(path) as h5:
        raw = h5["runs"][()]
    return decode(conform(raw))


def decode(raw: np.ndarray) -> np.ndarray:
    """Turn the fixed-length byte-string fields into numpy unicode fields."""
    descr = []
    for name in raw.dtype.names:
        dt = raw.dtype[name]
        descr.append((name, f"U{dt.itemsize}" if dt.kind == "S" else dt))
    out = np.zeros(raw.shape, descr)
    for name in raw.dtype.names:
        col = raw[name]
        out[name] = np.char.decode(col, "utf-8") if col.dtype.kind == "S" else col
    return out


def read_attrs(path: str) -> dict:
    check_ours(path)
    with open_study(path) as h5:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in h5.attrs.items()}


def read_detail(path: str, run_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(workers, trace) of one run."""
    check_ours(path)
    with open_study(path) as h5:
        g = h5["detail"][f"{run_id:06d}"]
        return g["workers"][()], g["trace"][()]


def check_writable(path: str) -> None:
    """Raise UsageError if ``path`` cannot be created or written (without creating it)."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError(f"--out {path}: is a directory")
    if not os.path.isdir(d):
        raise UsageError(f"--out {path}: directory {d} does not exist")
    if not os.access(d, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"--out {path}: not writable")
    # access() says yes to root everywhere, and to /proc or /sys; only a real file tells
    probe = os.path.join(d, f".hybridsched-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create a file in {d} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def stored_keys(path: str) -> set[tuple]:
    """``RunConfig.key()`` of every run stored in a study (verified or not): what a
    resumed study must not repeat."""
    from .records import RunConfig

    runs = read_runs(path)
    return {RunConfig(str(r["scheduler"]), int(r["k"]), int(r["L"]), int(r["H"]), int(r["W"]),
                      int(r["chunk"]), bool(r["affinity"]), int(r["rep"]), str(r["kernel"]),
                      int(r["seed"]), int(r["P"]), int(r["pipe_batch"]),
                      int(r["inflight"])).key() for r in runs}

