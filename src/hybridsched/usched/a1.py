"""A1: user-mode scheduling with ONE scheduler-wide queue of blocked user threads.

Data structures, all changed only under one lock (``A1._lock``, with the condition ``_cv`` that idle
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

Around that contract the hot paths are kept cheap: the scheduler loop pops ``_ready``
without the lock (``popleft`` is atomic under the GIL and every push happens under the
lock, so a thread re-checking under it before it sleeps cannot miss one); a wait on a SET
event is read without the lock (the flag only goes up; an unset read falls through to the
locked check); the lock is taken with bound ``acquire``/``release`` (half a with-statement);
blocks and switches are loop-local integers, wake-ups and scans plain integers under the
lock; ``_idle`` counts the threads asleep and not yet notified.
"""
from __future__ import annotations

import threading
from collections import deque
from itertools import compress, repeat
from operator import is_, not_

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
        lock = s._lock
        lock.acquire()  # acquire/release: half the cost of a with-statement on 3.11
        try:
            if self.state:
                return
            self.state = True
            s._signal_locked(self, len(s._bprims))
        finally:
            lock.release()

    def _take(self, s: "A1") -> bool:
        return self.state


class Semaphore1:
    __slots__ = ("_s", "count")

    def __init__(self, s: "A1", value: int):
        self._s, self.count = s, value

    def release(self, n: int = 1) -> None:
        s = self._s
        lock = s._lock
        lock.acquire()
        try:
            self.count += n
            self.count -= s._signal_locked(self, self.count)
        finally:
            lock.release()

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
        self._wakeups = self._scans = 0  # updated under _lock

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
        (the whole queue when fewer than ``want`` wait). Many hits are cut out in one
        pass (slices between the hits) rather than one ``del`` each, which would move the
        rest of the queue once per hit."""
        bp = self._bprims
        if want == 1:  # one unit released: the first hit only, no lists built
            try:
                j = bp.index(prim)
            except ValueError:
                self._scans += len(bp)
                return 0
            self._scans += j + 1
            bt = self._btasks
            self._ready.append(bt[j])
            del bp[j]
            del bt[j]
            self._wakeups += 1
            if self._idle:
                self._notify_locked(1)
            return 1
        hits: list[int] = []
        k = -1
        index = bp.index
        every = want >= len(bp)  # an event, a barrier, a large release: all its waiters
        try:
            while len(hits) < want:
                if every and len(hits) == 8:  # many: finish the scan at C speed
                    return self._signal_all_locked(prim)
                k = index(prim, k + 1)
                hits.append(k)
        except ValueError:
            k = len(bp) - 1
        self._scans += k + 1
        if not hits:
            return 0
        bt = self._btasks
        self._ready.extend([bt[j] for j in hits])
        if len(hits) <= 4:
            for j in reversed(hits):
                del bp[j]
                del bt[j]
        else:
            np_, nt, prev = [], [], 0
            for j in hits:
                np_ += bp[prev:j]
                nt += bt[prev:j]
                prev = j + 1
            np_ += bp[prev:]
            nt += bt[prev:]
            bp[:] = np_  # in place: the scheduler loops hold these lists as locals
            bt[:] = nt
        woken = len(hits)
        self._wakeups += woken
        if self._idle:
            self._notify_locked(woken)
        return woken

    def _signal_all_locked(self, prim) -> int:
        """Every waiter of ``prim`` to the ready queue, in blocking order, when there are
        many: the scan examines the whole queue (``scans`` += its length, as the index
        loop would have) at C speed, an identity mask (``map(operator.is_, ...)``) with
        the hits and the rest picked out by ``itertools.compress``: no Python-level step
        per hit (0.5 µs each with the index loop and slices)."""
        bp, bt = self._bprims, self._btasks
        self._scans += len(bp)
        mask = list(map(is_, bp, repeat(prim)))
        woken = list(compress(bt, mask))
        keep = list(map(not_, mask))
        bp[:] = list(compress(bp, keep))  # in place: the scheduler loops hold these lists
        bt[:] = list(compress(bt, keep))
        self._ready.extend(woken)
        n = len(woken)
        self._wakeups += n
        if self._idle:
            self._notify_locked(n)
        return n

    def _notify_locked(self, n: int) -> None:
        """Wake up to ``n`` idle scheduler threads; ``_idle`` counts those asleep and not
        yet notified (a notified one is taken off here), so later signals do not notify a
        thread that is already on its way."""
        k = min(n, self._idle)
        self._idle -= k
        self._cv.notify(k)

    # scheduler threads --------------------------------------------------------------------
    def _loop(self, i: int, c: Counts) -> None:
        """Pop the shared ready deque without the lock (``popleft`` is atomic under the
        GIL, and every push happens under the lock, so the sleeper's re-check under it
        cannot miss one); take the lock to park the task, to check a wait and to sleep."""
        lock, ready, cv = self._lock, self._ready, self._cv
        acquire, release = lock.acquire, lock.release
        bprims, btasks = self._bprims, self._btasks
        pop = ready.popleft
        n = len(self.cpus)
        switches = blocks = 0
        try:
            while not self._stop:
                try:
                    task = pop()
                except IndexError:
                    dead = False
                    with lock:
                        while not ready and not self._stop:
                            if self._idle + 1 == n and not self._spawning and self._live > 0:
                                dead = True
                                break
                            self._idle += 1  # the notifier takes it off again
                            cv.wait()
                    if dead:
                        self._deadlock()
                        return
                    continue
                switches += 1
                send = task.send
                try:
                    while True:
                        prim = send(None)
                        if prim.__class__ is Event1 and prim.state:
                            # a set event stays set: read without the lock (set() writes it
                            # under the lock; an unset read falls through to the locked
                            # check). No queue or scan is involved either way.
                            if self._stop:
                                break
                            continue
                        take = prim._take
                        acquire()
                        try:
                            if not take(self):
                                bprims.append(prim)
                                btasks.append(task)
                                blocks += 1
                                break
                        finally:
                            release()
                        if self._stop:
                            break
                except StopIteration:
                    self._finished()
                except BaseException as exc:  # noqa: BLE001 - the run's one line
                    self._task_raised(task, exc)
        finally:
            c.switches += switches
            c.blocks += blocks

    def _submit_new(self, task: Task) -> None:
        with self._lock:
            self._ready.append(task)
            if self._idle:
                self._notify_locked(1)

    def _wake_all(self) -> None:
        with self._cv:
            self._idle = 0
            self._cv.notify_all()

    def _queues(self) -> str:
        return f"{len(self._ready)}, scheduler threads asleep: {self._idle}"

    def _check_idle(self) -> None:
        with self._lock:
            dead = (self._idle == len(self.cpus) and not self._ready and self._live > 0
                    and not self._stop)
        if dead:
            self._deadlock()

    def _fold_counts(self) -> None:
        self.counts.wakeups += self._wakeups
        self.counts.scans += self._scans
        self._wakeups = self._scans = 0

    @property
    def blocked_now(self) -> int:
        """Entries in the single blocked queue (for tests and the benchmark)."""
        return len(self._bprims)
