"""The chunking policies against the OpenMP rules (issue 2 item 6), the dispensers'
claim/done semantics, and the ``plan`` subcommand.

The expected hand-outs are computed here independently from the rules as the issue states
them (no copy of the library's arithmetic), and hypothesis checks that every frame is handed
out exactly once for any L, k and chunk.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched import cli
from hybridsched.core import dispatch
from hybridsched.core import policies as pol
from hybridsched.errors import UsageError

L_ = st.integers(1, 2000)
K_ = st.integers(1, 70)
C_ = st.integers(1, 300)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def frames_of(chunks) -> list[int]:
    return [f for first, count in chunks for f in range(first, first + count)]


def assert_exact_cover(chunks, n: int) -> None:
    """Every frame 0..n-1 exactly once, every chunk non-empty."""
    chunks = list(chunks)
    assert all(count >= 1 for _, count in chunks), chunks
    assert sorted(frames_of(chunks)) == list(range(n))


# --- static -----------------------------------------------------------------------------


def test_static_blocks_example():
    # 10 frames over 4 workers: 10 mod 4 = 2 extra frames to workers 0 and 1
    assert pol.static_blocks(10, 4) == [[(0, 3)], [(3, 3)], [(6, 2)], [(8, 2)]]


def test_static_blocks_more_workers_than_frames():
    assert pol.static_blocks(2, 5) == [[(0, 1)], [(1, 1)], [], [], []]


@given(L_, K_)
def test_static_blocks_rule(n, k):
    per_worker = pol.static_blocks(n, k)
    assert len(per_worker) == k
    q, r = divmod(n, k)
    expect_first = 0
    for w, chunks in enumerate(per_worker):
        size = q + 1 if w < r else q  # the remainder one each to the lowest-numbered workers
        if size == 0:
            assert chunks == []
        else:
            assert chunks == [(expect_first, size)]  # one contiguous block
        expect_first += size
    assert_exact_cover([c for cs in per_worker for c in cs], n)


def test_static_chunks_example():
    assert pol.static_chunks(10, 3, 2) == [[(0, 2), (6, 2)], [(2, 2), (8, 2)], [(4, 2)]]


@given(L_, K_, C_)
def test_static_chunks_rule(n, k, c):
    per_worker = pol.static_chunks(n, k, c)
    assert len(per_worker) == k
    n_chunks = ceil_div(n, c)
    for j in range(n_chunks):
        first = j * c
        chunk = (first, min(c, n - first))  # [j*c, (j+1)*c), cut at n
        w = j % k
        assert chunk in per_worker[w]
    for w, chunks in enumerate(per_worker):
        assert chunks == sorted(chunks)  # each worker runs its chunks in order
        assert len(chunks) == len(range(w, n_chunks, k))
    assert_exact_cover([c for cs in per_worker for c in cs], n)


@given(L_, K_, st.integers(0, 300))
def test_static_assignment_zero_means_blocks(n, k, c):
    got = pol.static_assignment(n, k, c)
    assert got == (pol.static_blocks(n, k) if c == 0 else pol.static_chunks(n, k, c))


@given(L_, K_)
def test_round_robin_frames(n, k):
    per_worker = pol.round_robin_frames(n, k)
    for w, chunks in enumerate(per_worker):
        assert frames_of(chunks) == list(range(w, n, k))


# --- first come, first served -------------------------------------------------------------


def test_guided_example():
    # remaining 10, 3 workers: ceil(10/3)=4, ceil(6/3)=2, ceil(4/3)=2, then 1, 1
    chunks = list(pol.fcfs_chunks(10, lambda rem: pol.guided_size(rem, 3, 1)))
    assert chunks == [(0, 4), (4, 2), (6, 2), (8, 1), (9, 1)]


@given(L_, K_, C_)
def test_dynamic_rule(n, k, c):
    chunks = list(pol.fcfs_chunks(n, lambda rem: pol.dynamic_size(rem, k, c)))
    expect = [(f, min(c, n - f)) for f in range(0, n, c)]  # chunks of c, in order
    assert chunks == expect


@given(L_, K_, C_)
def test_guided_rule(n, k, c):
    chunks = list(pol.fcfs_chunks(n, lambda rem: pol.guided_size(rem, k, c)))
    first = 0
    for got_first, count in chunks:
        remaining = n - first
        assert got_first == first
        assert count == min(remaining, max(c, ceil_div(remaining, k)))
        first += count
    assert first == n
    sizes = [cnt for _, cnt in chunks]
    # guided chunks never grow (the last one may be cut by the remainder)
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))


@given(L_, K_, st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=30))
def test_adaptive_any_speed_factors_cover_once(n, k, factors):
    it = iter(factors * (n + 1))

    def size(rem):
        sf = next(it)
        got = pol.adaptive_size(rem, k, sf)
        assert 1 <= got <= rem
        # Eq. 3: base_chunk = remaining / k, times the speed factor, clamped to [1, remaining]
        assert got == max(1, min(rem, int(rem / k * sf)))
        return got

    assert_exact_cover(pol.fcfs_chunks(n, size), n)


def test_adaptive_size_clamps():
    assert pol.adaptive_size(100, 4, 1.0) == 25
    assert pol.adaptive_size(100, 4, 2.0) == 50
    assert pol.adaptive_size(100, 4, 0.001) == 1       # never below 1
    assert pol.adaptive_size(100, 4, 1000.0) == 100    # never above remaining
    assert pol.adaptive_size(3, 8, 1.0) == 1


def test_speed_factor_definition():
    assert pol.speed_factor(None, None) == 1.0         # no history anywhere
    assert pol.speed_factor(None, 2.0) == 1.0          # no history for this thread
    assert pol.speed_factor(2.0, None) == 1.0          # no global average yet
    assert pol.speed_factor(2.0, 3.0) == pytest.approx(3.0 / 2.0)  # global / thread avg
    assert pol.speed_factor(0.25, 1.0) == pytest.approx(4.0)       # faster -> larger


def test_thread_and_global_averages_in_both_readings():
    # the paper: per finished chunk, global = mean of the threads' averages
    assert pol.thread_average(4.0, 2, 10, pol.PER_CHUNK) == 2.0
    assert pol.thread_average(0.0, 0, 0, pol.PER_CHUNK) is None
    assert pol.global_average([4.0, 1.0, 0.0], [2, 1, 0], [10, 90, 0], pol.PER_CHUNK) == 1.5
    # the variant: per frame, global = all time over all frames
    assert pol.thread_average(4.0, 2, 10, pol.PER_FRAME) == 0.4
    assert pol.global_average([4.0, 1.0, 0.0], [2, 1, 0], [10, 90, 0], pol.PER_FRAME) == 0.05
    assert pol.global_average([0.0], [0], [0], pol.PER_FRAME) is None


def test_fcfs_chunks_rejects_empty_chunk():
    with pytest.raises(ValueError):
        list(pol.fcfs_chunks(5, lambda rem: 0))


@given(st.integers(1, 50), st.integers(2, 40))
def test_steal_victims_round_robin(w0, k):
    w = w0 % k
    victims = pol.steal_victims(w, k)
    assert victims == [(w + i) % k for i in range(1, k)]
    assert sorted(victims + [w]) == list(range(k))


# --- dispensers: claim/done semantics, any interleaving -------------------------------------


def drain(disp, k: int, rng: random.Random, seconds=lambda w, count: 0.001) -> list[tuple]:
    """Claim from random workers until every worker is told to stop; report ``done`` for
    feedback dispensers. Returns (worker, first, count) in hand-out order."""
    out = []
    active = list(range(k))
    while active:
        w = rng.choice(active)
        chunk = disp.claim(w)
        if chunk is None:
            active.remove(w)
            continue
        out.append((w, *chunk))
        if disp.feedback:
            disp.done(w, chunk[1], seconds(w, chunk[1]))
    return out


def make(kind: str, n: int, k: int, c: int):
    if kind == "static":
        return dispatch.Preassigned(pol.static_assignment(n, k, c % 3 and c))  # blocks or chunks
    if kind == "dynamic":
        return dispatch.SharedCounter(n, lambda rem: pol.dynamic_size(rem, k, c))
    if kind == "fixed":  # what the thread backend uses for dynamic and chunk
        return dispatch.fixed_chunks(n, k, c)
    if kind == "guided":
        return dispatch.SharedCounter(n, lambda rem: pol.guided_size(rem, k, c))
    if kind == "chunk-steal":
        return dispatch.StealQueues(pol.static_chunks(n, k, c))
    if kind == "adaptive":
        return dispatch.Adaptive(n, k)
    if kind == "aimd":
        return dispatch.AimdGate(n, k, k, None, c)
    raise AssertionError(kind)


KINDS = ["static", "dynamic", "fixed", "guided", "chunk-steal", "adaptive", "aimd"]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 600), k=st.integers(1, 40), c=st.integers(1, 50), seed=st.integers(0, 2**32))
def test_dispensers_hand_out_every_frame_once(kind, n, k, c, seed):
    rng = random.Random(seed)
    disp = make(kind, n, k, c)
    handed = drain(disp, k, rng, seconds=lambda w, count: rng.uniform(1e-4, 1e-2))
    assert_exact_cover([(f, cnt) for _, f, cnt in handed], n)
    assert all(0 <= w < k for w, _, _ in handed)
    # once drained, every later claim says stop
    assert all(disp.claim(w) is None for w in range(k))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 600), k=st.integers(1, 40), c=st.integers(1, 50), seed=st.integers(0, 2**32))
def test_steal_queues_owner_first_then_round_robin(n, k, c, seed):
    rng = random.Random(seed)
    per_worker = pol.static_chunks(n, k, c)
    disp = dispatch.StealQueues(per_worker)
    handed = drain(disp, k, rng)
    owner = {chunk: w for w, chunks in enumerate(per_worker) for chunk in chunks}
    own = [(w, f, cnt) for w, f, cnt in handed if owner[(f, cnt)] == w]
    stolen = [(w, f, cnt) for w, f, cnt in handed if owner[(f, cnt)] != w]
    assert disp.steals == len(stolen)
    for w in range(k):
        # the owner takes its own queue from the front, in order
        mine = [(f, cnt) for ww, f, cnt in own if ww == w]
        assert mine == sorted(mine)
    # a steal happens only once the thief's own queue is empty
    for i, (w, f, cnt) in enumerate(handed):
        if owner[(f, cnt)] != w:
            later_own = [x for x in handed[i + 1:] if x[0] == w and owner[(x[1], x[2])] == w]
            assert not later_own
    # replay against a reference model: the owner pops its front, a thief the back of the
    # first non-empty victim in steal_victims order (blind round-robin)
    from collections import deque

    q = [deque(chunks) for chunks in per_worker]
    for w, f, cnt in handed:
        if q[w]:
            expect = q[w].popleft()
        else:
            victim = next(v for v in pol.steal_victims(w, k) if q[v])
            expect = q[victim].pop()
        assert (f, cnt) == expect
    assert not any(q)


def test_steal_takes_from_the_back_of_the_next_victim():
    disp = dispatch.StealQueues([[], [(0, 2), (2, 2), (4, 2)], [(6, 2)]])
    assert disp.claim(0) == (4, 2)      # victim order 1, 2: back of worker 1's queue
    assert disp.claim(2) == (6, 2)      # its own first
    assert disp.claim(2) == (2, 2)      # then worker 0 (empty), worker 1 from the back
    assert disp.claim(1) == (0, 2)
    assert disp.claim(1) is None
    assert disp.steals == 2


@pytest.mark.parametrize("kind", KINDS)
def test_stop_makes_every_claim_return_none(kind):
    disp = make(kind, 100, 4, 3)
    assert disp.claim(0) is not None
    disp.stop()
    assert all(disp.claim(w) is None for w in range(4))


@pytest.mark.parametrize("kind", KINDS)
def test_dispenser_under_real_threads_covers_once(kind):
    """Contended claims from several threads still hand out each frame once."""
    import threading

    n, k = 5000, 4
    disp = make(kind, n, k, 1)
    got: list[list[tuple[int, int]]] = [[] for _ in range(k)]

    def worker(w):
        while (chunk := disp.claim(w)) is not None:
            got[w].append(chunk)
            if disp.feedback:
                disp.done(w, chunk[1], 1e-5 * (w + 1))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_exact_cover([c for cs in got for c in cs], n)


# --- defaults and plan ---------------------------------------------------------------------


def test_default_chunks():
    from hybridsched.core import registry

    chunk = lambda name, n: registry.get(name).resolve_chunk(0, n)  # noqa: E731
    assert chunk("chunk", 1000) == 10       # the paper's 10 for L=1000
    assert chunk("chunk", 10000) == 100     # and 100 for L=10000
    assert chunk("chunk", 7) == 1
    assert chunk("chunk-steal", 1000) == 10
    assert chunk("dynamic", 1000) == 1      # OpenMP dynamic default
    assert chunk("guided", 1000) == 1
    assert chunk("static", 1000) == 0       # blocks
    assert chunk("aimd", 1000) == 4         # §4: chunks of 4
    assert chunk("pipe-MtoM", 1000) == 1    # the paper's chunk 1 (Tables 5-7)
    assert chunk("dynamic", 1000) == 1 and registry.get("dynamic").resolve_chunk(7, 1000) == 7


@pytest.mark.parametrize("policy", pol.PLAN_POLICIES)
@settings(max_examples=40, deadline=None)
@given(n=L_, k=K_, c=st.integers(0, 300))
def test_plan_covers_and_is_in_handout_order(policy, n, k, c):
    rows = pol.plan(policy, n, k, c)
    assert_exact_cover([(r.first, r.count) for r in rows], n)
    assert [r.first for r in rows] == sorted(r.first for r in rows)
    if policy in ("static", "round-robin", "static_steal"):  # static_steal: its initial per-worker ranges
        assert all(0 <= r.worker < k for r in rows)
    else:
        assert all(r.worker == -1 for r in rows)  # decided first come, first served


def test_plan_round_robin_is_the_fork_and_pipe_1toN_deal():
    """round-robin plans what prolific, collective and pipe-1toN hand out: frame i to worker
    i mod k (chunks of c: chunk j to worker j mod k)."""
    assert [(r.worker, r.first, r.count) for r in pol.plan("round-robin", 5, 2)] == \
        [(0, 0, 1), (1, 1, 1), (0, 2, 1), (1, 3, 1), (0, 4, 1)]
    chunks = pol.static_chunks(10, 3, 2)
    want = sorted((w, f, c) for w, ch in enumerate(chunks) for f, c in ch)
    assert sorted((r.worker, r.first, r.count) for r in pol.plan("round-robin", 10, 3, 2)) == want
    assert [r.count for r in pol.plan("aimd", 10, 2)] == [pol.AIMD_CHUNK, pol.AIMD_CHUNK, 2]


def test_plan_rejects_bad_arguments():
    with pytest.raises(UsageError):
        pol.plan("nosuch", 10, 2)
    with pytest.raises(UsageError):
        pol.plan("static", 0, 2)
    with pytest.raises(UsageError):
        pol.plan("static", 10, 0)


def plan_csv(capsys, *argv) -> list[list[str]]:
    assert cli.main(["plan", *argv]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "worker,first,count"
    return [line.split(",") for line in out[1:]]


def test_plan_cli_static_blocks(capsys):
    rows = plan_csv(capsys, "--policy", "static", "--tasks", "10", "--workers", "4")
    assert rows == [["0", "0", "3"], ["1", "3", "3"], ["2", "6", "2"], ["3", "8", "2"]]


def test_plan_cli_static_chunks(capsys):
    rows = plan_csv(capsys, "--policy", "static", "--tasks", "7", "--workers", "2", "--chunk", "2")
    assert rows == [["0", "0", "2"], ["1", "2", "2"], ["0", "4", "2"], ["1", "6", "1"]]


def test_plan_cli_dynamic_default_chunk_is_one(capsys):
    rows = plan_csv(capsys, "--policy", "dynamic", "--tasks", "3", "--workers", "2")
    assert rows == [["-1", "0", "1"], ["-1", "1", "1"], ["-1", "2", "1"]]


def test_plan_cli_guided(capsys):
    rows = plan_csv(capsys, "--policy", "guided", "--tasks", "20", "--workers", "3", "--chunk", "2")
    # ceil(20/3)=7, ceil(13/3)=5, ceil(8/3)=3, max(2, ceil(5/3)=2)=2, then 2, then the last 1
    assert [int(r[2]) for r in rows] == [7, 5, 3, 2, 2, 1]
    assert all(r[0] == "-1" for r in rows)


def test_plan_cli_chunk_default_is_L_over_100(capsys):
    rows = plan_csv(capsys, "--policy", "chunk", "--tasks", "1000", "--workers", "24")
    assert len(rows) == 100 and {r[2] for r in rows} == {"10"}


def test_plan_cli_subprocess():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "hybridsched", "plan", "--policy", "dynamic",
                        "--tasks", "5", "--workers", "2", "--chunk", "2"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["worker,first,count", "-1,0,2", "-1,2,2", "-1,4,1"]


def test_hybridsched_plan_is_the_policies_plan_with_its_signature():
    import inspect

    import hybridsched

    assert hybridsched.plan is pol.plan
    # issue 24 item 7 names the public signature: plan(policy, tasks, workers, chunk=0, params=None)
    assert list(inspect.signature(pol.plan).parameters) == ["policy", "tasks", "workers", "chunk",
                                                            "params"]
    rows = hybridsched.plan("guided", 10, 3)
    assert [(r.worker, r.first, r.count) for r in rows][:2] == [(-1, 0, 4), (-1, 4, 2)]


@pytest.mark.parametrize("c", [2**62, 2**63 - 1, 10**18 + 7])
@pytest.mark.parametrize("n", [0, 1, 8, 1000])
def test_fixed_bounds_of_a_chunk_near_2_63_cover_every_task(n, c):
    """Issue 33 item 3: numpy's arange(0, n + c, c) computes its length in floating point,
    so a chunk near 2**63 gave no chunk at all."""
    b = pol.fixed_bounds(n, c)
    assert b.tolist() == ([0, n] if n else [0])
    pol.check_bounds(b, n, "dynamic")


def test_hand_out_checks_name_what_is_wrong():
    from hybridsched.errors import HandOutError

    with pytest.raises(HandOutError, match="chunk 1 has 0 tasks"):
        pol.check_bounds([0, 3, 3, 8], 8, "x")
    with pytest.raises(HandOutError, match="runs from 0 to 7"):
        pol.check_bounds([0, 3, 7], 8, "x")
    with pytest.raises(HandOutError, match="2 never handed out, 1 more than once"):
        pol.check_chunks([(0, 3), (2, 2), (6, 2)], 8, "x")
    assert pol.coverage([5, 0, 2], [3, 2, 3], 8) == (0, 0)
    assert pol.coverage([0, 6], [4, 4], 8) == (2, 2)  # 4, 5 missed; 8, 9 outside
