"""Where the simulator's task costs come from: a file of seconds per task (``--costs``), a
built-in workload's cost model scaled by this machine's per-row sort time (the default), or
the traces of a measured study (``--from``)."""
from __future__ import annotations

import json
import math
import os
import signal
import statistics
import time

import numpy as np

from ..errors import UsageError
from ..kernels import KERNELS, generate_frames, prepare
from ..workloads import catalogue, sorts

# Rows sorted to measure the per-row cost on the spot: enough for a stable mean (about
# 0.1 s at 640 bytes a row), few enough that `simulate` starts in well under a second.
_PROBE_ROWS = 4096
_PROBE_MAX_S = 0.3


def from_file(path: str) -> np.ndarray:
    """``--costs FILE.npy``: a 1-D array of seconds per task, finite and non-negative."""
    if not os.path.isfile(path):  # a FIFO or a device would block or never end
        raise UsageError(f"--costs {path}: not a regular file" if os.path.exists(path)
                         else f"--costs {path}: no such file")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"--costs {path}: cannot read a .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive
        arr.close()
        raise UsageError(f"--costs {path}: an .npz archive; give one .npy array")
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iuf":
        raise UsageError(f"--costs {path}: expected a non-empty 1-D array of numbers (seconds "
                         f"per task), got {arr.dtype} of shape {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise UsageError(f"--costs {path}: every cost must be a finite number of seconds >= 0")
    with np.errstate(over="ignore"):
        total = float(arr.sum())
    if not total > 0:
        raise UsageError(f"--costs {path}: every cost is 0; nothing to schedule")
    if not total <= MAX_TOTAL_S:
        raise UsageError(f"--costs {path}: the tasks add up to more than the "
                         f"{MAX_TOTAL_S:.0e} s a simulation takes (seconds per task?)")
    return arr


# The most seconds a cost array may add up to: about 30,000 years, far beyond any loop, and
# far below where sums of it (a makespan, a mean over repetitions) overflow a float.
MAX_TOTAL_S = 1e12


def exit_seconds(reps: int = 5) -> float:
    """The CPU a forked child of this process spends to exit at once (its copy-on-write
    faults and the unmapping of its copy of our address space), the median of ``reps``:
    what a forked worker still does on its core after its last chunk."""
    got = []
    for _ in range(reps):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(0)
        _, _, usage = os.wait4(pid, 0)
        got.append(usage.ru_utime + usage.ru_stime)
    return float(statistics.median(got))


# The widest row measured: a row this wide sorts in about a millisecond; wider ones are
# scaled from it (n log n) instead of allocating them.
_PROBE_WIDTH = 1 << 16


def switch_seconds(rounds: int = 2000) -> float:
    """One context switch through a pipe wake-up, measured now: this process and a forked
    child pinned to one CPU pass a byte back and forth ``rounds`` times (two switches per
    round); what a pipe producer on a full core costs the worker it preempts."""
    cpu = min(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    there, back = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(there[1])  # only the parent writes: its close is the child's EOF
            os.close(back[0])
            os.sched_setaffinity(0, {cpu})
            for _ in range(rounds):
                if not os.read(there[0], 1):
                    break  # the parent stopped early (Ctrl-C, an error)
                os.write(back[1], b"x")
        finally:
            os._exit(0)
    os.close(there[0])
    os.close(back[1])
    try:
        os.sched_setaffinity(0, {cpu})
        t0 = time.perf_counter()
        for _ in range(rounds):
            os.write(there[1], b"x")
            os.read(back[0], 1)
        return (time.perf_counter() - t0) / (2 * rounds)
    finally:
        os.sched_setaffinity(0, mine)
        os.close(there[1])  # the child, if still reading, sees EOF and ends
        os.close(back[0])
        try:
            os.waitpid(pid, 0)
        except BaseException:  # a second Ctrl-C while reaping: no zombie left behind
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise


def row_sort_seconds(width: int) -> float:
    """This machine's time to quicksort one row of ``width`` random bytes, measured now
    (numba's cached kernel, a few thousand rows); rows wider than the probe's are measured
    at its width and scaled as n log n."""
    if width > _PROBE_WIDTH:
        return row_sort_seconds(_PROBE_WIDTH) * float(
            _width_factor(np.array([width], float), _PROBE_WIDTH)[0])
    prepare("quicksort")
    kernel = KERNELS["quicksort"][0]
    rows = max(64, min(_PROBE_ROWS, 2_000_000 // max(1, width)))
    frames = max(1, rows // 64)
    data = np.empty((frames, 64, width), np.uint8)
    generate_frames(data, 12345, 0)
    kernel(data[:1].copy(), 0, 1)  # warm the caches and the page tables
    best = math.inf
    deadline = time.perf_counter() + _PROBE_MAX_S
    while True:
        work = data.copy()
        t0 = time.perf_counter()
        kernel(work, 0, frames)
        best = min(best, (time.perf_counter() - t0) / (frames * 64))
        if time.perf_counter() > deadline:
            return best


def _width_factor(widths: np.ndarray, ref: int) -> np.ndarray:
    """Sorting cost of a row of width w relative to one of width ``ref`` (n log n)."""
    w = np.maximum(widths.astype(np.float64), 2.0)
    r = max(float(ref), 2.0)
    return (w * np.log2(w)) / (r * math.log2(r))


def workload_costs(workload: str, params: dict, L: int, H: int, W: int, seed: int,
                   row_s: float, row_width: int) -> np.ndarray:
    """Seconds per task of a built-in workload on this machine: rows x width of each task
    (the workload's own rule, sorts.task_shape) times the per-row sort time."""
    info = catalogue.get(workload)
    if not info.sort:
        return mandelbrot_costs(params, L, H, W, row_s, row_width)
    lo = params.get("min", 1.0)
    second = params.get("heavy", params.get("alpha", 0.0))
    shp = sorts.shapes(workload, seed, 0, L, L, H, W, lo, second)
    return shp[:, 0] * row_s * _width_factor(shp[:, 1], row_width)


def mandelbrot_costs(params: dict, L: int, H: int, W: int, row_s: float, row_width: int) -> np.ndarray:
    """Mandelbrot bands: cost proportional to escape iterations, scaled by the time of one
    iteration, measured now on a sample band."""
    from ..workloads import mandelbrot

    p = {**catalogue.get("mandelbrot").params, **params}
    counts = np.empty((L, H, W), mandelbrot.DTYPE)
    t0 = time.perf_counter()
    mandelbrot.bands(counts, 0, 0, L, L, p["x0"], p["x1"], p["y0"], p["y1"], int(p["iters"]))
    per_iter = (time.perf_counter() - t0) / max(1, int(counts.sum(dtype=np.int64)))
    return counts.reshape(L, -1).sum(axis=1, dtype=np.int64) * per_iter


def check_costs(costs: np.ndarray) -> np.ndarray:
    if costs.ndim != 1 or costs.size == 0 or not np.all(np.isfinite(costs)) or (costs < 0).any():
        raise UsageError("task costs must be a non-empty list of finite seconds >= 0")
    return np.ascontiguousarray(costs, np.float64)


def prefix(costs: np.ndarray) -> np.ndarray:
    """Prefix sums with a leading 0: the work of tasks [a, b) is cum[b] - cum[a]."""
    return np.concatenate([[0.0], np.cumsum(costs)])


def describe(source: str, costs: np.ndarray) -> str:
    return (f"{source}: {len(costs)} tasks, mean {costs.mean() * 1e6:.1f} us, cv "
            f"{costs.std() / costs.mean() if costs.mean() else 0:.2f}")


CALIBRATION_VERSION = 1
# Figures a model divides by: never 0.
_POSITIVE = frozenset({"slice_s", "mpi_bandwidth", "row_width"})
# Not seconds: a rate and a width, up to 1e15; every other figure is seconds, up to an hour
# (beyond either, the file is broken, not the machine).
_NOT_SECONDS = frozenset({"mpi_bandwidth", "row_width"})


def _bound(key: str) -> float:
    return 1e15 if key in _NOT_SECONDS else 3600.0


def load_calibration(path: str, known: frozenset[str] = frozenset(),
                     listed: frozenset[str] = frozenset()) -> dict:
    """A calibration file written by `hybridsched calibrate` (JSON); ``known``: the
    overhead names a model reads (another one is a typo, refused); ``listed``: those that
    are lists of numbers, every other one a number."""
    if not os.path.isfile(path):  # a FIFO would block the open, a directory cannot be read
        raise UsageError(f"--calibration {path}: not a regular file" if os.path.exists(path)
                         else f"--calibration {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--calibration {path}: not a calibration file ({exc})") from None
    except RecursionError:
        raise UsageError(f"--calibration {path}: not a calibration file (JSON nested too "
                         "deep)") from None
    if not isinstance(data, dict) or data.get("format") != "hybridsched-calibration":
        raise UsageError(f"--calibration {path}: not a hybridsched calibration file")
    if not isinstance(data.get("version", 1), int) or data.get("version", 1) > CALIBRATION_VERSION:
        raise UsageError(f"--calibration {path}: version {data.get('version')!r} is newer than "
                         f"this hybridsched reads ({CALIBRATION_VERSION}); upgrade hybridsched")
    values = data.get("overheads")
    if not isinstance(values, dict):
        raise UsageError(f"--calibration {path}: no 'overheads' table")
    unknown = sorted(set(values) - known) if known else []
    if unknown:
        raise UsageError(f"--calibration {path}: unknown overhead {unknown[0]!r} (a typo? "
                         f"known: {', '.join(sorted(known))})")
    for key, v in values.items():
        if known and isinstance(v, list) != (key in listed):  # a list where a number goes
            # ended in a TypeError inside the model, a traceback
            raise UsageError(f"--calibration {path}: overhead {key} must be "
                             f"{'a list of numbers' if key in listed else 'a number'}, got "
                             f"{type(v).__name__}")
        for x in (v if isinstance(v, list) else [v]):
            low = "above 0" if key in _POSITIVE else "from 0"
            if (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                    or not 0 <= x <= _bound(key) or (key in _POSITIVE and x == 0)):
                raise UsageError(f"--calibration {path}: overhead {key} must be a number "
                                 f"{low} to {_bound(key):g}, got {x!r}")
    return data
