"""User kernels and verifiers: ``package.module:function`` references, per-task kernels
wrapped into chunk kernels, and compilation before any fork.

The kernel contract every backend calls is ``kernel(data, first, count)``: work in place
on tasks ``first .. first+count-1`` of ``data`` (tasks are the first axis), exactly like
the built-in sort kernels. A per-task kernel ``f(task)`` (one parameter) gets a view of one
task (``data[i]``; ``data[i:i+1]`` for a 1-D array, so it can be written in place) and is
wrapped here: a numba ``f`` into a ``nogil`` numba loop, so worker threads stay parallel;
a plain Python ``f`` into a Python loop, with `GILWarning`.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..kernels import KERNELS, compile_kernel, is_compiled
from ..errors import GILWarning, UsageError
from ..refs import import_object


@dataclass(frozen=True)
class KernelInfo:
    """A resolved kernel: the chunk kernel the backends call and what it is."""

    fn: Callable                # kernel(data, first, count)
    name: str                   # built-in name, package.module:function, or a qualname
    numba: bool                 # compiled: threads run it without the GIL (if nogil)
    nogil: bool
    sort: bool = False          # a built-in sort kernel: the sort check is its default verifier


def is_numba(fn) -> bool:
    return hasattr(fn, "py_func") and hasattr(fn, "overloads")


def _arity(fn, what: str) -> int:
    target = fn.py_func if is_numba(fn) else fn
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        raise UsageError(f"{what}: cannot read the signature of {fn!r}") from None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return -1  # f(*args): takes anything
    return sum(p.default is p.empty and p.kind != p.VAR_KEYWORD for p in params)


def import_ref(ref: str, what: str) -> Callable:
    """The function named by ``package.module:function``; every failure is one UsageError."""
    obj = import_object(ref, what, "package.module:function")
    if not callable(obj) or isinstance(obj, type):
        raise UsageError(f"{what} {ref!r}: {type(obj).__name__} is not a function")
    return obj


@functools.lru_cache(maxsize=64)  # one compiled wrapper per (kernel, ndim) per process
def _task_wrapper(f, ndim: int, numba_f: bool) -> Callable:
    if numba_f:
        import numba

        # cache=False: a closure over the user's function cannot be cached; compiled once
        # per process (before any fork, by compile_for), milliseconds for a loop this small
        if ndim == 1:
            def chunk(data, first, count):
                for i in range(first, first + count):
                    f(data[i:i + 1])
        else:
            def chunk(data, first, count):
                for i in range(first, first + count):
                    f(data[i])
        return numba.njit(nogil=True, cache=False)(chunk)

    def py_chunk(data, first, count):
        for i in range(first, first + count):
            f(data[i:i + 1] if ndim == 1 else data[i])
    return py_chunk


def resolve(kernel, ndim: int = 3, what: str = "kernel", per_task: bool | None = None) -> KernelInfo:
    """A KernelInfo for a built-in name, a ``package.module:function`` string or a callable.

    ``per_task``: None decides by the number of required parameters (1 = per task,
    3 = per chunk).
    """
    fn: Any  # a Python function, or a numba dispatcher (``targetoptions``)
    if isinstance(kernel, str):
        if kernel in KERNELS:
            fn = KERNELS[kernel][0]
            return KernelInfo(fn, kernel, is_numba(fn), True, sort=True)
        if ":" not in kernel:
            raise UsageError(f"{what}: unknown kernel {kernel!r}; choose from "
                             f"{', '.join(KERNELS)} or give package.module:function")
        name, fn = kernel, import_ref(kernel, what)
    elif callable(kernel):
        name, fn = f"{getattr(kernel, '__module__', '?')}:{getattr(kernel, '__qualname__', repr(kernel))}", kernel
        for bname, (bfn, _) in KERNELS.items():
            if bfn is kernel:
                return KernelInfo(bfn, bname, is_numba(bfn), True, sort=True)
    else:
        raise UsageError(f"{what}: expected a function or package.module:function, got "
                         f"{type(kernel).__name__}")
    numba_f = is_numba(fn)
    nogil = bool(numba_f and fn.targetoptions.get("nogil"))
    if per_task is None:
        n = _arity(fn, what)
        n = 3 if n == -1 else n  # f(*args): called as a chunk kernel
        if n not in (1, 3):
            raise UsageError(f"{what} {name}: takes {n} arguments; a kernel takes (task) or "
                             "(data, first, count)")
        per_task = n == 1
    if per_task:
        fn = _task_wrapper(fn, ndim, numba_f)
        nogil = numba_f  # the wrapper releases the GIL around the user's compiled calls
    return KernelInfo(fn, name, numba_f, nogil)


def gil_warning(info: KernelInfo, threaded: bool) -> None:
    """Warn once per call that a kernel holding the GIL serialises thread workers
    (``threaded``: the scheduler's workers are threads)."""
    if threaded and not info.nogil:
        what = "a plain Python function" if not info.numba else "compiled without nogil=True"
        warnings.warn(f"kernel {info.name} is {what}: worker threads hold the GIL while it "
                      "runs, so thread schedulers cannot run it in parallel", GILWarning,
                      stacklevel=3)


def compile_for(info: KernelInfo, work: np.ndarray) -> None:
    """Compile a numba kernel for ``work``'s exact type before any fork (children never
    compile); a kernel that does not type-check is one UsageError line."""
    if not info.numba or not is_compiled(info.fn):
        return
    try:
        compile_kernel(info.fn, work)
    except Exception as exc:  # numba's TypingError and friends: first line is the message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"kernel {info.name} does not compile for {work.dtype}"
                         f"{list(work.shape)}: {first}") from None


def resolve_verifier(ref) -> Callable | None:
    """None for 'none'/False, the function for a reference or callable."""
    if ref is None or ref is False or ref == "none":
        return None
    if isinstance(ref, str):
        fn = import_ref(ref, "--verify")
    elif callable(ref):
        fn = ref
    else:
        raise UsageError(f"verify: expected a function, 'none' or package.module:function, "
                         f"got {type(ref).__name__}")
    n = _arity(fn, "--verify")
    if n not in (2, -1):
        raise UsageError(f"--verify {ref!r}: takes {n} arguments; a verifier takes "
                         "(original, result)")
    return fn
