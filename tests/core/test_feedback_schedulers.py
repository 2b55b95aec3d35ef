"""The feedback-driven schedulers without threads or clocks: AIMD's utilisation (Eqs. 1-2)
from synthetic /proc/stat counters, its contention window from a fake monitor, and the
adaptive chunk sizes (Eq. 3) from chosen chunk timings."""
from __future__ import annotations

import math
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.core import dispatch
from hybridsched.core import policies as pol
from hybridsched.core.monitor import UtilisationModel, UtilisationMonitor
from waiting import wait_until

# --- Eq. 1 and Eq. 2 from synthetic counters ---------------------------------------------


def cumulative(*deltas):
    """Per-core (busy, total) deltas per sample -> cumulative counter samples."""
    out, acc = [], None
    for sample in deltas:
        if acc is None:
            acc = [(0.0, 0.0)] * len(sample)
            out.append(list(acc))
        acc = [(b + db, t + dt) for (b, t), (db, dt) in zip(acc, sample)]
        out.append(list(acc))
    return out


def test_utilisation_model_hand_computed():
    # two cores; per-sample (busy, total) deltas
    samples = cumulative([(0.5, 1.0), (0.1, 1.0)],     # U = 0.5, 0.1
                         [(0.9, 1.0), (0.3, 1.0)],     # U = 0.9, 0.3
                         [(1.0, 1.0), (0.0, 1.0)])     # U = 1.0, 0.0
    m = UtilisationModel(a=0.7, beta=0.8)
    assert m.update(samples[0]) is None  # one sample gives no delta yet
    # p=1: means 0.5, 0.1; Ug = 0.7*0.5 + 0.3*0.1 = 0.38; first value initialises the EWMA
    assert m.update(samples[1]) == pytest.approx(0.38)
    # p=2: means 0.7, 0.2; Ug = 0.7*0.7 + 0.3*min(0.9, 0.3) = 0.58; U = 0.8*0.38 + 0.2*0.58
    assert m.update(samples[2]) == pytest.approx(0.42)
    # p=3: means (0.5+0.9+1)/3 = 0.8, 0.4/3; Ug = 0.7*0.8 + 0.3*0.0 = 0.56
    assert m.update(samples[3]) == pytest.approx(0.8 * 0.42 + 0.2 * 0.56)
    assert m.samples == 3


def test_utilisation_model_defaults_are_the_papers():
    m = UtilisationModel()
    assert (m.a, m.beta) == (0.7, 0.8)
    assert pol.AIMD_THRESHOLD == 0.95 and pol.AIMD_CHUNK == 4 and pol.AIMD_MIRROR_EVERY == 32


def test_utilisation_model_clamps_and_idle_cores():
    m = UtilisationModel()
    m.update([(0.0, 0.0), (0.0, 0.0)])
    # busy delta above total (counter skew) clamps to 1; a core whose total did not move is 0
    u = m.update([(2.0, 1.0), (0.0, 0.0)])
    assert u == pytest.approx(0.7 * 1.0 + 0.3 * 0.0)
    assert 0.0 <= u <= 1.0


def test_utilisation_model_restarts_when_cores_change():
    m = UtilisationModel()
    m.update([(0.0, 0.0)])
    first = m.update([(1.0, 1.0)])
    assert first == pytest.approx(1.0)
    # a CPU came online: the pair cannot be compared, the value is kept
    assert m.update([(1.0, 1.0), (0.0, 0.0)]) == first


def test_combined_and_ewma_functions():
    assert pol.combined_utilisation([0.2, 0.9], [0.5, 0.1]) == pytest.approx(0.7 * 0.9 + 0.3 * 0.1)
    assert pol.ewma(None, 0.6) == 0.6
    assert pol.ewma(0.5, 1.0) == pytest.approx(0.8 * 0.5 + 0.2 * 1.0)


