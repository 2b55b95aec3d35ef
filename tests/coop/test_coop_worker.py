"""One cooperating worker's side of the arbiter (coop/worker.py) with real threads and
processes: its scheduling policy from the first wait, the waiters' back-off from the
dead-holder poll, and what a handle may do after it left or after its arbiter closed."""
from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time

import numpy as np
import pytest

from coopcheck import fork_token_holder
from waiting import DEADLINE_S, wait_until
from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.barrier import TeamBarrier
from hybridsched.coop.layout import BLOCKED, REVOKED, RUNNING, WAITING
from hybridsched.coop.reclaim import reclaim
from hybridsched.coop.ops import now_ns
from hybridsched.oslayer.cpus import usable_cpus
from hybridsched.oslayer.procfs import thread_state

CPUS = usable_cpus()


def test_a_worker_waiting_for_its_first_token_is_already_sched_batch(seg):
    """The first grant to a worker must not preempt its granter either (traced: two
    involuntary switches per worker per run when the policy was set after the first wait)."""
    seen = {}
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j = a.join_job()
        holder, waiter = a.worker(j), a.worker(j)
        go = threading.Event()

        def body():
            seen["tid"] = threading.get_native_id()
            go.wait(5)
            waiter.acquire()
            waiter.leave()
        t = threading.Thread(target=body)
        t.start()  # before the holder's policy changes: a new thread inherits it
        holder.acquire()
        go.set()
        deadline = time.monotonic() + 5
        while a.state.workers["state"][waiter.slot] != WAITING and time.monotonic() < deadline:
            time.sleep(0.001)
        seen["waiting"] = os.sched_getscheduler(seen["tid"])
        holder.leave()
        t.join(5)
        a.leave_job(j)
    assert not t.is_alive()
    assert seen["waiting"] == os.SCHED_BATCH


# Long enough to hold several of the longest sleeps (0.5 s), short for a test.
WINDOW_S = 1.5


def test_waiters_back_off_yet_a_killed_holder_is_reclaimed(seg):
    """Many waiters do not all wake every period (each wake-up preempts a holder): the one
    that made the last scan keeps the period, the others sleep longer. A holder killed
    after they have backed off is still found, by the scanner's period (about a second on
    a quiet machine; the test waits for the state, not for that time)."""
    from hybridsched.coop import worker as worker_mod

    calls = []
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        scan = a.reclaim_due
        a.reclaim_due = lambda: calls.append(time.monotonic()) or scan()
        j = a.join_job()
        pid = fork_token_holder(a, j)  # takes the only token and keeps it until killed
        got, seats = [], []

        def body():
            me = a.worker(j)
            seats.append(me)
            me.acquire()
            got.append(time.monotonic())
            me.leave()
        ts = [threading.Thread(target=body) for _ in range(6)]
        for t in ts:
            t.start()
        # every waiter but the scanner has backed off to the longer sleep
        wait_until(lambda: len(seats) == 6 and sum(w.poll_ns > worker_mod._RECLAIM_POLL_NS
                                                    for w in seats) >= 5,
                   "five of the six waiters backing off")
        n0, t0 = len(calls), time.monotonic()
        time.sleep(WINDOW_S)  # the measurement window (not a wait for a state)
        n_calls, t_kill = len(calls) - n0, time.monotonic()
        os.kill(pid, signal.SIGKILL)
        for t in ts:
            t.join(DEADLINE_S)  # a bound only a hang reaches
        os.waitpid(pid, 0)
        a.leave_job(j)
    assert len(got) == 6 and min(got) > t_kill
    # every waiter on the period would have woken 6 x window / 0.2 s times
    periods = 6 * (t_kill - t0) / worker_mod.RECLAIM_POLL_S
    assert n_calls < 0.6 * periods, n_calls


