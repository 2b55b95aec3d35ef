"""Atomic operations on numpy integer arrays for nopython code (llvmlite intrinsics).

Every operation is sequentially consistent (``seq_cst``): on x86 a ``lock``-prefixed
instruction, so it also orders the plain loads and stores around it. That is what the
lock-free paths that use them rely on (a store, then an atomic, then a load of another
thread's word: of two threads doing so crosswise, at least one sees the other's store).
Works on any integer array, including views of shared mappings (other processes see it).
"""
from __future__ import annotations

from typing import Any, Callable

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic as _numba_intrinsic


def intrinsic(defn: Callable[..., Any]) -> Callable[..., Any]:
    """numba's ``intrinsic``, typed as compiled code calls it: without the typing context
    (numba's stubs give the call the definition's signature, typing context first, and
    ``Never`` as its result, which would make every line after a call unreachable)."""
    return _numba_intrinsic(defn)


def _int_array(arr) -> bool:
    return isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer)


def _ptr(context, builder, sig, args):
    ary = context.make_array(sig.args[0])(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])


def _read_modify_write(op: str, name: str, doc: str):
    """The intrinsic ``old = arr[idx]; arr[idx] = op(old, operand); return old``, atomically
    (LLVM's ``atomicrmw op``), for one op."""
    def rmw(typingctx, arr, idx, operand):
        if not _int_array(arr):
            return None
        dt = arr.dtype

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[2], sig.args[2], dt)
            return builder.atomic_rmw(op, _ptr(context, builder, sig, args), v, "seq_cst")
        return dt(arr, types.intp, operand), codegen
    rmw.__name__ = rmw.__qualname__ = name
    rmw.__doc__ = doc
    return intrinsic(rmw)


fetch_add = _read_modify_write("add", "fetch_add",
                               "``old = arr[idx]; arr[idx] += delta; return old``, atomically.")
exchange = _read_modify_write("xchg", "exchange",
                              "``old = arr[idx]; arr[idx] = value; return old``, atomically.")


@intrinsic
def compare_exchange(typingctx, arr, idx, expected, value):
    """``if arr[idx] == expected: arr[idx] = value``, atomically; returns whether it did."""
    if not _int_array(arr):
        return None
    dt = arr.dtype

    def codegen(context, builder, sig, args):
        e = context.cast(builder, args[2], sig.args[2], dt)
        v = context.cast(builder, args[3], sig.args[3], dt)
        res = builder.cmpxchg(_ptr(context, builder, sig, args), e, v, "seq_cst", "seq_cst")
        return builder.extract_value(res, 1)
    return types.boolean(arr, types.intp, expected, value), codegen
