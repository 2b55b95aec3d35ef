"""A workspace: what one timed run needs besides the scheduler, for any array of tasks
(:class:`Workspace`). :class:`slab.Slab` is the uint8 sort tensor's workspace;
:class:`ArraySpace` holds any dtype and shape (``--input``, Mandelbrot, the Python API).
"""
from __future__ import annotations

import sys
from typing import Callable, Protocol

import numpy as np

from ..oslayer.shm import segment_array
from .slab import over_frames
from ..oslayer.shm import sweep_orphans

# (original, result) -> number of bad tasks (0 = verified); -1 = not checked by choice
Checker = Callable[[np.ndarray, np.ndarray, int, int], int]

NOT_CHECKED = -1


class Workspace(Protocol):
    """What the timed run (:class:`study.runner.TimedRun`) asks of the tasks: ``work``, the
    array the workers write (shared memory for forked workers); ``original``, the read-only
    input (restoring, verifying); ``kernel``, the chunk kernel or None for the run
    configuration's built-in one; a fresh copy before every run and the bad tasks after
    it (both untimed); a context manager that releases its memory."""

    @property
    def work(self) -> np.ndarray: ...

    @property
    def original(self) -> np.ndarray | None: ...

    kernel: Callable | None

    def fresh_copy(self) -> None: ...

    def bad_rows(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Workspace": ...

    def __exit__(self, *exc) -> None: ...


def bool_checker(verify: Callable[[np.ndarray, np.ndarray], bool]) -> Checker:
    """A user verifier ``verify(original, result) -> bool`` as a checker over the whole
    array: 0 bad tasks when it says True, all of them otherwise (it cannot say which)."""
    def check(orig, work, first, count):
        try:
            ok = bool(verify(orig[first:first + count], work[first:first + count]))
        except Exception as exc:  # a verifier that fails rejects the run, not the study
            name = getattr(verify, "__qualname__", repr(verify))
            print(f"hybridsched: verifier {name} raised {type(exc).__name__}: {exc}; "
                  "the run counts as unverified", file=sys.stderr)
            ok = False
        return 0 if ok else count
    return check


class ArraySpace:
    """Original and work copy of an array of tasks (first axis) in shared memory."""

    kernel: Callable | None = None  # set by the builder: a chunk kernel(data, first, count)

    def __init__(self, shape: tuple[int, ...], dtype, fill: Callable[[np.ndarray, int], None],
                 checker: Checker | None, frame0: int = 0, seed: int = 0):
        """``fill(out, first)`` writes local tasks first.. of the original into ``out``."""
        sweep_orphans()
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.frame0, self.seed = frame0, seed
        self._fill, self._checker = fill, checker
        self._segments = []
        try:
            seg, self._orig = segment_array(self.shape, self.dtype, "orig")
            self._segments.append(seg)
            seg, self._work = segment_array(self.shape, self.dtype, "work")
            self._segments.append(seg)
            self.generate(0, self.frames)
        except BaseException:
            self.close()
            raise

    @property
    def frames(self) -> int:
        return self.shape[0]

    @property
    def original(self) -> np.ndarray:
        view = self._orig.view()
        view.flags.writeable = False
        return view

    @property
    def work(self) -> np.ndarray:
        return self._work

    def generate(self, first: int, count: int) -> None:
        orig = self._orig
        over_frames(lambda a, n: self._fill(orig[first + a:first + a + n], first + a), count)

    def fresh_copy(self) -> None:
        orig, work = self._orig, self._work
        over_frames(lambda a, n: np.copyto(work[a:a + n], orig[a:a + n]), self.frames)

    def bad_rows(self, first: int = 0, count: int | None = None) -> int:
        """Bad tasks of the work copy (0 = verified), or NOT_CHECKED without a checker."""
        if self._checker is None:
            return NOT_CHECKED
        count = self.frames - first if count is None else count
        return int(self._checker(self._orig, self._work, first, count))

    def unlink_names(self) -> None:
        for seg in self._segments:
            seg.unlink_name()

    def close(self) -> None:
        while self._segments:
            self._segments.pop().close()
        for name in ("_orig", "_work"):  # views dropped: typed as what they hold while open
            setattr(self, name, None)

    def __enter__(self) -> "ArraySpace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
