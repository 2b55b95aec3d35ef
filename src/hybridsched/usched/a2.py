"""A2: A1 with the serialisation removed.

Data structures:

- ``_ready[i]``: one deque of ready user threads per scheduler thread (the seed's separate
  completion list per scheduler thread). A scheduler thread pops the head of its own deque;
  when it is empty it steals from the tail of the others'; only then does it sleep on the
  idle condition (``_idle_cv``), which is touched only when some thread is idle.
- each primitive has its own FIFO queue of blocked user threads (``waiters``) and more
  states: an event is FREE, SET or HAS_WAITERS; a semaphore is free while it has units,
  HAS_WAITERS while its queue is non-empty. Waiting on a SET event or on a semaphore with
  units, setting an event nobody waits on and releasing a semaphore nobody waits on touch
  no waiter queue; only HAS_WAITERS primitives hand their queue over. No scheduler-wide
  lock is taken on any of these paths.

No lock on the event and semaphore paths (the barrier keeps a lock of its own: it is waited
on once per stage, not per step). They are built from operations that are atomic under
CPython's GIL because each is ONE call into C: ``deque.append``, ``deque.popleft``,
``deque.pop`` (the deque's ``len``/truth read), and plain attribute stores and loads.
Python code between two such operations can be interleaved with another scheduler thread's
at any bytecode, so every path is written as *publish, then re-check*:

- a waiter publishes itself (``waiters.append(task)``) and only then re-reads the state
  (event: the SET flag; semaphore: the units). A signaller publishes its state first (the
  flag; a unit appended to ``units``) and only then reads ``waiters``. Under the GIL's
  sequential consistency at least one of the two sees the other, so a wake-up cannot be lost.
- whoever sees both (a waiter that finds the event SET after queueing itself, a signaller
  or waiter that finds units and waiters together) *matches* them: it pops a waiter (and,
  for a semaphore, a unit first) and makes it ready. Each pop is atomic, so every queued
  task is taken out exactly once, by exactly one thread; a task that pops itself goes on
  running (it did not block), a task popped by someone else stays parked and is resumed
  from a ready queue. A matcher that took a unit but found no waiter puts the unit back and
  re-checks, so a unit never stays hidden while a waiter waits.

A semaphore's count is the length of its ``units`` deque (``deque.pop`` is CPython's one
atomic "take one if any"; an integer's ``-= 1`` is three bytecodes and not atomic).
Semaphore waiters are released in the order they queued (FIFO); a newcomer may take a unit
released in the same instant ahead of a queued waiter (barging, as ``threading.Semaphore``).

Wake-ups go back to the ready deque of the scheduler thread that last ran the woken task
(``task.q``; a steal moves it), which spreads them over the scheduler threads the way the
work was spread, and costs no thread-local lookup; an idle thread is notified so it can
steal. Counts cost no lock either: switches and blocks are local integers of each
scheduler thread's loop, folded in when it ends; a wake-up increments ``task.wakes`` on
the task just popped from a waiter queue (only the popper can write it), summed at the end.
"""
from __future__ import annotations

import threading
from collections import deque
from itertools import repeat

from .api import Counts
from .common import Task, UserModeBase

FREE, SET, HAS_WAITERS = 0, 1, 2
# While the spawner is still creating user threads it wakes no sleeping scheduler thread:
# each wake-up hands the GIL to a thread that runs one new task to its first wait and sleeps
# again, which made creating 7921 user threads slower than A1's; they are all woken once,
# when spawning ends (``_spawn_done``), with their deques full.


