"""Shared memory: named POSIX segments (the tensor slab, the API's arrays), anonymous
shared mappings inherited across fork (the process teams' tables, barriers, gates), the
sweep of segments whose creator died, and how much room there is for new ones.

Every named segment we create is registered and unlinked on every exit path of the
creating process: normal close, exception, Ctrl-C, SIGTERM (the CLI turns it into
SystemExit) and interpreter exit (atexit). Forked children never unlink. Anonymous
``MAP_SHARED`` memory leaves nothing in /dev/shm at all.
"""
from __future__ import annotations

import atexit
import itertools
import math
import mmap
import os
import re
import shutil
import stat
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import posix_ipc

from .closing import Closing
from ..errors import ResourceError, UsageError
from .procfs import pid_alive, pid_namespace

SEGMENT_PREFIX = "hybridsched."
_counter = itertools.count()
_live: dict[str, int] = {}  # segment name -> pid of the creator


def _unlink(name: str) -> None:
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        pass


@atexit.register
def _unlink_leftovers() -> None:
    me = os.getpid()
    for name, pid in list(_live.items()):
        if pid == me:
            _unlink(name)
            _live.pop(name, None)


def live_segments() -> list[str]:
    """Names of the segments this process created and has not released yet."""
    return [n for n, pid in _live.items() if pid == os.getpid()]


def unmap(m: mmap.mmap | None) -> None:
    """Close a mapping now, or, while a numpy view of it is still referenced somewhere,
    leave it to go with the last view (closing would raise BufferError)."""
    if m is not None:
        try:
            m.close()
        except BufferError:
            pass


class Segment(Closing):
    """One POSIX shared-memory segment mapped as a numpy array; a context manager.

    Closing unlinks the name at once (so nothing is left in /dev/shm) and unmaps when the
    last numpy view is gone.
    """

    def __init__(self, shape: tuple[int, ...], role: str = "seg"):
        nbytes = int(np.prod(shape))
        # creator pid and pid namespace in the name: sweep_orphans removes a segment only
        # when its creator is provably gone (see _OUR_NAME)
        self.name = f"/{SEGMENT_PREFIX}{os.getpid()}.{pid_namespace()}.{next(_counter)}.{role}"
        # registered before it exists, so a Ctrl-C/SIGTERM landing right after the create
        # still finds it in the atexit cleanup (unlinking a name never created is harmless)
        _live[self.name] = os.getpid()
        try:
            shm = posix_ipc.SharedMemory(self.name, posix_ipc.O_CREX, mode=0o600, size=max(nbytes, 1))
        except (posix_ipc.Error, OSError) as exc:
            _live.pop(self.name, None)
            raise ResourceError(f"cannot create shared-memory segment of {nbytes} bytes: {exc}") from exc
        try:
            # reserve the pages now: on a /dev/shm that fills up later (another process)
            # the first touch of an unreserved page would be SIGBUS, not an error message
            os.posix_fallocate(shm.fd, 0, max(nbytes, 1))
            self._map: mmap.mmap | None = mmap.mmap(shm.fd, max(nbytes, 1))
        except OSError as exc:
            self.close()
            free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
            raise ResourceError(f"cannot reserve a shared-memory segment of {nbytes:,} bytes "
                                f"in /dev/shm ({exc.strerror}; {free:,} bytes free)") from None
        finally:
            shm.close_fd()
        self.array = np.frombuffer(self._map, np.uint8, count=nbytes).reshape(shape)

    def unlink_name(self) -> None:
        """Remove the /dev/shm name now; the mapping (and forked children's) stays valid."""
        if _live.pop(self.name, None) is not None:
            _unlink(self.name)

    def close(self) -> None:
        self.unlink_name()
        self.array = None  # type: ignore[assignment]
        unmap(getattr(self, "_map", None))
        self._map = None


