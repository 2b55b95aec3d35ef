"""One cooperating worker's side of the arbiter (:mod:`arbiter`): taking a token, the
scheduling points at which it gives the token up, and the wait for it to come back.

Kept apart from the segment's lifecycle: everything here runs per step or per chunk, in
the worker's own thread, and is tuned for that (views made once, lock-free tests first).
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import AbstractContextManager
from typing import Protocol

from ..errors import ResourceError
from . import handoff, rules
from .layout import REVOKED
from .ops import RECLAIM_POLL_S, now_ns
from .state import RUNNING, STATE_NAMES, WAITING, State


class Seat(Protocol):
    """What a worker needs of its arbiter (:class:`arbiter.Arbiter`): the state under its
    lock, the compiled paths' regions, waking the workers a change made runnable, and
    whether the dead are due to be looked for."""

    state: State | None
    regions: tuple

    @property
    def tables(self) -> State: ...

    def locked(self) -> AbstractContextManager[State]: ...

    def post(self, woken) -> None: ...

    def reclaim_due(self) -> bool: ...

_RECLAIM_POLL_NS = int(RECLAIM_POLL_S * 1e9)
# The longest a waiter sleeps once its wake-ups find the period's scan already made: the
# waiter that made the last scan keeps the period, so one scan per period still happens
# and a dead holder is found within this plus a period (0.7 s; a hostile review's worst
# case with 0.6 s took 0.77-0.80 s, too near the second). Every wake-up of a waiter
# preempts a token holder at its next tick: 30 waiters of a prolific run at k = 16 N, each
# waking every 0.2 s, woke ~650 times for nothing in a 7 s run (measured); longer would
# save more and answer a dead holder later.
_IDLE_POLL_NS = int(0.5e9)
# A worker holding a token runs as SCHED_BATCH: the same fair class and weight as
# SCHED_OTHER, but a waking batch thread never preempts the running one (CFS/EEVDF leave
# batch preemption to the tick). So a hand-off — post the next worker, then sleep — is two
# voluntary switches instead of the waker being preempted by the worker it just posted
# (measured here: 1715 -> 17 involuntary switches in 5000 same-CPU futex hand-offs).
# Restored on leave. The trade-off: a coop worker woken by a non-coop event waits for the
# running thread's tick instead of preempting it.
HANDOFF_POLICY = getattr(os, "SCHED_BATCH", None)


class Worker:
    """One worker's handle. ``acquire`` before running, ``boundary`` at every chunk
    boundary, ``block``/``acquire`` around a blocking wait, ``leave`` when done."""

    def __init__(self, arbiter: Seat, slot: int):
        self.arbiter = arbiter
        self.slot = slot
        self.cpu = -1
        self._affinity = os.sched_getaffinity(0)  # the calling thread's, restored on leave
        self.switches = 0      # times this worker got a token after waiting
        self.waited_s = 0.0    # time spent queued for a token
        self._policy: tuple[int, int, int] | None = None  # (tid, policy, priority) to restore
        self._stale_pin = False  # the owner changed the thread's mask (repinned)
        # how long this worker's next wait sleeps before looking for dead holders; kept
        # from wait to wait (a prolific child's waits are each longer than the period)
        self.poll_ns = _RECLAIM_POLL_NS
        self._views()

    def _views(self) -> None:
        # made once (the segment never moves): a field view of a record array costs
        # ~0.5 µs to make, and the per-step paths read four of them. Dropped on leave and
        # when the arbiter closes (_detach), so no handle keeps a detached mapping alive.
        st = self.arbiter.tables
        self._state, self._wcpu = st.workers["state"], st.workers["cpu"]
        self._pinned, self._ccpu = st.workers["pinned"], st.cpus["cpu"]
        # the words a boundary reads, as memoryviews: ~25 ns a read against ~65 through
        # numpy's indexing
        self._waiting = st.hw.data[rules.H_WAITING:rules.H_WAITING + 1]
        at = self.slot * rules.W_STRIDE + rules.W_STATE
        self._my_state = st.ws.data[at:at + 1]

    def _detach(self) -> None:
        # typed as what they hold while attached: _live() refuses a handle after this
        for name in ("_state", "_wcpu", "_pinned", "_ccpu", "_waiting", "_my_state"):
            setattr(self, name, None)

    def _live(self) -> None:
        if self._state is None:
            raise ResourceError(f"coop worker slot {self.slot}: used after it left or after its "
                                "arbiter closed")

    @property
    def holds(self) -> bool:
        return self._state is not None and self._state[self.slot] == RUNNING

    def acquire(self) -> int:
        """Run as soon as a token is ours; returns the CPU (the thread is pinned to it)."""
        a = self.arbiter
        self._live()  # a handle that left may not take back a slot someone else now has
        # the thread that runs is the one a granter pins (registration may be elsewhere)
        a.tables.workers["tid"][self.slot] = threading.get_native_id()
        if self._policy is None and HANDOFF_POLICY is not None:
            self._batch(HANDOFF_POLICY)  # before the first wait: the first grant must not preempt either
        return self._wait_token(queued=not self._queue())

    def _queue(self) -> bool:
        """Ask for a token under the lock (queued, or granted at once: True)."""
        a = self.arbiter
        with a.locked() as st:
            woken = st.acquire(self.slot, now_ns())
        a.post([w for w in woken if w != self.slot])
        return self.slot in woken

    def boundary(self) -> int:
        """A scheduling point: give the CPU away if the quantum is over and others wait."""
        if self._waiting is None:
            self._live()
        if self._my_state[0] != RUNNING:  # its token taken while it was stopped (reclaim):
            return self.acquire()  # queue at once, or a newcomer takes the token beside us
        a = self.arbiter
        st = a.tables
        # lock-free: nobody waiting (one read) or the quantum not over (a compiled test)
        if self._waiting[0] <= 0 or not st.expired(self.slot, now_ns()):
            return self.cpu
        with a.locked() as st:
            woken = st.boundary(self.slot, now_ns())
        a.post(woken)
        return self._wait_token(queued=bool(woken))  # rotated out: we queue

    def try_acquire(self) -> bool:
        """Take a free token if one is idle right now (never waits); does not pin."""
        self._live()
        with self.arbiter.locked() as st:
            got = st.try_acquire(self.slot, now_ns())
        if got:
            self.cpu = int(self._ccpu[self._wcpu[self.slot]])
        return got

    def block(self) -> None:
        """About to sleep on something else: hand the token on (own job first)."""
        self._live()
        a = self.arbiter
        with a.locked() as st:
            woken = st.release(self.slot, now_ns())
        a.post(woken)

    def leave(self) -> None:
        """Give the slot (and any token) back; the thread gets its own CPU mask and policy
        back also when the arbiter was closed first. Idempotent."""
        a = self.arbiter
        if self._state is not None and a.state is not None:
            with a.locked() as st:
                woken = st.leave_worker(self.slot, now_ns())
            a.post(woken)
        self._detach()
        if self.cpu >= 0:  # the thread goes back to where it could run before
            os.sched_setaffinity(0, self._affinity)
            self.cpu = -1
        if self._policy is not None:
            tid, policy, prio = self._policy
            self._policy = None
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(prio))
            except OSError:
                pass  # the thread is gone

    def repinned(self) -> None:
        """The thread's CPU mask was changed by its owner: the next grant pins it again."""
        self._live()
        self._pinned[self.slot] = -1
        self._stale_pin = True

    def resumed(self, result: int) -> None:
        """After a compiled park (handoff.wait_coop): the token is ours again. The fast
        case — granted, and on the CPU this thread is pinned to already — is a count; any
        other goes the whole way (:meth:`_wait_token`)."""
        self._live()
        if (result == handoff.GRANTED and not self._stale_pin and self.cpu >= 0
                and self._ccpu[self._wcpu[self.slot]] == self.cpu == self._pinned[self.slot]
                and self._policy is not None):
            self.switches += 1
            return
        self._wait_token(parked=True, queued=True, result=result)

    def wait_granted(self) -> int:
        """Sleep until a token is ours, also while still BLOCKED: a primitive that parked
        this worker (the coop barrier) queues it for a token on its behalf."""
        self._live()
        return self._wait_token(parked=True, queued=True)

    def _wait_token(self, parked: bool = False, queued: bool = False, result: int | None = None) -> int:
        """``queued``: the caller gave its token up or queued for one, so getting one back
        is a switch even when the grant lands before the first look. ``result``: what a
        compiled wait (handoff) already returned."""
        a = self.arbiter
        t0 = time.perf_counter()
        waited = queued
        if result is None:
            now_state = int(self._state[self.slot])
            if now_state == RUNNING:
                result = handoff.GRANTED
            elif a.tables.wake[self.slot] == REVOKED:  # taken since our grant, while stopped
                result = handoff.REVOKED
            elif not parked and now_state != WAITING:
                result = handoff.TAKEN
        while result != handoff.GRANTED:
            waited = True
            if result == handoff.FAILED:
                raise ResourceError(f"coop worker slot {self.slot}: waiting for a token failed "
                                    "(futex error)")
            if result == handoff.REVOKED:  # taken while we were stopped: queue again
                self._queue()
                result = handoff.wait_token(a.regions, self.slot, self.poll_ns)
                continue
            if result == handoff.TAKEN:
                now_state = int(self._state[self.slot])
                raise ResourceError(f"coop worker slot {self.slot} was taken away (reclaimed; "
                                    f"now {STATE_NAMES.get(now_state, now_state)})")
            # the node's period, not this wait's: waits cut short by grants (workers passing
            # the tokens left among themselves) never last one, and a dead holder's token
            # stayed with it; a look at the header, the lock only when the period is over
            scanned = a.reclaim_due()
            if result == handoff.TIMED_OUT:  # the scanner keeps the period, others back off
                self.poll_ns = _RECLAIM_POLL_NS if scanned else min(2 * self.poll_ns, _IDLE_POLL_NS)
            result = handoff.wait_token(a.regions, self.slot, self.poll_ns)
        if waited:
            self.switches += 1
            self.waited_s += time.perf_counter() - t0
        cpu = int(self._ccpu[self._wcpu[self.slot]])
        if cpu != self.cpu or self._stale_pin:
            self._stale_pin = False
            if int(self._pinned[self.slot]) != cpu:  # else the granter did
                os.sched_setaffinity(0, {cpu})
                self._pinned[self.slot] = cpu
            self.cpu = cpu
        if self._policy is None and HANDOFF_POLICY is not None:
            self._batch(HANDOFF_POLICY)
        return cpu

    def _batch(self, to: int) -> None:
        tid = threading.get_native_id()
        try:
            policy, prio = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
            if policy != to:
                os.sched_setscheduler(0, to, os.sched_param(0))
        except OSError:  # a real-time thread we may not demote back, or a refusing sandbox
            policy, prio = to, 0
        self._policy = (tid, policy, prio)
