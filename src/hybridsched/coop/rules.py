"""The arbiter's token rules compiled with numba, over the record arrays of
:func:`state.views` (a private copy in tests, the shared segment in a run).

Why compiled: a hand-off is a handful of field reads and writes plus two scans of the worker
table, and done with numpy calls (a field view and a mask over every slot per step) it cost
~80 µs of the releasing worker's CPU per release + acquire pair, a third of a 200 µs BSP
step; compiled it is a few microseconds. :class:`state.State` keeps the readable API and the
rules' documentation; these functions are its bodies. Each returns the slot it made
runnable, or -1. The caller holds the arbiter's lock.

The lazy park (:func:`lazy_park`, :func:`lazy_resume`, :func:`revoke_lazy`) is the one
lock-free protocol: a worker that parks in a primitive while nobody waits for a token keeps
its token (LAZY) instead of taking the lock twice to free and retake it; whoever queues
later revokes it. Its correctness rests on two sequentially consistent atomics crossing: a
parker sets LAZY (compare-exchange) and then reads ``waiting``; a queuer raises ``waiting``
(fetch-add) and then reads the states. At least one sees the other, so a LAZY token is never
left idle while somebody waits; LAZY -> RUNNING (the parker resumed) and LAZY -> BLOCKED
(revoked) are compare-exchanges, so exactly one of them wins.

Slots are used lowest-first (``join_worker`` takes the first free one), so the scans stop at
the header's high-water mark ``hi`` instead of the whole table.
"""
from __future__ import annotations

import numba

from ..oslayer.atomics import compare_exchange, fetch_add
from .layout import (BLOCKED, FREE, HEADER_DTYPE, LAZY, PREF_SPAN, RUNNING, WAITING, WORKER_DTYPE,
                     word_index)

# where the lock-free paths find a worker's state and the header's waiting count in int32
# views of the regions (compile-time constants). numba's cache does not see a change of
# these: every function that uses one also takes the record array it describes, whose type
# (the layout) is part of the cached signature, so a new layout compiles anew.
W_STRIDE, W_STATE = word_index(WORKER_DTYPE, "state")
_, H_WAITING = word_index(HEADER_DTYPE, "waiting")

# nogil=False on purpose: a rule runs for a microsecond under the arbiter's lock; releasing
# the GIL around it only hands the GIL to another thread of the process, which then keeps
# it until its own next blocking call (measured: a 2-worker hand-off went from ~150 to
# ~390 µs per step with the rules nogil). Kernels are nogil; scheduler bookkeeping is not.
_jit = numba.njit(nogil=False, cache=True)


@_jit
def holds_another(cpus, workers, pid, but):
    """Whether a worker of process ``pid`` holds a token other than CPU row ``but``'s."""
    for ci in range(len(cpus)):
        h = cpus[ci].holder
        if ci != but and h >= 0 and workers[h].pid == pid:
            return True
    return False


@_jit
def first_waiter(cpus, workers, hi, job, ci):
    """The WAITING worker of ``job`` to give token ``ci``: its longest waiter (FIFO by
    ticket), unless a shim thread of a process that holds another token queued at most
    PREF_SPAN tickets after it (the first such): the threads of one process that spin for
    each other run together (see layout.PREF_SPAN). -1 when the job has no waiter."""
    best, seq = -1, 0
    for w in range(hi):
        r = workers[w]
        if r.used == 1 and r.state == WAITING and r.job == job and (best < 0 or r.seq < seq):
            best, seq = w, r.seq
    pref, pseq = -1, 0
    if best >= 0:
        for w in range(hi):
            r = workers[w]
            if (r.used == 1 and r.state == WAITING and r.job == job and r.thread
                    and r.seq <= seq + PREF_SPAN and (pref < 0 or r.seq < pseq)
                    and holds_another(cpus, workers, r.pid, ci)):
                pref, pseq = w, r.seq
    return pref if pref >= 0 else best


