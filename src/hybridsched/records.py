"""Typed records: what one timed run is asked to do, and what it measured."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from .errors import BrokenRun

# Per-worker detail of one run. Times are seconds relative to the run's start (t_begin).
WORKER_DTYPE = np.dtype([
    ("worker", "i4"), ("pid", "i8"), ("cpu", "i4"),
    ("start", "f8"), ("end", "f8"), ("busy", "f8"),
    ("frames", "i8"), ("chunks", "i8"),
    ("user", "f8"), ("system", "f8"), ("iowait", "f8"),
])

# The chunk trace: one row per chunk a worker ran.
TRACE_DTYPE = np.dtype([
    ("worker", "i4"), ("first", "i8"), ("count", "i8"), ("start", "f8"), ("end", "f8"),
])


# AIMD's contention window after each chunk completion, with the utilisation U it used.
WINDOW_DTYPE = np.dtype([("t", "f8"), ("window", "i4"), ("u", "f8")])


def fit_text(s: str, n: int) -> str:
    """``s`` cut to at most ``n`` bytes of UTF-8 (a stored field's size), never inside a
    character."""
    return s.encode("utf-8")[:n].decode("utf-8", "ignore")


ParamValue = int | float | str
# A run's technique parameters: (name, value) pairs in name order (hashable, so they are
# part of RunConfig.key()).
Params = tuple[tuple[str, ParamValue], ...]


def param_value(text: str) -> ParamValue:
    """A technique parameter's value as given (``--param KEY=VALUE``): an int, else a
    float, else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def as_params(params: dict | Params | None) -> Params:
    """Technique parameters as a run holds them: (name, value) pairs sorted by name."""
    items = params.items() if isinstance(params, dict) else (params or ())
    return tuple(sorted((str(k), v) for k, v in items))


def params_text(params: Params) -> str:
    """The stored form of ``params`` (``/runs`` field ``params``, a report's label):
    ``name=value`` joined by ','."""
    return ",".join(f"{k}={v}" for k, v in params)


def parse_params(text: str) -> Params:
    """:func:`params_text`'s inverse: the codec of the study file, and of nothing else."""
    out = []
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        out.append((name, param_value(value)))
    return as_params(tuple(out))


# The workloads a run may name: workloads.catalogue defines each (tests/workloads/test_irregular_workloads.py
# keeps the two lists equal), and parallel_for's runs over the caller's own data name
# API_WORKLOAD; the study reader refuses any other name, which no hybridsched wrote.
WORKLOAD_NAMES = ("uniform", "ramp", "skewed", "heavytail", "varying", "mandelbrot")
API_WORKLOAD = "user"


@dataclass(frozen=True)
class RunConfig:
    """One timed run of a study: a scheduler at k workers on an L x H x W tensor."""

    scheduler: str
    k: int
    frames: int
    height: int
    width: int
    chunk: int = 0          # requested chunk; 0 = the policy's default
    affinity: bool = True
    rep: int = 0
    kernel: str = "quicksort"
    seed: int = 0
    P: int = 1
    # Variants beyond the paper's protocol (registry entries say which scheduler reads
    # which; the paper's value is the default and every other scheduler keeps it):
    pipe_batch: int = 1     # pipe records per producer write (paper: one chunk per message)
    inflight: int = 1       # pipe-MtoM chunks in flight per worker (paper: one, next on done)
    coop: bool = False      # workers run on the node's cooperative arbiter's tokens (--coop)
    # How thread workers loop over their chunks (auto | python | compiled, --dispatch). Not
    # part of the run's identity: it never changes the hand-out, only what runs it; which
    # loop ran is the record's ``dispatch`` (backends/compiled.py).
    dispatch: str = field(default="auto", metadata={"key": False})
    # What the tasks are (issue 12; the defaults are the paper's tensor and its sort check):
    workload: str = "uniform"   # workloads.WORKLOADS name (one of WORKLOAD_NAMES)
    workload_params: str = ""   # its parameters as sorted JSON ("" = none)
    verify: str = ""            # "" = the workload's own check, "none", or package.module:function
    input_hash: str = ""        # --input: sha256 of the .npy file ("" = generated from seed)
    # LB4OMP technique parameters, (name, value) pairs in name order (() = its defaults);
    # only the techniques that read a parameter get it (registry options)
    params: Params = ()
    # auto's portfolio: the technique names it races, in its order (() = its default)
    portfolio: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.params, str) or isinstance(self.portfolio, str):
            raise TypeError("RunConfig: params and portfolio are tuples (records.as_params), "
                            "not text")

    def param_dict(self) -> dict:
        """``params`` as {name: value}."""
        return dict(self.params)

    def key(self) -> tuple:
        """Identity of the run inside a study (used to resume without repeating)."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.metadata.get("key", True))


@dataclass(frozen=True)
class Failure:
    """How the worker that broke a run ended (:class:`errors.BrokenRun`'s fields, stored
    with the run): which ``worker`` (-1: none broke it; an MPI rank's number), its ``pid``
    (0 for a thread or where not known), the ``signal`` that ended it, its exit ``status``
    (-1: none) and the ``exception`` type it raised ("" where it did not end that way)."""

    worker: int = -1
    pid: int = 0
    signal: str = ""
    status: int = -1
    exception: str = ""

    @classmethod
    def of(cls, exc: BrokenRun) -> "Failure":
        return cls(int(exc.worker), int(exc.pid or 0), exc.signal,
                   -1 if exc.status is None else int(exc.status), exc.exception)

    def __bool__(self) -> bool:
        return self.worker >= 0


NO_FAILURE = Failure()

# Which chunk loop ran a run (Execution.dispatch, the /runs field): the thread backend's
# (core.capabilities.Dispatch's PYTHON or COMPILED, by value); "" where the question does
# not arise (serial, forked and piped workers) or a file before format 4 did not say.
DISPATCH_RAN = ("", "python", "compiled")
# A measured CPU time that was not measured (a run without a pipe-MtoM producer, a file
# before format 4 that did not say): -1 as bad_rows' "not checked", so that stored rows
# still compare equal (NaN would not equal itself).
NOT_MEASURED = -1.0


@dataclass
class Execution:
    """What a backend measured. ``t_begin``/``t_end`` are time.perf_counter() values
    (CLOCK_MONOTONIC, comparable across forked processes); detail times are absolute."""

    t_begin: float
    t_end: float
    workers: np.ndarray                      # WORKER_DTYPE, absolute times
    trace: np.ndarray                        # TRACE_DTYPE, absolute times
    chunk_used: int = 0
    lost_workers: int = 0
    notes: str = ""
    series: dict = field(default_factory=dict)  # name -> structured array with a "t" column
    technique: str = ""                      # what `auto` chose for this execution
    dispatch: str = ""                       # which chunk loop ran (DISPATCH_RAN)
    producer_cpu_s: float = NOT_MEASURED     # pipe-MtoM: the producer's own CPU seconds

    @property
    def seconds(self) -> float:
        return self.t_end - self.t_begin


@dataclass
class RunRecord:
    """One row of ``/runs`` plus its per-run detail (times relative to the run start)."""

    config: RunConfig
    family: str
    time_s: float
    verified: bool
    bad_rows: int = 0
    chunk_used: int = 0
    workers_used: int = 0
    lost_workers: int = 0
    error: str = ""
    notes: str = ""
    started_at: float = 0.0                  # wall clock (time.time()) of the start
    workers: np.ndarray = field(default_factory=lambda: np.zeros(0, WORKER_DTYPE))
    trace: np.ndarray = field(default_factory=lambda: np.zeros(0, TRACE_DTYPE))
    extra: dict = field(default_factory=dict)  # backend-specific scalars (e.g. per-rank times)
    series: dict = field(default_factory=dict)  # name -> time series, "t" relative to the start
    technique: str = ""                      # the technique `auto` chose, a user's module:qualname
    technique_hash: str = ""                 # sha256 of a user technique's source ("" otherwise)
    simulated: bool = False                  # made by `hybridsched simulate`, not measured
    dispatch: str = ""                       # which chunk loop ran (DISPATCH_RAN)
    producer_cpu_s: float = NOT_MEASURED     # pipe-MtoM: the producer's own CPU seconds
    failure: Failure = NO_FAILURE            # the worker that broke the run, how it ended


def worker_table(n: int) -> np.ndarray:
    table = np.zeros(n, WORKER_DTYPE)
    table["worker"] = np.arange(n)
    table["cpu"] = -1
    return table


def trace_table(per_worker) -> np.ndarray:
    """Concatenate per-worker (first, count, start, end) rows (lists of tuples, or n x 4
    arrays) into one TRACE_DTYPE array, ordered by start time; worker = list index."""
    total = sum(len(t) for t in per_worker)
    out = np.zeros(total, TRACE_DTYPE)
    i = 0
    for w, rows in enumerate(per_worker):
        if len(rows) == 0:
            continue
        arr = np.array(rows, dtype=np.float64)
        n = len(rows)
        out["worker"][i:i + n] = w
        out["first"][i:i + n] = arr[:, 0]
        out["count"][i:i + n] = arr[:, 1]
        out["start"][i:i + n] = arr[:, 2]
        out["end"][i:i + n] = arr[:, 3]
        i += n
    return out[np.argsort(out["start"], kind="stable")]
