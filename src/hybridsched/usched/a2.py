"""A2: A1 with the serialisation removed.

Data structures:

- ``_ready[i]``: one deque of ready user threads per scheduler thread (the seed's separate
  completion list per scheduler thread). A scheduler thread pops the head of its own deque;
  when it is empty it steals from the tail of the others'; only then does it sleep on the
  idle condition (``_idle_cv``), which is touched only when some thread is idle. deque's
  append/popleft/pop are atomic in CPython, so the ready deques need no lock of their own.
- each primitive has its own lock and its own FIFO queue of blocked user threads, and more
  states: an event is FREE, SET or HAS_WAITERS; a semaphore's count > 0 means free.
  Waiting on a SET event takes no lock and touches no queue (fast path); setting a FREE
  event or releasing a semaphore nobody waits on touches no queue; only HAS_WAITERS
  primitives hand their queue over. No scheduler-wide lock is taken on any of these paths.

Wake-ups go to the deque of the scheduler thread that signalled (the woken thread likely
needs data that thread just produced); an idle thread is notified so it can steal.
"""
from __future__ import annotations

import threading
from collections import deque

from .api import Counts
from .common import Task, UserModeBase

FREE, SET, HAS_WAITERS = 0, 1, 2


class Event2:
    __slots__ = ("_s", "state", "waiters", "lock")

    def __init__(self, s: "A2"):
        self._s, self.state, self.waiters, self.lock = s, FREE, [], threading.Lock()

    def is_set(self) -> bool:
        return self.state == SET

    def set(self) -> None:
        if self.state == SET:
            return
        with self.lock:
            old, self.state = self.state, SET
            woken, self.waiters = self.waiters, []
        if old == HAS_WAITERS:
            self._s._make_ready(woken)

    def _take(self, task: Task, c: Counts) -> bool:
        if self.state == SET:  # fast path: no lock, no queue
            return True
        with self.lock:
            if self.state == SET:
                return True
            self.waiters.append(task)
            self.state = HAS_WAITERS
        c.blocks += 1
        return False


class Semaphore2:
    __slots__ = ("_s", "count", "waiters", "lock")

    def __init__(self, s: "A2", value: int):
        self._s, self.count, self.waiters, self.lock = s, value, deque(), threading.Lock()

    def release(self, n: int = 1) -> None:
        woken = None
        with self.lock:
            w = self.waiters
            if w:  # HAS_WAITERS: hand the units over, oldest waiter first
                woken = [w.popleft()] if n == 1 else [w.popleft() for _ in range(min(n, len(w)))]
                n -= len(woken)
            self.count += n
        if woken:
            self._s._make_ready(woken)

    def _take(self, task: Task, c: Counts) -> bool:
        with self.lock:
            if self.count > 0:
                self.count -= 1
                return True
            self.waiters.append(task)
        c.blocks += 1
        return False


class Barrier2:
    __slots__ = ("_s", "parties", "arrived", "waiters", "lock")

    def __init__(self, s: "A2", parties: int):
        self._s, self.parties, self.arrived = s, parties, 0
        self.waiters: list[Task] = []
        self.lock = threading.Lock()

    def _take(self, task: Task, c: Counts) -> bool:
        with self.lock:
            self.arrived += 1
            if self.arrived < self.parties:
                self.waiters.append(task)
                woken = None
            else:
                self.arrived = 0
                woken, self.waiters = self.waiters, []
        if woken is None:
            c.blocks += 1
            return False
        if woken:
            self._s._make_ready(woken)
        return True


class A2(UserModeBase):
    """N pinned scheduler threads, a ready deque each (with stealing), per-primitive queues."""

    name = "A2"

    def __init__(self, cpus: list[int] | None = None):
        super().__init__(cpus)
        self._ready: list[deque[Task]] = [deque() for _ in self.cpus]
        self._idle_cv = threading.Condition(threading.Lock())
        self._n_idle = 0
        self._rr = 0
        self._tls = threading.local()
        self._ext = Counts()  # wake-ups signalled from outside the scheduler threads
        self._ext_lock = threading.Lock()

    def event(self) -> Event2:
        return Event2(self)

    def semaphore(self, value: int = 0) -> Semaphore2:
        return Semaphore2(self, value)

    def barrier(self, parties: int) -> Barrier2:
        return Barrier2(self, parties)

    def _make_ready(self, tasks: list[Task]) -> None:
        i = getattr(self._tls, "i", None)
        if i is None:  # signalled from a thread that is not ours (e.g. a test's main thread)
            with self._ext_lock:
                self._ext.wakeups += len(tasks)
                for t in tasks:
                    self._ready[self._rr % len(self._ready)].append(t)
                    self._rr += 1
        else:
            self._ready[i].extend(tasks)
            self._local_counts[i].wakeups += len(tasks)
        if self._n_idle:
            with self._idle_cv:
                self._idle_cv.notify(len(tasks))

    def _submit_new(self, task: Task) -> None:
        with self._ext_lock:
            self._ready[self._rr % len(self._ready)].append(task)
            self._rr += 1
        if self._n_idle:
            with self._idle_cv:
                self._idle_cv.notify()

    def _wake_all(self) -> None:
        with self._idle_cv:
            self._idle_cv.notify_all()

    def _park(self) -> bool:
        """Sleep until work may be there; True when this thread must exit."""
        dead = False
        with self._idle_cv:
            self._n_idle += 1
            try:
                if self._stop:
                    return True
                if any(self._ready):  # re-check after announcing idleness: no lost wake-up
                    return False
                if self._n_idle == len(self._ready) and not self._spawning and self._live > 0:
                    dead = True
                else:
                    self._idle_cv.wait()
                    return False
            finally:
                self._n_idle -= 1
        if dead:
            self._deadlock()
        return True

    def _loop(self, i: int, c: Counts) -> None:
        self._tls.i = i
        n = len(self._ready)
        mine = self._ready[i]
        others = [self._ready[(i + d) % n] for d in range(1, n)]
        while not self._stop:
            try:
                task = mine.popleft()
            except IndexError:
                task = None
                for q in others:  # steal the newest of another thread's queue
                    try:
                        task = q.pop()
                        break
                    except IndexError:
                        pass
                if task is None:
                    if self._park():
                        return
                    continue
            c.switches += 1
            self._run(task, c)

    def _run(self, task: Task, c: Counts) -> None:
        gen = task.gen
        while True:
            try:
                prim = gen.send(None)
                take = prim._take
            except StopIteration:
                self._finished()
                return
            except BaseException as exc:  # noqa: BLE001 - the run's one line
                self._task_raised(task, exc)
                return
            if not take(task, c) or self._stop:
                return

    def _check_idle(self) -> None:
        with self._idle_cv:
            dead = (self._n_idle == len(self._ready) and not any(self._ready)
                    and self._live > 0 and not self._stop)
        if dead:
            self._deadlock()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self.counts.add(self._ext)
        self._ext = Counts()
