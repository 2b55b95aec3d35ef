"""The three architectures' primitives (issue 11): hypothesis-generated wait/signal
interleavings with no lost wake-up, no double wake and FIFO semaphores where promised (A1,
A2); A1's single blocked queue and A2's per-primitive queues observed through their counts;
a raising user thread, a deadlock and a refused OS thread fail cleanly with every thread
joined."""
from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched import usched
from hybridsched.usched import ARCHS, Deadlock, ThreadLimit, UserThreadError

ALL = list(ARCHS)
USER_MODE = ["A1", "A2"]


pytestmark = pytest.mark.usefixtures("no_thread_left")  # conftest.py


# --- interleavings ---------------------------------------------------------------------------

# A program: W waiter threads, each a list of steps ("ev", e) wait on event e or ("sem", s)
# take one unit of semaphore s; one signaller thread that never waits sets every event and
# releases exactly as many semaphore units as the waiters take, in a random order with
# random batch sizes. It cannot deadlock, so every architecture must finish it.
programs = st.integers(1, 3).flatmap(lambda n_ev: st.integers(1, 3).flatmap(
    lambda n_sem: st.tuples(
        st.just(n_ev), st.just(n_sem),
        st.lists(st.lists(st.one_of(st.tuples(st.just("ev"), st.integers(0, n_ev - 1)),
                                    st.tuples(st.just("sem"), st.integers(0, n_sem - 1))),
                          max_size=5), min_size=1, max_size=6),
        st.randoms(use_true_random=False))))


def _run_program(arch: str, cpus: list[int], prog):
    n_ev, n_sem, waiters, rnd = prog
    log: list[tuple] = []
    takes = [0] * n_sem
    for steps in waiters:
        for kind, idx in steps:
            if kind == "sem":
                takes[idx] += 1
    signals = [("ev", e) for e in range(n_ev)]
    for s, k in enumerate(takes):
        while k:
            b = rnd.randint(1, k)
            signals.append(("sem", s, b))
            k -= b
    rnd.shuffle(signals)

    with ARCHS[arch](cpus) as sched:
        evs = [sched.event() for _ in range(n_ev)]
        sems = [sched.semaphore(0) for _ in range(n_sem)]

        def waiter(w, steps):
            for kind, idx in steps:
                yield (evs if kind == "ev" else sems)[idx]
                log.append(("got", kind, idx, w))

        def signaller():
            for sig in signals:
                if sig[0] == "ev":
                    log.append(("set", sig[1]))
                    evs[sig[1]].set()
                else:
                    log.append(("rel", sig[1], sig[2]))
                    sems[sig[1]].release(sig[2])
                yield from ()

        at = rnd.randint(0, len(waiters))  # the signaller starts among the waiters
        for w, steps in enumerate(waiters):
            if w == at:
                sched.spawn(signaller, name="signaller")
            sched.spawn(waiter, w, steps, name=f"w{w}")
        if at == len(waiters):
            sched.spawn(signaller, name="signaller")
        sched.run()
    # every unit released was taken exactly once: none left over, none missing
    assert [_units(s) for s in sems] == [0] * n_sem
    return log, sched.counts, waiters


def _units(sem) -> int:
    return sem.count if hasattr(sem, "count") else sem._sem._value


def _check_log(log, waiters):
    done_set: set[int] = set()
    units: dict[int, int] = {}
    got = [0] * len(waiters)
    for entry in log:
        if entry[0] == "set":
            done_set.add(entry[1])
        elif entry[0] == "rel":
            units[entry[1]] = units.get(entry[1], 0) + entry[2]
        else:
            _, kind, idx, w = entry
            if kind == "ev":
                assert idx in done_set, f"woke on event {idx} before it was set"
            else:
                units[idx] = units.get(idx, 0) - 1
                assert units[idx] >= 0, f"semaphore {idx}: more units taken than released"
            got[w] += 1
    assert got == [len(s) for s in waiters]  # no lost wake-up: every wait returned once


@pytest.mark.parametrize("arch", ALL)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_interleavings_one_cpu(arch, prog):
    log, counts, waiters = _run_program(arch, [0], prog)
    _check_log(log, waiters)
    assert counts.wakeups == counts.blocks  # every blocked user thread woken exactly once


@pytest.mark.parametrize("arch", USER_MODE)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs)
def test_interleavings_all_cpus(arch, prog):
    cpus = sorted(__import__("os").sched_getaffinity(0))
    log, counts, waiters = _run_program(arch, cpus, prog)
    _check_log(log, waiters)
    assert counts.wakeups == counts.blocks


@pytest.mark.parametrize("arch", USER_MODE)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), batches=st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_semaphore_fifo(arch, n, batches):
    """Waiters that blocked in order w0, w1, ... are released in that order."""
    order: list[int] = []
    with ARCHS[arch]([0]) as sched:
        sem = sched.semaphore(0)

        def waiter(w):
            yield sem
            order.append(w)

        def releaser():
            left = n
            for b in batches:
                if left <= 0:
                    break
                sem.release(min(b, left))
                left -= b
                yield from ()
            if left > 0:
                sem.release(left)
        for w in range(n):
            sched.spawn(waiter, w)
        sched.spawn(releaser)
        sched.run()
    assert order == list(range(n))


@pytest.mark.parametrize("arch", ALL)
def test_barrier_releases_all_parties_each_round(arch):
    rounds, parties = 3, 7
    seen: list[tuple[int, int]] = []
    with ARCHS[arch]() as sched:
        bar = sched.barrier(parties)

        def party(p):
            for r in range(rounds):
                seen.append((r, p))
                yield bar
        for p in range(parties):
            sched.spawn(party, p)
        sched.run()
    # nobody starts round r+1 before every party reached round r
    for k, (r, _) in enumerate(seen):
        assert sum(1 for rr, _ in seen[:k] if rr == r - 1) == (parties if r else 0)


