"""Per-frame kernels (sort every row of frames ``first .. first+count-1`` in place),
the tensor generator and the verifier.

Every numba function here is compiled with ``nogil=True`` so worker threads run it in
parallel, and ``cache=True`` so a fresh process loads machine code instead of compiling.
:func:`prepare` compiles (or loads) them; call it before any fork so children never compile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import is_jitted, overload

from .errors import UsageError

from .oslayer.atomics import fetch_add, intrinsic
from .oslayer.native import monotonic_ns
from .oslayer.signals import loading

Kernel = Callable[[np.ndarray, int, int], None]

# Partitions at or below this size are left for the final insertion sort, as libstdc++'s
# std::sort does (_S_threshold = 16): smaller means more partition passes, larger means
# quadratic insertion work on longer runs.
_INSERTION_THRESHOLD = 16
# Explicit partition stack: introsort's depth limit (2*log2(n)) bounds its height, and 128
# entries cover rows far longer than any tensor that fits in memory.
STACK = 128

_jit = numba.njit(nogil=True, cache=True)


@_jit
def _heapsort(a, lo, hi):
    n = hi - lo
    start = n // 2 - 1
    end = n
    while end > 1:
        if start >= 0:
            root = start
            start -= 1
        else:
            end -= 1
            a[lo], a[lo + end] = a[lo + end], a[lo]
            root = 0
        while True:
            child = 2 * root + 1
            if child >= end:
                break
            if child + 1 < end and a[lo + child] < a[lo + child + 1]:
                child += 1
            if a[lo + root] < a[lo + child]:
                a[lo + root], a[lo + child] = a[lo + child], a[lo + root]
                root = child
            else:
                break


# The quicksort below indexes with unsigned integers on purpose: numba wraps negative
# signed indices Python-style (an extra compare and add on every a[i]), which it cannot
# prove away in the partition loops. uint64 indices cut the per-row time from 1.19x to
# 1.07x of C++ std::sort on 640-byte rows, and 1.23x -> 1.08x on 64-byte rows (thread CPU
# time, benchmarks/bench_core.py). Every constant mixed in must be uint64 too: uint64 with
# int64 arithmetic gives float64 in numba.
_U = np.uint64
_ONE = _U(1)
_THRESHOLD = _U(_INSERTION_THRESHOLD)


@_jit
def _insertion_sort(a, lo, hi):
    i = lo + _ONE
    while i < hi:
        v = a[i]
        j = i
        while j > lo and a[j - _ONE] > v:
            a[j] = a[j - _ONE]
            j -= _ONE
        a[j] = v
        i += _ONE


@_jit
def introsort(a, stack_lo, stack_hi, stack_d):
    """Introsort of a 1-D array in place using caller-provided partition stacks (one set
    per chunk of rows, in the caller's stack frame: allocating them per row cost 7 % of a
    64-byte row's time, per chunk ~0.3-0.6 µs)."""
    n = _U(a.shape[0])
    if n < _U(2):
        return
    depth = 0
    m = n
    while m > _ONE:
        depth += 2
        m >>= _ONE
    stack_lo[0] = _U(0)
    stack_hi[0] = n
    stack_d[0] = depth
    sp = 1
    while sp > 0:
        sp -= 1
        lo = stack_lo[sp]
        hi = stack_hi[sp]
        d = stack_d[sp]
        while hi - lo > _THRESHOLD:
            if d == 0:
                _heapsort(a, np.int64(lo), np.int64(hi))
                break
            d -= 1
            # median of a[lo+1], a[mid], a[hi-1] moved to a[lo]
            mid = lo + ((hi - lo) >> _ONE)
            x = a[lo + _ONE]
            y = a[mid]
            z = a[hi - _ONE]
            if x < y:
                if y < z:
                    piv = mid
                elif x < z:
                    piv = hi - _ONE
                else:
                    piv = lo + _ONE
            elif x < z:
                piv = lo + _ONE
            elif y < z:
                piv = hi - _ONE
            else:
                piv = mid
            a[lo], a[piv] = a[piv], a[lo]
            p = a[lo]
            i = lo + _ONE
            j = hi
            while True:
                while a[i] < p:
                    i += _ONE
                j -= _ONE
                while p < a[j]:
                    j -= _ONE
                if i >= j:
                    break
                a[i], a[j] = a[j], a[i]
                i += _ONE
            # a[lo+1:i] <= p <= a[i:hi]; push the right part, keep looping on the left
            stack_lo[sp] = i
            stack_hi[sp] = hi
            stack_d[sp] = d
            sp += 1
            hi = i
    _insertion_sort(a, _U(0), n)


def _stack_array(dtype):
    """An intrinsic giving a 1-D array of STACK ``dtype`` items in the calling function's
    stack frame (LLVM alloca in its entry block): freed on return, no heap. Three np.empty
    per call cost 0.3-0.6 µs (measured), which compiled dispatch pays per chunk (7 µs
    tasks, chunk 1: 4-9 % of each task; libstdc++'s std::sort allocates nothing either)."""
    nbty = numba.from_dtype(np.dtype(dtype))

    @intrinsic
    def stack_ptr(typingctx):
        def codegen(context, builder, sig, args):
            lty = context.get_data_type(nbty)
            buf = cgutils.alloca_once(builder, ir.ArrayType(lty, STACK))
            return builder.bitcast(buf, lty.as_pointer())
        return types.CPointer(nbty)(), codegen

    return stack_ptr


_stack_u64 = _stack_array(np.uint64)
_stack_i64 = _stack_array(np.int64)


@_jit
def quicksort_frames(t, first, count):
    """Sort every row of frames ``first .. first+count-1`` of ``t[L, H, W]`` in place."""
    stack_lo = numba.carray(_stack_u64(), (STACK,))
    stack_hi = numba.carray(_stack_u64(), (STACK,))
    stack_d = numba.carray(_stack_i64(), (STACK,))
    for f in range(first, first + count):
        for i in range(t.shape[1]):
            introsort(t[f, i], stack_lo, stack_hi, stack_d)


@_jit
def counting_frames(t, first, count):
    """Counting sort of every row: the fast path for uint8 (two passes per row)."""
    hist = np.zeros(256, np.int64)
    w = t.shape[2]
    for f in range(first, first + count):
        for i in range(t.shape[1]):
            row = t[f, i]
            hist[:] = 0
            for j in range(w):
                hist[row[j]] += 1
            j = 0
            for v in range(256):
                c = hist[v]
                for _ in range(c):
                    row[j] = v
                    j += 1


def numpy_frames(t: np.ndarray, first: int, count: int) -> None:
    """ndarray.sort along rows; numpy releases the GIL while it sorts."""
    t[first:first + count].sort(axis=-1)


KERNELS: dict[str, tuple[Kernel, str]] = {
    "quicksort": (quicksort_frames, "numba introsort per row, the paper's quicksort (default)"),
    "numpy": (numpy_frames, "numpy ndarray.sort along rows (releases the GIL)"),
    "counting": (counting_frames, "numba counting sort per row, the fast path for uint8"),
}


@dataclass(frozen=True)
class Bound:
    """A package kernel with parameters: ``fn(data, first, count, params)`` called as a
    chunk kernel ``kernel(data, first, count)``. The parameters (a workload's seed, shape,
    region) are run-time values of one cached function instead of constants of a closure,
    which numba would compile again in every process."""

    fn: Callable
    params: tuple

    def __call__(self, data, first, count):
        return self.fn(data, first, count, self.params)


def is_compiled(kernel) -> bool:
    """Whether ``kernel`` is machine code the compiled loop can call (a numba function, or
    one bound to its parameters)."""
    return isinstance(kernel, Bound) or is_jitted(kernel)


def _parts(kernel) -> tuple[Any, tuple]:
    # Any: a numba dispatcher (compiled on demand: `overloads`, `compile`) or a plain function
    return (kernel.fn, kernel.params) if isinstance(kernel, Bound) else (kernel, ())


@loading
def compile_kernel(kernel, data: np.ndarray):
    """Compile (or load) numba ``kernel`` for ``data``'s exact array type; returns the
    compiled overload. Raises numba's error when it does not compile for it."""
    fn, params = _parts(kernel)
    args: tuple[Any, ...] = (numba.typeof(data), types.int64, types.int64)
    if isinstance(kernel, Bound):
        args += (numba.typeof(params),)
    cres = fn.overloads.get(args)
    if cres is None:
        if not getattr(fn, "_can_compile", True):  # explicit signatures, none of them this
            raise numba.core.errors.TypingError(
                f"no signature of {getattr(fn, '__name__', fn)} takes {args}")
        fn.compile(args)
        cres = fn.overloads[args]
    return cres


def get_kernel(name) -> Kernel:
    """A built-in kernel by name; a chunk kernel callable (a workspace's or the user's,
    see :mod:`workloads.kernelref`) is returned as it is."""
    if callable(name):
        return name
    try:
        return KERNELS[name][0]
    except KeyError:
        raise UsageError(f"unknown kernel {name!r}; choose from {', '.join(KERNELS)}") from None


def direct_entry(kernel: Kernel, work: np.ndarray) -> Kernel:
    """The compiled entry point of numba ``kernel`` for ``work``'s exact array type, or
    ``kernel`` itself (a plain Python kernel, or one not compiled for that type yet).

    The entry point skips the dispatcher's argument typing: the thread backend's worker
    loop drops from 0.97 to 0.81 us of CPU per chunk (`benchmarks/bench_core.py --only
    hotpath`). It is the same compiled wrapper, so it still releases the GIL (nogil). It
    does not check argument types, hence only an exact signature match is used.
    """
    fn, params = _parts(kernel)
    overloads = getattr(fn, "overloads", None)
    if not overloads:
        return kernel
    args = (numba.typeof(work), types.int64, types.int64)
    if isinstance(kernel, Bound):
        compiled = overloads.get(args + (numba.typeof(params),))
        if compiled is None:
            return kernel
        entry = compiled.entry_point
        return lambda data, first, count: entry(data, first, count, params)
    compiled = overloads.get(args)
    return kernel if compiled is None else compiled.entry_point


# --- generation -------------------------------------------------------------------------

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@_jit
def splitmix(x):
    z = x
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@_jit
def generate_frames(out, seed, frame0):
    """Fill ``out[j]`` with frame ``frame0 + j`` of the tensor for ``seed``.

    Each frame is its own splitmix64 stream keyed by (seed, frame id), so any subset of
    frames (an MPI rank's block, one claimed chunk) is reproduced exactly on its own.
    """
    n = out.shape[1] * out.shape[2]
    for j in range(out.shape[0]):
        flat = out[j].reshape(n)
        state = splitmix(np.uint64(seed) * GOLDEN + splitmix(np.uint64(frame0 + j) + GOLDEN))
        k = 0
        while k < n:
            state += GOLDEN
            r = splitmix(state)
            for b in range(8):
                if k < n:
                    flat[k] = np.uint8(r & np.uint64(0xFF))
                    r >>= np.uint64(8)
                    k += 1


# --- verification -----------------------------------------------------------------------

@_jit
def sorted_permutation(a, b, w, hist):
    """Whether ``b[:w]`` is nondecreasing and a permutation of ``a[:w]`` (``hist``: 256
    int64 of scratch, a per-row byte histogram)."""
    for j in range(1, w):
        if b[j - 1] > b[j]:
            return False
    hist[:] = 0
    for j in range(w):
        hist[a[j]] += 1
        hist[b[j]] -= 1
    for v in range(256):
        if hist[v] != 0:
            return False
    return True


@_jit
def count_bad_rows(orig, work, first, count):
    """Rows of frames ``first..first+count-1`` of ``work`` that are not nondecreasing or
    that are not a permutation of the same row of ``orig`` (per-row 256-bin histograms)."""
    bad = 0
    hist = np.zeros(256, np.int64)
    w = work.shape[2]
    for f in range(first, first + count):
        for i in range(work.shape[1]):
            if not sorted_permutation(orig[f, i], work[f, i], w, hist):
                bad += 1
    return bad


# --- the compiled dispatch loop ------------------------------------------------------------

def _call(kernel, data, first, count, params):
    """``kernel(data, first, count)``, or with ``params`` when the kernel is bound to some."""


@overload(_call)
def _call_typed(kernel, data, first, count, params):
    # chosen while typing: an empty tuple means a plain chunk kernel
    if isinstance(params, types.BaseTuple) and len(params) == 0:
        return lambda kernel, data, first, count, params: kernel(data, first, count)
    return lambda kernel, data, first, count, params: kernel(data, first, count, params)


@_jit
def claim_loop(kernel, data, bounds, ctl, capacity, params):
    """One worker's whole compiled run (backends/compiled.py): claim ticket i, run chunk i,
    record (i, start ns, end ns); until the tickets are past the hand-out (done, or
    stopped). Returns the records in claim order. A kernel's exception ends the loop and
    propagates to the calling thread.

    ``kernel`` arrives as a first-class function (a numba FunctionType: a pointer, not a
    type of its own), so one machine-code loop per array type serves every kernel and is
    cached on disk like the kernels themselves; a dispatcher-typed argument would make
    each kernel a new type and the loop uncacheable (compiled again in every process).
    The indirect call costs a few ns per chunk.

    The records are the worker's own, grown by doubling from ``capacity``: a table shared
    by ticket would put the rows of k workers in the same cache lines, three more
    contended lines per chunk besides the ticket's."""
    m = bounds.shape[0] - 1
    rec = np.empty((max(capacity, 1), 3), np.int64)
    n = 0
    while True:
        i = fetch_add(ctl, 0, 1)
        if i >= m:
            return rec[:n]
        first = bounds[i]
        t0 = monotonic_ns()
        _call(kernel, data, first, bounds[i + 1] - first, params)
        t1 = monotonic_ns()
        if n == rec.shape[0]:
            grown = np.empty((2 * n, 3), np.int64)
            grown[:n] = rec
            rec = grown
        rec[n, 0] = i
        rec[n, 1] = t0
        rec[n, 2] = t1
        n += 1


_I64 = numba.types.int64
_I64_ARRAY = numba.types.Array(_I64, 1, "C")


@loading
def loop_entry(kernel, data: np.ndarray) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """``run(bounds, ctl, capacity)``: the compiled :func:`claim_loop` of numba ``kernel``
    (or a :class:`Bound` one) over ``data``. The loop is loaded from numba's on-disk cache
    (compiled the first time ever for this array type), so a process compiles nothing of
    it. Raises numba's error when the kernel does not compile for ``data``."""
    fn, params = _parts(kernel)
    cres = compile_kernel(kernel, data)
    sig = (types.FunctionType(cres.signature.return_type(*cres.signature.args)), numba.typeof(data), _I64_ARRAY, _I64_ARRAY, _I64,
           numba.typeof(params))
    loop = claim_loop.overloads.get(sig)
    if loop is None:
        claim_loop.compile(sig)
        loop = claim_loop.overloads[sig]
    # numba's CompileResult is a namedtuple built from a list of field names: no stub sees them
    entry = loop.entry_point  # type: ignore[attr-defined]
    return lambda bounds, ctl, capacity: entry(fn, data, bounds, ctl, capacity, params)


@loading
def prepare(kernel: str | None = None, loop: bool = False) -> None:
    """Load the numba functions a study calls from numba's cache (compiling them the first
    time ever): the generator, the checker, built-in ``kernel`` (every one when None, none
    when "": a workload's or user's kernel is compiled with its workspace) and, with
    ``loop``, the compiled dispatch loop for it. Call before any fork."""
    tiny = np.zeros((1, 2, 3), np.uint8)
    generate_frames(tiny, 0, 0)
    orig = tiny.copy()
    for name in list(KERNELS) if kernel is None else [kernel] if kernel else []:
        fn = get_kernel(name)
        fn(tiny, 0, 1)
        if loop and is_jitted(fn):
            loop_entry(fn, tiny)  # the thread backend's compiled loop for it
    count_bad_rows(orig, tiny, 0, 1)