def test_monitor_thread_publishes_the_model_value():
    """The sampling thread with a fake counter source: all cores fully busy -> U = 1."""
    t = [0.0]

    def source():
        t[0] += 1.0
        return [(t[0], t[0]), (t[0], t[0])]

    with UtilisationMonitor(period=0.001, source=source) as mon:
        deadline = time.monotonic() + 5
        while mon.value == 0.0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert mon.value == pytest.approx(1.0)
    assert not [th for th in threading.enumerate() if th.name == "hybridsched-monitor"]


def test_monitor_samples_once_a_second_by_default():
    from hybridsched.core import monitor

    assert monitor.SAMPLE_PERIOD_S == 1.0  # §2.3: "completed sampling second intervals"


_STAT = """cpu  10 0 10 80 0 0 0 0 0 0
cpu0 {u0} 0 0 {i0} {w0} 0 0 0 0 0
cpu1 1 0 0 99 0 0 0 0 0 0
cpu3 {u3} 0 0 {i3} 0 0 0 0 0 0
intr 1 2 3
"""


def test_proc_stat_counters_read_only_the_cpuset_and_count_iowait_as_busy(tmp_path):
    from hybridsched.oslayer.procfs import proc_stat_counters

    f = tmp_path / "stat"
    f.write_text(_STAT.format(u0=30, i0=50, w0=20, u3=5, i3=95))
    # cpu1 is outside the cpuset, cpu2 is offline (absent): neither is returned
    got = proc_stat_counters([0, 2, 3], str(f))
    assert got == [(50.0, 100.0), (5.0, 100.0)]  # cpu0: user 30 + iowait 20 busy (Eq. 11)


def test_reset_forgets_the_history_of_earlier_runs():
    """A reset (before each timed AIMD run) starts the long-term mean afresh: what ran
    before (here a fully busy period) no longer weighs on Eq. 1."""
    t = [0.0, 0.0]
    busy = [True]

    def source():
        t[1] += 1.0
        t[0] += 1.0 if busy[0] else 0.0
        return [(t[0], t[1])]

    mon = UtilisationMonitor(period=3600, source=source)  # no thread: samples by hand
    mon.model.update(source())
    for _ in range(5):
        mon.model.update(source())
    assert mon.model.value == pytest.approx(1.0)
    busy[0] = False
    mon.reset()
    assert mon.value == 0.0 and mon.model.value is None and mon.resets == 1
    assert mon.model.update(source()) == pytest.approx(0.0)  # idle core, no old busy mean
    fresh = UtilisationMonitor(period=3600, source=source)
    fresh.model.update(source())
    assert fresh.model.update(source()) == mon.model.value  # as if nothing ran before


def test_reset_restarts_the_sampling_period():
    """After a reset the next sample comes a full period after the reset's own baseline,
    not at the end of the period the reset interrupted. Timestamps, not sleeps: on a loaded
    machine samples come late, never early."""
    calls: list[tuple[float, bool]] = []  # (when, made by the sampling thread)
    period = 0.2

    def source():
        calls.append((time.monotonic(), threading.current_thread() is not threading.main_thread()))
        return [(0.0, float(len(calls)))]

    def sampled_after(i: int) -> int | None:
        return next((j for j in range(i + 1, len(calls)) if calls[j][1]), None)

    with UtilisationMonitor(period=period, source=source) as mon:
        last = 0
        for _ in range(20):  # until a reset lands mid-period (a loaded machine may miss one)
            k = wait_until(lambda: sampled_after(last), "a periodic sample")
            while time.monotonic() < calls[k][0] + period / 2:
                pass  # half into the period
            mon.reset()
            r = max(i for i, (_, sampler) in enumerate(calls) if not sampler)  # the reset's
            last = r
            if sampled_after(k) is None or sampled_after(k) > r:
                break  # no sample between the one seen and the reset
        else:
            raise AssertionError("no reset landed mid-period in 20 periods")
        nxt = wait_until(lambda: sampled_after(r), "the first sample after the reset")
        assert calls[nxt][0] - calls[r][0] >= period - 1e-3
        assert calls[nxt][0] - calls[k][0] >= 1.5 * period - 1e-3  # not the old period's end


