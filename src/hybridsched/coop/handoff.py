"""The hand-off paths compiled: a coop barrier waiter's spin, park and sleep, an opener's
resume of the parked, and a worker's wait for its token — each one nopython call per side
(the rules of :mod:`rules`, the mutex, the futex calls of :mod:`native`), so nothing of the
interpreter runs between a worker giving its CPU up and the next one running on it.

The protocols are those documented in :mod:`barrier` (park/open, lock-free against each
other) and :mod:`rules` (the lazy park); only the language changed. ``S`` is the arbiter
segment's regions as a tuple (see :func:`regions`).

Every entry point that may wait for the mutex releases the GIL (a thread of the same
process may hold the mutex in Python and need the GIL to go on); ``post`` never waits and
keeps it.
"""
from __future__ import annotations

import numba
import numpy as np

from ..oslayer.atomics import compare_exchange, exchange
from ..oslayer import native as nv
from . import rules
from .layout import BLOCKED, LAZY, RUNNING, WAITING
from .layout import REVOKED as WAKE_REVOKED

_inner = numba.njit(cache=True)

# wait_token results (REVOKED: the token was taken while we were stopped: queue again)
GRANTED, TIMED_OUT, TAKEN, FAILED, REVOKED = 0, 1, 2, 3, 4
# the CPUs a cpu_set_t (set_affinity's mask) can name
_MAX_CPU = 1024
# wait_coop: returned when it never parked (else wait_token's result)
OPENED = 10
# barrier policies as numbers
BLOCK, SPIN, SPIN_BLOCK = 0, 1, 2
POLICY_CODES = {"block": BLOCK, "spin": SPIN, "spin-block": SPIN_BLOCK}


def regions(state) -> tuple:
    """The arbiter state's arrays in the order the compiled paths take them."""
    return (state.header, state.cpus, state.jobs, state.workers, state.wake, state.hw,
            state.ws, state.lock)


@_inner
def _wake(S, slot):
    """Wake worker ``slot``, just granted a token, pinned to the token's CPU first: a woken
    thread runs where its mask allows, and on its old CPU (another token holder's) it
    would wait for that holder's tick to be preempted before it could move itself, the
    token's CPU idle meanwhile (measured: ~2 ms of idle CPU per hand-off, 10 % of a
    prolific run at k = 1.5 N). The thread pins itself too, so a failed hint only costs
    that wait. A tid outlives its worker only in a slot not yet reclaimed, whose grant
    would wake nobody anyway."""
    if slot < 0:
        return
    header, cpus, jobs, workers, wake, hw, ws, lock = S
    r = workers[slot]
    ci = r.cpu
    if r.used == 1 and r.tid > 0 and ci >= 0:
        c = cpus[ci].cpu
        if r.pinned != c and 0 <= c < _MAX_CPU:  # moving a thread costs a migration
            if nv.set_affinity(r.tid, c) == 0:
                r.pinned = c
    nv.futex_wake(wake, slot, 1)


@numba.njit(nogil=False, cache=True)
def post(S, slot):
    """:func:`_wake` for Python callers (the arbiter's locked paths)."""
    _wake(S, slot)


@_inner
def _release(S, me):
    """Give the token up under the lock (a waiter of our job first); wakes the new holder."""
    header, cpus, jobs, workers, wake, hw, ws, lock = S
    nv.mutex_lock(lock)
    woken = rules.release(header, cpus, jobs, workers, wake, header[0].hi, me, nv.monotonic_ns())
    nv.mutex_unlock(lock)
    _wake(S, woken)


@_inner
def _resume(S, slots, n):
    """Let the claimed parked waiters ``slots[:n]`` run: with the token they kept (lazy)
    at once, else queued for one under the lock."""
    header, cpus, jobs, workers, wake, hw, ws, lock = S
    queued = 0
    for i in range(n):
        s = slots[i]
        if rules.lazy_resume(workers, s, ws):
            wake[s] = 1
            nv.futex_wake(wake, s, 1)
        else:
            slots[queued] = s
            queued += 1
    if queued == 0:
        return
    woken = np.empty(2 * queued, np.int64)
    woken[:] = -1
    nv.mutex_lock(lock)
    now = nv.monotonic_ns()
    for i in range(queued):
        s = slots[i]
        if workers[s].used == 1:  # a parked worker that died may have been reclaimed
            woken[2 * i], woken[2 * i + 1] = rules.acquire(header, cpus, jobs, workers, wake,
                                                           header[0].hi, s, now, hw, ws)
    nv.mutex_unlock(lock)
    for i in range(2 * queued):
        _wake(S, woken[i])


