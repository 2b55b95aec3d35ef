"""The frame workload: a uint8[L, H, W] tensor in POSIX shared memory.

``Slab`` owns two segments (:mod:`oslayer.shm`): the original (generated once, read-only
view) and the work copy that each timed run sorts.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..kernels import count_bad_rows, generate_frames
from ..errors import UsageError
from ..oslayer.cpus import n_cpus
from ..oslayer.shm import Segment, available_memory, sweep_orphans

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


def over_frames(fn: Callable[[int, int], object], frames: int, threads: int | None = None) -> list:
    """Run ``fn(first, count)`` over contiguous blocks of frames on a few threads.

    Only for the untimed steps (generation, copy, verification); the kernels release the GIL.
    """
    threads = max(1, min(threads or n_cpus(), frames))
    q, r = divmod(frames, threads)
    blocks = []
    first = 0
    for w in range(threads):
        count = q + (w < r)
        blocks.append((first, count))
        first += count
    if threads == 1:
        return [fn(*blocks[0])]
    with ThreadPoolExecutor(threads, thread_name_prefix="hybridsched-prep") as pool:
        return list(pool.map(lambda b: fn(*b), blocks))


class Slab:
    """The original tensor and its work copy for one node, in shared memory.

    ``frame0`` is the global id of local frame 0, so an MPI rank holding frames
    ``frame0 .. frame0+frames-1`` generates exactly those frames of the global tensor.
    """

    kernel: Callable | None = None  # the run configuration's built-in kernel applies (workloads.space)

    def __init__(self, frames: int, height: int, width: int, seed: int, frame0: int = 0,
                 generate: bool = True):
        check_sizes(frames, height, width)
        sweep_orphans()
        self.shape = (frames, height, width)
        self.seed = seed
        self.frame0 = frame0
        self._segments: list[Segment] = []
        try:
            self._orig = self._add(Segment(self.shape, "orig"))
            self._work = self._add(Segment(self.shape, "work"))
            if generate:
                self.generate(0, frames)
        except BaseException:
            self.close()
            raise

    def _add(self, seg: Segment) -> Segment:
        self._segments.append(seg)
        return seg

    @property
    def frames(self) -> int:
        return self.shape[0]

    @property
    def original(self) -> np.ndarray:
        view = self._orig.array.view()
        view.flags.writeable = False
        return view

    @property
    def work(self) -> np.ndarray:
        return self._work.array

    def generate(self, first: int, count: int) -> None:
        """Materialise local frames ``first .. first+count-1`` of the original."""
        orig = self._orig.array
        over_frames(lambda a, n: generate_frames(orig[first + a:first + a + n], self.seed,
                                                         self.frame0 + first + a), count)

    def fresh_copy(self) -> None:
        """Overwrite the work copy with the original (untimed, before every run)."""
        orig, work = self._orig.array, self._work.array
        over_frames(lambda a, n: np.copyto(work[a:a + n], orig[a:a + n]), self.frames)

    def bad_rows(self, first: int = 0, count: int | None = None) -> int:
        """Rows of the work copy that are unsorted or not a permutation of the original."""
        count = self.frames - first if count is None else count
        orig, work = self._orig.array, self._work.array
        return sum(over_frames(lambda a, n: count_bad_rows(orig, work, first + a, n), count))

    def unlink_names(self) -> None:
        """Drop the segments' names at once, keeping the mappings: nothing can be left in
        /dev/shm even if this process is later SIGKILLed (MPI ranks use this)."""
        for seg in self._segments:
            seg.unlink_name()

    def close(self) -> None:
        while self._segments:
            self._segments.pop().close()
        self._orig = self._work = None  # type: ignore[assignment]

    def __enter__(self) -> "Slab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
