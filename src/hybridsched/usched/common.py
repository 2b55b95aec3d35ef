"""What A1 and A2 share: the user-thread record, the pinned scheduler threads, the
finishing of a run (live count, first error, deadlock) and the join on every exit path."""
from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import Generator, Iterator
from typing import cast

from ..oslayer.cpus import pin_current, usable_cpus
from .api import Counts, Deadlock, UserThreadError


def _drive(it: Iterator) -> Generator:
    """A generator over a plain iterator (one without ``send``)."""
    yield from it


class Task:
    """A user thread: its generator, name, the generator's bound ``send`` (resumed as a
    local, no attribute chain per switch), ``q`` (A2: the ready deque it goes back to when
    woken, its scheduler thread's) and ``wakes`` (A2: how often it was woken, written only
    by whoever just took it out of a waiter queue, so an exact count without a lock). The
    generator is resumed by whichever scheduler thread holds the task; it is never resumed
    by two at once because a task is in at most one queue, or running, at any time."""

    __slots__ = ("gen", "name", "send", "q", "wakes")

    def __init__(self, gen: Iterator | None, name: str):
        if gen is None:
            gen = iter(())
        # anything with ``send`` is driven as a generator (duck-typed, as before)
        g = cast(Generator, gen) if hasattr(gen, "send") else _drive(gen)
        self.gen = g
        self.name = name
        self.send = g.send
        self.q: deque[Task]  # A2: set when it is first queued (Scheduler.spawn)
        self.wakes = 0


class UserModeBase:
    """N scheduler threads, one per CPU in ``cpus`` and pinned to it, each running
    ``self._loop(index, counts)`` until ``self._stop``. Subclasses provide the queues."""

    name = "?"

    def __init__(self, cpus: list[int] | None = None):
        self.cpus = list(cpus) if cpus is not None else usable_cpus()
        self.sched_threads = len(self.cpus)
        self.counts = Counts()
        self._threads: list[threading.Thread] = []
        self._local_counts = [Counts() for _ in self.cpus]
        self._live = 1  # the spawner's token: run() gives it back, so 0 means all done
        self._live_lock = threading.Lock()
        self._done = threading.Event()
        self._stop = False
        self._error: BaseException | None = None
        self._tasks: list[Task] = []  # every task, to close the unfinished ones at the end
        self._spawning = True

    # lifecycle -----------------------------------------------------------------------
    def _thread_main(self, i: int) -> None:
        try:
            pin_current(self.cpus[i])
            self._loop(i, self._local_counts[i])
        except BaseException as exc:  # noqa: BLE001 - a scheduler bug must not hang the run
            self._fail(RuntimeError(f"{self.name}: scheduler thread {i} failed: "
                                    f"{type(exc).__name__}: {exc}"))

    def __enter__(self):
        try:
            for i in range(len(self.cpus)):
                t = threading.Thread(target=self._thread_main, args=(i,),
                                     name=f"{self.name}-sched{i}", daemon=True)
                t.start()
                self._threads.append(t)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._wake_all()
        for t in self._threads:
            t.join()
        for c in self._local_counts:
            self.counts.add(c)
        self._local_counts = [Counts() for _ in self.cpus]
        self._fold_counts()
        for task in self._tasks:  # unfinished ones after an error: run their finally blocks
            try:
                task.gen.close()
            except BaseException:  # noqa: BLE001
                pass
        self._tasks = []

    # finishing -------------------------------------------------------------------------
    def _finished(self) -> None:
        with self._live_lock:
            self._live -= 1
            last = self._live == 0
        if last:
            self._done.set()
            self._stop = True
            self._wake_all()

    def _fail(self, exc: BaseException) -> None:
        with self._live_lock:
            if self._error is None:
                self._error = exc
        self._stop = True
        self._done.set()
        self._wake_all()

    def _task_raised(self, task: Task, exc: BaseException) -> None:
        self._fail(UserThreadError(self.name, task.name, exc))

    def _deadlock(self) -> None:
        self._fail(Deadlock(f"{self.name}: deadlock: {self._live} user threads wait on "
                            f"primitives nobody can signal any more ({self._unfinished()})"))

    def _unfinished(self) -> str:
        """The unfinished user threads by name, those never started apart: a thread that
        never started waits on nothing, so naming it tells a scheduler bug from the
        program's own deadlock."""
        waiting: list[str] = []
        never: list[str] = []
        for task in self._tasks:
            state = inspect.getgeneratorstate(task.gen)
            if state != inspect.GEN_CLOSED:
                (never if state == inspect.GEN_CREATED else waiting).append(task.name)
        shown = ", ".join(waiting[:8]) + (", ..." if len(waiting) > 8 else "")
        return (f"waiting: {shown or 'none'}"
                + (f"; never started: {', '.join(never[:8])}" if never else "")
                + f"; ready: {self._queues()}")

    def _queues(self) -> str:
        """The ready queues' lengths and the sleeping scheduler threads (in the deadlock
        line)."""
        return "?"

    def run(self) -> None:
        """Give back the spawner's token and wait (interruptibly) until every user thread
        finished, one raised, or the run deadlocked."""
        # The token goes back before spawning is declared over: a scheduler thread that ran
        # out of work in between saw "not spawning" with only the token alive and declared
        # a deadlock (seen on a loaded machine, when the last user thread ended there).
        self._finished()
        self._spawning = False
        self._spawn_done()
        self._check_idle()
        while not self._done.wait(0.25):
            pass
        if self._error is not None:
            raise self._error

    def spawn(self, fn, *args, name: str = "") -> None:
        task = Task(fn(*args), name or f"u{len(self._tasks)}")
        self._tasks.append(task)
        lock = self._live_lock
        lock.acquire()  # acquire/release: half a with-statement's cost on 3.11
        self._live += 1
        lock.release()
        self._submit_new(task)

    # subclasses ----------------------------------------------------------------------
    def _fold_counts(self) -> None:
        """After the join: add counts kept elsewhere than the per-thread Counts."""

    def _loop(self, i: int, c: Counts) -> None:
        raise NotImplementedError

    def _submit_new(self, task: Task) -> None:
        raise NotImplementedError

    def _spawn_done(self) -> None:
        """The spawner has made its last user thread (before it gives its token back)."""

    def _wake_all(self) -> None:
        raise NotImplementedError

    def _check_idle(self) -> None:
        """Called once spawning is over: declare a deadlock if everyone is idle already."""
        raise NotImplementedError
