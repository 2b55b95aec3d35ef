"""Every serial and thread scheduler sorts and verifies on odd shapes, with affinity on and
off and with each kernel; a wrong output is caught by the verifier.

The checks live in ``schedcheck.py`` so that the process and pipe suites run the same ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched import kernels
from hybridsched.core import policies, registry as schedulers
from hybridsched.core.monitor import UtilisationMonitor
from hybridsched.study.runner import warn_unverified
from schedcheck import N, ODD_SHAPES, Shape, check_record, config, run, run_and_check

# the paper's thread schedulers and variants; the LB4OMP techniques have their own suite
# (tests/core/test_lb4omp_techniques.py), which keeps this one's run time
NAMES = schedulers.names("serial") + schedulers.names("thread", technique=False)
KERNELS = list(kernels.KERNELS)


def test_all_seven_thread_schedulers_are_registered():
    assert [n for n in NAMES if schedulers.get(n).paper] == [
        "serial", "static", "dynamic", "guided", "chunk", "chunk-steal", "aimd", "adaptive"]
    assert [n for n in NAMES if not schedulers.get(n).paper] == ["adaptive-frame"]


@pytest.mark.parametrize("affinity", [True, False], ids=["aff", "noaff"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
@pytest.mark.parametrize("scheduler", NAMES)
def test_odd_shapes(scheduler, shape, affinity):
    run_and_check(scheduler, shape, affinity)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shape", [s for s in ODD_SHAPES if s.label in ("L<k", "W=1", "H=1", "L%k-chunk", "k>N")],
                         ids=str)
@pytest.mark.parametrize("scheduler", NAMES)
def test_each_kernel(scheduler, shape, kernel):
    run_and_check(scheduler, shape, affinity=bool(shape.L % 2), kernel=kernel)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheduler=st.sampled_from(NAMES), L=st.integers(1, 40), H=st.integers(1, 4),
       W=st.integers(1, 40), k=st.integers(1, 2 * N + 3), chunk=st.integers(0, 12),
       affinity=st.booleans(), kernel=st.sampled_from(KERNELS))
def test_any_shape(scheduler, L, H, W, k, chunk, affinity, kernel):
    run_and_check(scheduler, Shape("any", L, H, W, k, chunk), affinity, kernel)


def test_aimd_with_the_live_monitor():
    with UtilisationMonitor(period=0.01) as mon:
        rec = run_and_check("aimd", Shape("aimd-live", 120, 2, 32, 2 * N + 1), monitor=mon)
    assert rec.workers_used == min(2 * N + 1, N)  # a fixed pool of min(k, N) threads (§2.3)
    assert "window" in rec.notes
    win = rec.series["aimd_window"]
    assert len(win) == rec.trace.shape[0] + 1  # the start, then one entry per completion
    assert win["window"][0] == min(2 * N + 1, N) and (win["window"] >= 1).all()
    assert (np.diff(win["t"]) >= 0).all()


@pytest.mark.parametrize("scheduler", [n for n in NAMES if n not in ("serial", "aimd")])
def test_thread_schedulers_use_k_workers(scheduler):
    rec = run_and_check(scheduler, Shape("k", 12, 1, 8, 3))
    assert rec.workers_used == 3


@pytest.mark.parametrize("scheduler", NAMES)
def test_chunk_used_is_recorded(scheduler):
    shape = Shape("chunk", 40, 1, 4, 2, chunk=3)
    rec = run_and_check(scheduler, shape)
    sizes = [int(c) for c in rec.trace[np.argsort(rec.trace["first"])]["count"]]
    if scheduler in ("chunk", "dynamic", "chunk-steal", "static", "aimd"):
        assert rec.chunk_used == 3
        assert sizes == [3] * 13 + [1]          # 40 = 13 x 3 + 1, in frame order
    elif scheduler == "guided":                 # never below the minimum chunk but the tail
        assert rec.chunk_used == 3 and min(sizes[:-1]) >= 3 and sizes[0] == 20
    elif scheduler == "serial":
        assert sizes == [40]
    else:                                       # adaptive: guided-like first chunk 40 / 2
        assert sizes[0] == 20 and sum(sizes) == 40


def test_static_trace_matches_blocks():
    rec = run_and_check("static", Shape("blocks", 10, 1, 4, 4))
    got = sorted(zip(rec.trace["worker"].tolist(), rec.trace["first"].tolist(),
                     rec.trace["count"].tolist()))
    assert got == [(0, 0, 3), (1, 3, 3), (2, 6, 2), (3, 8, 2)]


def test_dynamic_default_chunk_is_one():
    rec = run_and_check("dynamic", Shape("dyn", 17, 1, 4, 2))
    assert set(rec.trace["count"].tolist()) == {1}


# --- verification catches a wrong output ---------------------------------------------------


def _noop(t, first, count):
    """A kernel that does nothing."""


def _sorts_but_alters(t, first, count):
    """Sorts, then duplicates one value over its neighbour: still nondecreasing, but no
    longer a permutation of the input (unless the row is constant)."""
    t[first:first + count].sort(axis=-1)
    for f in range(first, first + count):
        for row in t[f]:
            diff = np.flatnonzero(row[1:] != row[:-1])
            if len(diff):
                row[diff[0] + 1] = row[diff[0]]


def _unsorted_permutation(t, first, count):
    t[first:first + count].sort(axis=-1)
    t[first:first + count] = t[first:first + count, :, ::-1].copy()


@pytest.mark.parametrize("bad", [_noop, _sorts_but_alters, _unsorted_permutation])
@pytest.mark.parametrize("scheduler", NAMES)
def test_verification_catches_bad_output(monkeypatch, capsys, scheduler, bad):
    monkeypatch.setitem(kernels.KERNELS, "broken", (bad, "test kernel"))
    shape = Shape("bad", 9, 3, 32, 2)
    cfg = config(scheduler, shape, kernel="broken")
    rec, sorted_ok = run(cfg)
    assert not sorted_ok
    assert not rec.verified
    assert rec.bad_rows == 9 * 3  # every row of the random tensor is wrong
    warn_unverified(rec)
    err = capsys.readouterr().err
    assert "UNVERIFIED" in err and scheduler in err and len(err.strip().splitlines()) == 1


def test_verification_counts_only_the_wrong_rows(monkeypatch):
    def one_bad_frame(t, first, count):
        t[first:first + count].sort(axis=-1)
        if first <= 4 < first + count:
            t[4, 1, 0], t[4, 1, -1] = t[4, 1, -1], t[4, 1, 0]  # one unsorted row in frame 4

    monkeypatch.setitem(kernels.KERNELS, "broken", (one_bad_frame, "test kernel"))
    rec, _ = run(config("dynamic", Shape("one", 8, 3, 16, 2), kernel="broken"))
    assert not rec.verified and rec.bad_rows == 1


def test_failing_worker_is_a_failed_record_not_a_crash(monkeypatch):
    def boom(t, first, count):
        if first >= 3:
            raise RuntimeError("kernel exploded")
        t[first:first + count].sort(axis=-1)

    monkeypatch.setitem(kernels.KERNELS, "broken", (boom, "test kernel"))
    rec, _ = run(config("dynamic", Shape("boom", 8, 1, 4, 2), kernel="broken"))
    assert not rec.verified
    assert "kernel exploded" in rec.error


def test_check_record_rejects_a_double_count():
    """The shared checker itself must be able to fail."""
    cfg = config("dynamic", Shape("x", 6, 1, 4, 2))
    rec, ok = run(cfg)
    check_record(rec, cfg, ok)
    rec.trace = np.concatenate([rec.trace, rec.trace[:1]])
    with pytest.raises(AssertionError):
        check_record(rec, cfg, ok)


# --- the backend hands out exactly what the policy says --------------------------------------


def handed_out(rec) -> list[tuple[int, int]]:
    """The chunks of a run in hand-out order (first-come policies hand out increasing frames)."""
    return sorted(zip(rec.trace["first"].tolist(), rec.trace["count"].tolist()))


@pytest.mark.parametrize("policy,chunk", [("dynamic", 0), ("dynamic", 3), ("chunk", 0),
                                          ("chunk", 4), ("guided", 0), ("guided", 3)])
@pytest.mark.parametrize("L,k", [(1, 2), (10, 3), (37, 4), (250, 3), (7, 2 * N + 1)])
def test_first_come_schedulers_follow_the_plan(policy, chunk, L, k):
    rec = run_and_check(policy, Shape("plan", L, 1, 4, k, chunk))
    plan = [(r.first, r.count) for r in policies.plan(policy, L, k, chunk)]
    assert handed_out(rec) == plan


@pytest.mark.parametrize("chunk", [0, 1, 3])
@pytest.mark.parametrize("L,k", [(1, 2), (10, 3), (37, 4), (7, 2 * N + 1)])
def test_static_follows_the_plan_per_worker(chunk, L, k):
    rec = run_and_check("static", Shape("plan", L, 1, 4, k, chunk))
    got = sorted(zip(rec.trace["worker"].tolist(), rec.trace["first"].tolist(),
                     rec.trace["count"].tolist()))
    want = sorted((r.worker, r.first, r.count) for r in policies.plan("static", L, k, chunk))
    assert got == want


@pytest.mark.parametrize("L,k,chunk", [(1, 2, 0), (37, 4, 0), (37, 4, 5), (300, 3, 0)])
def test_chunk_steal_runs_the_static_chunks(L, k, chunk):
    rec = run_and_check("chunk-steal", Shape("steal", L, 1, 4, k, chunk))
    c = schedulers.get("chunk-steal").resolve_chunk(chunk, L)
    want = sorted(ch for chunks in policies.static_chunks(L, k, c) for ch in chunks)
    assert handed_out(rec) == want


@pytest.mark.parametrize("L,k,chunk", [(1, 2, 0), (37, 4, 0), (37, 2, 5)])
def test_aimd_runs_chunks_of_four(L, k, chunk):
    rec = run_and_check("aimd", Shape("aimd", L, 1, 4, k, chunk))
    c = chunk or 4
    assert handed_out(rec) == [(f, min(c, L - f)) for f in range(0, L, c)]


def test_adaptive_first_chunk_is_remaining_over_k():
    rec = run_and_check("adaptive", Shape("adaptive", 100, 1, 4, 4))
    assert handed_out(rec)[0] == (0, 25)  # no history yet: base_chunk = 100 / 4
