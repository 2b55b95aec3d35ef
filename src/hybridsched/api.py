"""The public Python API: run your kernel over the tasks of your array under any scheduler.

    import numpy as np, numba, hybridsched

    @numba.njit(nogil=True)
    def square(task):            # one task: a view of data[i]
        task[:] = task * task

    data = np.arange(12.0).reshape(6, 2)
    res = hybridsched.parallel_for(square, data, scheduler="guided", k=2)
    res.time_s, res.verified, res.workers, res.trace

What a loop learns across calls (auto's race, AWF's weights) is kept only in a
`hybridsched.Memory` the caller passes on (``memory=``); each call has its own otherwise.

The run is the same timed run as the CLI's (`study.runner.TimedRun`): the same
backends, the same per-worker table and chunk trace, the same record, which
`write_study` stores in a study file that ``hybridsched report`` reads.
"""
from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .core import registry
from .core.request import check_request
from .core.memory import Memory
from .errors import BadOption, RunFailed, Terminated, UsageError
from .records import API_WORKLOAD, RunConfig, RunRecord
from .store import INT32_MAX
from .shared import is_shared
from .oslayer.cpus import n_cpus
from .workloads import kernelref
from .records import fit_text
from .study.options import MAX_REF
from .workloads.catalogue import check_dtype
from .workloads.build import sort_checker, sortable
from .study.measure import single_record
from .study.resources import Resources
from .study.runner import TimedRun
from .workloads.space import Workspace, bool_checker


@dataclass
class Result:
    """One timed run: seconds, whether the result was verified (None: no verifier), the
    per-worker table (records.WORKER_DTYPE) and the chunk trace (records.TRACE_DTYPE),
    times relative to the run's start, and the full record the CLI would store."""

    time_s: float
    verified: bool | None
    workers: np.ndarray
    trace: np.ndarray
    record: RunRecord

    @property
    def error(self) -> str:
        return self.record.error

    def save(self, path: str, overwrite: bool = False) -> str:
        """Write this run to a new study file (see `write_study`)."""
        return write_study(path, [self], overwrite=overwrite)


# A non-contiguous input is hashed this many bytes of frames at a time, each piece copied
# contiguous: the whole at once doubled the memory of a huge strided view (a MemoryError);
# smaller pieces cost more Python calls per byte.
_HASH_PIECE_BYTES = 16 << 20


