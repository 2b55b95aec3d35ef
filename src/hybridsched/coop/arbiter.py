"""The node-wide core arbiter: the rules of :mod:`state` in one shared-memory segment per
user, used by every cooperating worker of every process on the node.

The segment is ``/dev/shm/hybridsched-coop.<uid>`` (mode 0600), created under an
``flock`` on its ``.lock`` file by the first participant and removed by the last one to
leave (the flock orders attaching and detaching only). Every change of the state is made
under the segment's own mutex, robust and process-shared (:mod:`oslayer.shmlock`): the kernel
tells the next locker when a holder died, so a killed participant never wedges the
others. A waiting worker sleeps on its own futex word in the segment; the worker that
hands it a token sets the word and wakes it (nOS-V posts the next worker's semaphore the
same way). Waiters look for holders that died and reclaim their tokens: one scan for the
node every :data:`RECLAIM_POLL_S`, the other waiters backing off (:mod:`worker`), so a
SIGKILLed job stalls the others for less than a second. The worker's own side (taking a
token, the scheduling points, the waits) is :class:`worker.Worker`. What needs compiled
code (the mutex, the rules an owner applies, a hand-off's wake-up) goes through
:mod:`ops`: numba's, or for an owner of commands under the shim only, the shim's C.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import threading
import time
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..errors import ArbiterInUse, ResourceError, UsageError
from ..oslayer import futex
from ..oslayer.shmlock import DIED_AT, init_mutex
from ..oslayer.procfs import pid_alive
from ..oslayer.shm import unmap
from .existing import other_tables, refuse_unless_unused
from .paths import OWN_ARBITER, UNFINISHED, segment_path, unfinished
from .reclaim import reclaim
from .state import ATTACHED, MAGIC, VERSION, ArbiterError, State, nbytes, views
from .ops import RECLAIM_POLL_S, CompiledOps, Ops, now_ns

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["Arbiter", "DEFAULT_QUANTUM_S", "RECLAIM_POLL_S", "segment_path"]

# nOS-V's default quantum (nosv.toml quantum_ns = 20 ms): long enough that a rotation costs
# a small share of it (a hand-off is tens of microseconds), short enough that k > N static
# workers of a job take turns many times in a run of seconds.
DEFAULT_QUANTUM_S = 0.020
# The longest quantum accepted: 10 s already lets one job keep its CPUs through most runs
# (no rotation at all); beyond it a typo or `inf` would overflow the segment's int64 ns.
MAX_QUANTUM_S = 10.0
# The shortest: a hand-off costs ~14 µs and a gang switch two signals to every process of a
# job, so 0.1 ms already spends a tenth or more of each quantum switching; below it a
# quantum rounded to 0 ns (0.000001 ms) kept the watchdog looking in a loop, a CPU's worth.
MIN_QUANTUM_S = 1e-4


def check_quantum(quantum_s: float) -> None:
    """The one check of a quantum, in the words of the `--quantum-ms` option that sets it."""
    if not MIN_QUANTUM_S <= quantum_s <= MAX_QUANTUM_S:
        raise UsageError(f"--quantum-ms must be at least {MIN_QUANTUM_S * 1e3:g} and at most "
                         f"{MAX_QUANTUM_S * 1e3:g}, got {quantum_s * 1e3:g}")
# Table sizes of a new segment: 4096 workers per node cover every study we run (k up to
# 4096). 1024 jobs: each `coop exec` holds two rows (its command's job and its own
# attachment), so 512 commands at once on a node, one per CPU of the largest with room to
# spare (64 rows let 32 run, fewer than a node's MPI ranks: hostile review); the table
# costs 128 KiB of the segment's ~400 KiB and is read whole only by the reclaim scan.
MAX_JOBS = 1024
MAX_WORKERS = 4096


class Arbiter:
    """This process's attachment to the node's arbiter; a context manager.

    ``cpus`` are the CPUs the tokens stand for (default: the usable ones). A segment made
    for other CPUs, by another user, or not ours at all is refused with a UsageError; a
    stale one (every participant dead) is reinitialised. ``ops``: how the compiled needs
    are met (:mod:`ops`): numba's by default, which Python workers need; ``ShimOps()``
    for a process whose jobs are all commands under the shim.
    """

    def __init__(self, cpus: list[int] | None = None, quantum_s: float = DEFAULT_QUANTUM_S,
                 path: str | None = None, ops: Ops | None = None):
        from ..oslayer.cpus import usable_cpus

        if not futex.available():
            raise ResourceError("--coop needs Linux futexes on this architecture")
        check_quantum(quantum_s)
        # compiled (Python workers), or the shim's C (ops.ShimOps: only commands under the
        # shim, no numba loaded)
        self.ops: Ops = ops or CompiledOps()
        self.ops.prepare()  # before any worker forks: no child compiles under the lock
        self.cpus = sorted(cpus if cpus is not None else usable_cpus())
        self.quantum_ns = int(quantum_s * 1e9)
        # absolute: its jobs' processes find it by this name whatever folder they go to
        self.path = os.path.abspath(path or segment_path())
        self._map: mmap.mmap | None = None
        self.state: State | None = None
        self.regions: Any = ()  # what ops.post needs of the state (ops.bind)
        self._seat = -1  # this attachment's row in the job table
        self._local: dict[int, tuple[int, threading.Lock]] = {}  # pid -> (lock fd, thread lock)
        self._owner = os.getpid()
        self._made_lock = False  # this attachment created the lock file (removed on refusal)
        self._workers: weakref.WeakSet = weakref.WeakSet()  # handles to detach on close

    # --- the locks ----------------------------------------------------------------------

    def _lockfd(self) -> tuple[int, threading.Lock]:
        pid = os.getpid()
        got = self._local.get(pid)
        if got is None:  # a forked child needs its own open file: flock is per description
            lock = self.path + ".lock"
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            try:
                while True:
                    try:
                        fd = os.open(lock, flags | os.O_CREAT | os.O_EXCL, 0o600)
                        self._made_lock = True
                        break
                    except FileExistsError:
                        pass
                    try:
                        fd = os.open(lock, flags)
                        self._made_lock = False  # someone else's (a retry may open a new one)
                        break
                    except FileNotFoundError:
                        continue  # its last user removed it between the two opens: make it
            except OSError as exc:  # a symlink, a directory, another user's file
                raise UsageError(f"{lock}: cannot use it as the coop lock ({exc.strerror}): "
                                 "refusing it") from None
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
                os.close(fd)
                raise UsageError(f"{lock} is not a private regular file of this user: refusing it")
            got = (fd, threading.Lock())
            for inherited, _ in self._local.values():  # a parent's: useless (and unsafe) here;
                os.close(inherited)  # closing our copy leaves the parent's flock alone
            self._local = {pid: got}
        return got

    @contextmanager
    def _attaching(self) -> Iterator[None]:
        """The flock that orders creating, attaching to and removing the segment.

        Taken on the lock file that is at the path once we hold it: the last participant
        and a refused creator unlink it under the flock, and a waiter that then gets the
        flock of the unlinked file would be in the section beside a newcomer holding the
        new file's; it lets go and takes the new one instead."""
        while True:
            fd, tlock = self._lockfd()
            with tlock:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    current = self._lock_is_current(fd)
                    if current:
                        yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            if current:
                return
            self._close_lock()

    def _lock_is_current(self, fd: int) -> bool:
        lock = self.path + ".lock"
        try:
            now = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as exc:  # e.g. its folder replaced by a file
            raise UsageError(f"{lock}: cannot check the coop lock ({exc.strerror})") from None
        mine = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    def _close_lock(self) -> None:
        for fd, _ in self._local.values():
            os.close(fd)
        self._local = {}

    @property
    def tables(self) -> State:
        """The segment's tables, while attached (``state`` is None before and after)."""
        if self.state is None:
            raise ResourceError(f"{self.path}: the coop arbiter is not attached")
        return self.state

    @contextmanager
    def locked(self) -> Iterator[State]:
        """The state under the segment's mutex. If its last owner died holding it, the
        dead are reclaimed first (their tokens passed on)."""
        st = self.tables
        woken: list[int] = []
        held = np.zeros(1, np.int8)  # set in the call that takes the mutex: see lock_into
        try:
            self.ops.lock(st.lock, held)
            if st.lock[DIED_AT]:  # a dead owner's, now or noticed by a compiled path
                woken = reclaim(st, now_ns())
                st.lock[DIED_AT] = 0
            yield st
        finally:
            self.ops.unlock(st.lock, held)
            self.post(woken)

    def quantum_in_use_ns(self) -> int:
        """The quantum the segment's jobs run with: its creator's, which an attachment that
        asked for another does not change."""
        with self.locked() as st:
            return int(st.header["quantum_ns"][0])

    def other_quantum(self) -> str:
        """Where the segment runs another quantum than this attachment asked for, that, in
        words; "" where it runs the one asked for."""
        used = self.quantum_in_use_ns()
        if used == self.quantum_ns:
            return ""
        return (f"the coop arbiter {self.path} is in use with a {used / 1e6:g} ms quantum, "
                "which its jobs keep")

    def require_quantum(self) -> None:
        """ArbiterInUse where the segment in use runs another quantum than this attachment
        asked for: a run that goes on would record a quantum it did not run with."""
        why = self.other_quantum()
        if why:
            raise ArbiterInUse(f"{why}, not this run's {self.quantum_ns / 1e6:g} ms")

    # --- attach / detach --------------------------------------------------------------

    def __enter__(self) -> "Arbiter":
        self._made_lock = False  # set by _lockfd if this attach creates the lock file
        try:
            with self._attaching():
                try:
                    self._attach()
                except BaseException:
                    if self._made_lock:  # refused: leave nothing of ours behind (under the
                        os.unlink(self.path + ".lock")  # flock: waiters see it went)
                    raise
        except BaseException:
            self._unmap()
            self._close_lock()
            raise
        return self

    def _attach(self) -> None:
        size = nbytes(len(self.cpus), MAX_JOBS, MAX_WORKERS)
        self._sweep_unfinished()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = -1
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot open the coop segment ({exc.strerror})") from None
        existing = fd >= 0
        fresh = not existing
        try:
            if existing:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                    raise UsageError(f"{self.path}: not a private coop segment of this user: refusing it")
                tables = (len(self.cpus), MAX_JOBS, MAX_WORKERS)
                if info.st_size != size or other_tables(fd, tables):
                    refuse_unless_unused(self.path, fd, info.st_size, tables, self.ops)
                    fresh = True
                else:
                    self._map = mmap.mmap(fd, size)
        finally:
            if existing:
                os.close(fd)
        if fresh:
            self._create(size, replace=existing)
        else:
            self._bind()
        h = self.tables.header[0]
        if fresh:
            self._take_seat()
            return
        if bytes(h["magic"]) != MAGIC:
            # a segment is created and initialised under the lock, so no one ever sees one
            # half made: a file without the magic is not ours
            del h
            self._unmap()
            raise UsageError(f"{self.path}: not a hybridsched coop segment (remove it if no "
                             "coop run is active): refusing it")
        if int(h["version"]) != VERSION:
            raise UsageError(f"{self.path}: coop segment version {int(h['version'])}, this "
                             f"hybridsched speaks {VERSION}")
        with self.locked() as st:
            reclaim(st, now_ns())  # never trust a segment blindly
            busy, problems = st.participants(), st.check_invariants()
        if busy and problems:
            raise UsageError(f"{self.path}: coop segment inconsistent while in use "
                             f"({'; '.join(problems)})")
        if not busy:
            # nobody alive is attached (every attachment has a row: _take_seat), and nobody
            # can attach meanwhile: we hold the flock
            self._initialise()
        elif list(self.tables.cpus["cpu"]) != self.cpus:
            raise ArbiterInUse(f"{self.path}: the running coop jobs use CPUs "
                             f"{[int(c) for c in self.tables.cpus['cpu']]}, not {self.cpus}; "
                             f"{OWN_ARBITER}")
        self._take_seat()

    def _take_seat(self) -> None:
        """Register this attachment (a job-table row of its own, key ATTACHED): a process
        attached between its jobs (a study between runs) keeps the segment from being
        reset or removed under it; reclaimed like any row once the process is dead."""
        with self.locked() as st:
            try:
                self._seat = st.join_job(os.getpid(), ATTACHED)
            except ArbiterError as exc:
                raise ResourceError(f"coop: {exc}") from None

    def _initialise(self) -> None:
        init_mutex(self.tables.lock)  # before the magic that lets others in
        self.tables.initialise(self.cpus, self.quantum_ns)

    def _unmap(self) -> None:
        self.state, self.regions = None, ()
        unmap(self._map)
        self._map = None

    def _bind(self) -> None:
        self.state = State(views(self._map, len(self.cpus), MAX_JOBS, MAX_WORKERS), self.ops)
        self.regions = self.ops.bind(self.state)

    def _create(self, size: int, replace: bool) -> None:
        """Make the segment whole under a name of its own, then put it at ``path`` (over a
        reset one with ``replace``): a creator killed on the way leaves no half-made
        segment there, only its ``.new.<pid>`` file, which the next attach removes."""
        tmp = f"{self.path}{UNFINISHED}{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # not ours (the sweep removes only our regular files)
            raise UsageError(f"{tmp}: in the way of creating the coop segment ({exc.strerror}): "
                             "refusing it") from None
        try:
            try:
                os.ftruncate(fd, size)
            except OSError as exc:  # a file size limit (ulimit -f) below the segment's size
                raise ResourceError(f"{self.path}: cannot make the coop segment {size} bytes "
                                    f"({exc.strerror})") from None
            try:
                os.posix_fallocate(fd, 0, size)  # a full /dev/shm is an error now, not SIGBUS later
            except OSError as exc:
                if exc.errno != errno.EOPNOTSUPP:
                    raise ResourceError(f"{self.path}: cannot reserve {size} bytes ({exc.strerror})") from None
            self._map = mmap.mmap(fd, size)
            self._bind()
            self._initialise()
            try:
                (os.replace if replace else os.link)(tmp, self.path)
            except FileExistsError:  # made meanwhile by something that ignores our lock
                raise UsageError(f"{self.path}: appeared while this run created it: refusing it") from None
            except OSError as exc:  # e.g. a file system without hard links
                raise UsageError(f"{self.path}: cannot put the coop segment in place "
                                 f"({exc.strerror})") from None
        except BaseException:
            self._unmap()
            raise
        finally:
            os.close(fd)
            try:
                os.unlink(tmp)  # after link: path keeps the segment; after replace: gone already
            except FileNotFoundError:
                pass

    def _sweep_unfinished(self) -> None:
        """Remove the ``.new.<pid>`` files of creators that died making the segment (under
        the flock, so none of them is still at work), ours only. Our own pid's name first,
        without listing the folder (one we may write but not list)."""
        self._remove_unfinished(f"{self.path}{UNFINISHED}{os.getpid()}")
        for name, pid in unfinished(self.path):
            try:
                if pid_alive(pid):
                    continue
            except (OverflowError, ValueError):  # no process has that number
                pass
            self._remove_unfinished(name)

    @staticmethod
    def _remove_unfinished(path: str) -> None:
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                os.unlink(path)
        except OSError:
            pass

    def close(self) -> None:
        """Detach; the last participant removes the segment and its lock file. When the
        lock cannot be taken (something planted at its path), the seat is still given up
        (under the segment's mutex, which needs no flock) and the UsageError raised after."""
        if self._map is None or os.getpid() != self._owner:
            return
        try:
            with self._attaching():
                if self._leave_seat():
                    for p in (self.path, self.path + ".lock"):
                        try:
                            os.unlink(p)
                        except FileNotFoundError:
                            pass
        except UsageError:
            self._leave_seat()  # without the flock: leave, but never remove anything
            raise
        finally:
            for w in list(self._workers):
                w._detach()
            self._unmap()
            self._close_lock()

    def _leave_seat(self) -> bool:
        """Give up this attachment's row; True when nobody is left on the segment."""
        with self.locked() as st:
            if self._seat >= 0 and int(st.jobs["pid"][self._seat]) == os.getpid():
                st.jobs["used"][self._seat] = 0
            self._seat = -1
            reclaim(st, now_ns())
            return st.participants() == 0 and not st.workers["used"].any()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- jobs and workers ---------------------------------------------------------------

    def join_job(self, key: int = 0) -> int:
        """A job of this process; ``key`` > 0 lets other processes find it (the shim's)."""
        with self.locked() as st:
            try:
                return st.join_job(os.getpid(), key)
            except ArbiterError as exc:
                raise ResourceError(f"coop: {exc}") from None

    def leave_job(self, job: int) -> None:
        with self.locked() as st:
            reclaim(st, now_ns())
            try:
                st.leave_job(job)
            except ArbiterError:
                pass  # workers of a killed child not reaped yet: reclaim frees it later

    def worker(self, job: int) -> "Worker":
        """Register the calling thread as a worker of ``job`` (blocked, no token yet)."""
        if not isinstance(self.ops, CompiledOps):  # its hand-offs are numba's (handoff)
            raise ResourceError("coop: a Python worker needs the compiled arbiter, not the "
                                "shim's rules")
        from .worker import Worker

        with self.locked() as st:
            try:
                slot = st.join_worker(job, os.getpid())
            except ArbiterError as exc:
                raise ResourceError(f"coop: {exc}") from None
        w = Worker(self, slot)
        self._workers.add(w)
        return w

    def reclaim_due(self) -> bool:
        """Look for dead participants, unless another waiter did within the period: one
        scan per period for the node, not one per waiting worker (each scan reads
        /proc for every participant, CPU taken from the token holders). True when this
        call made the period's scan."""
        h = self.tables.header
        died = self.tables.lock[DIED_AT]  # a compiled hand-off took a dead owner's lock
        if not died and now_ns() - int(h["reclaim_ns"][0]) < RECLAIM_POLL_S * 1e9:
            return False
        with self.locked() as st:  # reclaims at once if the death notice is up
            now = now_ns()
            if now - int(h["reclaim_ns"][0]) < RECLAIM_POLL_S * 1e9:
                return False
            h["reclaim_ns"][0] = now
            woken = reclaim(st, now)
        self.post(woken)
        return True

    def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (bounded) until no worker is registered: after this process killed its
        jobs, their own forked workers die a moment later (the parent-death signal), and
        the segment is removed on close only once they are gone from it."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.locked() as st:
                reclaim(st, now_ns())
                if not st.workers["used"].any() or time.monotonic() >= deadline:
                    return
            time.sleep(0.02)

    def post(self, slots: list[int]) -> None:
        """Wake the workers just granted a token (pinned to its CPU first: see handoff)."""
        for s in slots:
            self.ops.post(self.regions, s)
