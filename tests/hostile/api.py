"""Hostile cases: api.

The Python API, called in this process (tiny arrays): ``parallel_for`` under every
scheduler family with numba per-task and per-chunk kernels, plain Python kernels, the
built-in ``"quicksort"`` and ``"module:function"`` strings; dispatch modes; ``copy=False``;
``shared_array``; verifiers that reject or raise; kernels that raise, exit or kill their
worker; bad arguments; ``Result.save`` / ``write_study`` on hostile paths; ``plan``.

The contract (README, "Your own kernels and data"): bad input is one ``UsageError`` line;
a failed or rejected run raises ``RunFailed`` (``.result`` holds the record) unless
``check=False``; the caller's array holds the result after the run, every task run once.
"""
from __future__ import annotations

import functools
import os
import signal
import stat
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np

from .common import api_usage, case, hs, ok

A = "api"


# --- helpers ------------------------------------------------------------------------------


class _Alarm(Exception):
    """A case ran past its watchdog."""


def acase(seconds: int = 90):
    """``@case("api")`` with a watchdog (SIGALRM) and every exception, SystemExit and
    KeyboardInterrupt included, turned into the case's problem text: an in-process API call
    must never take the harness down."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapped(tmp: Path):
            def ring(signum, frame):
                raise _Alarm(f"no answer after {seconds} s")
            old = signal.signal(signal.SIGALRM, ring)
            signal.alarm(seconds)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return fn(tmp)
            except _Alarm as exc:
                return f"hung: {exc}"
            except BaseException as exc:
                from .common import Skip
                if isinstance(exc, Skip):
                    raise
                return f"{type(exc).__name__} escaped: {str(exc)[:200]}"
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
        return case(A)(wrapped)
    return deco


def _h():
    import hybridsched

    return hybridsched


@functools.cache
def _k():
    """The numba kernels, compiled once per process on first use."""
    import numba

    @numba.njit(nogil=True)
    def inc_task(task):
        task += 1

    @numba.njit(nogil=True)
    def inc_chunk(data, first, count):
        for i in range(first, first + count):
            data[i] += 1

    @numba.njit(nogil=True)
    def raise_task(task):
        if task.ravel()[0] == 3.0:
            raise ValueError("task three")
        task += 1

    @numba.njit
    def inc_task_gil(task):  # compiled without nogil
        task += 1

    @numba.njit(nogil=True)
    def bad_typing(task):
        task[0] = "text"  # does not type-check for a numeric array

    return type("K", (), {"inc_task": inc_task, "inc_chunk": inc_chunk,
                          "raise_task": raise_task, "inc_task_gil": inc_task_gil,
                          "bad_typing": bad_typing})


def py_inc_task(task):
    task += 1


def py_inc_chunk(data, first, count):
    for i in range(first, first + count):
        data[i] += 1


def py_two(a, b):
    a += 1


def py_raise_on_3(task):
    if task.ravel()[0] == 3.0:
        raise ValueError("task three")
    task += 1


def plus_one(original, result):
    return bool(np.array_equal(result, original + 1))


_PARENT = os.getpid()


def _data(L: int = 9, width: int = 3, dtype=np.float64) -> np.ndarray:
    return np.arange(L * width, dtype=np.float64).reshape(L, width).astype(dtype)


def _coverage(trace: np.ndarray, L: int) -> str | None:
    seen = np.zeros(L, np.int64)
    for row in trace:
        f, c = int(row["first"]), int(row["count"])
        if f < 0 or c < 0 or f + c > L:
            return f"trace row (first {f}, count {c}) outside 0..{L}"
        seen[f:f + c] += 1
    if not np.all(seen == 1):
        return (f"the trace does not cover every task once: counts "
                f"{seen.tolist()[:20]}")
    return None


def _once(scheduler: str, *, k: int = 2, chunk: int = 0, kernel: str = "task", L: int = 9,
          dispatch: str = "auto", data: np.ndarray | None = None, note: str | None = None,
          **kw) -> str | None:
    """Run +1 on every task; the caller's array must hold original + 1 (each task run
    exactly once, the copy written back), verified True, the trace covering every task once."""
    K = _k()
    kern = {"task": K.inc_task, "chunk": K.inc_chunk, "py": py_inc_task,
            "pychunk": py_inc_chunk, "gil": K.inc_task_gil}[kernel]
    if data is None:
        data = _data(L)
    L = int(data.shape[0])
    orig = data.copy()
    res = _h().parallel_for(kern, data, scheduler=scheduler, k=k, chunk=chunk,
                            verify=plus_one, dispatch=dispatch, **kw)
    if res.verified is not True:
        return f"verified {res.verified!r}: {res.error}"
    if not np.array_equal(data, orig + 1):
        bad = np.nonzero(np.any((data != orig + 1).reshape(L, -1), axis=1))[0]
        return f"the caller's array is not original + 1 at tasks {bad.tolist()[:10]}"
    problem = _coverage(res.trace, L)
    if problem:
        return problem
    if note is not None and note not in res.record.notes:
        return f"notes {res.record.notes!r} lack {note!r}"
    return None


def _runfailed(fn, says: str = "") -> str | None:
    """``fn`` must raise RunFailed with a result whose record names what failed."""
    h = _h()
    try:
        fn()
    except h.RunFailed as exc:
        if not isinstance(getattr(exc, "result", None), h.Result):
            return "RunFailed without a .result"
        if "\n" in str(exc):
            return f"RunFailed message has several lines: {str(exc)[:200]!r}"
        if says and says.lower() not in str(exc).lower():
            return f"RunFailed does not say {says!r}: {str(exc)[:200]}"
        if exc.result.verified is True:
            return "RunFailed but result.verified is True"
        return None
    except BaseException as exc:  # noqa: BLE001
        return f"{type(exc).__name__} instead of RunFailed: {str(exc)[:200]}"
    return "no RunFailed: the run counted as a success"


def _usage_unchanged(fn, data: np.ndarray, says: str = "") -> str | None:
    before = data.copy()
    problem = api_usage(fn, says)
    if problem:
        return problem
    if not np.array_equal(data, before):
        return "refused, yet the array was changed"
    return None


def _each(values, check) -> str | None:
    """``check(v)`` for every value; every problem, joined."""
    out = [f"{v!r}: {p}" for v in values if (p := check(v))]
    return "; ".join(out) if out else None


def _pf(kernel, data, **kw):
    return lambda: _h().parallel_for(kernel, data, **kw)


def _small_result(scheduler: str = "dynamic"):
    return _h().parallel_for(_k().inc_task, _data(4), scheduler=scheduler, k=2, verify=plus_one)


# --- parallel_for: every scheduler family, exactly once -------------------------------------

for _sched, _extra in [("serial", {}), ("static", {}), ("dynamic", {}), ("guided", {}),
                       ("chunk", {}), ("chunk-steal", {}), ("aimd", {}), ("adaptive", {}),
                       ("adaptive-frame", {}), ("prolific", {}), ("collective", {"k": 3}),
                       ("pipe-1to1", {}), ("pipe-1toN", {}), ("pipe-MtoM", {}),
                       ("fac", {}), ("fsc", {}), ("auto", {}), ("pipe-MtoM:fac", {}),
                       ("rnd", {}), ("static_steal", {}), ("awf_b", {}),
                       ("pipe-MtoM:auto", {})]:
    def _make(s=_sched, extra=_extra):
        def fn(tmp: Path) -> str | None:
            return _once(s, **extra)
        fn.__name__ = "pf_" + s.replace("-", "_").replace(":", "_") + "_numba_task"
        fn.__doc__ = f"parallel_for(numba per-task +1, float64[9,3], {s!r}): each task once, verified"
        return fn
    acase()(_make())


@acase()
def pf_static_chunk3(tmp):
    """static with chunk=3 (round-robin chunks): each task once"""
    return _once("static", chunk=3)


@acase()
def pf_dynamic_chunk_bigger_than_L(tmp):
    """dynamic with chunk=100 on 9 tasks: one chunk, each task once"""
    return _once("dynamic", chunk=100)


@acase()
def pf_prolific_k_more_than_tasks(tmp):
    """prolific with k=6 on 3 tasks (idle workers): each task once"""
    return _once("prolific", k=6, L=3)


@acase()
def pf_numba_chunk_kernel_guided(tmp):
    """numba chunk kernel f(data, first, count) under guided"""
    return _once("guided", kernel="chunk")


@acase()
def pf_numba_chunk_kernel_pipe_1toN(tmp):
    """numba chunk kernel under pipe-1toN (copied into shared memory and back)"""
    return _once("pipe-1toN", kernel="chunk")


@acase()
def pf_python_task_kernel_dynamic_warns(tmp):
    """plain Python per-task kernel under dynamic: runs, with a GILWarning"""
    h = _h()
    data, orig = _data(), _data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = h.parallel_for(py_inc_task, data, scheduler="dynamic", k=2, verify=plus_one)
    if not any(issubclass(w.category, h.GILWarning) for w in caught):
        return "no GILWarning for a plain Python kernel on a thread scheduler"
    if res.verified is not True or not np.array_equal(data, orig + 1):
        return f"verified {res.verified}, array right: {np.array_equal(data, orig + 1)}"
    return None


@acase()
def pf_python_chunk_kernel_collective(tmp):
    """plain Python chunk kernel under collective (k=3, forked tree)"""
    return _once("collective", k=3, kernel="pychunk")


@acase()
def pf_python_task_kernel_pipe_MtoM(tmp):
    """plain Python per-task kernel under pipe-MtoM"""
    return _once("pipe-MtoM", kernel="py")


@acase()
def pf_numba_without_nogil_dynamic(tmp):
    """numba kernel compiled without nogil under dynamic: runs (warned or wrapped)"""
    return _once("dynamic", kernel="gil")


@acase()
def pf_quicksort_builtin_prolific(tmp):
    """"quicksort" on uint8[6,4,8] under prolific: verified by the sort check, rows sorted"""
    data = np.random.default_rng(1).integers(0, 256, (6, 4, 8), dtype=np.uint8)
    res = _h().parallel_for("quicksort", data, scheduler="prolific", k=2)
    if res.verified is not True:
        return f"verified {res.verified}: {res.error}"
    if not np.all(np.diff(data.astype(int), axis=2) >= 0):
        return "the caller's rows are not sorted"
    return None


@acase()
def pf_quicksort_on_float(tmp):
    """"quicksort" on float64[4,3]: the sort kernels take uint8[L,H,W] only -> UsageError"""
    return _usage_unchanged(_pf("quicksort", d := _data(4), scheduler="dynamic", k=2), d)


@acase()
def pf_module_function_string(tmp):
    """"module:function" kernel and verifier written into a directory on sys.path"""
    mod = f"hostile_api_{uuid.uuid4().hex[:8]}"
    (tmp / f"{mod}.py").write_text(
        "import numba, numpy as np\n"
        "@numba.njit(nogil=True)\n"
        "def inc(task):\n    task += 1\n"
        "def check(o, r):\n    return bool(np.array_equal(r, o + 1))\n")
    sys.path.insert(0, str(tmp))
    try:
        data = _data()
        orig = data.copy()
        res = _h().parallel_for(f"{mod}:inc", data, scheduler="pipe-1to1", k=2,
                                verify=f"{mod}:check")
        if res.verified is not True or not np.array_equal(data, orig + 1):
            return f"verified {res.verified}: {res.error}"
        if res.record.config.kernel != f"{mod}:inc":
            return f"stored kernel {res.record.config.kernel!r}"
        return None
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop(mod, None)


@acase()
def pf_module_missing(tmp):
    """kernel "no_such_module_xyz:f" -> UsageError"""
    return api_usage(_pf("no_such_module_xyz:f", _data(), scheduler="dynamic", k=2))


@acase()
def pf_module_attr_not_function(tmp):
    """kernel "module:CONSTANT" (an int) -> UsageError"""
    mod = f"hostile_api_{uuid.uuid4().hex[:8]}"
    (tmp / f"{mod}.py").write_text("CONSTANT = 5\n")
    sys.path.insert(0, str(tmp))
    try:
        return api_usage(_pf(f"{mod}:CONSTANT", _data(), scheduler="dynamic", k=2))
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop(mod, None)


@acase()
def pf_kernel_unknown_name(tmp):
    """kernel "bogus" (no colon, not built in) -> UsageError"""
    return api_usage(_pf("bogus", _data(), scheduler="dynamic", k=2))


@acase()
def pf_kernel_not_callable(tmp):
    """kernel=42 -> UsageError"""
    return api_usage(_pf(42, _data(), scheduler="dynamic", k=2))


@acase()
def pf_kernel_two_params(tmp):
    """kernel f(a, b): neither (task) nor (data, first, count) -> UsageError"""
    return _usage_unchanged(_pf(py_two, d := _data(), scheduler="dynamic", k=2), d)


@acase()
def pf_kernel_does_not_compile(tmp):
    """numba kernel that does not type-check for float64 -> UsageError before any fork"""
    return _usage_unchanged(_pf(_k().bad_typing, d := _data(), scheduler="prolific", k=2), d)


# --- dispatch ---------------------------------------------------------------------------


@acase()
def dispatch_compiled_dynamic(tmp):
    """dispatch='compiled' with a numba kernel on dynamic: runs, notes say dispatch=compiled"""
    return _once("dynamic", dispatch="compiled", note="dispatch=compiled")


@acase()
def dispatch_auto_guided_compiles(tmp):
    """dispatch='auto' with a numba kernel on guided: compiled loop (README: the default)"""
    return _once("guided", dispatch="auto", note="dispatch=compiled")


@acase()
def dispatch_python_chunk(tmp):
    """dispatch='python' on chunk: the Python loop, no dispatch=compiled note"""
    data = _data()
    res = _h().parallel_for(_k().inc_task, data, scheduler="chunk", k=2, verify=plus_one,
                            dispatch="python")
    if "dispatch=compiled" in res.record.notes:
        return f"dispatch='python' ran compiled: notes {res.record.notes!r}"
    return None if res.verified else f"verified {res.verified}"


@acase()
def dispatch_compiled_static(tmp):
    """dispatch='compiled' with static (preassigned) -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="static", k=2,
                         dispatch="compiled"))


