"""The arbiter's OS calls for nopython code: futex wait/wake, a robust process-shared
mutex, the monotonic clock — each an LLVM call to the libc symbol by name, so the
functions that use them are cached by numba like any other (a ctypes function pointer
would pin them to one process's addresses).

Why compiled: a hand-off in Python (take the lock, run a rule, wake the next worker, sleep)
cost ~100 µs per park after a 200 µs compute step, 3-5x its warm cost, against ~30 µs for
the kernel's own futex sleep and wake (benchmarks/diag_coop_handoff.py); the interpreter's
working set is what the compute step evicts.

The lock is a glibc ``pthread_mutex_t`` in the segment, process-shared and robust: the
kernel marks it when its owner dies (EOWNERDEAD to the next locker, who makes it
consistent), so a SIGKILLed holder never wedges the node, as the ``flock`` it replaces
guaranteed; uncontended it is a compare-exchange in user space instead of two system calls.
"""
from __future__ import annotations

import ctypes
import errno
import os

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..errors import ResourceError
from .layout import LOCK_BYTES

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "ppc64le": 221, "s390x": 238}.get(os.uname().machine, -1)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
EOWNERDEAD = errno.EOWNERDEAD
# futex_wait results
WOKEN, TIMED_OUT, CHANGED = 0, 1, 2

_i8p = ir.IntType(8).as_pointer()
_i32, _i64 = ir.IntType(32), ir.IntType(64)


def _data(context, builder, aryty, ary):
    return builder.bitcast(context.make_array(aryty)(context, builder, ary).data, _i8p)


def _item(context, builder, aryty, ary, idx):
    a = context.make_array(aryty)(context, builder, ary)
    return builder.bitcast(cgutils.get_item_pointer(context, builder, aryty, a, [idx]), _i8p)


def _errno(builder):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32.as_pointer(), []),
                                        "__errno_location")
    return builder.load(builder.call(fn, []))


def _syscall(builder, args):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i64, [_i64], var_arg=True),
                                        "syscall")
    return builder.call(fn, args)


@intrinsic
def futex_wait(typingctx, words, idx, expected, timeout_ns):
    """Sleep while ``words[idx] == expected`` (an int32 of a shared mapping), at most
    ``timeout_ns``: WOKEN, TIMED_OUT, or CHANGED (the word differed, or a signal)."""
    if not (isinstance(words, types.Array) and words.dtype == types.int32):
        return None

    def codegen(context, builder, sig, args):
        addr = _item(context, builder, sig.args[0], args[0], args[1])
        ns = context.cast(builder, args[3], sig.args[3], types.int64)
        ts = cgutils.alloca_once(builder, ir.LiteralStructType([_i64, _i64]))
        billion = ir.Constant(_i64, 1_000_000_000)
        builder.store(builder.sdiv(ns, billion), cgutils.gep_inbounds(builder, ts, 0, 0))
        builder.store(builder.srem(ns, billion), cgutils.gep_inbounds(builder, ts, 0, 1))
        exp = context.cast(builder, args[2], sig.args[2], types.int32)
        r = _syscall(builder, [ir.Constant(_i64, _SYS_FUTEX), addr, ir.Constant(_i32, _FUTEX_WAIT),
                               exp, builder.bitcast(ts, _i8p), ir.Constant(_i8p, None),
                               ir.Constant(_i32, 0)])
        ok = builder.icmp_signed("==", r, ir.Constant(_i64, 0))
        with builder.if_else(ok) as (then, otherwise):
            with then:
                bb_ok = builder.block
            with otherwise:
                e = _errno(builder)
                timed = builder.icmp_signed("==", e, ir.Constant(_i32, errno.ETIMEDOUT))
                other = builder.select(timed, ir.Constant(_i64, TIMED_OUT), ir.Constant(_i64, CHANGED))
                bb_err = builder.block
        phi = builder.phi(_i64)
        phi.add_incoming(ir.Constant(_i64, WOKEN), bb_ok)
        phi.add_incoming(other, bb_err)
        return phi
    return types.int64(words, types.intp, expected, timeout_ns), codegen


@intrinsic
def futex_wake(typingctx, words, idx, n):
    """Wake up to ``n`` sleepers on ``words[idx]``; how many woke (never blocks)."""
    if not (isinstance(words, types.Array) and words.dtype == types.int32):
        return None

    def codegen(context, builder, sig, args):
        addr = _item(context, builder, sig.args[0], args[0], args[1])
        cnt = context.cast(builder, args[2], sig.args[2], types.int32)
        return _syscall(builder, [ir.Constant(_i64, _SYS_FUTEX), addr, ir.Constant(_i32, _FUTEX_WAKE),
                                  cnt, ir.Constant(_i8p, None), ir.Constant(_i8p, None),
                                  ir.Constant(_i32, 0)])
    return types.int64(words, types.intp, n), codegen


