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

import errno

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils

from . import futex
from .atomics import intrinsic
from .shmlock import DIED_AT, EOWNERDEAD, LOCK_BYTES, init_mutex, lock_with


_SYS_FUTEX = -1 if futex.SYS_FUTEX is None else futex.SYS_FUTEX  # unused where unavailable
_FUTEX_WAIT, _FUTEX_WAKE = futex.FUTEX_WAIT, futex.FUTEX_WAKE
# futex_wait results: woken (or spurious), the timeout ran out, the word was not the
# expected one, a signal came, any other error (a bad address or timeout)
WOKEN, TIMED_OUT, CHANGED, INTERRUPTED, FAILED = 0, 1, 2, 3, 4

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
    ``timeout_ns``: WOKEN, TIMED_OUT, CHANGED, INTERRUPTED or FAILED."""
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
                other = ir.Constant(_i64, FAILED)
                for code, res in ((errno.EINTR, INTERRUPTED), (errno.EAGAIN, CHANGED),
                                  (errno.ETIMEDOUT, TIMED_OUT)):
                    hit = builder.icmp_signed("==", e, ir.Constant(_i32, code))
                    other = builder.select(hit, ir.Constant(_i64, res), other)
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


@numba.njit(cache=True)
def _took(region, r):
    """After a lock call returned ``r``: whether the mutex is now ours; from a dead owner
    it is made consistent and the death notice set."""
    if r == EOWNERDEAD:
        _consistent(region)
        region[DIED_AT] = 1
    return r == 0 or r == EOWNERDEAD


@numba.njit(nogil=True, cache=True)
def mutex_lock(region):
    """Lock the segment's mutex; True if its last owner died holding it (the state it
    guarded may be half-changed: the death notice asks for a reclaim scan)."""
    r = _lock(region)
    if not _took(region, r):  # EINVAL (not a mutex), EDEADLK (ours already): never go on unlocked
        raise RuntimeError("coop: cannot lock the arbiter's mutex")
    return r == EOWNERDEAD


@intrinsic
def set_affinity(typingctx, tid, cpu):
    """sched_setaffinity(tid, {cpu}); 0 or -1 (a hint: the thread pins itself as well)."""
    def codegen(context, builder, sig, args):
        mask_t = ir.ArrayType(_i64, 16)  # a glibc cpu_set_t: 1024 CPUs (callers check)
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

@intrinsic
def _timedlock(typingctx, region, ns):
    """pthread_mutex_timedlock for at most ``ns`` from now (CLOCK_REALTIME, as it wants)."""
    if not isinstance(region, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ts_t = ir.LiteralStructType([_i64, _i64])
        now = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32, [_i32, ts_t.as_pointer()]),
                                             "clock_gettime")
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i32, [_i8p, ts_t.as_pointer()]),
                                            "pthread_mutex_timedlock")
        ts = cgutils.alloca_once(builder, ts_t)
        builder.call(now, [ir.Constant(_i32, 0), ts])  # 0 = CLOCK_REALTIME
        billion = ir.Constant(_i64, 1_000_000_000)
        sec_p, nsec_p = cgutils.gep_inbounds(builder, ts, 0, 0), cgutils.gep_inbounds(builder, ts, 0, 1)
        total = builder.add(builder.load(nsec_p), context.cast(builder, args[1], sig.args[1], types.int64))
        builder.store(builder.add(builder.load(sec_p), builder.sdiv(total, billion)), sec_p)
        builder.store(builder.srem(total, billion), nsec_p)
        r = builder.call(fn, [_data(context, builder, sig.args[0], args[0]), ts])
        return builder.sext(r, _i64)
    return types.int64(region, ns), codegen


@numba.njit(nogil=False, cache=True)
def _try_into(region, held):
    r = mutex_trylock(region)
    if _took(region, r):
        held[0] = 1
    return r


@numba.njit(nogil=True, cache=True)
def _wait_into(region, held, ns):
    """One slice of waiting, the GIL released (a thread of this process holding the mutex
    may need it to go on)."""
    r = _timedlock(region, ns)
    if _took(region, r):
        held[0] = 1
    return r


@numba.njit(nogil=False, cache=True)
def _unlock_from(region, held):
    """The mutex given back if ``held[0]`` says it was taken, and the flag cleared, in one
    call: a Ctrl-C between the two can neither leak it nor give it back twice."""
    if held[0]:
        held[0] = 0
        return mutex_unlock(region)
    return 0


def lock_into(region, held) -> bool:
    """Lock from Python (:func:`shmlock.lock_with` over the compiled calls)."""
    return lock_with(_try_into, _wait_into, region, held)


def unlock_from(region, held) -> None:
    _unlock_from(region, held)


def prepare() -> None:
    """Compile (or load) the Python-side lock helpers."""
    import numpy as np

    m = np.zeros(LOCK_BYTES, np.uint8)
    held = np.zeros(1, np.int8)
    init_mutex(m)
    lock_into(m, held)
    unlock_from(m, held)
    _wait_into(m, held, 0)  # free: taken at once (compiled all the same)
    unlock_from(m, held)