class Event2:
    """FREE / SET / HAS_WAITERS. The waiter queue is a list (56 bytes, a deque is 760:
    there are g^2 events in a tiles run): ``append`` and ``pop`` are each one atomic C
    call; a drain pops from the end and wakes the batch reversed, in blocking order."""

    __slots__ = ("_s", "flag", "waiters")

    def __init__(self, s: "A2"):
        self._s, self.flag = s, False
        self.waiters: list[Task] = []

    @property
    def state(self) -> int:
        return SET if self.flag else HAS_WAITERS if self.waiters else FREE

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        if self.flag:
            return
        self.flag = True                      # publish, then look for waiters
        w = self.waiters
        if not w:
            return
        try:
            t = w.pop()
        except IndexError:
            return
        if not w:                             # one waiter: the common case
            t.wakes += 1
            t.q.append(t)
            if self._s._n_idle:
                self._s._notify(1)
            return
        self._wake_batch([t], None)

    def _wake_batch(self, batch: list, me) -> bool:
        """Pop the rest of the queue onto ``batch`` and make them ready in blocking order;
        True unless ``me`` was among them."""
        w = self.waiters
        pop = w.pop
        while w:
            try:
                batch.append(pop())
            except IndexError:
                break
        parked = True
        woken = 0
        for t in reversed(batch):
            if t is me:
                parked = False
            else:
                t.wakes += 1
                t.q.append(t)
                woken += 1
        if woken and self._s._n_idle:
            self._s._notify(woken)
        return parked

    def _wait(self, task: Task) -> bool:
        """True: the task parked (it is in ``waiters`` or already made ready by a setter)."""
        if self.flag:                         # SET: no lock, no queue
            return False
        self.waiters.append(task)             # publish, then re-check the flag
        if not self.flag:
            return True
        return self._wake_batch([], task)     # set() may have drained before our append


class Semaphore2:
    __slots__ = ("_s", "units", "waiters")

    def __init__(self, s: "A2", value: int):
        self._s, self.units = s, deque(repeat(None, value))
        self.waiters: deque[Task] = deque()

    @property
    def count(self) -> int:
        return len(self.units)

    @property
    def state(self) -> int:
        return HAS_WAITERS if self.waiters else FREE

    def release(self, n: int = 1) -> None:
        w = self.waiters
        if n == 1:
            if w:                             # HAS_WAITERS: hand the unit to the oldest
                try:
                    t = w.popleft()
                except IndexError:            # another thread took it meanwhile
                    pass
                else:
                    t.wakes += 1
                    t.q.append(t)
                    if self._s._n_idle:
                        self._s._notify(1)
                    return
            self.units.append(None)           # publish the unit, then re-check
            if w:
                self._match(None)
            return
        woken = 0
        while n > 0 and w:
            try:
                t = w.popleft()
            except IndexError:
                break
            t.wakes += 1
            t.q.append(t)
            woken += 1
            n -= 1
        if woken and self._s._n_idle:
            self._s._notify(woken)
        if n > 0:
            self.units.extend(repeat(None, n))
            if w:
                self._match(None)

    def _match(self, me) -> bool:
        """Pair units with queued waiters, oldest first, until one side is empty; True
        unless ``me`` got a unit."""
        u, w, s = self.units, self.waiters, self._s
        parked = True
        woken = 0
        while u and w:
            try:
                u.pop()
            except IndexError:                # taken by someone who re-checks himself
                break
            try:
                t = w.popleft()
            except IndexError:
                u.append(None)                # nobody to give it to: back, and re-check
                continue
            if t is me:
                parked = False
            else:
                t.wakes += 1
                t.q.append(t)
                woken += 1
        if woken and s._n_idle:
            s._notify(woken)
        return parked

    def _wait(self, task: Task) -> bool:
        u = self.units
        if u:                                 # units left: take one, no queue
            try:
                u.pop()
                return False
            except IndexError:
                pass
        self.waiters.append(task)             # publish, then re-check the units
        if not u:
            return True
        return self._match(task)


class Barrier2:
    __slots__ = ("_s", "parties", "arrived", "waiters", "lock")

    def __init__(self, s: "A2", parties: int):
        self._s, self.parties, self.arrived = s, parties, 0
        self.waiters: list[Task] = []
        self.lock = threading.Lock()

    def _wait(self, task: Task) -> bool:
        with self.lock:
            self.arrived += 1
            if self.arrived < self.parties:
                self.waiters.append(task)
                return True
            self.arrived = 0
            woken, self.waiters = self.waiters, []
        for t in woken:
            t.wakes += 1
            t.q.append(t)
        if woken and self._s._n_idle:
            self._s._notify(len(woken))
        return False


