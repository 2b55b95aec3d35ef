"""The workspace of a timed run: the original and the work copy of an array of tasks (first
axis), of any dtype and shape. :class:`Workspace` is the one type: it owns the shared memory
behind them and releases it on every exit; :class:`slab.Slab`, the uint8 sort tensor, is a
thin layer over it, and `parallel_for` wraps a caller's array in it (:meth:`Workspace.around`).
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..errors import INTERRUPTS
from ..oslayer.closing import Closing
from ..oslayer.cpus import n_cpus
from ..oslayer.shm import Segment, segment_array, sweep_orphans

# (original, result) -> number of bad tasks (0 = verified); -1 = not checked by choice
Checker = Callable[[np.ndarray, np.ndarray, int, int], int]
# fill(out, first): writes local tasks first .. first+len(out)-1 of the original into out
Fill = Callable[[np.ndarray, int], None]

NOT_CHECKED = -1


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


def bool_checker(verify: Callable[[np.ndarray, np.ndarray], bool]) -> Checker:
    """A user verifier ``verify(original, result) -> bool`` as a checker over the whole
    array: 0 bad tasks when it says True, all of them otherwise (it cannot say which)."""
    name = getattr(verify, "__qualname__", repr(verify))

    def check(orig, work, first, count):
        before = orig[first:first + count]  # a view of its own: read-only, the original not
        before.flags.writeable = False  # (a verifier that wrote it, o[:] = 0, made every later
        # run sort zeros, all of them verified)
        try:
            said = verify(before, work[first:first + count])
        except INTERRUPTS:  # Ctrl-C or SIGTERM lands here as often as
            raise  # anywhere: it ends the study
        except BaseException as exc:  # noqa: BLE001 - sys.exit too: it rejects the run, not
            # the study (it ended the command, silently, with the verifier's status)
            print(f"hybridsched: verifier {name} raised {type(exc).__name__}: {exc}; "
                  "the run counts as unverified", file=sys.stderr)
            return count
        if not isinstance(said, (bool, np.bool_)):  # "no" is true to bool()
            print(f"hybridsched: verifier {name} returned {type(said).__name__} {said!r:.40}, "
                  "not True or False; the run counts as unverified", file=sys.stderr)
            return count
        return 0 if said else count
    return check


class Workspace(Closing):
    """What the timed run (:class:`study.runner.TimedRun`) asks of the tasks: ``work``, the
    array the workers write (shared memory for forked workers); ``original``, the read-only
    input (restoring, verifying); ``kernel``, the chunk kernel or None for the run
    configuration's built-in one; a fresh copy before every run and the bad tasks after
    it (both untimed). A context manager: its segments are removed on every exit.

    ``frame0`` is the global id of local task 0, so an MPI rank holding tasks
    ``frame0 .. frame0+frames-1`` generates exactly those of the global array.
    """

    kernel: Callable | None = None  # set by the builder: a chunk kernel(data, first, count)
    _orig: np.ndarray | None  # None once closed, or where nothing reads the original
    _work: np.ndarray | None  # None once closed

    def __init__(self, shape: tuple[int, ...], dtype, fill: Fill, checker: Checker | None,
                 frame0: int = 0, seed: int = 0, *, generate: bool = True):
        """Both copies in new segments; the original filled by ``fill`` now, or by the
        caller block by block (:meth:`generate`) when ``generate`` is False."""
        self._own(tuple(shape), dtype, checker, frame0, seed)
        self._fill: Fill | None = fill
        try:
            self._orig = self._segment("orig")
            self._work = self._segment("work")
            if generate:
                self.generate(0, self.frames)
        except BaseException:
            self.close()
            raise

    @classmethod
    def around(cls, data: np.ndarray, in_place: bool, keep_original: bool,
               checker: Checker | None) -> "Workspace":
        """The workspace of one run on a caller's array (`parallel_for`): the array itself
        (``in_place``: threads, or memory that forked workers share), else a segment copy
        of it, which the caller copies back; the original, where anything reads it
        (``keep_original``), a private copy, as only this process reads it (verifying,
        pipe-MtoM's restore)."""
        space = cls.__new__(cls)
        space._own(data.shape, data.dtype, checker, 0, 0)
        space._fill = None
        try:
            space._work = data if in_place else space._segment("api")
            if not in_place:
                np.copyto(space._work, data)
            space._orig = np.array(data, copy=True) if keep_original else None
        except BaseException:
            space.close()
            raise
        space._pristine = True  # the caller's input is the run's input: no copy before it
        return space

    def _own(self, shape: tuple[int, ...], dtype, checker: Checker | None, frame0: int,
             seed: int) -> None:
        sweep_orphans()  # dead creators' segments go before we make ours
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.frame0, self.seed = frame0, seed
        self._checker = checker
        self._segments: list[Segment] = []
        self._orig = None
        self._work = None
        self._pristine = False  # the work copy holds the original and no run has had it

    def _segment(self, role: str) -> np.ndarray:
        seg, arr = segment_array(self.shape, self.dtype, role)
        self._segments.append(seg)
        return arr

    @property
    def frames(self) -> int:
        return self.shape[0]

    @property
    def original(self) -> np.ndarray | None:
        if self._orig is None:
            return None
        view = self._orig.view()
        view.flags.writeable = False
        return view

    @property
    def work(self) -> np.ndarray:
        assert self._work is not None, "a closed workspace has no work copy"
        return self._work

    def generate(self, first: int, count: int) -> None:
        """Materialise local tasks ``first .. first+count-1`` of the original."""
        orig, fill = self._orig, self._fill
        assert orig is not None and fill is not None, "generated only while open, once"
        over_frames(lambda a, n: fill(orig[first + a:first + a + n], first + a), count)

    def fresh_copy(self) -> None:
        """Overwrite the work copy with the original (untimed, before every run)."""
        if self._pristine:
            self._pristine = False
            return
        orig, work = self._orig, self.work
        assert orig is not None, "a work copy is refreshed only from a kept original"
        over_frames(lambda a, n: np.copyto(work[a:a + n], orig[a:a + n]), self.frames)

    def bad_rows(self, first: int = 0, count: int | None = None) -> int:
        """Bad tasks of the work copy (0 = verified), or NOT_CHECKED without a checker."""
        if self._checker is None:
            return NOT_CHECKED
        count = self.frames - first if count is None else count
        assert self._orig is not None, "a checked workspace keeps its original"
        return int(self._checker(self._orig, self.work, first, count))

    def unlink_names(self) -> None:
        """Drop the segments' names at once, keeping the mappings: nothing can be left in
        /dev/shm even if this process is later SIGKILLed (MPI ranks, co-located jobs)."""
        for seg in self._segments:
            seg.unlink_name()

    def close(self) -> None:
        while self._segments:
            self._segments.pop().close()
        self._orig = self._work = None