# --- the AIMD window ---------------------------------------------------------------------


class FakeMonitor:
    """Stands in for UtilisationMonitor: the test sets ``value``."""

    def __init__(self, value: float):
        self.value = value


def complete(gate, n: int) -> list[int]:
    """Claim and complete n chunks one at a time; the window after each completion."""
    windows = []
    for _ in range(n):
        chunk = gate.claim(0)
        assert chunk is not None
        gate.done(0, chunk[1], 0.001)
        windows.append(gate.window)
    return windows


def test_window_starts_at_the_pool():
    gate = dispatch.AimdGate(1000, pool=3, limit=8, monitor=FakeMonitor(0.5))
    assert gate.window == 3 and [w for _, w, _ in gate.window_trace] == [3]
    assert gate.window_trace[0][2] == 0.5  # the U it started from


def test_additive_increase_below_threshold():
    gate = dispatch.AimdGate(1000, pool=2, limit=6, monitor=FakeMonitor(0.5))
    assert complete(gate, 6) == [3, 4, 5, 6, 6, 6]  # +1 per completion, capped at the limit


def test_exactly_at_threshold_is_not_overload():
    gate = dispatch.AimdGate(1000, pool=2, limit=6, monitor=FakeMonitor(0.95))
    assert complete(gate, 1) == [3]


def test_multiplicative_decrease_above_threshold():
    gate = dispatch.AimdGate(1000, pool=8, limit=8, monitor=FakeMonitor(0.96))
    assert complete(gate, 5) == [4, 2, 1, 1, 1]  # halved, never below 1


def test_slow_start_doubles_while_idle():
    gate = dispatch.AimdGate(1000, pool=1, limit=12, monitor=FakeMonitor(0.0))
    assert complete(gate, 5) == [2, 4, 8, 12, 12]  # doubles up to the limit


def test_no_monitor_means_slow_start():
    gate = dispatch.AimdGate(100, pool=1, limit=4, monitor=None)
    assert complete(gate, 3) == [2, 4, 4]