@acase()
def dispatch_compiled_adaptive(tmp):
    """dispatch='compiled' with adaptive (feedback policy) -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="adaptive", k=2,
                         dispatch="compiled"))


@acase()
def dispatch_compiled_python_kernel(tmp):
    """dispatch='compiled' with a plain Python kernel on dynamic -> UsageError"""
    return _usage_unchanged(_pf(py_inc_task, d := _data(), scheduler="dynamic", k=2,
                                dispatch="compiled"), d)


@acase()
def dispatch_bogus(tmp):
    """dispatch='bogus' -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2, dispatch="bogus"))


@acase()
def dispatch_compiled_prolific_consistent_with_cli(tmp):
    """dispatch='compiled' on prolific: accepted (the CLI runs it too) and correct"""
    return _once("prolific", dispatch="compiled")


# --- copy=False, shared_array, memmap ------------------------------------------------------


@acase()
def copy_false_prolific_ordinary(tmp):
    """copy=False with an ordinary array under prolific -> UsageError, array unchanged"""
    return _usage_unchanged(_pf(_k().inc_task, d := _data(), scheduler="prolific", k=2,
                                copy=False), d)


@acase()
def copy_false_pipe_MtoM_ordinary(tmp):
    """copy=False with an ordinary array under pipe-MtoM -> UsageError, array unchanged"""
    return _usage_unchanged(_pf(_k().inc_task, d := _data(), scheduler="pipe-MtoM", k=2,
                                copy=False), d)


