"""Backend-independent checks of one scheduler run, shared by the scheduler test suites.

Any backend (serial, threads, forked processes, pipes) is driven through the public path
``runner.timed_run`` on a tiny shared-memory slab; :func:`check_record` then checks what
every backend promises: the output sorted and verified, every frame in the chunk trace
exactly once, per-worker statistics consistent with the trace, times inside the run, and
the placement recorded as the affinity rule says. A process/pipe suite reuses it as::

    from schedcheck import ODD_SHAPES, run_and_check
    @pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
    def test_prolific(shape): run_and_check("prolific", shape)
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hybridsched.records import RunConfig, RunRecord
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.cpus import n_cpus, usable_cpus
from hybridsched.workloads.slab import Slab

N = n_cpus()
EPS = 1e-6  # seconds of slack when comparing times taken by different perf_counter calls


@dataclass(frozen=True)
class Shape:
    label: str
    L: int
    H: int
    W: int
    k: int
    chunk: int = 0  # 0: the policy's default

    def __str__(self) -> str:
        return f"{self.label}-L{self.L}x{self.H}x{self.W}-k{self.k}-c{self.chunk}"


ODD_SHAPES = [
    Shape("L<k", 3, 4, 8, 5),
    Shape("L=1", 1, 3, 5, 3),
    Shape("W=1", 7, 3, 1, 2),
    Shape("H=1", 9, 1, 16, 3),
    Shape("L%k", 10, 2, 8, 3),
    Shape("L%k-chunk", 11, 2, 8, 3, chunk=2),
    Shape("k>N", 13, 2, 8, 2 * N + 1),
    Shape("k=1", 5, 2, 4, 1),
    Shape("chunk>L", 6, 2, 4, 2, chunk=10),
    Shape("many-frames", 203, 1, 3, 4),
]


def config(scheduler: str, shape: Shape, affinity: bool = True, kernel: str = "quicksort",
           seed: int = 7) -> RunConfig:
    return RunConfig(scheduler, shape.k, shape.L, shape.H, shape.W, shape.chunk, affinity,
                     0, kernel, seed)


def run(cfg: RunConfig, monitor=None) -> tuple[RunRecord, bool]:
    """Run ``cfg`` on a fresh tiny slab; also say whether the work copy equals numpy's sort
    of the original (an oracle independent of the library's verifier)."""
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        record = timed_run(slab, cfg, monitor)
        sorted_ok = bool(np.array_equal(slab.work, np.sort(slab.original, axis=-1)))
    return record, sorted_ok


def check_coverage(trace: np.ndarray, L: int) -> None:
    """Every frame of 0..L-1 is in exactly one chunk of the trace."""
    hits = np.zeros(L, np.int64)
    for first, count in zip(trace["first"].tolist(), trace["count"].tolist()):
        assert count >= 1, f"empty chunk at frame {first}"
        assert 0 <= first and first + count <= L, f"chunk ({first}, {count}) outside 0..{L - 1}"
        hits[first:first + count] += 1
    missing = np.flatnonzero(hits == 0)
    twice = np.flatnonzero(hits > 1)
    assert not len(missing) and not len(twice), (
        f"frames never run: {missing[:10].tolist()}, run more than once: {twice[:10].tolist()}")


def check_record(rec: RunRecord, cfg: RunConfig, sorted_ok: bool | None = None) -> None:
    """Everything a correct run of any backend must satisfy."""
    assert not rec.error, rec.error
    assert rec.verified and rec.bad_rows == 0, f"verified={rec.verified} bad_rows={rec.bad_rows}"
    if sorted_ok is not None:
        assert sorted_ok, "work copy differs from numpy's sort of the original"
    assert rec.config == cfg
    assert np.isfinite(rec.time_s) and rec.time_s > 0
    L = cfg.frames
    w, t = rec.workers, rec.trace
    check_coverage(t, L)
    # per-worker statistics agree with the trace
    assert len(w) == rec.workers_used >= 1
    assert sorted(w["worker"].tolist()) == list(range(len(w)))
    assert int(w["frames"].sum()) == L
    assert int(w["chunks"].sum()) == len(t)
    assert ((t["worker"] >= 0) & (t["worker"] < len(w))).all()
    for row in w:
        mine = t[t["worker"] == row["worker"]]
        assert int(row["frames"]) == int(mine["count"].sum()), f"worker {row['worker']} frames"
        assert int(row["chunks"]) == len(mine), f"worker {row['worker']} chunks"
        if row["chunks"]:
            assert row["start"] >= -EPS and row["end"] <= rec.time_s + EPS
            assert row["start"] <= row["end"] + EPS
            assert row["busy"] <= row["end"] - row["start"] + EPS
            assert (mine["start"] >= row["start"] - EPS).all()
            assert (mine["end"] <= row["end"] + EPS).all()
    assert (t["start"] <= t["end"] + EPS).all()
    assert (t["start"] >= -EPS).all() and (t["end"] <= rec.time_s + EPS).all()
    # the run ends with its last worker (§4)
    assert abs(float(w["end"].max()) - rec.time_s) < 1e-3
    # placement: worker w on CPU w mod N with affinity, left to Linux (-1) without
    cpus = usable_cpus()
    for row in w:
        want = cpus[int(row["worker"]) % len(cpus)] if cfg.affinity else -1
        assert int(row["cpu"]) == want, f"worker {row['worker']} cpu {row['cpu']} != {want}"


def run_and_check(scheduler: str, shape: Shape, affinity: bool = True, kernel: str = "quicksort",
                  monitor=None) -> RunRecord:
    """Run one configuration and check it; the calling thread's CPU mask is left unchanged."""
    mask = os.sched_getaffinity(0)
    cfg = config(scheduler, shape, affinity, kernel)
    rec, sorted_ok = run(cfg, monitor)
    check_record(rec, cfg, sorted_ok)
    assert os.sched_getaffinity(0) == mask, "the calling thread's CPU mask was not restored"
    return rec