def test_mirror_is_read_every_32_completions():
    mon = FakeMonitor(0.5)
    gate = dispatch.AimdGate(10_000, pool=4, limit=64, monitor=mon)
    mon.value = 0.99  # overload appears at once, but the gate still acts on the old mirror
    w = complete(gate, 31)
    assert w == list(range(5, 36))
    assert gate.u == 0.5
    w = complete(gate, 1)  # completion 32 re-reads the mirror and halves
    assert gate.u == 0.99 and w == [35 // 2]
    mon.value = 0.0
    w = complete(gate, 31)  # still overloaded in the gate's view until completion 64
    assert w[-1] == 1
    w = complete(gate, 1)
    assert gate.u == 0.0 and w == [2]


def test_chunks_of_four_and_every_frame_once():
    gate = dispatch.AimdGate(30, pool=2, limit=2, monitor=FakeMonitor(0.5))
    chunks = []
    while (c := gate.claim(0)) is not None:
        chunks.append(c)
        gate.done(0, c[1], 0.001)
    assert chunks == [(f, min(4, 30 - f)) for f in range(0, 30, 4)]


@settings(max_examples=200, deadline=None)
@given(window=st.integers(1, 64), limit=st.integers(1, 64), u=st.floats(0.0, 1.0))
def test_aimd_window_rule(window, limit, u):
    window = min(window, limit)
    new = pol.aimd_window(window, u, limit)
    assert 1 <= new <= limit
    if u == 0.0:
        assert new == min(limit, 2 * window)
    elif u > 0.95:
        assert new == max(1, window // 2)
    else:
        assert new == min(limit, window + 1)


def test_window_gates_concurrent_claims():
    """With the window full a claim blocks until a chunk completes; stop() frees waiters."""
    gate = dispatch.AimdGate(1000, pool=1, limit=1, monitor=FakeMonitor(0.5))
    first = gate.claim(0)
    got = []
    t = threading.Thread(target=lambda: got.append(gate.claim(1)))
    t.start()
    wait_until(lambda: gate._waiting == 1, "the second claim blocking on the full window")
    assert got == [] and gate.in_flight == 1  # blocked: window 1, one chunk in flight
    gate.done(0, first[1], 0.001)
    t.join(5)
    assert not t.is_alive() and got == [(4, 4)]
    # window full again: a blocked claimer is released (with None) by stop()
    t2 = threading.Thread(target=lambda: got.append(gate.claim(0)))
    t2.start()
    wait_until(lambda: gate._waiting == 1, "a claim blocking on the full window again")
    assert len(got) == 1
    gate.stop()
    t2.join(5)
    assert not t2.is_alive() and got[-1] is None


def test_waiters_are_released_at_the_end():
    """When the last frames are handed out, claimers waiting on a full window get None
    (they block while frames remain, one takes the last chunk, the rest see the end)."""
    gate = dispatch.AimdGate(8, pool=1, limit=1, monitor=FakeMonitor(0.99))
    assert gate.claim(0) == (0, 4)
    got = []
    waiters = [threading.Thread(target=lambda: got.append(gate.claim(1))) for _ in range(3)]
    for t in waiters:
        t.start()
    wait_until(lambda: gate._waiting == 3, "three claims blocking on the full window")
    gate.done(0, 4, 0.001)
    wait_until(lambda: got, "a waiter taking the last chunk")
    assert got == [(4, 4)] and gate._waiting == 2
    gate.done(1, 4, 0.001)
    for t in waiters:
        t.join(5)
    assert not any(t.is_alive() for t in waiters) and got == [(4, 4), None, None]


# --- adaptive chunk sizes from chosen timings (§2.4, Eq. 3) --------------------------------


def test_adaptive_first_chunks_are_guided_like():
    a = dispatch.Adaptive(100, 4)
    assert a.claim(0) == (0, 25)       # no history: base_chunk = 100/4, speed factor 1
    assert a.claim(1) == (25, 18)      # 75/4 = 18.75, still no history for anyone


def test_adaptive_hand_computed_paper_reading():
    """§2.4 as written: thread_avg = the thread's time per finished chunk, global_avg = the
    mean of thread_avg over the threads with history."""
    a = dispatch.Adaptive(100, 4)
    assert a.claim(0) == (0, 25)
    a.done(0, 25, 1.0)                 # thread 0: 1 s per chunk
    assert a.claim(1) == (25, 18)      # thread 1 has no history: factor 1, 75/4
    a.done(1, 18, 3.0)                 # thread 1: 3 s per chunk; global avg (1 + 3) / 2 = 2
    assert a.claim(0) == (43, 28)      # 57/4 * 2/1 = 28.5
    assert a.claim(1) == (71, 4)       # 29/4 * 2/3 = 4.83
    assert a.claim(2) == (75, 6)       # 25/4 * 1 (no history) = 6.25
    a.done(0, 28, 1.0)                 # thread 0: 2 s / 2 chunks = 1; global (1 + 3) / 2
    assert a.claim(0) == (81, int(19 / 4 * 2.0))
    # clamps: a very fast thread gets everything that is left, a very slow one gets 1
    b = dispatch.Adaptive(1000, 4)
    for _ in range(1000):
        b.done(1, 1, 1e-6)             # thread 1 has finished many quick chunks
    b.done(0, 1, 10.0)                 # thread 0 one very slow one; global avg ~ 5 s
    assert b.claim(0) == (0, 125)      # 1000/4 * 5/10 = 125
    assert b.claim(1) == (125, 875)    # 875/4 * 5/1e-6 -> clamped down to remaining


def test_adaptive_hand_computed_per_frame_variant():
    """The adaptive-frame variant: averages per frame (slice) instead of per chunk."""
    a = dispatch.Adaptive(100, 4, pol.PER_FRAME)
    assert a.claim(0) == (0, 25)
    a.done(0, 25, 1.0)                 # thread 0: 1 s for 25 slices = 0.04 s per slice
    assert a.claim(1) == (25, 18)
    a.done(1, 18, 3.0)                 # thread 1: 3 s / 18 slices; global avg 4 s / 43
    assert a.claim(0) == (43, 33)      # 57/4 * (4/43)/(1/25) = 33.1
    assert a.claim(1) == (76, 3)       # 24/4 * (4/43)/(3/18) = 3.35
    assert a.claim(2) == (79, 5)       # 21/4 * 1 (no history) = 5.25
    b = dispatch.Adaptive(1000, 4, pol.PER_FRAME)
    for _ in range(1000):
        b.done(1, 1, 1e-6)
    b.done(0, 1, 10.0)                 # global avg ~ 0.01 s per slice
    assert b.claim(0) == (0, 1)        # 1000/4 * ~0.001 -> clamped up to 1
    assert b.claim(1) == (1, 999)


def test_the_two_readings_differ_when_chunks_shrink():
    """A thread that ran one big chunk looks slow per chunk but not per frame: the next
    chunk thread 0 gets is below base_chunk per chunk and above it per frame."""
    for reading, slower in ((pol.PER_CHUNK, True), (pol.PER_FRAME, False)):
        a = dispatch.Adaptive(1000, 2, reading)
        a.claim(0), a.claim(1)
        a.done(0, 500, 1.0)            # 500 frames in 1 s: 2 ms per frame, 1 s per chunk
        a.done(1, 250, 0.6)            # 250 frames in 0.6 s: 2.4 ms per frame, 0.6 s per chunk
        size = a.claim(0)[1]           # base_chunk = 250 / 2 = 125
        assert (size < 125) == slower, (reading, size)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3000), k=st.integers(1, 16),
       ops=st.lists(st.tuples(st.integers(0, 15), st.floats(1e-6, 10.0)), min_size=1, max_size=200))