@_jit
def next_job(header, workers, njobs, hi, exclude):
    """The next job after the round-robin cursor with a waiter (not ``exclude``); advances
    the cursor past it. -1 when none waits."""
    h = header[0]
    if h.waiting <= 0:
        return -1
    best, dist = -1, njobs
    start = h.rr
    for w in range(hi):
        r = workers[w]
        if r.used == 1 and r.state == WAITING and r.job != exclude:
            d = (r.job - start) % njobs
            if d < dist:
                best, dist = r.job, d
    if best >= 0:
        h.rr = (best + 1) % njobs
    return best


@_jit
def grant(header, cpus, workers, wake, w, ci, now, keep_quantum):
    h = header[0]
    r = workers[w]
    if r.state == WAITING:
        h.waiting -= 1
    c = cpus[ci]
    c.holder = w
    if not keep_quantum or c.job != r.job:
        c.since_ns = now
        c.job = r.job
    r.state = RUNNING
    r.cpu = ci
    r.last_cpu = ci
    r.acquired_ns = now
    h.grants += 1
    wake[w] = 1
    return w


@_jit
def drop(workers, wake, w, now, state):
    r = workers[w]
    r.held_ns += now - r.acquired_ns
    r.state = state
    r.cpu = -1
    wake[w] = 0


@_jit
def enqueue(header, workers, wake, w, hw):
    h = header[0]
    h.seq += 1
    r = workers[w]
    r.seq = h.seq
    r.state = WAITING
    wake[w] = 0
    fetch_add(hw, H_WAITING, 1)  # a full fence before the caller looks for LAZY tokens


@_jit
def free_cpu(cpus, prefer):
    if prefer >= 0 and cpus[prefer].holder < 0:
        return prefer
    for ci in range(len(cpus)):
        if cpus[ci].holder < 0:
            return ci
    return -1


@_jit
def acquire(header, cpus, jobs, workers, wake, hi, w, now, hw, ws):
    """(woken, woken) — the second from a LAZY token revoked for the queue."""
    r = workers[w]
    if r.state == RUNNING or r.state == WAITING:
        return -1, -1
    ci = free_cpu(cpus, r.last_cpu)
    if ci >= 0:
        return grant(header, cpus, workers, wake, w, ci, now, False), -1
    enqueue(header, workers, wake, w, hw)
    return -1, revoke_lazy(header, cpus, jobs, workers, wake, hi, now, ws)


@_jit
def try_acquire(header, cpus, workers, wake, w, now):
    r = workers[w]
    if r.state == RUNNING:
        return True
    if header[0].waiting > 0 or r.state == WAITING:
        return False
    ci = free_cpu(cpus, -1)
    if ci < 0:
        return False
    grant(header, cpus, workers, wake, w, ci, now, False)
    return True


@_jit
def pass_token(header, cpus, jobs, workers, wake, hi, ci, job, now):
    """Token ``ci``, just given up by a worker of ``job``: to that job's first waiter
    (keeping its quantum), else the next job with a waiter, else free."""
    target = first_waiter(cpus, workers, hi, job, ci)
    if target >= 0:
        return grant(header, cpus, workers, wake, target, ci, now, True)
    j = next_job(header, workers, len(jobs), hi, -1)
    if j >= 0:
        return grant(header, cpus, workers, wake, first_waiter(cpus, workers, hi, j, ci), ci, now, False)
    cpus[ci].holder = -1
    cpus[ci].job = -1
    return -1


@_jit
def release(header, cpus, jobs, workers, wake, hi, w, now):
    r = workers[w]
    ci = r.cpu
    if r.state != RUNNING or ci < 0:
        return -1
    drop(workers, wake, w, now, BLOCKED)
    return pass_token(header, cpus, jobs, workers, wake, hi, ci, r.job, now)


@_jit
def revoke_lazy(header, cpus, jobs, workers, wake, hi, now, ws):
    """Take the token of one LAZY holder (if any) for the waiters; the slot woken or -1."""
    if header[0].waiting <= 0:
        return -1
    for ci in range(len(cpus)):
        h = cpus[ci].holder
        if h >= 0 and compare_exchange(ws, h * W_STRIDE + W_STATE, LAZY, BLOCKED):
            r = workers[h]
            r.held_ns += now - r.acquired_ns
            r.cpu = -1
            wake[h] = 0
            return pass_token(header, cpus, jobs, workers, wake, hi, ci, r.job, now)
    return -1


