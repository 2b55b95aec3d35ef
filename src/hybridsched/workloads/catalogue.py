"""The catalogue of workloads (what the tasks are and their parameters) and the --input
file: checked names, parameters and arrays, nothing built yet (:mod:`.build` builds)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    description: str
    params: dict              # parameter -> default (floats; mandelbrot's iters an int)
    sort: bool = True         # the uint8 sort tensor (False: its own data and kernel)


_ALL = [
    WorkloadInfo("uniform", "the paper's tensor: every frame the same cost (default)", {}),
    WorkloadInfo("ramp", "frame cost grows linearly from min x to 1 x a full frame",
                 {"min": 0.1}),
    WorkloadInfo("skewed", "a share `heavy` of frames (by hash) cost a full frame, the rest "
                 "`min` of one", {"min": 0.1, "heavy": 0.02}),
    WorkloadInfo("heavytail", "Pareto(alpha) frame cost: min x U^(-1/alpha) of a frame, "
                 "clipped at one", {"min": 0.05, "alpha": 1.5}),
    WorkloadInfo("varying", "frames of different sizes: row width uniform in [min x W, W]",
                 {"min": 0.25}),
    WorkloadInfo("mandelbrot", "bands of H rows of the Mandelbrot set, cost = escape "
                 "iterations (the classic DLS benchmark)",
                 {"x0": -2.0, "x1": 0.5, "y0": -1.25, "y1": 1.25, "iters": 256}, sort=False),
]
WORKLOADS = {w.name: w for w in _ALL}


def get(name: str) -> WorkloadInfo:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UsageError(f"--workload: unknown workload {name!r}; choose from "
                         f"{', '.join(WORKLOADS)}") from None


def parse(text: str) -> tuple[str, dict]:
    """``NAME[:key=value,...]`` -> (name, every parameter with defaults filled in)."""
    name, _, rest = text.partition(":")
    info = get(name.strip())
    params = dict(info.params)
    seen: set[str] = set()
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in info.params:
            raise UsageError(f"--workload {info.name}: unknown parameter {item!r}; its "
                             f"parameters are {', '.join(info.params) or 'none'}")
        if not eq:
            raise UsageError(f"--workload {info.name}: {key} needs a value ({key}=...)")
        if key in seen:
            raise UsageError(f"--workload {info.name}: {key} given twice")
        seen.add(key)
        try:
            v = float(value)
        except ValueError:
            raise UsageError(f"--workload {info.name}: {key} must be a number, got {value!r}") from None
        if isinstance(info.params[key], int):
            if not v.is_integer():
                raise UsageError(f"--workload {info.name}: {key} must be an integer, got {value.strip()}")
            v = int(v)
        params[key] = v
    check_params(info.name, params)
    return info.name, params


def check_params(name: str, p: dict) -> None:
    bad = ""
    if any(not math.isfinite(v) for v in p.values()):
        bad = "parameters must be finite"
    elif "min" in p and not 0 < p["min"] <= 1:
        bad = f"min must be in (0, 1], got {p['min']}"
    elif "heavy" in p and not 0 <= p["heavy"] <= 1:
        bad = f"heavy must be in [0, 1], got {p['heavy']}"
    elif "alpha" in p and not p["alpha"] > 0:
        bad = f"alpha must be above 0, got {p['alpha']}"
    elif name == "mandelbrot":
        from .mandelbrot import UNSET

        if not 1 <= p["iters"] < UNSET:
            bad = f"iters must be from 1 to {UNSET - 1}, got {p['iters']}"
        elif not (p["x0"] < p["x1"] and p["y0"] < p["y1"]):
            bad = "the region needs x0 < x1 and y0 < y1"
    if bad:
        raise UsageError(f"--workload {name}: {bad}")


def params_json(params: dict) -> str:
    return json.dumps(params, sort_keys=True) if params else ""


def _regular(path: str) -> None:
    """Refuse anything but a regular file: opening a FIFO would block, a device read
    forever."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise UsageError(f"--input {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--input {path}: not a regular file")


def file_hash(path: str) -> str:
    """sha256 of a file's bytes, as stored with the runs of an ``--input`` study."""
    _regular(path)
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise UsageError(f"--input {path}: {exc.strerror or exc}") from None
    return "sha256:" + h.hexdigest()


# The element kinds every kernel (numba's and the workers' shared memory) takes: bool,
# signed and unsigned integers, floats, complex. Anything else is refused, never converted.
KERNEL_KINDS = "biufc"


def check_dtype(dtype: np.dtype, what: str) -> None:
    """Refuse (one UsageError line naming the conversion to make) a dtype the kernels
    cannot take: another byte order than this machine's, dates and times, text, records,
    Python objects."""
    dtype = np.dtype(dtype)
    if dtype.kind in KERNEL_KINDS and not dtype.isnative:
        raise UsageError(f"{what}: dtype {dtype.str} is not in this machine's byte order; "
                         "convert it first, e.g. a.astype(a.dtype.newbyteorder('='))")
    if dtype.kind in "mM":
        raise UsageError(f"{what}: dtype {dtype} (dates and times) is not taken by the kernels; "
                         "convert it first, e.g. a.view('i8')")
    if dtype.kind not in KERNEL_KINDS:
        raise UsageError(f"{what}: dtype {dtype} is not supported: kernels take bool, integer, "
                         "float or complex arrays (object, text and record arrays are not)")


def load_input(path: str) -> np.ndarray:
    """The --input array, memory-mapped read-only; one UsageError line if it is not one:
    unreadable, no task, an empty inner axis, a dtype the kernels cannot take."""
    _regular(path)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, OverflowError, MemoryError) as exc:
        raise UsageError(f"--input {path}: not a readable .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray) or arr.ndim < 1 or arr.shape[0] < 1:
        raise UsageError(f"--input {path}: needs an array with at least one task (first axis)")
    if 0 in arr.shape[1:]:
        raise UsageError(f"--input {path}: shape {arr.shape} has an empty axis; every task "
                         "needs at least one element")
    check_dtype(arr.dtype, f"--input {path}")
    return arr


def input_dims(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(L, H, W) as stored for an array of any shape: tasks, second axis, the rest."""
    L = int(shape[0])
    H = int(shape[1]) if len(shape) > 1 else 1
    W = int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 2 else 1
    return L, H, W