@_inner
def all_at(arrive, epoch):
    """Whether every worker has arrived at ``epoch`` (also the Python barrier's test)."""
    for e in arrive:
        if e < epoch:
            return False
    return True


@_inner
def _open(S, release, parked, bslot, epoch):
    """Open barrier ``epoch``: publish it, then claim every waiter parked at it (each by
    exactly one opener: compare-exchange) and resume them."""
    exchange(release, 0, epoch)
    slots = np.empty(len(parked), np.int64)
    n = 0
    for t in range(len(parked)):
        if parked[t] == epoch and compare_exchange(parked, t, epoch, 0):
            slots[n] = bslot[t]
            n += 1
    _resume(S, slots, n)


@_inner
def _missing_all_hold_tokens(workers, arrive, bslot, epoch):
    for t in range(len(arrive)):
        if arrive[t] < epoch:
            s = bslot[t]
            if s < 0 or workers[s].state != RUNNING:
                return False
    return True


@_inner
def _wait_token(S, me, timeout_ns):
    header, cpus, jobs, workers, wake, hw, ws, lock = S
    deadline = nv.monotonic_ns() + timeout_ns  # signals do not restart the timeout
    while True:
        st = workers[me].state  # read once: a grant may land between two reads
        if st == RUNNING:
            return GRANTED
        if st != WAITING and st != BLOCKED and st != LAZY:
            return TAKEN
        if wake[me] == WAKE_REVOKED:
            return REVOKED
        left = deadline - nv.monotonic_ns()
        if left <= 0:
            return TIMED_OUT
        r = nv.futex_wait(wake, me, 0, left)
        if r == nv.FAILED:
            return FAILED


@numba.njit(nogil=True, cache=True)
def wait_token(S, me, timeout_ns):
    """Sleep until worker ``me`` holds a token: GRANTED, TIMED_OUT (the caller looks for
    dead holders and waits again), TAKEN (the slot was reclaimed) or REVOKED (its token
    was taken while it was stopped: the caller queues again)."""
    return _wait_token(S, me, timeout_ns)


@numba.njit(nogil=True, cache=True)
def wait_coop(S, arrive, release, parked, bslot, t, me, epoch, policy, spin_ns, timeout_ns, spun):
    """Barrier ``epoch`` under coop for worker ``t`` (arbiter slot ``me``), already
    arrived: spin while every missing partner holds a token (not under ``block``; for at
    most ``spin_ns`` under ``spin-block``), else park — keep the token lazily or hand it
    on, publish, re-check — and sleep until the token is ours again. ``spun[0]`` gets the
    spin time in ns. OPENED (never parked), or wait_token's result after parking."""
    header, cpus, jobs, workers, wake, hw, ws, lock = S
    t0 = nv.monotonic_ns()
    while release[0] < epoch:
        if all_at(arrive, epoch):
            _open(S, release, parked, bslot, epoch)
            break
        now = nv.monotonic_ns()
        if (policy != BLOCK and (policy == SPIN or now - t0 < spin_ns)
                and _missing_all_hold_tokens(workers, arrive, bslot, epoch)):
            continue  # they are running: they will be here soon
        spun[0] = now - t0
        if wake[me] == WAKE_REVOKED:  # parks BLOCKED: the opener's to queue, as any parker
            wake[me] = 0
        if not rules.lazy_park(header, workers, wake, me, ws):
            _release(S, me)
        exchange(parked, t, epoch)  # publish, then re-check: see barrier._park
        if release[0] >= epoch:
            if compare_exchange(parked, t, epoch, 0):  # opened before the opener saw us
                one = np.empty(1, np.int64)
                one[0] = me
                _resume(S, one, 1)
        elif all_at(arrive, epoch):  # the last arrival after all (it missed our store)
            _open(S, release, parked, bslot, epoch)
        while True:
            r = _wait_token(S, me, timeout_ns)
            if r != REVOKED or release[0] >= epoch:
                return r  # REVOKED once open: taken after the opener queued us
            # taken while we were stopped on the way here (after the check above): the
            # opener queues us, as any parker; the mark only says what we knew
            compare_exchange(wake, me, WAKE_REVOKED, 0)
    spun[0] = nv.monotonic_ns() - t0
    return OPENED


@numba.njit(nogil=True, cache=True)
def open_coop(S, release, parked, bslot, epoch):
    """The last arrival opens barrier ``epoch``. Releases the GIL: it may wait for the
    mutex, which a thread of its own process may hold in Python."""
    _open(S, release, parked, bslot, epoch)
