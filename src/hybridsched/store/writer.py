"""Writing a study: one writer per file, and a file on disk that is always a complete study.

The writer keeps the study in memory (an HDF5 file image) and *publishes* it after each run:
the whole image is written to a fresh private file beside the study and renamed over it.
A rename is atomic, so

- a reader (``report`` in a loop, a notebook) opens either the previous or the new
  snapshot, both complete and never changed again: live reading needs no HDF5 locking,
  SWMR or retries;
- a crash, a SIGKILL or a full disk at any moment leaves the last published snapshot, in
  which every run is whole; the run being written is absent, not half there;
- ``--overwrite`` replaces the old study only when the new one is published, and a start
  that fails before the first run leaves the old file (or no file) as it was.

Why not HDF5 SWMR: a SWMR writer that is SIGKILLed leaves the superblock marked "open for
write", and HDF5 then refuses to open the file for writing again until the ``h5clear``
tool is run (h5py has no call for it), so ``--resume`` could not continue it; an ENOSPC
in the middle of a metadata flush has no defined outcome; and SWMR forbids the attributes,
groups and variable-length data that the format and the per-invocation history use.

The price is a write of the whole file per run. A study file is small next to its tensor
(kilobytes per run), so this is a millisecond for ordinary studies; for a very large file
snapshots are spaced out (PUBLISH_SHARE) and every one is still complete.
"""
from __future__ import annotations

import io
import json
import os
import time
from typing import Any

import h5py

from ..errors import NotOurFile, UsageError
from ..oslayer.signals import signals_held
from ..records import RunRecord
from .files import StudyLock, check_output, publish
from .metadata import stored
from .format import FORMAT, FORMAT_VERSION, RUN_DTYPE, RUNS_CHUNK, conform, record_row
from .reader import check_ours, read_runs

# A snapshot that took less than this is written after every run: below it a study loses
# nothing to spacing. Above it (files of hundreds of MB), snapshots are spaced so that
# publishing takes at most PUBLISH_SHARE of the wall time; a crash then loses the runs of
# the last interval only, a price paid only by studies whose publish costs > 50 ms.
PUBLISH_ALWAYS_S = 0.05
PUBLISH_SHARE = 0.1


