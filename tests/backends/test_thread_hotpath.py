"""The thread backend's hot path: the lock-free ticket dispenser for dynamic/chunk and the
direct numba entry point. (Its speed is measured by benchmarks/bench_core.py, not here.)"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.core import dispatch
from hybridsched import kernels
from hybridsched.core import policies as pol
from hybridsched.workloads.slab import Slab


def covered_once(chunks, n):
    seen = np.zeros(n, np.int64)
    for first, count in chunks:
        assert count >= 1
        seen[first:first + count] += 1
    return bool((seen == 1).all())


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 500), k=st.integers(1, 40), c=st.integers(1, 50))
def test_tickets_hand_out_the_dynamic_policy_in_order(n, k, c):
    disp = dispatch.TicketCounter(n, k, c)
    got = []
    while (chunk := disp.claim(len(got) % k)) is not None:
        got.append(chunk)
    assert got == list(pol.fcfs_chunks(n, lambda rem: pol.dynamic_size(rem, k, c)))
    assert all(disp.claim(w) is None for w in range(k))


def test_tickets_under_real_threads_cover_every_frame_once():
    n, k = 20000, 4
    disp = dispatch.TicketCounter(n, k, 3)
    got: list[list[tuple[int, int]]] = [[] for _ in range(k)]

    def worker(w):
        while (chunk := disp.claim(w)) is not None:
            got[w].append(chunk)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert covered_once([c for cs in got for c in cs], n)


def test_tickets_stop():
    disp = dispatch.TicketCounter(100, 2, 1)
    assert disp.claim(0) == (0, 1)
    disp.stop()
    assert disp.claim(0) is None and disp.claim(1) is None


def test_fixed_chunks_falls_back_to_the_lock_without_a_gil(monkeypatch):
    assert isinstance(dispatch.fixed_chunks(10, 2, 3), dispatch.TicketCounter)
    monkeypatch.setattr(dispatch, "_GIL_ATOMIC", False)
    disp = dispatch.fixed_chunks(10, 2, 3)
    assert isinstance(disp, dispatch.SharedCounter)
    assert [disp.claim(0) for _ in range(5)] == [(0, 3), (3, 3), (6, 3), (9, 1), None]


@pytest.mark.parametrize("name", ["quicksort", "counting"])
def test_direct_entry_is_the_compiled_kernel_and_sorts_the_same(name):
    kernels.prepare(name)
    kernel = kernels.get_kernel(name)
    with Slab(5, 3, 17, seed=3) as slab:
        entry = kernels.direct_entry(kernel, slab.work)
        assert entry is not kernel  # found the compiled signature of the slab's array type
        slab.fresh_copy()
        entry(slab.work, 1, 3)
        expect = slab.original.copy()
        expect[1:4].sort(axis=-1)
        assert np.array_equal(slab.work, expect)


def test_direct_entry_falls_back_to_the_dispatcher():
    kernels.prepare("quicksort")
    other = np.zeros((2, 2, 2), np.uint16)  # a type the kernel was not compiled for
    assert kernels.direct_entry(kernels.quicksort_frames, other) is kernels.quicksort_frames
    assert kernels.direct_entry(kernels.numpy_frames, other) is kernels.numpy_frames


def _inputs(w: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    rand = rng.integers(0, 256, (2, 3, w), dtype=np.uint8)
    return {
        "random": rand,
        "equal": np.full((2, 3, w), 7, np.uint8),
        "sorted": np.sort(rand, axis=-1),
        "reversed": np.ascontiguousarray(np.sort(rand, axis=-1)[..., ::-1]),
        "two values": rng.integers(0, 2, (2, 3, w), dtype=np.uint8),
        "organ pipe": np.resize(np.concatenate([np.arange(w // 2 + 1), np.arange(w // 2 + 1)[::-1]]),
                                (2, 3, w)).astype(np.uint8),
    }


@pytest.mark.parametrize("w", [1, 2, 3, 16, 17, 18, 33, 640, 3001])
def test_quicksort_kernel_sorts_adversarial_rows(w):
    """The unsigned-index introsort around its thresholds (16-element insertion runs) and on
    inputs that stress the partition (all equal, sorted, reversed, organ pipe)."""
    rng = np.random.default_rng(w)
    for name, a in _inputs(w, rng).items():
        got = a.copy()
        kernels.quicksort_frames(got, 0, 2)
        assert np.array_equal(got, np.sort(a, axis=-1)), name
        row = a[1:2, 2:3].copy()  # one row alone, as a 1 x 1 x W tensor
        kernels.quicksort_frames(row, 0, 1)
        assert np.array_equal(row[0, 0], np.sort(a[1, 2])), name


def test_heapsort_fallback_sorts_its_range_only():
    a = np.arange(40, 0, -1).astype(np.uint8)
    kernels._heapsort(a, 5, 30)
    assert np.array_equal(a[5:30], np.sort(np.arange(40, 0, -1)[5:30]))
    assert np.array_equal(a[:5], np.arange(40, 35, -1)) and np.array_equal(a[30:], np.arange(10, 0, -1))


def test_tickets_refuse_a_zero_chunk():
    with pytest.raises(ValueError):
        dispatch.TicketCounter(10, 2, 0)


def test_no_garbage_collection_inside_the_timed_region(monkeypatch):
    import gc

    from hybridsched.records import RunConfig
    from hybridsched.study.runner import timed_run

    seen = []

    def kernel(t, first, count):
        seen.append(gc.isenabled())
        t[first:first + count].sort(axis=-1)

    monkeypatch.setitem(kernels.KERNELS, "gcprobe", (kernel, "test kernel"))
    assert gc.isenabled()
    with Slab(6, 2, 8, seed=1) as slab:
        rec = timed_run(slab, RunConfig("dynamic", 2, 6, 2, 8, kernel="gcprobe"))
    assert rec.verified and seen and not any(seen)
    assert gc.isenabled()  # restored after the run
