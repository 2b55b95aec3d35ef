"""A2's lock-free event and semaphore paths (issue 11): no lost wake-up, no double wake,
no unit lost or made up, whatever the interleaving.

Three kinds of interleaving:

- *every one, bounded*: the primitives' deques are replaced by a deque that calls a hook
  before and after each operation (append, pop, popleft, extend, len/truth; a list
  with the same hooks for an event's waiters). These are
  exactly the points where another scheduler thread could interleave to any effect: the
  only shared state besides the deques is the event's flag, read or written right next to
  a deque operation. Each wait or signal runs in its own OS thread, one at a time, and a
  small model checker enumerates every schedule of them at those points with up to two
  preemptions (CHESS's bound; most concurrency bugs need one or two).
- *injected at random*: the same hooks run, as hypothesis chooses, another pending wait or
  signal to completion (nested), over longer programs.
- *real threads*: OS threads hammer one primitive with the GIL's switch interval at 1 µs,
  so the interpreter hands the GIL over inside the primitives' code.

The accounting checked afterwards: each task that parked is, exactly once, either still
queued or in a ready deque (woken once: ``wakes == 1``); no task that went straight on is
anywhere; units released = units taken on the fast path + waiters handed a unit + units
left; a semaphore never ends with both units and waiters, an event that was set with no
waiter left.
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.usched.a2 import Event2, Semaphore2
from hybridsched.usched.common import Task


class FakeSched:
    _n_idle = 0


class HookDeque(deque):
    """A deque that calls ``HookDeque.hook`` before and after each operation."""

    hook = None

    def _h(self):
        h = HookDeque.hook
        if h is not None:
            h()

    def append(self, x):
        self._h()
        super().append(x)
        self._h()

    def extend(self, xs):
        self._h()
        super().extend(xs)
        self._h()

    def pop(self):
        self._h()
        v = super().pop()
        self._h()
        return v

    def popleft(self):
        self._h()
        v = super().popleft()
        self._h()
        return v

    def __len__(self):
        self._h()
        n = super().__len__()
        self._h()
        return n


class HookList(list):
    """The same for a list (an event's waiter queue)."""

    _h = HookDeque._h

    def append(self, x):
        self._h()
        super().append(x)
        self._h()

    def pop(self, *i):
        self._h()
        v = super().pop(*i)
        self._h()
        return v

    def __len__(self):
        self._h()
        n = super().__len__()
        self._h()
        return n


def _task(ready: deque, k: int) -> Task:
    t = Task(iter(()), f"t{k}")
    t.q = ready
    return t


class Harness:
    """Pending operations on one primitive, run in order; hooks may run later ones first."""

    def __init__(self, choose, prim, ops, depth=3):
        """``choose(k)`` picks, at an interleaving point with k pending operations, 0 (go
        on) or i (run the i-th pending operation to completion here)."""
        self.choose, self.prim, self.pending, self.depth = choose, prim, list(ops), depth
        self.level = 0
        self.ready: deque = deque()
        self.parked: list[Task] = []
        self.straight = 0
        self.released = 0
        self.k = 0

    def hook(self):
        if not self.pending or self.level >= self.depth:
            return
        i = self.choose(len(self.pending))
        if i:
            self.run(self.pending.pop(i - 1))

    def run(self, op):
        self.level += 1
        try:
            kind, arg = op
            if kind == "wait":
                self.k += 1
                t = _task(self.ready, self.k)
                if self.prim._wait(t):
                    self.parked.append(t)
                else:
                    self.straight += 1
            elif kind == "release":
                self.released += arg
                self.prim.release(arg)
            else:
                self.prim.set()
        finally:
            self.level -= 1

    def go(self):
        HookDeque.hook = self.hook
        try:
            while self.pending:
                self.run(self.pending.pop(0))
        finally:
            HookDeque.hook = None


def _check_parked(ready, parked, queued):
    woken = list(ready)
    assert len(set(map(id, woken))) == len(woken), "a task was made ready twice"
    assert len(set(map(id, queued))) == len(queued), "a task is queued twice"
    assert {id(t) for t in woken} | {id(t) for t in queued} == {id(t) for t in parked}
    assert not {id(t) for t in woken} & {id(t) for t in queued}
    assert all(t.wakes == 1 for t in woken) and all(t.wakes == 0 for t in queued)


def _drawer(data):
    return lambda k: data.draw(st.integers(0, k), label="interleave")


class Interleaver:
    """Runs each operation in its own OS thread, one at a time: at every hook point the
    running thread asks ``choose`` which live thread goes on (0: itself), hands over and
    waits for its turn; at a thread's end the next one is chosen the same way."""

    def __init__(self, choose, harness, ops):
        self.choose, self.h = choose, harness
        self.cv = threading.Condition()
        self.turn = -1
        self.live = list(range(len(ops)))
        self.idx: dict[int, int] = {}
        self.ops = ops

    def point(self):
        me = self.idx.get(threading.get_ident())
        if me is None:
            return
        with self.cv:
            opts = [me] + [t for t in self.live if t != me]
            nxt = opts[self.choose(len(opts), preempt=True)]
            if nxt != me:
                self.turn = nxt
                self.cv.notify_all()
                self.cv.wait_for(lambda: self.turn == me)

    def body(self, i):
        self.idx[threading.get_ident()] = i
        with self.cv:
            self.cv.wait_for(lambda: self.turn == i)
        try:
            self.h.run(self.ops[i])
        finally:
            with self.cv:
                self.live.remove(i)
                if self.live:
                    self.turn = self.live[self.choose(len(self.live), preempt=False)]
                self.cv.notify_all()

    def go(self):
        ts = [threading.Thread(target=self.body, args=(i,)) for i in range(len(self.ops))]
        for t in ts:
            t.start()
        while len(self.idx) < len(ts):
            time.sleep(0)
        HookDeque.hook = self.point
        try:
            with self.cv:
                self.turn = self.choose(len(self.live), preempt=False)
                self.cv.notify_all()
            for t in ts:
                t.join()
        finally:
            HookDeque.hook = None


def explore(make, check, ops, preemptions=2):
    """Every interleaving of ``ops`` (one thread each) at the hook points with at most
    ``preemptions`` switches away from a thread that could have gone on (CHESS's
    preemption bound; a thread's end switches freely): a stateless model checker that
    replays a prefix of decisions, takes 0 at each new point, then backtracks. Returns
    how many interleavings it ran."""
    todo: list[list[int]] = [[]]
    runs = 0
    while todo:
        prefix = todo.pop()
        taken: list[tuple[int, int, bool]] = []
        used = [0]

        def choose(k, preempt):
            pos = len(taken)
            d = prefix[pos] if pos < len(prefix) else 0
            if preempt and used[0] >= preemptions:
                k = 1  # no preemption left: this point has a single choice
                d = 0
            taken.append((d, k, preempt))
            if preempt and d:
                used[0] += 1
            return d
        prim = make()
        h = Harness(None, prim, [])
        Interleaver(choose, h, ops).go()
        check(prim, h)
        runs += 1
        for pos in range(len(prefix), len(taken)):
            for alt in range(1, taken[pos][1]):
                todo.append([d for d, _, _ in taken[:pos]] + [alt])
    return runs


def _hooked_sem(initial):
    def make():
        sem = Semaphore2(FakeSched(), initial)
        sem.units, sem.waiters = HookDeque(sem.units), HookDeque()
        return sem
    return make


def _check_sem(initial):
    def check(sem, h):
        units, queued = list(deque.__iter__(sem.units)), list(deque.__iter__(sem.waiters))
        assert not (units and queued), "a unit is left while a waiter waits"
        _check_parked(h.ready, h.parked, queued)
        assert initial + h.released == h.straight + len(h.ready) + len(units)
    return check


def _hooked_ev():
    ev = Event2(FakeSched())
    ev.waiters = HookList()
    return ev


def _check_ev(ops):
    def check(ev, h):
        queued = list(list.__iter__(ev.waiters))
        _check_parked(h.ready, h.parked, queued)
        if any(k == "set" for k, _ in ops):
            assert ev.is_set() and queued == [], "a waiter is left on a set event"
        else:
            assert len(h.ready) == 0 and h.straight == 0
    return check


# (operations, initial units, preemption bound): every multiset of up to three operations
# with two preemptions, four with one (the three-op runs already need two: a release
# interrupted by a waiter, then by a second release that takes that waiter)
SMALL_SEM = [([("wait", 0), ("release", 1)], 0, 2), ([("wait", 0), ("release", 1)], 1, 2),
             ([("wait", 0), ("wait", 0), ("release", 2)], 0, 2),
             ([("wait", 0), ("wait", 0), ("release", 2)], 1, 2),
             ([("release", 1), ("wait", 0), ("release", 1)], 0, 2),
             ([("wait", 0), ("release", 1), ("wait", 0)], 1, 2),
             ([("wait", 0), ("wait", 0), ("release", 1), ("release", 1)], 0, 1)]


@pytest.mark.parametrize("ops,initial,bound", SMALL_SEM, ids=str)
def test_semaphore_every_interleaving(ops, initial, bound):
    assert explore(_hooked_sem(initial), _check_sem(initial), ops, bound) > len(ops)


@pytest.mark.parametrize("ops,bound", [([("wait", 0), ("set", 0)], 2),
                                       ([("wait", 0), ("wait", 0), ("set", 0)], 2),
                                       ([("wait", 0), ("set", 0), ("wait", 0), ("set", 0)], 1)],
                         ids=str)
def test_event_every_interleaving(ops, bound):
    assert explore(_hooked_ev, _check_ev(ops), ops, bound) > len(ops)


sem_ops = st.lists(st.one_of(st.just(("wait", 0)), st.tuples(st.just("release"),
                                                              st.integers(1, 3))),
                   min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), ops=sem_ops, initial=st.integers(0, 2))
