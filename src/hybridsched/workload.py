"""The frame workload: a uint8[L, H, W] tensor in POSIX shared memory.

``Slab`` owns two segments: the original (generated once, read-only view) and the work
copy that each timed run sorts. Every segment we create is registered here and unlinked on
every exit path of the creating process: normal close, exception, Ctrl-C, SIGTERM (the CLI
turns it into SystemExit) and interpreter exit (atexit). Forked children never unlink.
"""
from __future__ import annotations

import atexit
import itertools
import mmap
import os
import re
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import posix_ipc

from . import kernels
from .errors import ResourceError, UsageError
from .sysinfo import available_memory, n_cpus, pid_alive, pid_namespace

SEGMENT_PREFIX = "hybridsched."
INT32_MAX = 2**31 - 1  # = store.format.INT32_MAX (not imported: h5py stays out of workers)
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


class Segment:
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
            self._map = mmap.mmap(shm.fd, max(nbytes, 1))
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
        m = getattr(self, "_map", None)
        if m is not None:
            try:
                m.close()
            except BufferError:
                pass  # a view is still referenced; the mapping goes with it
            self._map = None

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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

    kernel = None  # the run configuration's built-in kernel applies (workloads.space)

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
        over_frames(lambda a, n: kernels.generate_frames(orig[first + a:first + a + n], self.seed,
                                                         self.frame0 + first + a), count)

    def fresh_copy(self) -> None:
        """Overwrite the work copy with the original (untimed, before every run)."""
        orig, work = self._orig.array, self._work.array
        over_frames(lambda a, n: np.copyto(work[a:a + n], orig[a:a + n]), self.frames)

    def bad_rows(self, first: int = 0, count: int | None = None) -> int:
        """Rows of the work copy that are unsorted or not a permutation of the original."""
        count = self.frames - first if count is None else count
        orig, work = self._orig.array, self._work.array
        return sum(over_frames(lambda a, n: kernels.count_bad_rows(orig, work, first + a, n), count))

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