class A2(UserModeBase):
    """N pinned scheduler threads, a ready deque each (with stealing), per-primitive queues."""

    name = "A2"

    def __init__(self, cpus: list[int] | None = None):
        super().__init__(cpus)
        self._ready: list[deque[Task]] = [deque() for _ in self.cpus]
        self._idle_cv = threading.Condition(threading.Lock())
        self._n_idle = 0
        self._rr = 0

    def event(self) -> Event2:
        return Event2(self)

    def semaphore(self, value: int = 0) -> Semaphore2:
        return Semaphore2(self, value)

    def barrier(self, parties: int) -> Barrier2:
        return Barrier2(self, parties)

    def _notify(self, n: int) -> None:
        """Wake up to ``n`` sleeping scheduler threads. ``_n_idle`` counts the threads
        asleep and not yet notified (a notified one is taken off at once, here, not when it
        gets the GIL back), so the signals and spawns that follow a wake-up see 0 and do
        not take the condition's lock again for a thread that is already on its way."""
        with self._idle_cv:
            k = min(n, self._n_idle)
            if k:
                self._n_idle -= k
                self._idle_cv.notify(k)

    def _submit_new(self, task: Task) -> None:
        # spawn is called by one thread at a time (the spawner); round-robin over the deques
        rr = self._rr
        q = task.q = self._ready[rr]
        self._rr = rr + 1 if rr + 1 < len(self._ready) else 0
        q.append(task)
        if self._n_idle and not self._spawning:  # a user thread spawning one while running
            self._notify(1)

    def _spawn_done(self) -> None:
        if self._n_idle and any(self._ready):
            self._notify(len(self._ready))

    def _wake_all(self) -> None:
        with self._idle_cv:
            self._n_idle = 0
            self._idle_cv.notify_all()

    def _park(self) -> bool:
        """Sleep until work may be there; True when this thread must exit."""
        dead = False
        with self._idle_cv:
            if self._stop:
                return True
            if any(self._ready):  # re-checked under the lock: a push after this notifies
                return False
            if self._n_idle + 1 == len(self._ready) and not self._spawning and self._live > 0:
                dead = True
            else:
                self._n_idle += 1  # the notifier takes it off again
                self._idle_cv.wait()
                return False
        if dead:
            self._deadlock()
        return True

    def _loop(self, i: int, c: Counts) -> None:
        n = len(self._ready)
        mine = self._ready[i]
        pop = mine.popleft
        others = [self._ready[(i + d) % n] for d in range(1, n)]
        switches = blocks = 0
        try:
            while not self._stop:
                try:
                    task = pop()
                except IndexError:
                    stolen = None
                    for q in others:  # steal the newest of another thread's queue
                        try:
                            stolen = q.pop()
                            break
                        except IndexError:
                            pass
                    if stolen is None:
                        if self._park():
                            return
                        continue
                    stolen.q = mine  # stolen: its wake-ups come here from now on
                    task = stolen
                switches += 1
                send = task.send
                try:
                    while True:  # resume until it parks (a fast-path wait goes straight on)
                        prim = send(None)
                        # a SET event: Event2._wait's fast path, inlined (no call)
                        if not (prim.__class__ is Event2 and prim.flag) and prim._wait(task):
                            blocks += 1
                            break
                        if self._stop:
                            break
                except StopIteration:
                    self._finished()
                except BaseException as exc:  # noqa: BLE001 - the run's one line
                    self._task_raised(task, exc)
        finally:
            c.switches += switches
            c.blocks += blocks

    def _check_idle(self) -> None:
        with self._idle_cv:
            dead = (self._n_idle == len(self._ready) and not any(self._ready)
                    and self._live > 0 and not self._stop)
        if dead:
            self._deadlock()

    def _queues(self) -> str:
        return f"{[len(q) for q in self._ready]}, scheduler threads asleep: {self._n_idle}"

    def _fold_counts(self) -> None:
        self.counts.wakeups += sum(t.wakes for t in self._tasks)
