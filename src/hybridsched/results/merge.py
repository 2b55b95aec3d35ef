"""Combine study files (e.g. one per Slurm job at a different P) into one, for the P x k fits.

Runs are renumbered in input order; each run's detail group (workers, trace, extra) is
copied along and tagged with where it came from. The output is a StudyWriter like any
study: one writer per file (a merge into a study being written is refused), and it is
published by rename at the end, so a failure leaves nothing behind.
"""
from __future__ import annotations

import json
import os

import h5py
import numpy as np

from ..colocate.output import conform as conform_colocate
from ..colocate.output import read_colocate
from ..errors import BadStudy, UsageError
from ..oslayer.signals import honour_pending
from ..ge.output import read_ge
from ..store import (check_ours, check_output, conform, open_study, read_attrs, read_runs,
                     same_file, study_spec)
from ..study.output import new_study
from .data import mpi_text


# The side tables a merge carries over with /runs: `hybridsched ge` and `colocate` rows
# are results as much as runs are.
SIDE_TABLES = ("ge", "colocate")
# A side table whose layout grew with a format version: its rows of older files in today's
# layout first, so studies of both versions merge
_CONFORM = {"colocate": conform_colocate}
SIDE_READERS = (read_ge, read_colocate)  # their readers, which check every row
# Tables whose rows of one repetition ran together (a colocate repetition is its jobs, run
# at once, and its makespan is theirs): each input's repetitions are numbered on after the
# earlier inputs', or two studies' rep 0 would read as one repetition of twice the jobs
_REPS_TOGETHER = ("colocate",)


def _tensor(t: tuple) -> str:
    s, h, w, kern, wl, wp, ih = t
    return (f"seed {s}, {h}x{w}, {kern}" + (f", {wl} {wp}".rstrip() if wl != "uniform" else "")
            + (f", {ih[:15]}" if ih else ""))


# each side table's field that holds a measured time
_MEASURED = {"ge": "t_total_s", "colocate": "time_s"}


def _once(path: str, runs: np.ndarray, seen: dict[bytes, str]) -> None:
    """Refuse a row of ``path`` that an earlier input holds too, every measured field alike
    to the bit (its times, its start): a copy of a study, or a study and a copy of it made
    while it ran, would count their runs twice (the hostile review). So for the side tables'
    rows (`ge`, `colocate`: measured times to the nanosecond). Runs without a start are
    not compared: records made by hand (as tests make them), and `simulate`'s, which a
    model computes alike each time."""
    tables = [("runs", runs[runs["started_at"] > 0])]
    for name, read in zip(SIDE_TABLES, SIDE_READERS):
        rows = read(path)
        # measured: a time taken (a turn that could not start stores NaN, alike in every
        # study that met the same refusal)
        timed = _MEASURED[name]
        tables.append((name, rows[np.isfinite(rows[timed]) & (rows[timed] > 0)] if len(rows)
                       else rows))
    mine = set()
    for name, rows in tables:
        rows = rows.copy()
        for renumbered in ("run_id", "rep"):  # per file; the rest is the measurement
            if renumbered in (rows.dtype.names or ()):
                rows[renumbered] = 0
        mine |= {name.encode() + bytes(r.tobytes()) for r in rows}
    for key in mine:
        if key in seen:
            raise UsageError(f"merge: {path} and {seen[key]} hold the same runs (a copy of one "
                             "study, or of it while it was written): give each run once")
    seen.update(dict.fromkeys(mine, path))


