"""The arbiter's mutex in a shared segment, the part that needs no compiler: its bytes, its
making, and a Python caller's wait for it. A glibc ``pthread_mutex_t``, process-shared and
robust (the kernel marks it when its owner dies: EOWNERDEAD to the next locker, who makes
it consistent), with a death notice beside it. The calls that take it are given by the
caller: numba's (:mod:`native`, for a process with Python workers) or the coop shim's
through ctypes (``coop/ops.py``, for one without, which then loads no numba)."""
from __future__ import annotations

import ctypes
import errno
import os
from typing import Callable

from ..errors import ResourceError

# A glibc pthread_mutex_t (40 bytes) and the death notice (DIED_AT) on a cache line of its own
LOCK_BYTES = 64
# A byte of the lock region past glibc's pthread_mutex_t: set by whoever takes the mutex
# from a dead owner, cleared by the reclaim scan that follows (Arbiter.reclaim_due runs it
# at once when set), so a death noticed by a compiled hand-off is not lost.
DIED_AT = 48
EOWNERDEAD = errno.EOWNERDEAD

# How long a Python locker waits in one call before it looks at signals: the delay a Ctrl-C
# sees while another participant holds the lock, against a wake-up per slice.
SLICE_NS = 50_000_000

_libc = ctypes.CDLL(None, use_errno=True)

# (region, held) -> the lock call's result, ``held[0]`` set by the call that takes it
TryLock = Callable[[object, object], int]
# (region, held, ns) -> the same, waiting at most ns
WaitLock = Callable[[object, object, int], int]


def init_mutex(region) -> None:
    """Make ``region`` (a uint8 view of LOCK_BYTES of a shared mapping) a robust,
    process-shared mutex; nobody may be using it."""
    region[DIED_AT] = 0
    attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t is 4 bytes on glibc
    addr = ctypes.c_void_p(region.ctypes.data)
    for step, rc in (("attr_init", _libc.pthread_mutexattr_init(attr)),
                     ("setpshared", _libc.pthread_mutexattr_setpshared(attr, 1)),  # PTHREAD_PROCESS_SHARED
                     ("setrobust", _libc.pthread_mutexattr_setrobust(attr, 1)),    # PTHREAD_MUTEX_ROBUST
                     # PTHREAD_MUTEX_ERRORCHECK: relocking by its owner fails (EDEADLK), not hangs
                     ("settype", _libc.pthread_mutexattr_settype(attr, 2)),
                     ("init", _libc.pthread_mutex_init(addr, attr))):
        if rc:
            raise ResourceError(f"coop: pthread_mutex{step} failed: {os.strerror(rc)}")
    _libc.pthread_mutexattr_destroy(attr)


def lock_with(try_lock: TryLock, wait_lock: WaitLock, region, held) -> bool:
    """Lock from Python; ``held[0]`` becomes 1 in the same call that takes the mutex, so a
    caller that unlocks in ``finally`` when it is set never leaks the lock, whenever an
    exception (a Ctrl-C) comes. Waits in slices, so a signal gets through while another
    participant holds it. True if the last owner died holding it."""
    rc = int(try_lock(region, held))
    while rc == errno.EBUSY or rc == errno.ETIMEDOUT:
        rc = int(wait_lock(region, held, SLICE_NS))
    if rc and rc != EOWNERDEAD:
        raise ResourceError(f"coop: cannot lock the arbiter ({os.strerror(rc)})")
    return rc == EOWNERDEAD