def test_semaphore_injected_interleavings(data, ops, initial):
    sem = _hooked_sem(initial)()
    h = Harness(_drawer(data), sem, ops)
    h.go()
    _check_sem(initial)(sem, h)


ev_ops = st.lists(st.sampled_from([("wait", 0), ("wait", 0), ("set", 0)]), min_size=1,
                  max_size=10)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), ops=ev_ops)
def test_event_injected_interleavings(data, ops):
    ev = _hooked_ev()
    h = Harness(_drawer(data), ev, ops)
    h.go()
    _check_ev(ops)(ev, h)


@pytest.fixture
def tiny_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _hammer(fns):
    start = threading.Barrier(len(fns))

    def body(fn):
        start.wait()
        fn()
    ts = [threading.Thread(target=body, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


@pytest.mark.parametrize("rep", range(3))
def test_semaphore_real_threads(tiny_switch_interval, rep):
    sem = Semaphore2(FakeSched(), 0)
    ready: deque = deque()
    parked: list[list[Task]] = [[] for _ in range(3)]
    straight = [0] * 3
    rounds = 3000

    def waiter(w):
        def fn():
            for k in range(rounds):
                t = _task(ready, k)
                if sem._wait(t):
                    parked[w].append(t)
                else:
                    straight[w] += 1
        return fn

    def releaser(n):
        def fn():
            for _ in range(rounds // n):
                sem.release(n)
        return fn
    _hammer([waiter(0), waiter(1), waiter(2), releaser(1), releaser(3), releaser(1)])
    released = 3 * rounds - 3000 % 3
    units, queued = list(sem.units), list(sem.waiters)
    assert not (units and queued)
    _check_parked(ready, [t for p in parked for t in p], queued)
    assert released == sum(straight) + len(ready) + len(units)


@pytest.mark.parametrize("rep", range(3))
def test_event_real_threads(tiny_switch_interval, rep):
    ready: deque = deque()
    evs = [Event2(FakeSched()) for _ in range(400)]
    parked: list[list[Task]] = [[], [], []]

    def waiter(w):
        def fn():
            for k, ev in enumerate(evs):
                t = _task(ready, k)
                if ev._wait(t):
                    parked[w].append(t)
        return fn

    def setter():
        for ev in evs:
            for _ in range(20):  # let waiters queue up on it for a while
                pass
            ev.set()
    _hammer([waiter(0), waiter(1), waiter(2), setter])
    assert all(len(ev.waiters) == 0 for ev in evs)
    _check_parked(ready, [t for p in parked for t in p], [])