@acase()
def copy_false_dynamic_ordinary(tmp):
    """copy=False with an ordinary array on threads: in place, no copy needed"""
    return _once("dynamic", copy=False)


@acase()
def shared_array_prolific_in_place(tmp):
    """shared_array + copy=False under prolific: forked workers write into it"""
    h = _h()
    with h.shared_array((9, 3)) as shared:
        shared[:] = _data()
        if not h.is_shared(shared):
            return "is_shared(shared_array()) is False"
        return _once("prolific", data=shared, copy=False)


@acase()
def shared_array_slice_pipe_1to1(tmp):
    """a slice of a shared_array (shared[3:]) + copy=False under pipe-1to1: only it changes"""
    h = _h()
    with h.shared_array((9, 3)) as shared:
        shared[:] = _data()
        head = shared[:3].copy()
        view = shared[3:]
        problem = _once("pipe-1to1", data=view, copy=False)
        if problem:
            return problem
        if not np.array_equal(shared[:3], head):
            return "tasks outside the slice changed"
    return None


@acase()
def memmap_r_plus_pipe_1toN(tmp):
    """a writable np.memmap (r+) + copy=False under pipe-1toN: in place, the file holds it"""
    path = tmp / "m.npy"
    np.save(path, _data())
    mm = np.load(path, mmap_mode="r+")
    if not _h().is_shared(mm):
        return "is_shared(np.load(mmap_mode='r+')) is False"
    problem = _once("pipe-1toN", data=mm, copy=False)
    del mm
    if problem:
        return problem
    if not np.array_equal(np.load(path), _data() + 1):
        return "the file does not hold the result"
    return None


