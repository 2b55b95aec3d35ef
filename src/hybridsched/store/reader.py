"""Reading a study: the one API that report, fit, merge and resume go through.

Every field is checked on the way in, so a malformed or crafted file gives one line
(BadStudy, a UsageError: exit 2) instead of a traceback somewhere in a reader. Per-run
detail is lenient where a reader can do without it (a version-1 file that filled its disk
may hold a row whose detail is missing): ``iter_details`` then yields None for that run.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Iterable, Iterator, NamedTuple

import h5py
import numpy as np

from ..errors import BadStudy, NotOurFile
from ..oslayer.signals import honour_pending
from ..records import (API_WORKLOAD, DISPATCH_RAN, TRACE_DTYPE, WORKER_DTYPE, WORKLOAD_NAMES,
                       NOT_MEASURED, Failure, RunConfig, parse_params)
from .format import FORMAT, FORMAT_VERSION, READABLE_VERSIONS, RUN_DEFAULTS, RUN_DTYPE, conform, decode
from .legacy import FROM_NOTES


# What h5py raises for a damaged file: OSError for most, RuntimeError where HDF5 finds a
# heap or B-tree it cannot follow ("addr overflow", "bad heap free list"), KeyError,
# ValueError and TypeError for objects of the wrong kind or shape
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


@contextlib.contextmanager
def reading(path: str, what: str) -> Iterator[None]:
    """h5py's errors of a damaged file, raised in the block, as one BadStudy saying that
    ``what`` of ``path`` cannot be read."""
    try:
        yield
    except H5_ERRORS as exc:
        raise BadStudy(f"{path}: {what} cannot be read: the file is damaged "
                       f"({exc.__class__.__name__}: {exc})") from None


def open_study(path: str) -> h5py.File:
    """Open a study file read-only without taking HDF5's file lock. The writer never changes
    a published file (it renames a new one over it), so an open file stays valid however
    long the reader takes, while ``hybridsched run`` goes on."""
    return h5py.File(path, "r", locking=False)


def check_ours(path: str) -> None:
    """Raise NotOurFile unless ``path`` is a readable hybridsched study of a known version."""
    open_ours(path).close()


def open_ours(path: str) -> h5py.File:
    """``path`` opened read-only (:func:`open_study`) once it is checked to be a readable
    hybridsched study of a known version (NotOurFile or BadStudy otherwise, and closed)."""
    if not os.path.exists(path):
        raise NotOurFile(f"{path}: no such file")
    if not os.path.isfile(path):  # a FIFO would block the open forever
        raise NotOurFile(f"{path}: not a regular file (a directory, device or FIFO)")
    try:
        h5 = open_study(path)
    except H5_ERRORS as exc:
        raise NotOurFile(f"{path}: not a hybridsched study file ({exc.__class__.__name__})") from None
    try:
        _check_format(path, h5)
    except BaseException:
        h5.close()
        raise
    return h5


def _check_format(path: str, h5: h5py.File) -> None:
    try:
        if h5.attrs.get("format") != FORMAT or "runs" not in h5:
            raise NotOurFile(f"{path}: not a hybridsched study file")
        version = h5.attrs.get("format_version", -1)
    except NotOurFile:
        raise
    except H5_ERRORS as exc:
        raise NotOurFile(f"{path}: not a hybridsched study file ({exc.__class__.__name__})") from None
    _check_version(path, version)


def _check_version(path: str, version) -> None:
    try:
        version = int(version)
    except (TypeError, ValueError):
        raise BadStudy(f"{path}: format_version {version!r} is not a number") from None
    if version not in READABLE_VERSIONS:
        raise NotOurFile(f"{path}: format_version {version} is not supported "
                         f"(this hybridsched reads {', '.join(map(str, READABLE_VERSIONS))}; "
                         f"it writes {FORMAT_VERSION})")


# the stored kinds that may fill a field of each kind (an int read as a float or a bool),
# for /runs and the side tables
FIELD_KINDS = {"S": "S", "i": "iub", "f": "fiu", "b": "biu"}
# fields that must be at least 1 in every row: a study of zero nodes, workers or frames
# is not a study (and would divide by zero in the metrics)
_POSITIVE = ("P", "k", "L", "H", "W")


def _rows(path: str, h5: h5py.File) -> np.ndarray:
    ds = h5.get("runs")
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.dtype.names is None:
        raise BadStudy(f"{path}: /runs is not a one-dimensional table of runs")
    missing = [n for n in RUN_DTYPE.names or ()
               if n not in ds.dtype.names and n not in RUN_DEFAULTS and n not in FROM_NOTES]
    if missing:
        raise BadStudy(f"{path}: /runs lacks the field(s) {', '.join(missing)}")
    for name in RUN_DTYPE.names or ():
        if name in ds.dtype.names:
            want, got = RUN_DTYPE[name].kind, ds.dtype[name]
            if got.kind not in FIELD_KINDS[want] or got.shape:
                raise BadStudy(f"{path}: /runs field {name} is stored as {got}, not as "
                               f"{RUN_DTYPE[name]}")
    try:
        raw = ds[()]
        rows = conform(raw)
    except (*H5_ERRORS, OverflowError) as exc:
        raise BadStudy(f"{path}: /runs cannot be read ({exc.__class__.__name__}: {exc})") from None
    for name in RUN_DTYPE.names or ():
        if RUN_DTYPE[name].kind != "S":
            continue
        for i, text in enumerate(rows[name].tolist()):
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                raise BadStudy(f"{path}: run {int(rows['run_id'][i])}: field {name} is not "
                               "UTF-8 text") from None
    out = decode(rows)
    _check_values(path, out)
    return out


# The longest time a verified run may hold: about 30,000 years, beyond any real or simulated
# run, and far below where a mean or a sum over a study's runs would overflow a float.
MAX_TIME_S = 1e12


# the text fields that name things (tables' rows, plots' labels, choices), as opposed to
# free text for people (notes, error), where a line break may be
_NAMES = ("scheduler", "family", "kernel", "workload", "technique", "dispatch")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_values(path: str, runs: np.ndarray) -> None:
    def bad(i: int, what: str):
        return BadStudy(f"{path}: run {int(runs['run_id'][i])}: {what}")

    for name in _POSITIVE:
        low = np.flatnonzero(runs[name] < 1)
        if len(low):
            raise bad(low[0], f"{name} = {runs[name][low[0]]} (must be at least 1)")
    ids = runs["run_id"]
    if (ids < 0).any():
        raise bad(int(np.flatnonzero(ids < 0)[0]), "negative run_id")
    if len(np.unique(ids)) != len(ids):
        _, first = np.unique(ids, return_index=True)
        dup = sorted(set(range(len(ids))) - set(first.tolist()))[0]
        raise bad(dup, "run_id appears twice")
    for name in _NAMES:  # they label tables and plots: a control character is damage
        hit = [i for i, text in enumerate(runs[name].tolist()) if _CONTROL.search(str(text))]
        if hit:
            raise bad(hit[0], f"field {name} holds a control character: "
                      f"{str(runs[name][hit[0]])[:40]!r}")
    known = (*WORKLOAD_NAMES, API_WORKLOAD)
    unknown = np.flatnonzero(~np.isin(runs["workload"], known))
    if len(unknown):  # a name no hybridsched wrote: its rows cannot be read as tasks
        raise bad(int(unknown[0]), f"workload {str(runs['workload'][unknown[0]])[:40]!r} is not "
                  f"one of {', '.join(known)}")
    spoilt = np.flatnonzero(runs["verified"] & (runs["bad_rows"] > 0))
    if len(spoilt):  # verified means checked and found right: no bad row
        raise bad(int(spoilt[0]), f"marked verified with bad_rows = {runs['bad_rows'][spoilt[0]]}")
    t = runs["time_s"][runs["verified"]]
    wrong = ~(np.isfinite(t) & (t > 0) & (t <= MAX_TIME_S))
    if wrong.any():
        i = int(np.flatnonzero(runs["verified"])[np.flatnonzero(wrong)[0]])
        raise bad(i, f"a verified run with time_s = {runs['time_s'][i]} (must be > 0 and at "
                  f"most {MAX_TIME_S:.0e} s)")
    ran = np.flatnonzero(~np.isin(runs["dispatch"], DISPATCH_RAN))
    if len(ran):
        raise bad(int(ran[0]), f"dispatch {str(runs['dispatch'][ran[0]])!r} is not one of "
                  f"{', '.join(repr(d) for d in DISPATCH_RAN)}")
    cpu = runs["producer_cpu_s"]
    odd = np.flatnonzero((cpu != NOT_MEASURED) & ~((cpu >= 0) & (cpu <= MAX_TIME_S)))
    if len(odd):
        raise bad(int(odd[0]), f"producer_cpu_s = {cpu[odd[0]]} (must be {NOT_MEASURED:g}, "
                  f"not measured, or 0 to {MAX_TIME_S:.0e} s)")
    if "workload_params" in (runs.dtype.names or ()):
        for text in set(runs["workload_params"].tolist()) - {""}:
            if not numbers_object(text):
                i = int(np.flatnonzero(runs["workload_params"] == text)[0])
                raise bad(i, f"workload_params {text[:60]!r} is not a JSON object of numbers")


def numbers_object(text: str) -> bool:
    """Whether ``text`` is a JSON object of numbers, {"name": number, ...}: what a run stores
    as workload_params, a colocate row as its policy's counters."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())