@pytest.mark.skipif(len(CPUS) < 2, reason="two tokens needed")
def test_a_killed_holder_is_reclaimed_while_the_others_rotate(seg):
    """Two tokens, one kept by a process then killed; two threads pass the other back and
    forth at their quantum's boundaries, so no wait of theirs lasts a reclaim period. The
    period is the node's, not each wait's: the dead holder is still found (it was not,
    the two sharing one token for as long as they ran)."""
    with Arbiter(path=seg, cpus=CPUS[:2], quantum_s=0.002) as a:
        j = a.join_job()
        pid = fork_token_holder(a, j)
        stop, turns = threading.Event(), [0, 0]

        def body(i):
            me = a.worker(j)
            me.acquire()
            while not stop.is_set():
                sum(range(2000))
                turns[i] += 1
                me.boundary()
            me.leave()
        ts = [threading.Thread(target=body, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        try:
            wait_until(lambda: min(turns) > 0, "both threads running")
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            wait_until(lambda: int(a.state.header["reclaimed"][0]) >= 1,
                       "the killed holder's token reclaimed")
        finally:
            stop.set()
            for t in ts:
                t.join(DEADLINE_S)
        a.leave_job(j)


def test_a_handle_that_left_cannot_take_back_its_reused_slot(seg):
    """(hostile review) After leave() the slot may go to a new worker: the old handle's
    acquire raises, and its second leave frees nothing of the new owner's."""
    from hybridsched.errors import ResourceError

    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j = a.join_job()
        old = a.worker(j)
        old.leave()
        new = a.worker(j)
        assert new.slot == old.slot
        with pytest.raises(ResourceError, match="after it left"):
            old.acquire()
        with pytest.raises(ResourceError):
            old.boundary()
        old.leave()
        assert a.state.workers["used"][new.slot] == 1
        new.acquire()
        assert new.holds
        new.leave()
        a.leave_job(j)


def test_closing_the_arbiter_first_detaches_its_workers(seg):
    """(hostile review) A worker whose arbiter closed keeps no mapping alive, fails loudly
    when used, and its leave still gives the thread its CPU mask and policy back."""
    from hybridsched.errors import ResourceError

    got = {}

    def body():
        before = (os.sched_getaffinity(0), os.sched_getscheduler(0))
        a = Arbiter(path=seg, cpus=CPUS[:1]).__enter__()
        j = a.join_job()
        w = a.worker(j)
        w.acquire()
        a.close()
        with open("/proc/self/maps") as fh:
            got["mapped"] = seg in fh.read()
        try:
            w.boundary()
        except ResourceError as exc:
            got["boundary"] = str(exc)
        w.leave()
        got["restored"] = (os.sched_getaffinity(0), os.sched_getscheduler(0)) == before
    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    for p in (seg, seg + ".lock"):  # a worker row was never freed: left for the next attach
        if os.path.exists(p):
            os.unlink(p)
    assert got == {"mapped": False, "boundary": got.get("boundary", ""), "restored": True}
    assert "after its arbiter closed" in got["boundary"]


def _stopped(pid: int) -> bool:
    return thread_state(pid, pid) in ("T", "t")


def _holding_waiter(a: Arbiter, job: int):
    """A thread that takes a token of ``job`` and keeps it until ``done`` is set; (thread,
    got, done), not started."""
    w = a.worker(job)
    got, done = threading.Event(), threading.Event()

    def hold():
        w.acquire()
        got.set()
        done.wait(DEADLINE_S)
        w.leave()
    return threading.Thread(target=hold), got, done


def _end(pid: int, t: threading.Thread, got: threading.Event, done: threading.Event) -> None:
    """Let the holding waiter go, kill and reap the worker process, join the waiter."""
    done.set()
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if t.is_alive() or got.is_set():
        t.join(DEADLINE_S)


def test_a_stopped_python_workers_token_goes_to_a_waiter_and_it_queues_once_continued(seg):
    """A worker granted the token while stopped (Ctrl-Z, SIGSTOP, a debugger) would keep
    it until continued, the other waiter waiting as long: the waiters' reclaim takes it.
    The worker sleeps in its wait for the token, where BLOCKED alone reads as "parked at
    a barrier, the opener queues me" (a first version hung so: co-located Python-worker
    jobs in 4 of 8 stop-and-continue runs); its wake word says REVOKED, and continued it
    queues again and runs once the token comes back."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j, k = a.join_job(), a.join_job()
        first = a.worker(k)
        first.acquire()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # waits for the token, then says so
            try:
                me = a.worker(j)
                me.acquire()
                os.write(w, b"x")
                me.leave()
            finally:
                os._exit(0)
        os.close(w)
        (slot,) = wait_until(lambda: next(((int(s),) for s in np.flatnonzero(
            (a.state.workers["used"] == 1) & (a.state.workers["job"] == j)
            & (a.state.workers["state"] == WAITING))), None),
            "the child queued for the token")
        t, got, done = _holding_waiter(a, k)
        try:
            os.kill(pid, signal.SIGSTOP)
            wait_until(lambda: _stopped(pid), "the child stopped")
            first.leave()  # the token goes to the stopped child
            t.start()  # a waiter, whose reclaim scan takes it back
            wait_until(got.is_set, "the waiter given the stopped child's token")
            revoked = int(a.state.jobs["revoked"][j])
            assert a.state.workers["state"][slot] == BLOCKED
            assert a.state.wake[slot] == REVOKED
            os.kill(pid, signal.SIGCONT)
            wait_until(lambda: a.state.workers["state"][slot] == WAITING,
                       "the continued child queued again")
            assert not select.select([r], [], [], 0)[0]  # it waits for its turn
            done.set()  # the token back to the child
            assert select.select([r], [], [], DEADLINE_S)[0], "the continued child never ran"
            assert os.read(r, 1) == b"x"
            os.waitpid(pid, 0)
            t.join(DEADLINE_S)
            assert not t.is_alive()
        finally:
            os.close(r)
            _end(pid, t, got, done)
        a.settle()
        a.leave_job(j), a.leave_job(k)
    assert revoked == 1


def test_a_computing_python_worker_stopped_queues_at_its_next_boundary(seg):
    """A worker stopped while it computes on the only token: a waiter gets the token, and
    the worker, continued, queues for it at its next boundary instead of computing on
    beside the new holder."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j, k = a.join_job(), a.join_job()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # computes on the token, a boundary now and then, until killed
            try:
                me = a.worker(j)
                me.acquire()
                os.write(w, b"x")
                while True:
                    sum(range(1000))
                    me.boundary()
            finally:
                os._exit(0)
        os.close(w)
        t, got, done = _holding_waiter(a, k)
        try:
            assert os.read(r, 1) == b"x"
            (slot,) = np.flatnonzero((a.state.workers["used"] == 1) & (a.state.workers["job"] == j))
            os.kill(pid, signal.SIGSTOP)
            wait_until(lambda: _stopped(pid), "the worker stopped")
            t.start()
            wait_until(got.is_set, "the waiter given the stopped worker's token")
            os.kill(pid, signal.SIGCONT)
            wait_until(lambda: a.state.workers["state"][slot] == WAITING
                       and thread_state(pid, pid) == "S", "the continued worker queued")
            done.set()
            wait_until(lambda: a.state.workers["state"][slot] == RUNNING,
                       "the worker on the token again")
        finally:
            os.close(r)
            _end(pid, t, got, done)
        a.settle()
        a.leave_job(j), a.leave_job(k)


def test_a_worker_stopped_on_its_way_into_a_barrier_never_leaves_it_early(seg):
    """Stopped after arriving at a barrier but before giving its token up (here: in the
    arbiter's mutex, held by the test), a worker has its token taken and its wake word
    marked. Continued, it parks: the mark must not send it for a token before the barrier
    opens (a hostile review: it left barrier 1 with its partner never there)."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j, k = a.join_job(), a.join_job()
        bar = TeamBarrier(2)  # worker 1 never arrives
        r, w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                me = a.worker(j)
                bar.slot[0] = me.slot
                me.acquire()
                os.write(w, b"r")
                os.read(go_r, 1)
                bar.wait(0, 1, "block", me)  # must not return
                os.write(w, b"left")
            finally:
                os._exit(0)
        t, got, done = _holding_waiter(a, k)
        try:
            assert os.read(r, 1) == b"r"
            slot = int(bar.slot[0])
            t.start()
            wait_until(lambda: int(a.state.header["waiting"][0]) == 1, "the waiter queued")
            with a.locked() as st:
                os.write(go_w, b"g")  # it arrives, and waits for the mutex to give its token up
                wait_until(lambda: bar.arrive[0] == 1 and thread_state(pid, pid) == "S",
                           "the worker at the barrier, waiting for the mutex")
                os.kill(pid, signal.SIGSTOP)
                wait_until(lambda: _stopped(pid), "the worker stopped")
                woken = reclaim(st, now_ns())  # the waiters' scan, as it would run now
                assert st.wake[slot] == REVOKED
            a.post(woken)
            os.kill(pid, signal.SIGCONT)
            wait_until(got.is_set, "the waiter given the stopped worker's token")
            done.set()
            wait_until(lambda: a.state.cpus["holder"][0] < 0 and bar.parked[0] == 1
                       and a.state.workers["state"][slot] == BLOCKED
                       and thread_state(pid, pid) == "S",
                       "the worker parked at the barrier, the token free")
            assert not select.select([r], [], [], 0)[0], "it left the barrier"
        finally:
            for fd in (r, go_r, go_w):
                os.close(fd)
            _end(pid, t, got, done)
            bar.close()
        a.settle()
        a.leave_job(j), a.leave_job(k)


def test_a_worker_stopped_right_after_its_grant_queues_again_once_continued(seg):
    """Stopped between its grant and its first look at its state (placed there by a
    wrapper of the arbiter's post, as a SIGSTOP may land anywhere), a worker has its token
    taken; continued, it queues again instead of raising "taken away"."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j, k = a.join_job(), a.join_job()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                me = a.worker(j)
                post = a.post

                def post_then_stop(woken):
                    post(woken)
                    a.post = post
                    os.kill(os.getpid(), signal.SIGSTOP)
                a.post = post_then_stop
                try:
                    me.acquire()
                    os.write(w, b"ok" if me.holds else b"no token")
                except Exception as exc:  # noqa: BLE001 - what it raised is the finding
                    os.write(w, f"{type(exc).__name__}: {exc}".encode())
                me.leave()
            finally:
                os._exit(0)
        os.close(w)
        t, got, done = _holding_waiter(a, k)
        try:
            wait_until(lambda: _stopped(pid), "the worker stopped holding the token")
            (slot,) = np.flatnonzero((a.state.workers["used"] == 1) & (a.state.workers["job"] == j))
            t.start()
            wait_until(got.is_set, "the waiter given the stopped worker's token")
            os.kill(pid, signal.SIGCONT)
            wait_until(lambda: a.state.workers["state"][slot] == WAITING,
                       "the continued worker queued again")
            done.set()
            assert select.select([r], [], [], DEADLINE_S)[0], "the worker never answered"
            assert os.read(r, 200) == b"ok"
        finally:
            os.close(r)
            _end(pid, t, got, done)
        a.settle()
        a.leave_job(j), a.leave_job(k)
