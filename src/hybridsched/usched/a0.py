"""A0: the operating system does it all.

Every user thread is an OS thread (``threading.Thread``) that drives its generator and
carries out each yielded wait with the matching ``threading`` primitive, blocking in the
kernel (futex); Linux decides who runs where. Nothing here is pinned: A0 is the OS's
scheduler. ``sched_threads`` is the number of usable CPUs, for the record.

Thousands of threads: each gets a reduced stack (``STACK_SIZE``, 256 KiB instead of the
default 8 MiB) so 7936 of them reserve ~2 GiB of address space rather than 62 GiB; the
solvers' frames are a few generator levels deep and the kernels run in numba frames of a few
KiB, so 256 KiB is far more than used, while 64 KiB would risk overflow inside numba/BLAS.
The previous process-wide stack size is restored after the threads are created. If the OS
refuses a thread (``RuntimeError: can't start new thread``), the run fails with one
:class:`ThreadLimit` line, after every thread already started has been released and joined.

Abort (a user thread raised, the OS refused a thread, Ctrl-C in ``run``): every primitive
created by this scheduler is *broken* (events set, semaphores flooded, barriers aborted)
and each thread, on waking, sees the abort flag and closes its generator, so all join.
"""
from __future__ import annotations

import threading
from collections.abc import Generator

from ..oslayer.cpus import usable_cpus
from .api import Counts, ThreadLimit, UserThreadError, start

STACK_SIZE = 256 * 1024


class _Aborted(Exception):
    pass


class OsEvent:
    __slots__ = ("_ev",)

    def __init__(self):
        self._ev = threading.Event()

    def set(self) -> None:
        self._ev.set()

    def is_set(self) -> bool:
        return self._ev.is_set()

    def _wait(self, c: Counts) -> None:
        if not self._ev.is_set():
            c.blocks += 1
            self._ev.wait()
            c.wakeups += 1

    def _break(self, n: int) -> None:
        self._ev.set()


class OsSemaphore:
    __slots__ = ("_sem",)

    def __init__(self, value: int = 0):
        # threading.Semaphore wakes waiters in FIFO order (a Condition's waiter deque)
        self._sem = threading.Semaphore(value)

    def release(self, n: int = 1) -> None:
        self._sem.release(n)

    def _wait(self, c: Counts) -> None:
        if not self._sem.acquire(blocking=False):
            c.blocks += 1
            self._sem.acquire()
            c.wakeups += 1

    def _break(self, n: int) -> None:
        self._sem.release(n)


class OsBarrier:
    __slots__ = ("_bar", "parties")

    def __init__(self, parties: int):
        self._bar = threading.Barrier(parties)
        self.parties = parties

    def _wait(self, c: Counts) -> None:
        try:
            idx = self._bar.wait()
        except threading.BrokenBarrierError:
            raise _Aborted from None
        if idx != self.parties - 1:  # CPython: the last arrival gets parties-1 and never waits
            c.blocks += 1
            c.wakeups += 1

    def _break(self, n: int) -> None:
        self._bar.abort()


class A0:
    """One OS thread per user thread, OS primitives, the kernel schedules."""

    name = "A0"

    def __init__(self, cpus: list[int] | None = None, stack_size: int = STACK_SIZE):
        self.cpus = list(cpus) if cpus is not None else usable_cpus()
        self.sched_threads = len(self.cpus)
        self.stack_size = stack_size
        self.counts = Counts()
        self._threads: list[threading.Thread] = []
        self._prims: list = []
        self._abort = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # guards _error and counts merging

    # primitives --------------------------------------------------------------------
    def event(self) -> OsEvent:
        p = OsEvent()
        self._prims.append(p)
        return p

    def semaphore(self, value: int = 0) -> OsSemaphore:
        p = OsSemaphore(value)
        self._prims.append(p)
        return p

    def barrier(self, parties: int) -> OsBarrier:
        p = OsBarrier(parties)
        self._prims.append(p)
        return p

    # threads -----------------------------------------------------------------------
    def _body(self, gen: Generator, name: str) -> None:
        c = Counts()
        try:
            for prim in gen:
                if self._abort:
                    raise _Aborted
                prim._wait(c)
                if self._abort:
                    raise _Aborted
        except _Aborted:
            gen.close()
        except BaseException as exc:  # noqa: BLE001 - reported as the run's one line
            with self._lock:
                if self._error is None:
                    self._error = UserThreadError(self.name, name, exc)
            self._break_all()
        finally:
            with self._lock:
                self.counts.add(c)

    def spawn(self, fn, *args, name: str = "") -> None:
        gen = start(fn, args)
        name = name or f"u{len(self._threads)}"
        old = threading.stack_size(self.stack_size)
        try:
            t = threading.Thread(target=self._body, args=(gen, name), name=f"A0-{name}",
                                 daemon=True)
            t.start()
        except RuntimeError as exc:
            gen.close()
            self._break_all()
            raise ThreadLimit(f"A0: the OS refused to start user thread {name} after "
                              f"{len(self._threads)} threads ({exc}); lower --threads "
                              "or raise the limits (ulimit -u, kernel.threads-max, memory)") from None
        finally:
            threading.stack_size(old)
        self._threads.append(t)

    def _break_all(self) -> None:
        self._abort = True
        n = len(self._threads) + 1
        for p in list(self._prims):
            p._break(n)

    def run(self) -> None:
        try:
            for t in self._threads:
                while t.is_alive():
                    t.join(0.25)  # a timed join, so Ctrl-C reaches the main thread
        except BaseException:
            self._break_all()
            raise
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "A0":
        return self

    def __exit__(self, *exc) -> None:
        if any(t.is_alive() for t in self._threads):
            self._break_all()
        for t in self._threads:
            t.join()
