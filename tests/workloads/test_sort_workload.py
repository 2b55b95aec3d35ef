"""Kernels, the shared-memory slab, tensor generation and the verifier."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hybridsched import kernels
from hybridsched.errors import UsageError
from hybridsched.oslayer.shm import Segment, live_segments, our_shm_entries
from hybridsched.workloads.slab import Slab, check_sizes

SORTERS = {
    "quicksort": kernels.quicksort_frames,
    "counting": kernels.counting_frames,
    "numpy": kernels.numpy_frames,
}


def sort_rows_with(name: str, rows: np.ndarray) -> np.ndarray:
    """Run a frame kernel over ``rows`` (a 2-D uint8 array) as one frame; return the result."""
    t = np.ascontiguousarray(rows, dtype=np.uint8)[None].copy()
    SORTERS[name](t, 0, 1)
    return t[0]


def edge_rows(w: int, rng: np.random.Generator) -> np.ndarray:
    rand = rng.integers(0, 256, w, dtype=np.uint8)
    return np.stack([
        np.full(w, 7, np.uint8),                            # all equal
        np.sort(rand),                                      # already sorted
        np.sort(rand)[::-1],                                # reverse-sorted
        rand,                                               # random
        np.resize(np.array([255, 0], np.uint8), w),         # alternating extremes
        rng.integers(0, 2, w, dtype=np.uint8),              # many duplicates
        (np.arange(w) % 17).astype(np.uint8),               # sawtooth
        np.concatenate([np.sort(rand)[: w // 2], np.sort(rand)[w // 2:][::-1]]),  # organ pipe
    ])


@pytest.mark.parametrize("name", list(SORTERS))
@pytest.mark.parametrize("w", [1, 2, 3, 16, 17, 18, 33, 640, 1000, 5000])
def test_kernels_agree_with_numpy_on_edge_cases(name, w):
    rows = edge_rows(w, np.random.default_rng(w))
    assert np.array_equal(sort_rows_with(name, rows), np.sort(rows, axis=-1))


@pytest.mark.parametrize("name", ["quicksort", "counting"])
@settings(max_examples=300, deadline=None)
@given(row=hnp.arrays(np.uint8, st.integers(1, 1000)))
def test_kernels_agree_with_numpy_on_any_row(name, row):
    assert np.array_equal(sort_rows_with(name, row[None]), np.sort(row)[None])


@settings(max_examples=150, deadline=None)
@given(data=hnp.arrays(np.uint8, st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 70))),
       span=st.data())
def test_kernels_touch_only_their_frames(data, span):
    L = data.shape[0]
    first = span.draw(st.integers(0, L - 1))
    count = span.draw(st.integers(1, L - first))
    for name, fn in SORTERS.items():
        t = data.copy()
        fn(t, first, count)
        want = data.copy()
        want[first:first + count].sort(axis=-1)
        assert np.array_equal(t, want), name


def test_sort_row_adversarial_depth():
    """A median-of-three killer and long runs of duplicates must not overflow the explicit
    stack or go quadratic past the heapsort fallback (and must still sort)."""
    n = 4096
    a = np.zeros(n, np.uint8)
    a[: n // 2] = np.arange(n // 2) % 256
    a[n // 2:] = 255 - (np.arange(n - n // 2) % 256)
    b = a.copy().reshape(1, 1, n)
    kernels.quicksort_frames(b, 0, 1)
    assert np.array_equal(b[0, 0], np.sort(a))


def test_prepare_compiles_everything():
    kernels.prepare()
    for name in kernels.KERNELS:
        kernels.prepare(name)
    with pytest.raises(UsageError):
        kernels.get_kernel("bogosort")


# --- generation --------------------------------------------------------------------------


def test_generation_is_deterministic_and_per_frame():
    with Slab(6, 5, 9, seed=3) as a, Slab(6, 5, 9, seed=3) as b, Slab(6, 5, 9, seed=4) as c:
        assert np.array_equal(a.original, b.original)
        assert not np.array_equal(a.original, c.original)
        # frames differ from each other
        assert len({a.original[f].tobytes() for f in range(6)}) == 6
        # a slab holding only frames 2..5 (an MPI rank's block) makes exactly those frames
        with Slab(4, 5, 9, seed=3, frame0=2) as part:
            assert np.array_equal(part.original, a.original[2:])
        # one frame on its own
        one = np.zeros((1, 5, 9), np.uint8)
        kernels.generate_frames(one, 3, 4)
        assert np.array_equal(one[0], a.original[4])


def test_generated_bytes_look_uniform():
    with Slab(4, 64, 256, seed=1) as s:
        counts = np.bincount(s.original.ravel(), minlength=256)
    expected = s.shape[0] * 64 * 256 / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 400  # 255 degrees of freedom: mean 255, this is far in the tail


# --- the slab ----------------------------------------------------------------------------


def test_slab_lifecycle_and_fresh_copy():
    with Slab(3, 4, 8, seed=0) as s:
        names = our_shm_entries(os.getpid())
        assert len(names) == 2 and len(live_segments()) == 2
        assert not s.original.flags.writeable
        with pytest.raises(ValueError):
            s.original[0, 0, 0] = 1
        s.fresh_copy()
        assert np.array_equal(s.work, s.original)
        s.work[:] = 0
        s.fresh_copy()
        assert np.array_equal(s.work, s.original)
    assert our_shm_entries(os.getpid()) == [] and live_segments() == []


def test_slab_released_on_exception():
    with pytest.raises(RuntimeError):
        with Slab(2, 2, 2, seed=0):
            raise RuntimeError("boom")
    assert our_shm_entries(os.getpid()) == [] and live_segments() == []


def test_slab_released_on_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt):
        with Slab(2, 2, 2, seed=0):
            raise KeyboardInterrupt
    assert our_shm_entries(os.getpid()) == []


def test_segment_close_is_idempotent():
    seg = Segment((2, 3), "t")
    seg.array[:] = 5
    seg.close()
    seg.close()
    assert our_shm_entries(os.getpid()) == []


def test_bad_rows_counts_exactly_the_wrong_rows():
    with Slab(4, 3, 16, seed=2) as s:
        s.fresh_copy()
        assert s.bad_rows() == 4 * 3  # random rows are unsorted
        s.work[:] = np.sort(s.original, axis=-1)
        assert s.bad_rows() == 0
        # sorted but a value changed: not a permutation
        row = s.work[1, 2]
        i = int(np.flatnonzero(row[1:] != row[:-1])[0])
        row[i + 1] = row[i]
        # unsorted permutation
        s.work[3, 0] = s.work[3, 0][::-1].copy()
        assert s.bad_rows() == 2
        assert s.bad_rows(1, 1) == 1 and s.bad_rows(0, 1) == 0


def test_check_sizes():
    check_sizes(1, 1, 1)
    for bad in [(0, 1, 1), (1, 0, 1), (1, 1, 0), (-3, 4, 4)]:
        with pytest.raises(UsageError):
            check_sizes(*bad)
    with pytest.raises(UsageError, match="GiB"):
        check_sizes(100_000_000, 640, 640)
    with pytest.raises(UsageError):
        Slab(100_000_000, 640, 640, seed=0)  # refused before any segment is made
    assert our_shm_entries(os.getpid()) == []


def test_sweep_orphans_removes_only_segments_of_dead_creators(monkeypatch):
    import subprocess
    import sys

    import posix_ipc

    from hybridsched.oslayer import shm
    from hybridsched.oslayer.shm import SEGMENT_PREFIX, sweep_orphans

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # A pid namespace of this test's own (real ones are inode numbers near 4026531836): the
    # sweep of any other hybridsched process on the machine leaves these names alone.
    ns = os.getpid()
    monkeypatch.setattr(shm, "pid_namespace", lambda: ns)
    orphan = f"/{SEGMENT_PREFIX}{dead.pid}.{ns}.0.orig"
    alive = f"/{SEGMENT_PREFIX}1.{ns}.0.orig"  # pid 1 always exists
    for name in (orphan, alive):
        posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=16).close_fd()
    try:
        removed = sweep_orphans()
        assert orphan[1:] in removed and alive[1:] not in removed
        assert orphan[1:] not in our_shm_entries() and alive[1:] in our_shm_entries()
    finally:
        for name in (orphan, alive):
            try:
                posix_ipc.unlink_shared_memory(name)
            except posix_ipc.ExistentialError:
                pass


def test_foreign_load_counts_other_processes_not_our_own_work(monkeypatch):
    """The share is (busy time on our CPUs - our own CPU time) / (N x wall), from the
    counters alone: the same whatever else the machine is doing."""
    from hybridsched.oslayer import procfs

    clock = {"wall": 100.0, "busy": 50.0, "own": 3.0}
    monkeypatch.setattr(procfs.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(procfs, "busy_seconds", lambda cpus: clock["busy"])
    monkeypatch.setattr(procfs, "own_cpu_seconds", lambda: clock["own"])
    load = procfs.ForeignLoad([0, 1])
    clock.update(wall=102.0, busy=52.0, own=5.0)  # 2 s on 2 CPUs, all of the busy time ours
    assert load.share() == 0.0
    clock.update(busy=53.0)  # and one more CPU second that was someone else's
    assert load.share() == pytest.approx(1.0 / 4.0)
    clock.update(busy=60.0)  # more busy time than the CPUs have: clamped
    assert load.share() == 1.0


def test_foreign_load_sees_a_busy_neighbour_on_a_loaded_machine_too():
    """On the real counters: a neighbour's CPU time shows at least in full (other load
    only adds to it, so the bound holds on a busy machine as on a quiet one)."""
    import subprocess
    import sys
    import time

    import psutil

    from hybridsched.oslayer.cpus import usable_cpus
    from hybridsched.oslayer.procfs import TICK, ForeignLoad

    cpus = usable_cpus()
    spin = subprocess.Popen([sys.executable, "-c",
                             "import time\nt=time.process_time()\n"
                             "while time.process_time()-t<0.3: pass\ninput()"],
                            stdin=subprocess.PIPE, text=True)
    theirs = ForeignLoad(cpus)
    t0 = time.monotonic()
    child = psutil.Process(spin.pid)
    cpu0 = sum(child.cpu_times()[:2])
    while sum(child.cpu_times()[:2]) - cpu0 < 0.25:  # the neighbour has spun its 0.25 s
        time.sleep(0.005)
    neighbour = sum(child.cpu_times()[:2]) - cpu0
    share, wall = theirs.share(), time.monotonic() - t0
    spin.communicate("\n")
    slack = 4 * TICK * len(cpus)  # /proc/stat counts in ticks, per CPU, at both ends
    assert share >= (neighbour - slack) / (len(cpus) * wall)