def _digest(data: np.ndarray) -> str:
    """The input's sha256 over its bytes in C order, as for a contiguous copy of it (a
    contiguous input's pieces are views of it: nothing is copied)."""
    h = hashlib.sha256()
    per_frame = max(1, data.itemsize * int(np.prod(data.shape[1:], dtype=np.int64)))
    step = max(1, _HASH_PIECE_BYTES // per_frame)
    for first in range(0, len(data), step):
        h.update(np.ascontiguousarray(data[first:first + step]).data)
    return "sha256:" + h.hexdigest()


# How parallel_for names the options and values of a refused request (core.request)
NAMES = {"k": "k", "chunk": "chunk", "sizes": "0 (the scheduler's default) or more",
         "auto": "-1 (auto)", "dispatch": "dispatch", "compiled": "dispatch='compiled'",
         "use_auto": "dispatch='auto'"}


def _checker_for(verify, kern: kernelref.KernelInfo, data: np.ndarray):
    """(checker, stored verify mode)."""
    if verify is None:
        if kern.sort:
            if not sortable(data):
                raise UsageError(f"kernel {kern.name} sorts uint8[L, H, W] rows; got "
                                 f"{data.dtype}{list(data.shape)}")
            return sort_checker, ""
        return None, "none"
    fn = kernelref.resolve_verifier(verify)
    if fn is None:
        return None, "none"
    name = verify if isinstance(verify, str) else \
        f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"
    return bool_checker(fn), fit_text(name, MAX_REF)


def _check_data(data) -> None:
    if not isinstance(data, np.ndarray) or data.ndim < 1 or data.shape[0] < 1:
        raise UsageError("data: expected a numpy array with at least one task (first axis)")
    if not data.flags.writeable:
        raise UsageError("data: the array is read-only; the kernel works in place")
    if data.dtype.hasobject:
        raise UsageError("data: object arrays hold references, which neither a kernel in "
                         "compiled code nor a forked worker can share: use a numeric dtype")


def parallel_for(kernel, data: np.ndarray, scheduler="dynamic", k: int | None = None,
                 chunk: int = 0, verify=None, *, affinity: bool = True, copy: bool = True,
                 per_task: bool | None = None, rep: int = 0, check: bool = True,
                 dispatch: str = "auto", params: dict | None = None,
                 memory: Memory | None = None) -> Result:
    """Run ``kernel`` over the tasks (first axis) of ``data`` in place under ``scheduler``
    with ``k`` workers (default: the usable CPUs) and return the timed `Result`.

    ``kernel``: ``f(task)`` or ``f(data, first, count)``, numba (``nogil=True`` keeps
    thread workers parallel) or plain Python (warned: threads then hold the GIL), a
    built-in name (``"quicksort"``) or ``"package.module:function"``. ``chunk``: 0 = the
    scheduler's default. ``verify(original, result) -> bool``: None = the sort check for
    the sort kernels and no check otherwise; ``"none"`` = no check. Fork and pipe
    schedulers copy ``data`` into shared memory and back, unless it comes from
    `hybridsched.shared_array` (no copy); ``copy=False`` refuses to copy instead.
    ``check``: raise `RunFailed` when the run fails or does not verify.
    ``dispatch``: the thread workers' loop, as ``run --dispatch`` (auto | python | compiled).
    ``scheduler`` may be a `hybridsched.Technique` (instance or class) or
    ``"package.module:Class"``; ``params``: its ``self.params`` (or an LB4OMP technique's).
    ``memory``: a `hybridsched.Memory` that keeps what the loop learns (auto's race, AWF's
    weights, the profiling run, ``chunk=-1``'s trials) for the next call given the same
    one; None = a new one, so that separate calls share nothing.
    """
    info = registry.lookup(scheduler)
    scheduler = info.name
    run_params = registry.run_params(info, params, strict=True)
    _check_data(data)
    if memory is not None and not isinstance(memory, Memory):
        raise UsageError(f"memory: expected a hybridsched.Memory or None, got {type(memory).__name__}")
    from .core.policies import whole

    k = n_cpus() if k is None else whole(k, "k")
    chunk = whole(chunk, "chunk")
    rep = whole(rep, "rep")
    if not 0 <= rep <= INT32_MAX:  # stored in the study file's int32 field
        raise UsageError(f"rep must be 0 to {INT32_MAX}, got {rep}")
    for name, flag in (("affinity", affinity), ("copy", copy), ("check", check)):
        if not isinstance(flag, (bool, np.bool_)):  # 'no' is true: it pinned the workers
            raise UsageError(f"{name}: expected True or False, got {type(flag).__name__} {flag!r:.40}")
    if per_task is not None and not isinstance(per_task, (bool, np.bool_)):
        raise UsageError(f"per_task: expected True, False or None, got {type(per_task).__name__} "
                         f"{per_task!r:.40}")
    check_dtype(data.dtype, "data")
    kern = kernelref.resolve(kernel, data.ndim, "kernel", per_task)
    try:  # refused before anything runs, as `run`'s options are
        check_request([info], [k], [chunk], dispatch, kernel=kern.name, numba=kern.numba)
    except BadOption as exc:
        raise exc.named(NAMES) from None
    kernelref.gil_warning(kern, info.threaded)
    checker, mode = _checker_for(verify, kern, data)
    in_place = not info.forked or is_shared(data)
    if not in_place and not copy:
        raise UsageError(f"{scheduler} runs in forked workers, which cannot write into an "
                         "ordinary array: allocate it with hybridsched.shared_array() or "
                         "allow copy=True")
    L = int(data.shape[0])
    H = int(data.shape[1]) if data.ndim > 1 else 1
    W = int(np.prod(data.shape[2:], dtype=np.int64)) if data.ndim > 2 else 1
    digest = _digest(data)
    cfg = RunConfig(scheduler, 1 if info.baseline else k, L, H, W, chunk, affinity, rep,
                    fit_text(kern.name, MAX_REF), 0, workload=API_WORKLOAD, verify=mode, input_hash=digest,
                    dispatch=dispatch, params=run_params)
    with _sigterm_unwinds():
        rec = _run(cfg, data, in_place, kern, checker, info, memory)
    verified = None if mode == "none" and not rec.error else rec.verified
    result = Result(rec.time_s, verified, rec.workers, rec.trace, rec)
    if check and (rec.error or verified is False):
        what = rec.error or f"the result did not verify ({mode or 'sort check'})"
        raise RunFailed(f"{scheduler} k={k}: {what}", result)
    return result


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM as SIGINT is: an exception in the main thread that unwinds the run (workers
    killed and reaped, segments removed), where the process left SIGTERM at its default,
    which would end it on the spot and leave the run's segments behind."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def unwind(signum, frame):
        raise Terminated(128 + signum)
    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run(cfg: RunConfig, data: np.ndarray, in_place: bool, kern, checker, info,
         memory: Memory | None) -> RunRecord:
    # the original is kept where anything reads it: a verifier, pipe-MtoM restoring a lost
    # worker's chunk, --chunk auto's trials, and a profiling run, after which the array is
    # put back (the profile runs the kernel over it once)
    keep = (checker is not None or info.resends or cfg.chunk < 0
            or info.profiled)
    with Resources([cfg], lambda c: Workspace.around(data, in_place, keep, checker), memory) as res:
        space = res.space(cfg)  # owned (closed on every exit) from here
        space.kernel = kern.fn
        kernelref.compile_for(kern, space.work)  # before any fork: children never compile
        rec = single_record(TimedRun(space, cfg, res).run())
        if not in_place:
            np.copyto(data, space.work)
    return rec


def write_study(path, results, overwrite: bool = False) -> str:
    """Store API results in a new study file (``hybridsched report`` reads it); refuses an
    existing file unless ``overwrite``. ``path``: a str or os.PathLike."""
    try:
        path = os.fspath(path)
        results = list(results)
    except TypeError as exc:
        raise UsageError(f"write_study: expected a path and an iterable of results ({exc})") from None
    if not isinstance(path, str):
        raise UsageError("write_study: the path must be text")
    if not all(isinstance(r, Result) for r in results):
        raise UsageError("write_study: expected the Result objects of parallel_for")
    runs = [(r.record.started_at, r.record.time_s, r.record.config) for r in results]
    if len({repr(k) for k in runs}) != len(runs):  # one run stored twice counts twice (a
        raise UsageError("write_study: a result is given more than once")  # copy of it too)
    study = {"api": True, "created_by": "hybridsched.parallel_for",
             "schedulers": sorted({r.record.config.scheduler for r in results}),
             "kernel": sorted({r.record.config.kernel for r in results}),
             "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    from .study.output import new_study  # h5py: only where a study is written

    with new_study(path, study, overwrite=overwrite, what="study",
                   hint="pass overwrite=True to replace it") as writer:
        for r in results:
            writer.append(r.record)
    return path