@acase()
def noncontiguous_prolific(tmp):
    """a strided view (a[:, ::2]) under prolific: copied and written back into the view"""
    base = np.arange(9 * 6, dtype=np.float64).reshape(9, 6)
    keep = base[:, 1::2].copy()
    problem = _once("prolific", data=base[:, ::2])
    if problem:
        return problem
    if not np.array_equal(base[:, 1::2], keep):
        return "the columns between the view's changed"
    return None


@acase()
def fortran_order_dynamic(tmp):
    """a Fortran-order array under dynamic: each task once"""
    return _once("dynamic", data=np.asfortranarray(_data()))


@acase()
def one_d_array_pipe_1toN(tmp):
    """a 1-D array (tasks are scalars, per-task view data[i:i+1]) under pipe-1toN"""
    return _once("pipe-1toN", data=np.arange(7, dtype=np.float64))


@acase()
def complex_dtype_chunk_steal(tmp):
    """complex128 data under chunk-steal"""
    return _once("chunk-steal", data=_data(dtype=np.complex128))


@acase()
def int8_dtype_serial(tmp):
    """int8 data under serial"""
    return _once("serial", data=_data(4, 2, dtype=np.int8))


# --- verify ---------------------------------------------------------------------------


@acase()
def verify_returns_false(tmp):
    """verify returning False -> RunFailed with .result.verified False"""
    return _runfailed(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2,
                          verify=lambda o, r: False), "verif")


@acase()
def verify_false_check_false(tmp):
    """verify returning False with check=False -> a Result, verified False, no exception"""
    res = _h().parallel_for(_k().inc_task, _data(), scheduler="guided", k=2,
                            verify=lambda o, r: False, check=False)
    return None if res.verified is False else f"verified {res.verified!r}"


@acase()
def verify_raises(tmp):
    """verify raising ZeroDivisionError -> RunFailed (the run rejected), not the exception"""
    def bad(o, r):
        return 1 / 0
    return _runfailed(_pf(_k().inc_task, _data(), scheduler="prolific", k=2, verify=bad))


@acase()
def verify_returns_array(tmp):
    """verify returning an array (ambiguous truth) -> RunFailed, not ValueError"""
    return _runfailed(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2,
                          verify=lambda o, r: r == o + 1))


@acase()
def verify_one_param(tmp):
    """verify with one parameter -> UsageError before the run"""
    return _usage_unchanged(_pf(_k().inc_task, d := _data(), scheduler="dynamic", k=2,
                                verify=lambda r: True), d)


