"""The workspace of one run configuration: tensor (generated, or from ``--input``), chunk
kernel (built-in, irregular, Mandelbrot or the user's) and verifier; compiled before any
fork. Also the checks a study spec gets before its first run."""
from __future__ import annotations

import json
import sys

import numpy as np

from ..kernels import KERNELS, count_bad_rows, generate_frames, is_compiled
from ..errors import UsageError
from ..records import RunConfig
from .slab import Slab, check_sizes
from .catalogue import file_hash, get, input_dims, load_input
from . import kernelref, mandelbrot, sorts
from .space import Workspace, bool_checker


def sort_checker(orig, work, first, count):
    return int(count_bad_rows(orig, work, first, count))


def _checker(cfg: RunConfig, default):
    """The run's checker: the default for its workload, none by choice, or the user's."""
    if cfg.verify == "":
        return default
    fn = kernelref.resolve_verifier(cfg.verify)
    return None if fn is None else bool_checker(fn)


def build(cfg: RunConfig, input_path: str = "", frames: int | None = None, frame0: int = 0):
    """The workspace for ``cfg`` holding local tasks frame0 .. frame0+frames-1 (default:
    all ``cfg.frames``); its ``kernel`` is None when the built-in ``cfg.kernel`` applies."""
    L = cfg.frames if frames is None else frames
    info = get(cfg.workload)
    params = json.loads(cfg.workload_params) if cfg.workload_params else dict(info.params)
    plain = cfg.kernel in KERNELS
    if cfg.input_hash or input_path:
        if file_hash(input_path) != cfg.input_hash:
            raise UsageError(f"--input {input_path}: the file changed since the study started")
        arr = load_input(input_path)
        if input_dims(arr.shape) != (cfg.frames, cfg.height, cfg.width):
            raise UsageError(f"--input {input_path}: shape {arr.shape} changed since the "
                             "study was planned")
        block = arr[frame0:frame0 + L]
        kern = kernelref.resolve(cfg.kernel, block.ndim, "--kernel")
        default = sort_checker if kern.sort and sortable(block) else None
        space = Workspace(block.shape, block.dtype, lambda out, a: np.copyto(out, block[a:a + len(out)]),
                           _checker(cfg, default), frame0, cfg.seed)
        space.kernel = kern.fn
    elif info.name == "uniform" and plain and cfg.verify == "":
        return Slab(L, cfg.height, cfg.width, cfg.seed, frame0=frame0)  # the paper's path
    elif info.sort:
        def fill(out, a):
            generate_frames(out, cfg.seed, frame0 + a)
        rule, lo = sorts.RULES[info.name], params.get("min", 1.0)
        second = params.get("heavy", params.get("alpha", 0.0))
        if info.name == "uniform":
            kern = kernelref.resolve(cfg.kernel, 3, "--kernel")
            default = sort_checker if kern.sort else None
            kernel = kern.fn
        else:
            kernel = sorts.make_kernel(info.name, cfg.seed, frame0, cfg.frames, cfg.height,
                                       cfg.width, lo, second, counting=cfg.kernel == "counting")

            def default(orig, work, first, count):
                return int(sorts.count_bad(orig, work, first, count, rule, cfg.seed, frame0,
                                           cfg.frames, lo, second))
        check_sizes(L, cfg.height, cfg.width)
        space = Workspace((L, cfg.height, cfg.width), np.uint8, fill, _checker(cfg, default),
                           frame0, cfg.seed)
        space.kernel = kernel
    else:
        p = params
        kernel = mandelbrot.make_kernel(frame0, cfg.frames, p["x0"], p["x1"], p["y0"], p["y1"],
                                        p["iters"])
        ref = np.empty((L, cfg.height, cfg.width), mandelbrot.DTYPE)
        # the reference, once per workspace (untimed): a run must reproduce it exactly
        mandelbrot.bands(ref, frame0, 0, L, cfg.frames, p["x0"], p["x1"], p["y0"], p["y1"],
                         p["iters"])

        def default(orig, work, first, count):
            return int(mandelbrot.count_bad(ref[first:first + count], work[first:first + count], 0, count))
        check_sizes(L, cfg.height, cfg.width, copies=6)  # uint16: orig, work, reference
        space = Workspace((L, cfg.height, cfg.width), mandelbrot.DTYPE,
                           lambda out, a: out.fill(mandelbrot.UNSET), _checker(cfg, default),
                           frame0, cfg.seed)
        space.kernel = kernel
    try:
        if is_compiled(space.kernel):
            kernelref.compile_for(kernelref.KernelInfo(space.kernel, cfg.kernel, True, True),
                                  space.work)
    except BaseException:
        space.close()
        raise
    return space


def sortable(arr: np.ndarray) -> bool:
    return arr.dtype == np.uint8 and arr.ndim == 3


def validate_spec(spec) -> None:
    """Refuse, before any run, a combination that cannot run or cannot be verified."""
    info = get(spec.workload)
    builtin = spec.kernel in KERNELS
    kern = None
    if spec.verify not in ("", "none"):
        kernelref.resolve_verifier(spec.verify)
    if not builtin:
        ndim = 3
        if spec.input:
            ndim = load_input(spec.input).ndim
        kern = kernelref.resolve(spec.kernel, ndim, "--kernel")
    if info.name != "uniform":
        if spec.input:
            raise UsageError(f"--workload {info.name} generates its tasks; --input gives them "
                             "instead (use one of the two)")
        if not builtin or (info.sort and spec.kernel == "numpy"):
            raise UsageError(f"--workload {info.name} runs its own kernel"
                             + (" (quicksort or counting)" if info.sort else "")
                             + f"; --kernel {spec.kernel} does not apply")
    if kern is not None and not kern.nogil:
        from ..core import registry

        threads = [s for s in spec.schedulers if registry.get(s).threaded]
        if threads:
            what = "a plain Python function" if not kern.numba else "compiled without nogil=True"
            print(f"hybridsched: warning: --kernel {spec.kernel} is {what}: the thread "
                  f"schedulers ({', '.join(threads)}) hold the GIL while it runs",
                  file=sys.stderr)
    if spec.verify == "" and (kern is not None and not kern.sort):
        raise UsageError(f"--kernel {spec.kernel}: a kernel of your own needs --verify "
                         "package.module:function (or --verify none to run unverified)")
    if spec.input and spec.verify == "" and builtin:
        arr = load_input(spec.input)
        if not sortable(arr):
            raise UsageError(f"--input {spec.input}: the sort kernels need uint8[L, H, W], "
                             f"got {arr.dtype}{list(arr.shape)}; give --kernel and --verify")