# --- the contract, observed through the counts -----------------------------------------------

def _two_queues(arch: str, k: int):
    """k waiters on e1 and k on e2 block first (one CPU, FIFO ready queue), then one
    signaller sets e1 and e2."""
    with ARCHS[arch]([0]) as sched:
        e1, e2 = sched.event(), sched.event()
        peak = []

        def waiter(e):
            yield e

        def signaller():
            if hasattr(sched, "blocked_now"):
                peak.append(sched.blocked_now)
            e1.set()
            e2.set()
            yield from ()
        for _ in range(k):
            sched.spawn(waiter, e1)
            sched.spawn(waiter, e2)
        sched.spawn(signaller)
        sched.run()
    return sched.counts, peak


@pytest.mark.parametrize("k", [1, 5, 40])
def test_a1_single_blocked_queue_is_scanned(k):
    c, peak = _two_queues("A1", k)
    assert peak == [2 * k]  # every blocked user thread sits in the one scheduler-wide queue
    assert c.blocks == c.wakeups == 2 * k
    assert c.scans == 2 * k + k  # e1 scans the whole queue, e2 the k left


@pytest.mark.parametrize("k", [1, 5, 40])
def test_a2_per_primitive_queues_no_scan(k):
    c, _ = _two_queues("A2", k)
    assert c.blocks == c.wakeups == 2 * k
    assert c.scans == 0


def test_a2_fast_paths_touch_no_queue():
    with ARCHS["A2"]([0]) as sched:
        ev, sem = sched.event(), sched.semaphore(0)

        def prog():
            ev.set()            # FREE -> SET, nobody waits
            sem.release(3)      # no waiter: only the count
            for _ in range(3):
                yield sem       # count > 0: no block
            for _ in range(5):
                yield ev        # SET: no lock, no queue
        sched.spawn(prog)
        sched.run()
    assert len(ev.waiters) == 0 and len(sem.waiters) == 0 and sem.count == 0
    assert sched.counts.blocks == sched.counts.wakeups == 0
    assert sched.counts.switches == 1  # resumed from a ready queue once, then never parked


def test_a1_wait_on_set_event_does_not_block_but_signal_scans():
    with ARCHS["A1"]([0]) as sched:
        ev = sched.event()

        def prog():
            ev.set()
            yield ev
        sched.spawn(prog)
        sched.run()
    assert sched.counts.blocks == 0 and sched.counts.scans == 0  # the queue was empty


@pytest.mark.parametrize("arch", USER_MODE)
def test_a2_switch_counts_match_blocks(arch):
    with ARCHS[arch]([0]) as sched:
        a, b = sched.semaphore(), sched.semaphore()

        def ping():
            for _ in range(50):
                b.release()
                yield a

        def pong():
            for _ in range(50):
                yield b
                a.release()
        sched.spawn(ping)
        sched.spawn(pong)
        sched.run()
    c = sched.counts
    assert c.switches == c.blocks + 2  # each block costs one later resume; +2 first starts


# --- failures ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ALL)
def test_raising_user_thread_fails_run_and_joins_everything(arch):
    with pytest.raises(UserThreadError, match=r"user thread bad raised ValueError: boom"):
        with ARCHS[arch]() as sched:
            ev = sched.event()
            bar = sched.barrier(50)

            def waits():
                yield ev

            def at_barrier():
                yield bar

            def bad():
                yield from ()
                raise ValueError("boom")
            for _ in range(20):
                sched.spawn(waits)
                sched.spawn(at_barrier)
            sched.spawn(bad, name="bad")
            sched.run()


@pytest.mark.parametrize("arch", USER_MODE)
def test_deadlock_is_reported_not_hung(arch):
    with pytest.raises(Deadlock):
        with ARCHS[arch]() as sched:
            ev = sched.event()

            def waits():
                yield ev
            for _ in range(4):
                sched.spawn(waits)
            sched.run()


@pytest.mark.parametrize("arch", USER_MODE)
def test_the_last_user_thread_ending_as_spawning_ends_is_no_deadlock(arch):
    """The spawner gives its token back and declares spawning over; a scheduler thread
    whose last user thread ended between the two saw only the token alive and no spawner,
    and declared a deadlock (under load). Here the user thread ends exactly there."""
    from waiting import wait_until
    gate = threading.Event()
    with ARCHS[arch]() as sched:
        real_spawn_done = sched._spawn_done

        def spawn_done():  # the window between "spawning over" and the run's end
            real_spawn_done()
            gate.set()
            wait_until(lambda: sched._done.is_set() or sched._live == 0,
                       "the user thread to end", timeout=30)
        sched._spawn_done = spawn_done

        def ends_when_let():
            gate.wait()
            yield from ()
        sched.spawn(ends_when_let)
        sched.run()  # raised Deadlock("... 1 user threads wait ...")


def test_a0_refused_thread_is_one_clear_error(monkeypatch):
    real = threading.Thread.start
    started = []

    def start(self):
        if self.name.startswith("A0-") and len(started) >= 5:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(ThreadLimit, match="refused to start user thread u5 after 5 threads"):
        with ARCHS["A0"]() as sched:
            ev = sched.event()

            def waits():
                yield ev
            for _ in range(10):
                sched.spawn(waits)
            sched.run()
    assert all(not t.is_alive() for t in started)


def test_a0_restores_stack_size():
    before = threading.stack_size()
    with ARCHS["A0"]() as sched:
        sched.spawn(lambda: iter(()))
        sched.run()
    assert threading.stack_size() == before


def test_unknown_arch_is_usage_error():
    with pytest.raises(usched.UsageError if hasattr(usched, "UsageError") else Exception):
        usched.get("A3")