def _pthread(name):
    @intrinsic
    def call(typingctx, region):
        if not isinstance(region, types.Array):
            return None

        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32, [_i8p]), name)
            return builder.sext(builder.call(fn, [_data(context, builder, sig.args[0], args[0])]), _i64)
        return types.int64(region), codegen
    return call


_lock = _pthread("pthread_mutex_lock")
mutex_trylock = _pthread("pthread_mutex_trylock")
mutex_unlock = _pthread("pthread_mutex_unlock")
_consistent = _pthread("pthread_mutex_consistent")


@numba.njit(nogil=True, cache=True)
def mutex_lock(region):
    """Lock the segment's mutex; True if its last owner died holding it (the state it
    guarded may be half-changed: the caller's reclaim scan repairs what it can)."""
    r = _lock(region)
    if r == EOWNERDEAD:
        _consistent(region)
        return True
    return False


@intrinsic
def set_affinity(typingctx, tid, cpu):
    """sched_setaffinity(tid, {cpu}); 0 or -1 (a hint: the thread pins itself as well)."""
    def codegen(context, builder, sig, args):
        mask_t = ir.ArrayType(_i64, 16)  # a glibc cpu_set_t: 1024 CPUs
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_i32, [_i32, _i64, _i8p]), "sched_setaffinity")
        mask = cgutils.alloca_once(builder, mask_t)
        builder.store(ir.Constant(mask_t, None), mask)
        c = context.cast(builder, args[1], sig.args[1], types.int64)
        word = cgutils.gep_inbounds(builder, mask, 0, builder.udiv(c, ir.Constant(_i64, 64)))
        builder.store(builder.shl(ir.Constant(_i64, 1), builder.urem(c, ir.Constant(_i64, 64))), word)
        t = context.cast(builder, args[0], sig.args[0], types.int32)
        r = builder.call(fn, [t, ir.Constant(_i64, 128), builder.bitcast(mask, _i8p)])
        return builder.sext(r, _i64)
    return types.int64(tid, cpu), codegen


@intrinsic
def monotonic_ns(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in nanoseconds: time.monotonic_ns's clock."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_i32, [_i32, ir.LiteralStructType([_i64, _i64]).as_pointer()]),
            "clock_gettime")
        ts = cgutils.alloca_once(builder, ir.LiteralStructType([_i64, _i64]))
        builder.call(fn, [ir.Constant(_i32, 1), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(_i64, 1_000_000_000)), nsec)
    return types.int64(), codegen


# --- from Python ------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
# Through CDLL the call releases the GIL: a locker that has to wait must not hold it, or a
# thread of its own process holding the mutex (Python code under the lock) could never go on.
_py_lock = _libc.pthread_mutex_lock
_py_lock.argtypes = [ctypes.c_void_p]
_py_lock.restype = ctypes.c_int


@numba.njit(nogil=False, cache=True)
def _try(region):
    return mutex_trylock(region)


@numba.njit(nogil=False, cache=True)
def _unlock(region):
    return mutex_unlock(region)


def init_mutex(region) -> None:
    """Make ``region`` (a uint8 view of LOCK_BYTES of a shared mapping) a robust,
    process-shared mutex; nobody may be using it."""
    attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t is 4 bytes on glibc
    addr = ctypes.c_void_p(region.ctypes.data)
    for step, rc in (("attr_init", _libc.pthread_mutexattr_init(attr)),
                     ("setpshared", _libc.pthread_mutexattr_setpshared(attr, 1)),  # PTHREAD_PROCESS_SHARED
                     ("setrobust", _libc.pthread_mutexattr_setrobust(attr, 1)),    # PTHREAD_MUTEX_ROBUST
                     ("init", _libc.pthread_mutex_init(addr, attr))):
        if rc:
            raise ResourceError(f"coop: pthread_mutex{step} failed: {os.strerror(rc)}")
    _libc.pthread_mutexattr_destroy(attr)


def lock_from_python(region) -> bool:
    """Lock from Python (the GIL held while it is free, released while waiting); True if
    the last owner died holding it (made consistent)."""
    rc = int(_try(region))
    if rc == errno.EBUSY:
        rc = _py_lock(ctypes.c_void_p(region.ctypes.data))
    if rc == EOWNERDEAD:
        _libc.pthread_mutex_consistent(ctypes.c_void_p(region.ctypes.data))
        return True
    if rc:
        raise ResourceError(f"coop: cannot lock the arbiter ({os.strerror(rc)})")
    return False


def unlock_from_python(region) -> None:
    _unlock(region)


def prepare() -> None:
    """Compile (or load) the Python-side lock helpers."""
    import numpy as np

    m = np.zeros(LOCK_BYTES, np.uint8)
    init_mutex(m)
    lock_from_python(m)
    unlock_from_python(m)
