"""The frame workload: a uint8[L, H, W] tensor in POSIX shared memory.

``Slab`` is the workspace (:class:`space.Workspace`: the original, generated once and
read through a read-only view, and the work copy that each timed run sorts) of the
paper's tensor: its frames come from the seed and its check is the sort check.
"""
from __future__ import annotations

import numpy as np

from ..kernels import count_bad_rows, generate_frames
from ..errors import UsageError
from ..oslayer.shm import available_memory
from .space import Workspace, over_frames

INT32_MAX = 2**31 - 1  # = store.format.INT32_MAX (not imported: h5py stays out of workers)


def tensor_bytes(frames: int, height: int, width: int) -> int:
    return frames * height * width


def check_sizes(frames: int, height: int, width: int, copies: int = 2) -> None:
    """Raise UsageError for empty sizes or a tensor that would not fit in memory."""
    for what, v, top in (("frames", frames, 2**63 - 1), ("height", height, INT32_MAX),
                         ("width", width, INT32_MAX)):
        if v < 1:
            raise UsageError(f"--{what} must be at least 1, got {v}")
        if v > top:  # the study file stores H and W as int32, L as int64
            raise UsageError(f"--{what} must be at most {top}, got {v}")
    need = copies * tensor_bytes(frames, height, width)
    have = available_memory()
    if need > have:
        raise UsageError(
            f"tensor {frames}x{height}x{width} needs {need / 2**30:.2f} GiB "
            f"(original + work copy) but only {have / 2**30:.2f} GiB is available"
        )


def _count_bad(orig: np.ndarray, work: np.ndarray, first: int, count: int) -> int:
    """Rows of the work copy that are unsorted or not a permutation of the original."""
    return sum(over_frames(lambda a, n: count_bad_rows(orig, work, first + a, n), count))


class Slab(Workspace):
    """The original tensor and its work copy for one node, in shared memory: a
    :class:`space.Workspace` whose original is generated from ``seed`` and whose check is
    the sort check. ``frame0`` is the global id of local frame 0, so an MPI rank holding
    frames ``frame0 .. frame0+frames-1`` generates exactly those frames of the global tensor.
    """

    def __init__(self, frames: int, height: int, width: int, seed: int, frame0: int = 0,
                 generate: bool = True):
        check_sizes(frames, height, width)
        super().__init__((frames, height, width), np.uint8, self._frames, _count_bad, frame0,
                         seed, generate=generate)

    def _frames(self, out: np.ndarray, first: int) -> None:
        generate_frames(out, self.seed, self.frame0 + first)