@pytest.mark.parametrize("reading", pol.READINGS)
def test_adaptive_matches_eq3_for_any_timings(reading, n, k, ops):
    """Replay claims with chosen chunk times; every size follows Eq. 3 computed here from
    the same history, and the frames are handed out exactly once."""
    a = dispatch.Adaptive(n, k, reading)
    time_w = [0.0] * k
    frames_w = [0] * k
    chunks_w = [0] * k
    handed = []
    nxt = 0
    for w, seconds in ops:
        w %= k
        got = a.claim(w)
        if nxt >= n:
            assert got is None
            break
        remaining = n - nxt
        units = chunks_w if reading == pol.PER_CHUNK else frames_w
        have = [i for i in range(k) if units[i]]
        if units[w] and have:
            if reading == pol.PER_CHUNK:     # mean of the threads' averages
                g = sum(time_w[i] / chunks_w[i] for i in have) / len(have)
            else:                            # all time over all frames
                g = sum(time_w[i] for i in have) / sum(frames_w[i] for i in have)
            sf = g / (time_w[w] / units[w])
        else:
            sf = 1.0
        want = max(1, min(remaining, math.floor(remaining / k * sf)))
        assert got == (nxt, want)
        handed.append(got)
        nxt += want
        a.done(w, want, seconds)
        time_w[w] += seconds
        frames_w[w] += want
        chunks_w[w] += 1
    while nxt < n:
        got = a.claim(0)
        handed.append(got)
        nxt += got[1]
    assert a.claim(0) is None
    frames = sorted(f for first, count in handed for f in range(first, first + count))
    assert frames == list(range(n))