@acase()
def verify_not_callable(tmp):
    """verify=5 -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2, verify=5))


@acase()
def verify_none_string(tmp):
    """verify='none' -> verified None, stored as verify='none'"""
    res = _h().parallel_for(_k().inc_task, _data(), scheduler="dynamic", k=2, verify="none")
    if res.verified is not None:
        return f"verified {res.verified!r}, not None"
    return None if res.record.config.verify == "none" else f"verify {res.record.config.verify!r}"


# --- kernels that fail ---------------------------------------------------------------------


@acase()
def kernel_raises_python_dynamic(tmp):
    """a Python kernel raising ValueError on one task under dynamic -> RunFailed naming it"""
    return _runfailed(_pf(py_raise_on_3, _data(), scheduler="dynamic", k=2,
                          dispatch="python"), "ValueError")


@acase()
def kernel_raises_numba_compiled(tmp):
    """a numba kernel raising ValueError under dynamic (compiled dispatch) -> RunFailed"""
    return _runfailed(_pf(_k().raise_task, _data(), scheduler="dynamic", k=2))


@acase()
def kernel_raises_serial(tmp):
    """a Python kernel raising ValueError under serial -> RunFailed"""
    return _runfailed(_pf(py_raise_on_3, _data(), scheduler="serial"), "ValueError")


@acase()
def kernel_raises_prolific(tmp):
    """a Python kernel raising ValueError in a forked worker -> RunFailed"""
    return _runfailed(_pf(py_raise_on_3, _data(), scheduler="prolific", k=2), "ValueError")


@acase()
def kernel_raises_pipe_MtoM(tmp):
    """a kernel raising on one task under pipe-MtoM (every worker that takes it fails)
    -> RunFailed, no hang"""
    return _runfailed(_pf(py_raise_on_3, _data(), scheduler="pipe-MtoM", k=2))


def _sys_exit(task):
    raise SystemExit(3)


@acase()
def kernel_sysexit_dynamic(tmp):
    """a kernel calling sys.exit(3) under dynamic -> RunFailed, the process goes on"""
    return _runfailed(_pf(_sys_exit, _data(), scheduler="dynamic", k=2, dispatch="python"))


@acase()
def kernel_sysexit_serial(tmp):
    """a kernel calling sys.exit(3) under serial -> RunFailed as on the other backends"""
    return _runfailed(_pf(_sys_exit, _data(), scheduler="serial"))


@acase()
def kernel_os_exit_prolific(tmp):
    """a kernel calling os._exit(0) in a forked worker (early exit) -> RunFailed"""
    def die(task):
        if os.getpid() != _PARENT:
            os._exit(0)
        raise RuntimeError("ran in the parent")
    return _runfailed(_pf(die, _data(), scheduler="prolific", k=2))


@acase()
def kernel_sigkill_prolific(tmp):
    """a worker SIGKILLed by its kernel under prolific -> RunFailed naming signal 9"""
    def die(task):
        if os.getpid() != _PARENT:
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("ran in the parent")
    return _runfailed(_pf(die, _data(), scheduler="prolific", k=2), "signal 9")


@acase()
def kernel_sigkill_once_pipe_MtoM(tmp):
    """one pipe-MtoM worker SIGKILLed mid-run: the chunk is restored and re-sent; the
    run verifies, every task + 1 exactly once, lost_workers 1"""
    marker = tmp / "killed"

    def kill_once(task):
        if os.getpid() != _PARENT and task.ravel()[0] == 12.0 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        task += 1
    data, orig = _data(), _data()
    res = _h().parallel_for(kill_once, data, scheduler="pipe-MtoM", k=2, verify=plus_one)
    if not marker.exists():
        return "the worker was never killed (case did not exercise the path)"
    if res.verified is not True or not np.array_equal(data, orig + 1):
        return f"verified {res.verified}: not original + 1"
    if res.record.lost_workers != 1:
        return f"lost_workers {res.record.lost_workers}, not 1"
    return None


# --- bad arguments ------------------------------------------------------------------------


@acase()
def data_list(tmp):
    """data a list of lists -> UsageError"""
    return api_usage(_pf(_k().inc_task, [[1.0, 2.0]], scheduler="dynamic", k=2))


@acase()
def data_zero_d(tmp):
    """data a 0-d array -> UsageError"""
    return api_usage(_pf(_k().inc_task, np.array(3.0), scheduler="dynamic", k=2))


@acase()
def data_zero_length(tmp):
    """data of 0 tasks -> UsageError"""
    return api_usage(_pf(_k().inc_task, np.zeros((0, 3)), scheduler="prolific", k=2))


@acase()
def data_read_only(tmp):
    """a read-only array -> UsageError"""
    d = _data()
    d.flags.writeable = False
    return api_usage(_pf(_k().inc_task, d, scheduler="dynamic", k=2))


@acase()
def data_object_dtype(tmp):
    """object dtype -> UsageError"""
    return api_usage(_pf(py_inc_task, np.array([[1], [2]], dtype=object), scheduler="dynamic",
                         k=2))


@acase()
def data_str_dtype(tmp):
    """str dtype ('<U3') -> UsageError"""
    return api_usage(_pf(py_inc_task, np.array([["a"], ["b"]]), scheduler="dynamic", k=2))


@acase()
def data_datetime_dtype(tmp):
    """datetime64 dtype -> UsageError"""
    return api_usage(_pf(py_inc_task, np.zeros((3, 2), "datetime64[s]"), scheduler="prolific",
                         k=2))


@acase()
def data_big_endian(tmp):
    """big-endian '>f8' -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data().astype(">f8"), scheduler="dynamic", k=2))


@acase()
def data_structured_dtype(tmp):
    """a record dtype -> UsageError"""
    return api_usage(_pf(py_inc_task, np.zeros(3, [("a", "f8"), ("b", "i4")]),
                         scheduler="dynamic", k=2))


@acase()
def data_empty_inner_axis(tmp):
    """float64[5,0,3] (no element per task): runs doing nothing, or one UsageError"""
    from hybridsched.errors import UsageError
    try:
        _h().parallel_for(_k().inc_task, np.zeros((5, 0, 3)), scheduler="prolific", k=2)
    except UsageError as exc:
        return None if "\n" not in str(exc) else "multi-line UsageError"
    return None


@acase()
def scheduler_unknown(tmp):
    """scheduler='bogus' -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="bogus", k=2))


@acase()
def scheduler_pipe_MtoM_bogus(tmp):
    """scheduler='pipe-MtoM:bogus' -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="pipe-MtoM:bogus", k=2))


@acase()
def scheduler_list(tmp):
    """scheduler=['dynamic'] (a list, unhashable) -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler=["dynamic"], k=2))


@acase()
def scheduler_none(tmp):
    """scheduler=None -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler=None, k=2))


@acase()
def k_bad_values(tmp):
    """k = 0, -1, '2', 2.5, True, 10**9 (huge) -> UsageError each"""
    return _each((0, -1, "2", 2.5, True, 10 ** 9),
                 lambda k: api_usage(_pf(_k().inc_task, _data(), scheduler="dynamic", k=k)))


@acase()
def k_huge_prolific(tmp):
    """k=10**6 under prolific -> UsageError at once (no mass fork)"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="prolific", k=10 ** 6))


@acase()
def k_numpy_integer(tmp):
    """k=np.int64(2): a whole number, accepted"""
    return _once("dynamic", k=np.int64(2))


@acase()
def chunk_negative(tmp):
    """chunk=-5 -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2, chunk=-5))


@acase()
def chunk_auto_on_threads(tmp):
    """chunk=-1 (auto) on dynamic: pipe schedulers only -> UsageError"""
    return api_usage(_pf(_k().inc_task, _data(), scheduler="dynamic", k=2, chunk=-1))