def read_runs(path: str) -> np.ndarray:
    """The ``/runs`` table of a study as a numpy structured array (strings decoded to str),
    every field checked."""
    with open_ours(path) as h5, reading(path, "its runs"):  # a field name not UTF-8, say
        return _rows(path, h5)


def read_attrs(path: str) -> dict:
    """Root attributes, byte strings decoded (BadStudy if one is not UTF-8, or if the file's
    attribute storage is damaged: every reader of a side table's spec comes here)."""
    with open_ours(path) as h5, reading(path, "its attributes"):
        return _attrs(path, h5)


def _attrs(path: str, h5: h5py.File) -> dict:
    out = {}
    for k, v in h5.attrs.items():
        if not isinstance(k, str):  # h5py hands over a name that is not UTF-8 as bytes
            raise BadStudy(f"{path}: an attribute's name is not UTF-8 text: {k!r}")
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                raise BadStudy(f"{path}: attribute {k} is not UTF-8 text") from None
        elif isinstance(v, str):  # h5py hands bytes that are not UTF-8 over as escapes
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise BadStudy(f"{path}: attribute {k} is not UTF-8 text") from None
        out[k] = v
    return out


def study_spec(path: str, attrs: dict | None = None, key: str = "study") -> Any:
    """The JSON object in attribute ``key`` ({} where absent); BadStudy if not one. A key
    other than "study" and a side table's "_spec" holds a JSON list (Any: either)."""
    attrs = read_attrs(path) if attrs is None else attrs
    text = attrs.get(key)
    if text is None:
        return {}
    try:
        val = json.loads(text)
    except (TypeError, ValueError, RecursionError):  # nested past Python's stack: not ours
        raise BadStudy(f"{path}: attribute {key} is not JSON") from None
    obj = key == "study" or key.endswith("_spec")  # a side table's spec is an object too
    if not isinstance(val, dict if obj else list):
        raise BadStudy(f"{path}: attribute {key} is not a JSON {'object' if obj else 'list'}")
    return val