def merge(inputs: list[str], out: str, overwrite: bool = False) -> dict[str, int]:
    """Write the union of the studies ``inputs`` to ``out`` (runs and side tables); returns
    the rows written per table ({"runs": 12, "ge": 4}).

    Raises NotOurFile (a UsageError) for an input that is not a hybridsched study, and
    UsageError where two inputs hold the same side table in different layouts.
    """
    if not inputs:
        raise UsageError("merge: no input files")
    for i, p in enumerate(inputs):  # by inode: a hard link or another spelling is the same
        if any(same_file(p, q) for q in inputs[:i]):
            raise UsageError(f"merge: {p} is given twice (its runs would count twice)")
    tensors: dict[tuple, str] = {}
    seen: dict[bytes, str] = {}
    for p in inputs:
        check_ours(p)
        runs = read_runs(p)  # what is copied is read as `report` reads it
        _once(p, runs, seen)  # the side tables read (and checked) there too
        for name in SIDE_TABLES:  # their specs are copied too: JSON objects, or one line
            study_spec(p, key=f"{name}_spec")
        # the workload, its parameters and an --input file's hash name the tasks too
        mine = set(zip(runs["seed"].tolist(), runs["H"].tolist(), runs["W"].tolist(),
                       runs["kernel"].tolist(), runs["workload"].tolist(),
                       runs["workload_params"].tolist(), runs["input_hash"].tolist()))
        if len(mine) > 1:  # one study, one tensor: this one was made otherwise
            raise UsageError(f"merge: {p} itself holds runs of {len(mine)} tensors or kernels "
                             f"({'; '.join(map(_tensor, sorted(mine)))})")
        for t in mine:
            tensors.setdefault(t, p)
    if len(tensors) > 1:
        # one T_serial per L: runs on other frames, seeds or kernels are not comparable
        shown = "; ".join(f"{p}: {_tensor(t)}" for t, p in tensors.items())
        raise UsageError(f"merge: the studies sort different tensors or kernels ({shown})")
    check_output(out, "-o")
    if any(same_file(p, out) for p in inputs if os.path.exists(out)):
        raise UsageError(f"-o {out}: is also an input")
    sources, machine = [], {}
    for i, p in enumerate(inputs):
        a = read_attrs(p)
        if i == 0:
            machine = {k[len("machine."):]: v for k, v in a.items() if k.startswith("machine.")}
        sources.append({"path": os.path.abspath(p), "created": str(a.get("created", "")),
                        "hostname": str(a.get("machine.hostname", "")),
                        "study": study_spec(p, a)})
        if mpi_text(a):  # the root keeps the first input's machine: each input's MPI here
            sources[-1]["mpi"] = mpi_text(a)
    # the lock before looking at -o (its writer may be creating it now), the machine the
    # studies ran on (the first input's) rather than this one
    counts = {"runs": 0}
    with new_study(out, {"merged_from": sources}, overwrite=overwrite, metadata=machine,
                   what="-o") as w:
        for i, p in enumerate(inputs):
            try:
                counts["runs"] = _copy_runs(p, i, w.h5, counts["runs"])
                _copy_tables(p, w.h5, counts)
            except RuntimeError as exc:  # HDF5 on a damaged input's heap or B-tree (a full
                # disk under -o is an OSError, which the writer reports as such)
                raise BadStudy(f"merge: {p}: the file is damaged ({exc})") from None
    return counts


def _copy_tables(path: str, dst: h5py.File, counts: dict[str, int]) -> None:
    """Append the side tables of ``path`` to ``dst``'s; a table's ``run_id`` (`ge`) is
    renumbered on, as the runs' are, and its spec kept per source (``<table>_specs``)."""
    with open_study(path) as src:
        for name in SIDE_TABLES:
            ds = src.get(name)
            if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None or ds.ndim != 1:
                continue
            rows = ds[()]
            if name in _CONFORM:
                try:
                    rows = _CONFORM[name](rows)
                except UsageError as exc:
                    raise UsageError(f"merge: {path}: {exc}") from None
            have = dst.get(name)
            if have is None:
                have = dst.create_dataset(name, shape=(0,), maxshape=(None,), dtype=rows.dtype,
                                          chunks=True)
                for key, value in src.attrs.items():  # its layout version, say
                    if key.startswith(f"{name}_") and key != f"{name}_spec":
                        dst.attrs[key] = value
            elif have.dtype != rows.dtype:
                raise UsageError(f"merge: {path}: /{name} rows have another layout than the "
                                 "earlier inputs' (a study of another hybridsched version)")
            first = int(have.shape[0])
            if "run_id" in (rows.dtype.names or ()):
                rows["run_id"] = np.arange(first, first + len(rows))
            if name in _REPS_TOGETHER and first and len(rows):
                rows["rep"] += int(have["rep"].max()) + 1 - int(rows["rep"].min())
            have.resize((first + len(rows),))
            have[first:] = rows
            specs = json.loads(dst.attrs.get(f"{name}_specs", "[]"))  # ours: written below
            specs.append(study_spec(path, key=f"{name}_spec"))  # checked: crafted, it is one line
            dst.attrs[f"{name}_specs"] = json.dumps(specs, sort_keys=True)
            dst.attrs[f"{name}_spec"] = json.dumps(specs[0], sort_keys=True)
            counts[name] = counts.get(name, 0) + len(rows)


def _copy_runs(path: str, source: int, dst: h5py.File, first_id: int) -> int:
    with open_study(path) as src:
        rows = conform(src["runs"][()])  # checked by read_runs above
        old_ids = rows["run_id"].copy()
        rows["run_id"] = np.arange(first_id, first_id + len(rows))
        runs = dst["runs"]
        runs.resize((first_id + len(rows),))
        if len(rows):
            runs[first_id:] = rows
        detail = src.get("detail")
        for old, new in zip(old_ids, rows["run_id"]):
            honour_pending()  # h5py's finalizers may have swallowed a signal's exception
            name = f"{int(old):06d}"
            if detail is not None and name in detail:
                src.copy(detail[name], dst["detail"], name=f"{int(new):06d}")
            else:
                dst["detail"].create_group(f"{int(new):06d}")
            g = dst["detail"][f"{int(new):06d}"]
            g.attrs["merged_from"] = json.dumps({"source": source, "run_id": int(old)})
    return first_id + len(rows)