@acase()
def chunk_auto_on_pipe(tmp):
    """chunk=-1 (auto) on pipe-1to1: the search runs, the result is still each task once"""
    return _once("pipe-1to1", chunk=-1)


@acase()
def chunk_bad_types(tmp):
    """chunk='4', 2.0, None -> UsageError each"""
    return _each(("4", 2.0, None), lambda c: api_usage(
        _pf(_k().inc_task, _data(), scheduler="dynamic", k=2, chunk=c)))


@acase()
def rep_not_integer(tmp):
    """rep='x' -> UsageError (at the call, or at the latest when saved), never a crash"""
    from hybridsched.errors import UsageError
    try:
        res = _h().parallel_for(_k().inc_task, _data(), scheduler="dynamic", k=2, rep="x")
        res.save(str(tmp / "r.h5"))
    except UsageError:
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__} instead of UsageError: {str(exc)[:200]}"
    return "accepted rep='x' and stored it"


@acase()
def rep_negative(tmp):
    """rep=-1 -> UsageError, or a study that read_runs accepts"""
    from hybridsched.errors import UsageError
    from hybridsched.store.reader import read_runs
    try:
        res = _h().parallel_for(_k().inc_task, _data(), scheduler="dynamic", k=2, rep=-1)
        res.save(str(tmp / "r.h5"))
    except UsageError:
        return
    read_runs(str(tmp / "r.h5"))
    return


# --- shared_array ------------------------------------------------------------------------


def _shared_usage(*args, **kw):
    def go():
        with _h().shared_array(*args, **kw):
            pass
    return api_usage(go)


@acase()
def shared_negative(tmp):
    """shared_array(-1) -> UsageError"""
    return _shared_usage(-1)


@acase()
def shared_negative_axis(tmp):
    """shared_array((2, -3)) -> UsageError"""
    return _shared_usage((2, -3))


@acase()
def shared_huge(tmp):
    """shared_array((10**15,)) -> UsageError, nothing allocated"""
    return _shared_usage((10 ** 15,))


@acase()
def shared_huge_overflow(tmp):
    """shared_array((2**40, 2**40)) (bytes overflow int64) -> UsageError"""
    return _shared_usage((2 ** 40, 2 ** 40))


@acase()
def shared_object_dtype(tmp):
    """shared_array(3, object) -> UsageError"""
    return _shared_usage(3, object)


@acase()
def shared_bogus_dtype(tmp):
    """shared_array(3, 'bogus') -> UsageError"""
    return _shared_usage(3, "bogus")


@acase()
def shared_text_shape(tmp):
    """shared_array('abc') -> UsageError"""
    return _shared_usage("abc")


@acase()
def shared_fractional_shape(tmp):
    """shared_array(2.5) -> UsageError (not silently 2 elements)"""
    return _shared_usage(2.5)


@acase()
def shared_zero_size(tmp):
    """shared_array(0): an empty array or one UsageError, nothing left in /dev/shm"""
    from hybridsched.errors import UsageError
    try:
        with _h().shared_array(0) as a:
            if a.size != 0:
                return f"size {a.size}"
    except UsageError as exc:
        return None if "\n" not in str(exc) else "multi-line UsageError"
    return None


@acase()
def shared_removed_on_exception(tmp):
    """an exception inside the with block: the segment is gone from /dev/shm after it"""
    from hybridsched.oslayer.shm import our_shm_entries
    before = set(our_shm_entries(os.getpid()))
    try:
        with _h().shared_array((4, 4)) as a:
            a[:] = 1
            during = set(our_shm_entries(os.getpid())) - before
            raise KeyError("boom")
    except KeyError:
        pass
    after = set(our_shm_entries(os.getpid())) - before
    if not during:
        return "no /dev/shm segment seen while the block ran"
    return f"left: {sorted(after)}" if after else None


@acase()
def is_shared_copies_are_not(tmp):
    """is_shared: shared_array and its slices True; np.copy of it and plain arrays False"""
    h = _h()
    with h.shared_array((4, 4)) as a:
        if not (h.is_shared(a) and h.is_shared(a[1:]) and h.is_shared(a[:, 1])):
            return "a shared_array or its view is not is_shared"
        if h.is_shared(a.copy()) or h.is_shared(np.zeros(3)):
            return "a private copy counts as shared"
    ro = np.load(_save_npy(tmp), mmap_mode="r")
    if h.is_shared(ro):
        return "a read-only memmap counts as shared"
    return None


def _save_npy(tmp: Path) -> Path:
    p = tmp / "x.npy"
    np.save(p, np.zeros((2, 2)))
    return p


# --- Result.save / write_study -------------------------------------------------------------


@acase(120)
def save_then_report(tmp):
    """Result.save then `hybridsched report --no-plots` reads it"""
    path = tmp / "s.h5"
    _small_result("guided").save(str(path))
    p = hs("report", str(path), "--no-plots", "--out-dir", str(tmp / "rep"), timeout=90,
           env={"HYBRIDSCHED_NO_LOAD_PROBE": "1"})
    return ok(p, path)


@acase()
def save_existing_file(tmp):
    """save onto an existing file without overwrite -> UsageError, the file unchanged"""
    path = tmp / "s.h5"
    path.write_text("precious")
    res = _small_result()
    p = api_usage(lambda: res.save(str(path)))
    if p:
        return p
    return None if path.read_text() == "precious" else "the existing file was changed"