def study_settings(attrs: dict) -> dict:
    """The study's settings (attribute ``study``) for what only adds to a report: {} where
    they are absent or not a JSON object (nested past Python's stack too). Readers that
    need them whole take :func:`study_spec`, which refuses such a study."""
    try:
        val = json.loads(attrs.get("study", "{}") or "{}")
    except (TypeError, ValueError, RecursionError):
        return {}
    return val if isinstance(val, dict) else {}


def simulated_cores(attrs: dict) -> int:
    """The virtual cores per node a simulated study was simulated on; 0 for a measured one
    (or settings that do not say)."""
    try:
        sim = study_settings(attrs).get("simulate") or {}
        return max(0, int(sim.get("cores", 0) or 0))
    except (TypeError, ValueError, AttributeError):
        return 0


def machine_n(path: str, attrs: dict) -> int:
    """N (usable CPUs when the study ran) from the attributes, for a simulated study the
    virtual cores per node it was simulated on; 0 when not recorded."""
    if cores := simulated_cores(attrs):
        return cores
    val = attrs.get("machine.N", attrs.get("machine.cpus_usable", 0))
    try:
        n = int(val or 0)
    except (TypeError, ValueError):
        raise BadStudy(f"{path}: attribute machine.N {val!r} is not a number") from None
    if n < 0:
        raise BadStudy(f"{path}: attribute machine.N = {n} is negative")
    return n


class Detail(NamedTuple):
    """What a study holds about one run beside its row."""

    workers: np.ndarray          # WORKER_DTYPE
    trace: np.ndarray            # TRACE_DTYPE
    extra: dict                  # e.g. foreign_cpu, rank_times
    series: dict                 # name -> structured array, e.g. aimd_window


def _empty() -> Detail:
    return Detail(np.zeros(0, WORKER_DTYPE), np.zeros(0, TRACE_DTYPE), {}, {})


