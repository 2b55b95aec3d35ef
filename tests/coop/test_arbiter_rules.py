"""The arbiter's rules with fake clocks and fake processes (no OS): tokens never exceed
CPUs, own job first on blocking, round-robin on an expired quantum, dead holders reclaimed."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.coop.state import BLOCKED, RUNNING, WAITING, ArbiterError, State

Q = 20_000_000  # 20 ms in ns


def make(ncpu=2, jobs=3, per_job=3):
    st_ = State.private(list(range(ncpu)), Q)
    js = [st_.join_job(pid=100 + j) for j in range(jobs)]
    ws = {j: [st_.join_worker(j, pid=1000 + 10 * j + i) for i in range(per_job)] for j in js}
    return st_, js, ws


def test_free_tokens_first_then_fifo_queue():
    s, js, ws = make(ncpu=2)
    a, b, c = ws[js[0]]
    assert s.acquire(a, 0) == [a] and s.acquire(b, 0) == [b]
    assert s.acquire(c, 0) == [] and s.workers["state"][c] == WAITING
    assert s.header["waiting"][0] == 1 and not s.check_invariants()


def test_blocking_passes_to_own_job_first_and_keeps_its_quantum():
    s, js, ws = make(ncpu=1)
    a, b, _ = ws[js[0]]
    x = ws[js[1]][0]
    s.acquire(a, 0)
    s.acquire(x, 1)          # other job waits first
    s.acquire(b, 2)          # own job waits second
    assert s.release(a, 5_000_000) == [b]   # own job first, despite x waiting longer
    assert s.cpus["since_ns"][0] == 0       # the job's quantum goes on
    assert s.workers["state"][a] == BLOCKED and not s.check_invariants()


def test_blocking_with_no_own_waiter_goes_round_robin():
    s, js, ws = make(ncpu=1)
    a = ws[js[0]][0]
    x, y = ws[js[1]][0], ws[js[2]][0]
    s.acquire(a, 0)
    s.acquire(y, 1)
    s.acquire(x, 2)
    assert s.release(a, 10) == [x]     # job 1 is next after job 0 in round-robin order
    assert s.cpus["since_ns"][0] == 10 and s.cpus["job"][0] == js[1]
    assert s.release(x, 20) == [y]
    assert s.release(y, 30) == [] and s.cpus["holder"][0] == -1


def test_quantum_checked_only_when_expired_and_someone_waits():
    s, js, ws = make(ncpu=1)
    a = ws[js[0]][0]
    x = ws[js[1]][0]
    s.acquire(a, 0)
    assert not s.expired(a, Q)            # nobody waits
    s.acquire(x, 1)
    assert not s.expired(a, Q - 1) and s.expired(a, Q)
    assert s.boundary(a, Q - 1) == []     # not yet
    assert s.boundary(a, Q) == [x]        # rotate to the other job
    assert s.workers["state"][a] == WAITING and s.header["rotations"][0] == 1
    assert s.boundary(x, Q + Q) == [a]    # and back
    assert not s.check_invariants()


def test_expired_quantum_goes_to_another_job_before_its_own():
    s, js, ws = make(ncpu=1)
    a, b, _ = ws[js[0]]
    x = ws[js[1]][0]
    s.acquire(a, 0)
    s.acquire(b, 1)   # own job waits first
    s.acquire(x, 2)
    assert s.boundary(a, Q) == [x]


def test_static_shares_of_one_job_take_turns():
    """k > N workers of a single job: on expiry the token passes to its own next waiter."""
    s, js, ws = make(ncpu=1, jobs=1)
    a, b, c = ws[js[0]]
    s.acquire(a, 0), s.acquire(b, 0), s.acquire(c, 0)
    order = [a]
    now = 0
    for _ in range(5):
        now += Q
        cur = order[-1]
        (nxt,) = s.boundary(cur, now)
        order.append(nxt)
    assert order == [a, b, c, a, b, c]


def test_nobody_waiting_restarts_the_quantum():
    s, js, ws = make(ncpu=1)
    a = ws[js[0]][0]
    s.acquire(a, 0)
    assert s.boundary(a, 3 * Q) == [] and s.cpus["since_ns"][0] == 3 * Q


def test_dead_holder_is_reclaimed_and_its_token_passed_on():
    s, js, ws = make(ncpu=1)
    a = ws[js[0]][0]
    x = ws[js[1]][0]
    s.acquire(a, 0)
    s.acquire(x, 1)
    dead = {int(s.workers["pid"][a])}
    woken = s.reclaim(lambda pid: pid not in dead, 5)
    assert woken == [x] and s.workers["used"][a] == 0 and s.header["reclaimed"][0] == 1
    assert not s.check_invariants()


def test_dead_job_with_no_workers_is_freed():
    s = State.private([0], Q)
    j = s.join_job(pid=77)
    s.reclaim(lambda pid: pid != 77, 0)
    assert s.jobs["used"][j] == 0 and s.participants() == 0


def test_unregistered_slots_are_refused():
    s, js, ws = make()
    with pytest.raises(ArbiterError):
        s.acquire(200, 0)
    with pytest.raises(ArbiterError):
        s.join_worker(15, 1)


@settings(max_examples=300, deadline=None)
@given(ncpu=st.integers(1, 4), ops=st.lists(
    st.tuples(st.sampled_from(["acquire", "release", "boundary", "leave", "kill"]),
              st.integers(0, 8), st.integers(0, 3 * Q)), max_size=80))
def test_tokens_never_exceed_cpus_and_invariants_hold(ncpu, ops):
    s, js, ws = make(ncpu=ncpu, jobs=3, per_job=3)
    slots = [w for j in js for w in ws[j]]
    now = 0
    dead: set[int] = set()
    for op, i, dt in ops:
        now += dt
        w = slots[i]
        if not s.workers["used"][w]:
            continue
        if op == "acquire":
            s.acquire(w, now)
        elif op == "release":
            s.release(w, now)
        elif op == "boundary":
            s.boundary(w, now)
        elif op == "leave":
            s.leave_worker(w, now)
        else:
            dead.add(int(s.workers["pid"][w]))
            s.reclaim(lambda pid: pid not in dead, now)
        running = int(((s.workers["used"] == 1) & (s.workers["state"] == RUNNING)).sum())
        assert running <= ncpu
        assert not s.check_invariants(), (op, i, s.check_invariants())


def test_lazy_park_keeps_the_token_until_somebody_queues():
    from hybridsched.coop.state import LAZY

    s, js, ws = make(ncpu=1)
    a, b, _ = ws[js[0]]
    s.acquire(a, 0)
    assert s.lazy_park(a) and s.workers["state"][a] == LAZY
    assert s.cpus["holder"][0] == a and not s.check_invariants()
    assert s.lazy_resume(a) and s.workers["state"][a] == RUNNING  # resumed with its token
    assert s.lazy_park(a)
    assert s.acquire(b, 5) == [b]                   # the queuer revokes the lazy token
    assert s.workers["state"][a] == BLOCKED and s.cpus["holder"][0] == b
    assert not s.lazy_resume(a)                     # revoked: must queue again
    assert s.acquire(a, 6) == [] and s.workers["state"][a] == WAITING
    assert not s.check_invariants()


def test_lazy_park_is_refused_while_somebody_waits_and_a_dead_lazy_token_is_reclaimed():
    from hybridsched.coop.state import LAZY

    s, js, ws = make(ncpu=1)
    a = ws[js[0]][0]
    x = ws[js[1]][0]
    s.acquire(a, 0)
    s.acquire(x, 1)
    assert not s.lazy_park(a) and s.workers["state"][a] == RUNNING
    assert s.release(a, 2) == [x]
    assert s.lazy_park(x) and s.workers["state"][x] == LAZY
    dead = {int(s.workers["pid"][x])}
    assert s.reclaim(lambda pid: pid not in dead, 3) == []  # nobody waits: the token is freed
    assert s.cpus["holder"][0] == -1 and not s.check_invariants()


def _threads(s, job, pids):
    """Shim thread slots of ``job``, one per pid in ``pids`` (several may share a process)."""
    return [s.join_worker(job, pid=p, tid=p * 10 + i, thread=True) for i, p in enumerate(pids)]


def test_a_thread_whose_process_holds_another_token_goes_first():
    """Two processes of one job, each with a thread holding a token: of the two threads
    waiting, the one whose process still holds a token is given the token that P2's holder
    gives up, though the other waited longer; the threads of one process that spin for
    each other (OpenBLAS's) then run together."""
    s = State.private([0, 1], Q)
    j = s.join_job(pid=100)
    a1, b2, c2, d1 = _threads(s, j, [501, 502, 502, 501])
    s.acquire(a1, 0)   # process 501 holds token 0
    s.acquire(b2, 0)   # process 502 holds token 1
    s.acquire(c2, 1)   # 502's second thread waits first
    s.acquire(d1, 2)   # 501's second thread waits second
    assert s.release(b2, 5) == [d1]          # 501 holds another token: d1 first
    assert s.release(d1, 6) == [c2]          # 501 now holds only the token given up: FIFO
    assert not s.check_invariants()


def test_the_preference_passes_over_the_longest_waiter_only_within_the_span():
    """The longest waiter is passed over only by threads that queued at most PREF_SPAN
    tickets after it: one that queued later waits its turn behind it (no starvation)."""
    from hybridsched.coop.layout import PREF_SPAN

    s = State.private([0, 1], Q, max_workers=PREF_SPAN + 8)
    j = s.join_job(pid=100)
    a1, b2, c3 = _threads(s, j, [501, 502, 503])
    s.acquire(a1, 0)
    s.acquire(b2, 0)
    s.acquire(c3, 1)                          # the longest waiter, process 503
    for k in range(PREF_SPAN):                # others queue and leave meanwhile
        x = s.join_worker(j, pid=600 + k, tid=6000 + k, thread=True)
        s.acquire(x, 2)
        s.leave_worker(x, 2)
    d1 = _threads(s, j, [501])[0]
    s.acquire(d1, 3)                          # PREF_SPAN + 1 tickets after c3
    assert s.release(b2, 5) == [c3]          # beyond the span: FIFO
    assert not s.check_invariants()


def test_python_workers_keep_fifo_order():
    """Python workers (not shim threads) of one process keep strict FIFO: the preference is
    for the shim's threads only."""
    s = State.private([0, 1], Q)
    j = s.join_job(pid=100)
    a, b = s.join_worker(j, pid=501), s.join_worker(j, pid=502)
    c, d = s.join_worker(j, pid=502), s.join_worker(j, pid=501)
    s.acquire(a, 0)
    s.acquire(b, 0)
    s.acquire(c, 1)
    s.acquire(d, 2)
    assert s.release(b, 5) == [c]
