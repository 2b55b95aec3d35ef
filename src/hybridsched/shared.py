"""Arrays in POSIX shared memory for the user: forked and pipe workers write into them.

``shared_array(shape, dtype)`` gives a numpy array that forked workers share with this
process, so `hybridsched.parallel_for` runs on it in place on every backend. Any
other array is copied into a segment for the fork and pipe backends and copied back
afterwards (or refused with ``copy=False``): a child writing into its own copy-on-write
page of an ordinary array would leave the caller's array unchanged.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from .errors import UsageError
from .oslayer.shm import Segment, segment_array, sweep_orphans

_ours: dict[int, Segment] = {}  # id(mmap) -> the live segment behind arrays we handed out


@contextmanager
def shared_array(shape, dtype=np.float64) -> Iterator[np.ndarray]:
    """A zero-filled array in shared memory, valid inside the ``with`` block.

    Fork and pipe workers write into it directly, so ``parallel_for`` needs no copy. The
    segment's name is removed from /dev/shm on leaving the block; keep no view beyond it.
    """
    try:
        shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        dtype = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"shared_array: bad shape or dtype ({exc})") from None
    if any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in shape):
        raise UsageError(f"shared_array: the shape must be whole numbers, got {shape}")
    shape = tuple(int(s) for s in shape)
    if dtype.hasobject:
        raise UsageError("shared_array: object arrays cannot be shared between processes")
    sweep_orphans()
    seg, arr = segment_array(shape, dtype, "user")
    _ours[id(seg._map)] = seg
    try:
        yield arr
    finally:
        _ours.pop(id(seg._map), None)
        seg.close()


def _root(arr: np.ndarray):
    """The object that owns the memory behind ``arr`` (numpy wraps an mmap in a
    memoryview, whose ``obj`` is the mmap)."""
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base


def is_shared(arr: np.ndarray) -> bool:
    """True when forked children write into the memory of ``arr`` itself: an array from
    `shared_array`, a segment of ours, or a writable ``np.memmap`` of a file
    (MAP_SHARED). Ordinary arrays are private to each process after a fork."""
    root = _root(arr)
    seg = _ours.get(id(root))
    if seg is not None and seg._map is root:
        return True
    if isinstance(arr, np.memmap) and getattr(arr, "mode", "") in ("r+", "w+"):
        return True
    return False