class StudyWriter:
    """Appends runs to a study file; a context manager that publishes and releases the lock
    on every exit path. ``lock``: a StudyLock the caller already holds on ``path`` (taken
    before it looked at the file); without one the writer takes its own."""

    def __init__(self, path: str, metadata: dict | None = None, study: dict | None = None,
                 append: bool = False, lock: StudyLock | None = None,
                 release_lock: bool | None = None, resumable: bool = False):
        self.path = path
        self.h5: Any = None  # the h5py.File while open (Any: h5py ships no types)
        # release the lock on close: the writer's own, or one handed over (open_new)
        self._own_lock = lock is None if release_lock is None else release_lock
        self._lock = StudyLock(path).acquire() if lock is None else lock
        try:
            if append:
                check_ours(path)
                with open(path, "rb") as fh:
                    self._image = io.BytesIO(fh.read())
                try:
                    self.h5 = h5py.File(self._image, "r+")
                except OSError as exc:
                    raise NotOurFile(f"{path}: not a hybridsched study file ({exc})") from None
                read_runs(path)  # every field checked before a run is added to them
                if self.h5["runs"].dtype != RUN_DTYPE:
                    # an older version-1 file (without pipe_batch, inflight, coop): its rows in
                    # today's layout, with those fields at RUN_DEFAULTS, so new rows fit
                    rows = conform(self.h5["runs"][()])
                    del self.h5["runs"]
                    self.h5.create_dataset("runs", data=rows, maxshape=(None,),
                                           chunks=(RUNS_CHUNK,))
                    self.h5.attrs["format_version"] = FORMAT_VERSION
                if not isinstance(self.h5.get("detail"), h5py.Group):
                    if "detail" in self.h5:
                        raise NotOurFile(f"{path}: /detail is not a group")
                    self.h5.create_group("detail")
            else:
                self._image = io.BytesIO()
                self.h5 = h5py.File(self._image, "w")
                a = self.h5.attrs
                a["format"] = FORMAT
                a["format_version"] = FORMAT_VERSION
                a["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
                for name, val in stored(metadata or {}).items():
                    a[name] = val
                a["study"] = json.dumps(study or {}, sort_keys=True)
                self.h5.create_dataset("runs", shape=(0,), maxshape=(None,), dtype=RUN_DTYPE,
                                       chunks=(RUNS_CHUNK,))
                self.h5.create_group("detail")
        except BaseException:
            self._abandon()
            raise
        self.runs = self.h5["runs"]
        self._existed = append
        self._pending = 0            # runs appended since the last snapshot
        self._published_runs = int(self.runs.shape[0]) if append else 0
        self._safe = self._stored() if append else ""  # what the file on disk holds
        # what a full disk leaves the user to do: only `run` continues a study (--resume)
        self._then = ("free space, then continue with --resume" if resumable else
                      "free space and run it again to a new --out")
        self._publish_cost = 0.0
        self._published_at = 0.0

    # --- appending ------------------------------------------------------------------

    def append(self, record: RunRecord) -> int:
        """Store one run and publish the study. Ctrl-C or SIGTERM arriving meanwhile is held
        until the snapshot is on disk, then acted upon."""
        with signals_held():
            run_id = self._append(record)
            self._pending += 1
            if self._due():
                self.publish()
            return run_id

    def _append(self, record: RunRecord) -> int:
        run_id = int(self.runs.shape[0])
        row = record_row(run_id, record)  # complete (and range-checked) before anything grows
        name = f"{run_id:06d}"
        if name in self.h5["detail"]:
            del self.h5["detail"][name]  # a version-1 crash left a half run here
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
        self.runs[run_id] = row[0]
        return run_id

    def append_row(self, table: str, row) -> int:
        """Add one row to side table ``/<table>`` (created with the row's dtype on first
        use) and publish; returns its index. Signals are held as in :meth:`append`."""
        return self.append_rows(table, row[:1])

    def append_rows(self, table: str, rows) -> int:
        """Add ``rows`` to side table ``/<table>`` together: no snapshot holds some of them
        without the others (a colocate repetition's J rows). Returns the first's index."""
        with signals_held():
            ds = self.h5.get(table)
            if ds is None:
                ds = self.h5.create_dataset(table, shape=(0,), maxshape=(None,), dtype=rows.dtype,
                                            chunks=(RUNS_CHUNK,))
            elif ds.dtype != rows.dtype:
                raise NotOurFile(f"{self.path}: /{table} holds rows of another layout")
            i = int(ds.shape[0])
            ds.resize((i + len(rows),))
            ds[i:] = rows
            self._pending += len(rows)
            if self._due():
                self.publish()
            return i

    def _due(self) -> bool:
        if self._publish_cost < PUBLISH_ALWAYS_S:
            return True
        return time.monotonic() - self._published_at >= self._publish_cost / PUBLISH_SHARE

    def publish(self) -> None:
        """Write the study as it is now to ``path`` (atomically); DiskFull if out of space."""
        t0 = time.monotonic()
        self.h5.flush()
        n = int(self.runs.shape[0])
        with self._image.getbuffer() as image:
            publish(self.path, image, self._safe,
                    replacing_old=not self._existed and os.path.lexists(self.path),
                    then=self._then)
        self._published_runs, self._pending = n, 0
        self._safe = self._stored()
        self._existed = True
        self._published_at = time.monotonic()
        self._publish_cost = self._published_at - t0

    def _stored(self) -> str:
        """The rows of the study as it is now: "3 runs", "3 runs and 4 ge rows"."""
        parts = [f"{int(self.runs.shape[0])} runs"] if self.runs.shape[0] else []
        parts += [f"{int(ds.shape[0])} {name} rows" for name, ds in self.h5.items()
                  if name not in ("runs", "detail") and isinstance(ds, h5py.Dataset)
                  and ds.ndim == 1 and ds.shape[0]]
        return " and ".join(parts)

    @property
    def published_runs(self) -> int:
        """Runs that are safe on disk."""
        return self._published_runs

    # --- closing --------------------------------------------------------------------

    def close(self, failed: bool = False) -> None:
        """Publish what is not on disk yet, then release. After a failure (``failed``) an
        empty new study is not published (a failed start leaves nothing behind) and an
        error while publishing is not raised over the original one."""
        if self.h5 is None:
            return
        try:
            if not failed or self._pending:
                with signals_held():
                    self.publish()
        except Exception:
            if not failed:
                raise
        finally:
            self._abandon()

    def _abandon(self) -> None:
        if self.h5 is not None:
            try:
                self.h5.close()
            except Exception:  # noqa: BLE001 - an in-memory image; nothing on disk to save
                pass
            self.h5 = None
        if self._own_lock:
            self._lock.release()

    def __enter__(self) -> "StudyWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)


def open_new(path: str, metadata: dict, study: dict, *, overwrite: bool = False,
             lock: StudyLock | None = None, what: str = "--out",
             hint: str = "use --overwrite to replace it", resumable: bool = False) -> StudyWriter:
    """The writer of a new study at ``path``: refused (one UsageError line) when something
    is there already unless ``overwrite``, and then replaced only once the new study is
    published. Checked under the study's lock: ``lock`` when the caller holds it (taken
    before it looked at the file), else taken here and released with the writer."""
    check_output(path, what)
    own = lock is None
    lock = StudyLock(path).acquire() if lock is None else lock
    try:
        if os.path.lexists(path) and not overwrite:
            raise UsageError(f"{what} {path}: file exists ({hint})")
        return StudyWriter(path, metadata, study, lock=lock, release_lock=own,
                           resumable=resumable)
    except BaseException:
        if own:
            lock.release()
        raise
