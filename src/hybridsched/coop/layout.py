"""The arbiter segment's layout: worker states, the record types of its regions and where
each region lies (shared by the rules, which are compiled against it, and the state)."""
from __future__ import annotations

import numpy as np

from ..oslayer.native import LOCK_BYTES

# worker states; LAZY: parked (asleep in a primitive) but still holding its token, because
# nobody waited when it parked; any worker that queues later revokes it (see rules)
FREE, RUNNING, WAITING, BLOCKED, LAZY = 0, 1, 2, 3, 4
STATE_NAMES = {FREE: "free", RUNNING: "running", WAITING: "waiting", BLOCKED: "blocked",
               LAZY: "parked holding its token"}

MAGIC = b"HSCOOP01"
# 2: the header's high-water mark ``hi`` (the compiled rules scan slots below it only),
# ``reclaim_ns`` (when the dead were last looked for) and the LAZY state;
# 3: the ``lock`` region (a robust process-shared mutex, see oslayer/native.py) instead of an flock,
# and each worker's thread id (``tid``: the granter pins the thread it wakes)
VERSION = 3

HEADER_DTYPE = np.dtype([
    ("magic", "S8"), ("version", "i4"), ("ncpu", "i4"), ("max_jobs", "i4"),
    ("max_workers", "i4"), ("quantum_ns", "i8"), ("rr", "i4"), ("waiting", "i4"),
    ("seq", "i8"), ("grants", "i8"), ("rotations", "i8"), ("reclaimed", "i8"),
    ("hi", "i4"), ("_pad", "i4"), ("reclaim_ns", "i8"),
])
CPU_DTYPE = np.dtype([("cpu", "i4"), ("holder", "i4"), ("job", "i4"), ("_pad", "i4"),
                      ("since_ns", "i8")])
JOB_DTYPE = np.dtype([("used", "i4"), ("pid", "i4"), ("key", "i8")])
WORKER_DTYPE = np.dtype([("used", "i4"), ("pid", "i4"), ("job", "i4"), ("state", "i4"),
                         ("cpu", "i4"), ("last_cpu", "i4"), ("seq", "i8"), ("held_ns", "i8"),
                         ("acquired_ns", "i8"), ("tid", "i4"), ("pinned", "i4"),
                         ("_pad", "i4", (2,))])


def layout(ncpu: int, max_jobs: int, max_workers: int) -> list[tuple[str, np.dtype, int]]:
    """(name, dtype, count) of each region, in order; ``wake`` holds the futex words,
    ``lock`` the mutex that guards every change."""
    return [("header", HEADER_DTYPE, 1), ("cpus", CPU_DTYPE, ncpu), ("jobs", JOB_DTYPE, max_jobs),
            ("workers", WORKER_DTYPE, max_workers), ("wake", np.dtype(np.int32), max_workers),
            ("lock", np.dtype(np.uint8), LOCK_BYTES)]


def nbytes(ncpu: int, max_jobs: int, max_workers: int) -> int:
    return sum(_aligned(dt.itemsize * n) for _, dt, n in layout(ncpu, max_jobs, max_workers))


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64  # every region on its own cache line


def views(buf, ncpu: int, max_jobs: int, max_workers: int) -> dict[str, np.ndarray]:
    """Numpy views of the regions of ``buf`` (a mapping or bytearray)."""
    out, off = {}, 0
    for name, dt, n in layout(ncpu, max_jobs, max_workers):
        out[name] = np.frombuffer(buf, dt, n, off)
        off += _aligned(dt.itemsize * n)
    return out


def word_index(dt: np.dtype, field: str) -> tuple[int, int]:
    """(stride, offset) in int32 words of ``field`` in an array of ``dt``: where the
    lock-free paths find it in an int32 view of the region."""
    off = dt.fields[field][1]
    assert dt.itemsize % 4 == 0 and off % 4 == 0
    return dt.itemsize // 4, off // 4