@acase()
def save_existing_overwrite(tmp):
    """save with overwrite=True onto an existing study: replaced, one run in it"""
    from hybridsched.store.reader import read_runs
    path = tmp / "s.h5"
    _small_result().save(str(path))
    _small_result("guided").save(str(path), overwrite=True)
    runs = read_runs(str(path))
    if len(runs) != 1 or runs["scheduler"][0] != "guided":
        return f"runs {list(runs['scheduler'])}"
    return None


@acase()
def save_directory(tmp):
    """save onto a directory (even with overwrite=True) -> UsageError, directory intact"""
    d = tmp / "dir.h5"
    d.mkdir()
    (d / "keep").write_text("x")
    res = _small_result()
    for ow in (False, True):
        p = api_usage(lambda ow=ow: res.save(str(d), overwrite=ow))
        if p:
            return f"overwrite={ow}: {p}"
    return None if d.is_dir() and (d / "keep").exists() else "the directory was touched"


@acase()
def save_symlink(tmp):
    """save through a symlink to a file (with and without overwrite) -> UsageError, target
    unchanged"""
    target = tmp / "target"
    target.write_text("precious")
    link = tmp / "link.h5"
    link.symlink_to(target)
    res = _small_result()
    for ow in (False, True):
        p = api_usage(lambda ow=ow: res.save(str(link), overwrite=ow))
        if p:
            return f"overwrite={ow}: {p}"
    if target.read_text() != "precious" or not link.is_symlink():
        return "the target or the link was changed"
    return None


@acase()
def save_dangling_symlink(tmp):
    """save through a dangling symlink -> UsageError, nothing created at its target"""
    link = tmp / "link.h5"
    link.symlink_to(tmp / "nowhere.h5")
    p = api_usage(lambda: _small_result().save(str(link)))
    if p:
        return p
    return "created the symlink's target" if (tmp / "nowhere.h5").exists() else None


@acase()
def save_fifo(tmp):
    """save onto a FIFO (with overwrite) -> UsageError, nothing written into it, no hang"""
    fifo = tmp / "f.h5"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer's open cannot block
    try:
        res = _small_result()
        for ow in (False, True):
            p = api_usage(lambda ow=ow: res.save(str(fifo), overwrite=ow))
            if p:
                return f"overwrite={ow}: {p}"
        try:
            got = os.read(fd, 16)
        except BlockingIOError:
            got = b""
        if got:
            return f"wrote into the FIFO: {got!r}"
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
            return "the FIFO was replaced"
    finally:
        os.close(fd)
    return None


@acase()
def save_missing_directory(tmp):
    """save into a directory that does not exist -> UsageError"""
    return api_usage(lambda: _small_result().save(str(tmp / "no" / "such" / "s.h5")))


@acase()
def write_study_non_results(tmp):
    """write_study with a non-Result item -> UsageError, no file"""
    path = tmp / "s.h5"
    p = api_usage(lambda: _h().write_study(str(path), [_small_result(), {"time_s": 1}]))
    if p:
        return p
    left = [q.name for q in tmp.iterdir()]
    return f"left {left}" if left else None


@acase()
def write_study_not_iterable(tmp):
    """write_study(path, 5) -> UsageError"""
    return api_usage(lambda: _h().write_study(str(tmp / "s.h5"), 5))


@acase()
def write_study_int_path(tmp):
    """write_study(123, results) -> UsageError (not a TypeError), nothing created"""
    res = _small_result()
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        p = api_usage(lambda: _h().write_study(123, [res]))
    finally:
        os.chdir(cwd)
    if p:
        return p
    return "created a file named 123" if (tmp / "123").exists() else None


@acase()
def write_study_pathlib_and_mixed(tmp):
    """write_study(Path, [dynamic, prolific results]): both runs stored"""
    from hybridsched.store.reader import read_runs
    path = tmp / "s.h5"
    _h().write_study(path, [_small_result("dynamic"), _small_result("prolific")])
    runs = read_runs(str(path))
    got = sorted(runs["scheduler"])
    return None if got == ["dynamic", "prolific"] else f"stored {got}"


# --- plan -------------------------------------------------------------------------------


def _plan_covers(policy: str, n: int, k: int, c: int, params=None) -> str | None:
    rows = _h().plan(policy, n, k, c, params) if params else _h().plan(policy, n, k, c)
    seen = np.zeros(n, np.int64)
    for r in rows:
        if r.count < 1 or r.first < 0 or r.first + r.count > n:
            return f"{policy} n={n} k={k} c={c}: bad row {r}"
        if not -1 <= r.worker < k:
            return f"{policy} n={n} k={k} c={c}: worker {r.worker} out of range"
        seen[r.first:r.first + r.count] += 1
    if not np.all(seen == 1):
        return f"{policy} n={n} k={k} c={c}: tasks not covered once ({seen.tolist()[:20]})"
    return None


def _plan_policies():
    from hybridsched.core.policies import PLAN_POLICIES
    return PLAN_POLICIES


for _pol in ("static", "dynamic", "guided", "chunk", "round-robin", "aimd", "trapezoidal",
             "fac2", "fac2a", "fac2b", "tfss", "fiss", "viss", "mfsc", "pls", "rnd",
             "static_steal"):
    def _make_plan(pol=_pol):
        def fn(tmp: Path) -> str | None:
            if pol not in _plan_policies():
                return f"README names policy {pol!r}, plan does not know it"
            for n, k, c in ((37, 3, 0), (5, 8, 0), (37, 3, 4), (1, 1, 0), (100, 7, 1)):
                p = _plan_covers(pol, n, k, c)
                if p:
                    return p
            return None
        fn.__name__ = "plan_covers_" + pol.replace("-", "_")
        fn.__doc__ = f"plan({pol!r}, n, k, chunk): every task exactly once, workers in range"
        return fn
    acase()(_make_plan())