@_jit
def lazy_park(header, workers, wake, w, ws):
    """Park keeping the token if nobody waits (lock-free); False: take the locked path.
    The worker may be left BLOCKED (revoked in between): it then holds nothing."""
    if header[0].waiting > 0 or workers[w].state != RUNNING:
        return False
    wake[w] = 0  # before LAZY is visible: a resumer's wake word store comes after it
    if not compare_exchange(ws, w * W_STRIDE + W_STATE, RUNNING, LAZY):
        return False
    if header[0].waiting > 0:  # somebody queued meanwhile: give it up properly
        compare_exchange(ws, w * W_STRIDE + W_STATE, LAZY, RUNNING)  # fails if revoked
        return False
    return True


@_jit
def lazy_resume(workers, w, ws):
    """LAZY -> RUNNING (lock-free): True if the worker still had its token. (``workers``
    only keys the cache to the layout: see W_STRIDE.)"""
    return compare_exchange(ws, w * W_STRIDE + W_STATE, LAZY, RUNNING)


@_jit
def expired(header, cpus, workers, w, now):
    ci = workers[w].cpu
    h = header[0]
    return ci >= 0 and h.waiting > 0 and now - cpus[ci].since_ns >= h.quantum_ns


@_jit
def boundary(header, cpus, jobs, workers, wake, hi, w, now, hw, ws):
    """(woken, woken) — the second from a LAZY token revoked for the rotated-out worker."""
    r = workers[w]
    ci = r.cpu
    if r.state != RUNNING or ci < 0:
        return -1, -1
    h = header[0]
    if now - cpus[ci].since_ns < h.quantum_ns:
        return -1, -1
    j = next_job(header, workers, len(jobs), hi, r.job)
    target = first_waiter(cpus, workers, hi, j if j >= 0 else r.job, ci)
    if target < 0:
        cpus[ci].since_ns = now  # nobody waits: a fresh quantum, keep running
        return -1, -1
    drop(workers, wake, w, now, WAITING)
    enqueue(header, workers, wake, w, hw)
    h.rotations += 1
    return (grant(header, cpus, workers, wake, target, ci, now, False),
            revoke_lazy(header, cpus, jobs, workers, wake, hi, now, ws))


@_jit
def leave_worker(header, cpus, jobs, workers, wake, hi, w, now, ws):
    woken = -1
    r = workers[w]
    if compare_exchange(ws, w * W_STRIDE + W_STATE, LAZY, RUNNING):
        pass  # a dead parker's token: released below like a running one's
    if r.state == RUNNING:
        woken = release(header, cpus, jobs, workers, wake, hi, w, now)
    if r.state == WAITING:
        header[0].waiting -= 1
    r.used = 0
    r.state = FREE
    return woken


@_jit
def revoke_holder(header, cpus, jobs, workers, wake, hi, w, now, ws):
    """Take the token of RUNNING worker ``w``, asleep in a call nothing intercepts (the
    shim's watchdog, lock held): its state becomes BLOCKED by compare-exchange, so a
    worker that resumes meanwhile and parks lazily fails its own exchange and takes the
    locked path, where it finds it holds nothing. The slot woken, or -1. Not one of the
    rules the C shim mirrors: only the watchdog (Python) revokes."""
    ci = workers[w].cpu
    if ci < 0 or not compare_exchange(ws, w * W_STRIDE + W_STATE, RUNNING, BLOCKED):
        return -1
    r = workers[w]
    r.held_ns += now - r.acquired_ns
    r.cpu = -1
    wake[w] = 0
    return pass_token(header, cpus, jobs, workers, wake, hi, ci, r.job, now)


@_jit
def running_all(workers, slots):
    """Whether every slot in ``slots`` is a worker holding a token (-1: not a coop worker)."""
    for s in slots:
        if s < 0 or workers[s].state != RUNNING:
            return False
    return True