def _detail(h5: h5py.File, run_id: int) -> Detail:
    """One run's detail; KeyError, ValueError or OSError where it is malformed."""
    det = h5.get("detail")
    name = f"{int(run_id):06d}"
    if det is None or name not in det:
        return _empty()
    g = det[name]
    if not isinstance(g, h5py.Group):
        raise ValueError(f"/detail/{name} is not a group")
    workers = g["workers"][()] if "workers" in g else np.zeros(0, WORKER_DTYPE)
    trace = g["trace"][()] if "trace" in g else np.zeros(0, TRACE_DTYPE)
    for arr, dt in ((workers, WORKER_DTYPE), (trace, TRACE_DTYPE)):
        if arr.dtype.names is None or not set(dt.names or ()) <= set(arr.dtype.names):
            raise ValueError(f"/detail/{name}: a table of another layout")
    if len(trace) and not (np.isfinite(trace["start"]).all() and np.isfinite(trace["end"]).all()
                           and (trace["count"] >= 1).all() and (trace["first"] >= 0).all()):
        raise ValueError(f"/detail/{name}: a chunk of the trace with a time that is not finite, "
                         "a first task below 0 or a count below 1")
    text = g.attrs.get("extra")
    try:
        extra = json.loads(text.decode() if isinstance(text, bytes) else text) if text is not None else {}
    except RecursionError:
        raise ValueError(f"/detail/{name}: extra is nested too deep") from None
    if not isinstance(extra, dict):
        raise ValueError(f"/detail/{name}: extra is not a JSON object")
    series = {k: g[k][()] for k in g if k not in ("workers", "trace") and isinstance(g[k], h5py.Dataset)}
    return Detail(workers, trace, extra, series)


def read_detail(path: str, run_id: int) -> Detail:
    """(workers, trace, extra, series) of one run; empty where the file holds none."""
    with open_ours(path) as h5:
        return _checked_detail(path, h5, run_id)


def _checked_detail(path: str, h5: h5py.File, run_id: int) -> Detail:
    try:
        return _detail(h5, run_id)
    except (*H5_ERRORS, UnicodeDecodeError) as exc:
        raise BadStudy(f"{path}: the detail of run {run_id} cannot be read ({exc})") from None


def iter_details(path: str, run_ids: Iterable[int]) -> Iterator[tuple[int, Detail | None]]:
    """(run_id, Detail) for each run, the file opened once; None for a run whose detail is
    missing or malformed (its row still counts; only the figures from detail are left out)."""
    with open_study(path) as h5:
        yield from _details(h5, run_ids)


def _details(h5: h5py.File, run_ids: Iterable[int]) -> Iterator[tuple[int, Detail | None]]:
    for rid in run_ids:
        honour_pending()  # h5py's finalizers may have swallowed a signal's exception
        try:
            d = _detail(h5, int(rid))
        except (*H5_ERRORS, UnicodeDecodeError):
            d = None
        yield int(rid), (None if d is None or (len(d.workers) == 0 and not d.extra) else d)


def row_config(r) -> RunConfig:
    """The run configuration a stored ``/runs`` row was made from (a decoded row)."""
    return RunConfig(str(r["scheduler"]), int(r["k"]), int(r["L"]), int(r["H"]), int(r["W"]),
                     int(r["chunk"]), bool(r["affinity"]), int(r["rep"]), str(r["kernel"]),
                     int(r["seed"]), int(r["P"]), int(r["pipe_batch"]), int(r["inflight"]),
                     bool(r["coop"]), workload=str(r["workload"]),
                     workload_params=str(r["workload_params"]), verify=str(r["verify"]),
                     input_hash=str(r["input_hash"]), params=parse_params(str(r["params"])),
                     portfolio=tuple(filter(None, str(r["portfolio"]).split(","))))


def row_failure(r) -> Failure:
    """How the worker that broke the run of a stored ``/runs`` row ended (a decoded row)."""
    return Failure(int(r["failed_worker"]), int(r["failed_pid"]), str(r["failed_signal"]),
                   int(r["failed_status"]), str(r["failed_exception"]))


def stored_keys(path: str) -> set[tuple]:
    """``RunConfig.key()`` of every run stored in a study (verified or not): what a
    resumed study must not repeat."""
    return keys_of(read_runs(path))


def keys_of(runs: np.ndarray) -> set[tuple]:
    """``RunConfig.key()`` of every row of ``runs``."""
    return {row_config(r).key() for r in runs}