@acase()
def plan_bad_tasks(tmp):
    """plan tasks = 0, -1, '10', 10.5, True, None -> UsageError each"""
    return _each((0, -1, "10", 10.5, True, None),
                 lambda n: api_usage(lambda: _h().plan("dynamic", n, 2)))


@acase()
def plan_bad_workers(tmp):
    """plan workers = 0, -3, '2', 1.5 -> UsageError each"""
    return _each((0, -3, "2", 1.5), lambda k: api_usage(lambda: _h().plan("static", 10, k)))


@acase()
def plan_bad_chunk(tmp):
    """plan chunk = -1, 'x', 2.5 -> UsageError each"""
    return _each((-1, "x", 2.5), lambda c: api_usage(lambda: _h().plan("guided", 10, 2, c)))


@acase()
def plan_huge(tmp):
    """plan tasks 10**9 / workers 10**9 -> UsageError at once (built in memory)"""
    for n, k in ((10 ** 9, 2), (10, 10 ** 9)):
        p = api_usage(lambda n=n, k=k: _h().plan("static", n, k))
        if p:
            return f"tasks {n} workers {k}: {p}"
    return None


@acase()
def plan_unknown_policy(tmp):
    """plan policy 'bogus', 'prolific', None, ['static'] -> UsageError each"""
    return _each(("bogus", "prolific", None, ["static"]),
                 lambda pol: api_usage(lambda: _h().plan(pol, 10, 2)))


@acase()
def plan_params_on_plain_policy(tmp):
    """plan('dynamic', ..., params={'pls_swr': 0.5}) -> UsageError (takes none)"""
    return api_usage(lambda: _h().plan("dynamic", 10, 2, 0, {"pls_swr": 0.3}))


@acase()
def plan_params_bad_values(tmp):
    """technique params out of range or unknown -> UsageError each"""
    return _each((("pls", {"pls_swr": 2}), ("pls", {"pls_swr": float("nan")}),
                  ("pls", {"pls_swr": -0.1}), ("fiss", {"fiss_stages": -1}),
                  ("viss", {"viss_param": 0}), ("fiss", {"bogus": 1})),
                 lambda a: api_usage(lambda: _h().plan(a[0], 10, 2, 0, a[1])))


@acase()
def plan_params_bad_types(tmp):
    """technique params of the wrong type ('x', a str instead of a dict) -> UsageError each"""
    return _each((("pls", {"pls_swr": "x"}), ("fiss", {"fiss_stages": "x"}),
                  ("viss", {"viss_param": "2x"}), ("fiss", "abc")),
                 lambda a: api_usage(lambda: _h().plan(a[0], 10, 2, 0, a[1])))


@acase()
def plan_pls_swr_edges(tmp):
    """pls with pls_swr 0 and 1 (the range's ends): every task once"""
    for swr in (0.0, 1.0):
        p = _plan_covers("pls", 37, 3, 0, {"pls_swr": swr})
        if p:
            return f"pls_swr={swr}: {p}"
    return None


# --- more -----------------------------------------------------------------------------------


@acase()
def pf_prolific_from_worker_thread(tmp):
    """parallel_for(prolific) called from a non-main thread: runs, each task once"""
    import threading
    out: list = []

    def go():
        try:
            out.append(_once("prolific"))
        except BaseException as exc:  # noqa: BLE001
            out.append(f"{type(exc).__name__}: {exc}")
    t = threading.Thread(target=go)
    t.start()
    t.join(60)
    if t.is_alive():
        return "hung in a thread"
    return out[0] if out else "the thread returned nothing"


@acase()
def pf_numba_chunk_without_nogil_warns(tmp):
    """a numba chunk kernel compiled without nogil on dynamic: GILWarning (README)"""
    import numba
    h = _h()

    @numba.njit
    def chunk_gil(data, first, count):
        for i in range(first, first + count):
            data[i] += 1
    data = _data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h.parallel_for(chunk_gil, data, scheduler="dynamic", k=2, verify=plus_one)
    if not any(issubclass(w.category, h.GILWarning) for w in caught):
        return "no GILWarning for a numba kernel without nogil on threads"
    return None


@acase()
def pf_per_task_false_on_task_kernel(tmp):
    """per_task=False forcing a 1-parameter Python kernel to be a chunk kernel:
    UsageError, or RunFailed (it is called with 3 arguments) -- never a success"""
    from hybridsched.errors import UsageError
    h = _h()
    try:
        h.parallel_for(py_inc_task, _data(), scheduler="dynamic", k=2, per_task=False,
                       verify=plus_one)
    except (UsageError, h.RunFailed):
        return None
    return "ran a 1-parameter kernel as f(data, first, count) and succeeded"


@acase()
def save_failed_result(tmp):
    """a failed run (check=False) saved: read_runs shows it unverified with its error"""
    from hybridsched.store.reader import read_runs
    res = _h().parallel_for(py_raise_on_3, _data(), scheduler="dynamic", k=2, check=False,
                            dispatch="python")
    if not res.error:
        return "the failed run has no error text"
    res.save(str(tmp / "f.h5"))
    runs = read_runs(str(tmp / "f.h5"))
    if len(runs) != 1 or runs["verified"][0] or "ValueError" not in runs["error"][0]:
        return f"stored verified {runs['verified'].tolist()}, error {runs['error'].tolist()}"
    return None