def our_shm_entries(pid: int | None = None) -> list[str]:
    """Entries of /dev/shm made by hybridsched (optionally by one creator pid): for leak tests."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    prefix = SEGMENT_PREFIX + (f"{pid}." if pid is not None else "")
    return sorted(n for n in names if n.startswith(prefix))


# Names we create: hybridsched.<creator pid>.<pid namespace inode>.<counter>.<role>. Only
# an exact match is ours; older names without the namespace, other programs' names that
# happen to share the prefix and anything odd are never touched.
_OUR_NAME = re.compile(r"hybridsched\.(\d+)\.(\d+)\.\d+\.[a-z]+")


def sweep_orphans() -> list[str]:
    """Unlink segments whose creating hybridsched process no longer exists (a run killed
    with SIGKILL cannot clean up after itself); returns the names removed.

    Only regular files owned by this user, named exactly as we name them, made in this pid
    namespace by a pid that is gone here. Anything else (another user's, a directory, a
    live run in a container whose pids mean other processes) is left alone, silently. A
    pid that exists again (reused) keeps its segments: skipping is harmless.
    """
    ns = pid_namespace()
    if not ns:
        return []  # cannot tell namespaces apart: removing could hit a live run
    removed = []
    for name in our_shm_entries():
        m = _OUR_NAME.fullmatch(name)
        if not m or int(m.group(2)) != ns:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join("/dev/shm", name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            os.unlink(path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(name)
    return removed


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes of a ``dtype[shape]`` array, in Python integers (numpy's int64 product wraps
    around silently); refused when it cannot be placed in shared memory."""
    if any(int(s) < 0 for s in shape):
        raise UsageError(f"shared_array: negative dimension in shape {shape}")
    n = math.prod(int(s) for s in shape) * dtype.itemsize
    if n > available_memory():
        raise UsageError(f"shared_array: shape {shape} of {dtype} needs {n:,} bytes, more than "
                         f"the {available_memory():,} available for shared memory")
    return n


def segment_array(shape, dtype, role: str = "user") -> tuple[Segment, np.ndarray]:
    """A new named segment and a ``dtype[shape]`` view of it (zero-filled); the caller
    closes it."""
    dtype = np.dtype(dtype)
    n = _nbytes(shape, dtype)
    seg = Segment((max(n, 1),), role)
    return seg, seg.array[:n].view(dtype).reshape(shape)


def available_memory() -> int:
    """Bytes we may place in new shared-memory segments: RAM available and /dev/shm free."""
    import psutil

    avail = psutil.virtual_memory().available
    try:
        avail = min(avail, shutil.disk_usage("/dev/shm").free)
    except OSError:
        pass
    return avail


# Each region of an anonymous mapping starts on its own cache line: a word written by one
# process (a futex word, a counter) shares no line with its neighbours'.
_LINE = 64


class SharedArrays(Closing):
    """Anonymous ``MAP_SHARED`` memory holding named numpy arrays, inherited across fork
    (children write into the parent's arrays); a context manager that unmaps on close.

    ``regions``: (name, dtype, shape) in order; each becomes an attribute, on a cache line
    of its own, zero-filled."""

    def __init__(self, regions: Sequence[tuple[str, Any, Any]]):
        layout: list[tuple[str, np.dtype, tuple[int, ...], int, int]] = []
        offset = 0
        for name, kind, size in regions:
            dtype = np.dtype(kind)
            shape = (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)
            count = int(np.prod(shape, dtype=np.int64))
            layout.append((name, dtype, shape, count, offset))
            offset += -(-max(count * dtype.itemsize, 1) // _LINE) * _LINE
        try:
            self._map: mmap.mmap | None = mmap.mmap(-1, max(offset, _LINE), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        except OSError as exc:
            raise ResourceError(f"cannot map {offset} bytes of shared memory: {exc}") from exc
        self._names = [name for name, *_ in layout]
        for name, dtype, shape, count, off in layout:
            setattr(self, name, np.frombuffer(self._map, dtype, count, off).reshape(shape))

    if TYPE_CHECKING:
        # the regions are attributes named at run time (``regions``)
        def __getattr__(self, name: str) -> np.ndarray: ...

    def close(self) -> None:
        for name in self._names:
            setattr(self, name, None)
        unmap(self._map)
        self._map = None


def shared_zeros(shape, dtype) -> tuple[SharedArrays, np.ndarray]:
    """One anonymous shared array: (its owner, to close; the array)."""
    owner = SharedArrays([("array", dtype, shape)])
    return owner, owner.array

