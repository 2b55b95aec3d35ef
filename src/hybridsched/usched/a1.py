"""A1: user-mode scheduling with ONE scheduler-wide queue of blocked user threads.

Data structures, all behind one lock (``A1._lock``, with the condition ``_cv`` that idle
scheduler threads sleep on):

- ``_ready``: one deque of ready user threads shared by the N scheduler threads (the
  seed's single completion list); spawn and wake-ups append, scheduler threads pop.
- ``_bprims`` / ``_btasks``: the single queue of blocked user threads, as two parallel lists
  (the primitive waited on, the task), in blocking order.
- the primitives (``Event1``, ``Semaphore1``, ``Barrier1``, the one new primitive family)
  hold only their state (set flag, count, arrivals); they have no queue of their own.

Blocking appends to the blocked queue. Signalling takes the lock, updates the state and
scans the blocked queue from its head for this primitive's waiters (all of them for an
event or a barrier's release; up to the count for a semaphore, which therefore wakes in
FIFO order), removes them and appends them to ``_ready``. ``scans`` counts the entries
examined: the cost that A2 removes.
"""
from __future__ import annotations

import threading
from collections import deque

from .api import Counts
from .common import Task, UserModeBase


class Event1:
    __slots__ = ("_s", "state")

    def __init__(self, s: "A1"):
        self._s, self.state = s, False

    def is_set(self) -> bool:
        return self.state

    def set(self) -> None:
        s = self._s
        with s._lock:
            if self.state:
                return
            self.state = True
            s._signal_locked(self, len(s._bprims))

    def _take(self, s: "A1") -> bool:
        return self.state


class Semaphore1:
    __slots__ = ("_s", "count")

    def __init__(self, s: "A1", value: int):
        self._s, self.count = s, value

    def release(self, n: int = 1) -> None:
        s = self._s
        with s._lock:
            self.count += n
            self.count -= s._signal_locked(self, self.count)

    def _take(self, s: "A1") -> bool:
        if self.count > 0:
            self.count -= 1
            return True
        return False


class Barrier1:
    __slots__ = ("_s", "parties", "arrived")

    def __init__(self, s: "A1", parties: int):
        self._s, self.parties, self.arrived = s, parties, 0

    def _take(self, s: "A1") -> bool:
        self.arrived += 1
        if self.arrived < self.parties:
            return False
        self.arrived = 0
        s._signal_locked(self, len(s._bprims))  # the last arrival releases the others
        return True


class A1(UserModeBase):
    """N pinned scheduler threads, one ready deque and one blocked queue under one lock."""

    name = "A1"

    def __init__(self, cpus: list[int] | None = None):
        super().__init__(cpus)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._ready: deque[Task] = deque()
        self._bprims: list = []
        self._btasks: list[Task] = []
        self._idle = 0
        self._shared = Counts()  # blocks, wakeups, scans: updated under _lock

    def event(self) -> Event1:
        return Event1(self)

    def semaphore(self, value: int = 0) -> Semaphore1:
        return Semaphore1(self, value)

    def barrier(self, parties: int) -> Barrier1:
        return Barrier1(self, parties)

    # the blocked queue (caller holds _lock) -----------------------------------------------
    def _signal_locked(self, prim, want: int) -> int:
        """Move up to ``want`` waiters of ``prim`` from the blocked queue to the ready
        queue, oldest first; return how many. ``list.index`` compares by identity first,
        so the scan runs at C speed, but it still examines every entry up to the last hit
        (the whole queue when fewer than ``want`` wait)."""
        bp = self._bprims
        hits = []
        k = -1
        try:
            while len(hits) < want:
                k = bp.index(prim, k + 1)
                hits.append(k)
        except ValueError:
            k = len(bp) - 1
        self._shared.scans += k + 1
        if not hits:
            return 0
        bt = self._btasks
        woken = [bt[j] for j in hits]
        for j in reversed(hits):
            del bp[j]
            del bt[j]
        self._ready.extend(woken)
        self._shared.wakeups += len(woken)
        if self._idle:
            self._cv.notify(len(woken))
        return len(woken)

    # scheduler threads --------------------------------------------------------------------
    def _loop(self, i: int, c: Counts) -> None:
        lock, ready, cv = self._lock, self._ready, self._cv
        n = len(self.cpus)
        while True:
            dead = False
            with lock:
                while not ready:
                    if self._stop:
                        return
                    if self._idle + 1 == n and not self._spawning and self._live > 0:
                        dead = True
                        break
                    self._idle += 1
                    cv.wait()
                    self._idle -= 1
                if dead:
                    pass
                elif self._stop:
                    return
                else:
                    task = ready.popleft()
            if dead:
                self._deadlock()
                return
            c.switches += 1
            self._run(task)

    def _run(self, task: Task) -> None:
        gen, lock, sh = task.gen, self._lock, self._shared
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
            with lock:
                if take(self):
                    if not self._stop:
                        continue
                    return
                self._bprims.append(prim)
                self._btasks.append(task)
                sh.blocks += 1
            return

    def _submit_new(self, task: Task) -> None:
        with self._lock:
            self._ready.append(task)
            if self._idle:
                self._cv.notify()

    def _wake_all(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _check_idle(self) -> None:
        with self._lock:
            dead = (self._idle == len(self.cpus) and not self._ready and self._live > 0
                    and not self._stop)
        if dead:
            self._deadlock()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self.counts.add(self._shared)
        self._shared = Counts()

    @property
    def blocked_now(self) -> int:
        """Entries in the single blocked queue (for tests and the benchmark)."""
        return len(self._bprims)
