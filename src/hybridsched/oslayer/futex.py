"""Futex wait and wake on 32-bit words of a shared mapping, through ctypes.

A word in a ``MAP_SHARED`` mapping can be waited on by any process that maps it (the
non-private futex operations), so a worker sleeps in the kernel until another process
posts it, without a named semaphore to leak. ctypes releases the GIL around the call, so a
waiting thread does not stall the others of its process; a wake, which never blocks, keeps
the GIL.
"""
from __future__ import annotations

import ctypes
import errno
import os

import numpy as np

SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "ppc64le": 221, "s390x": 238}.get(os.uname().machine)
FUTEX_WAIT, FUTEX_WAKE = 0, 1

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# FUTEX_WAKE never blocks: called through PyDLL it keeps the GIL. Through CDLL every wake
# released the GIL, which another thread of the process then took, so the waker waited to
# get it back (measured: 17 µs per wake in a two-thread barrier, most of a step's cost).
_syscall_gil = ctypes.PyDLL(None, use_errno=True).syscall
_syscall_gil.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def available() -> bool:
    return SYS_FUTEX is not None


def address(words: np.ndarray, i: int) -> int:
    """Address of the i-th int32 of ``words`` (a view of a shared mapping)."""
    if words.dtype != np.int32:
        raise TypeError("futex words are int32")
    return words.ctypes.data + i * 4


def wait(addr: int, expected: int, timeout: float | None = None) -> bool:
    """Sleep while the word at ``addr`` equals ``expected`` (checked atomically by the
    kernel, so a wake that came first is never lost). False on timeout."""
    ts = None
    if timeout is not None:
        sec = int(timeout)
        ts = ctypes.byref(_Timespec(sec, int((timeout - sec) * 1e9)))
    r = _syscall(SYS_FUTEX, ctypes.c_void_p(addr), FUTEX_WAIT, ctypes.c_int(expected), ts, None, 0)
    if r == 0:
        return True
    e = ctypes.get_errno()
    if e == errno.ETIMEDOUT:
        return False
    if e in (errno.EAGAIN, errno.EINTR):
        return True  # the word had changed already, or a signal: the caller re-checks
    raise OSError(e, os.strerror(e))


def wake(addr: int, n: int = 1) -> int:
    """Wake up to ``n`` waiters on the word at ``addr``; returns how many woke."""
    r = _syscall_gil(SYS_FUTEX, ctypes.c_void_p(addr), FUTEX_WAKE, ctypes.c_int(n), None, None, 0)
    return max(0, int(r))
