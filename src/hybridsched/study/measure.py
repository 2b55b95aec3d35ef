"""What one process measured in one timed run (:class:`Measured`, which an MPI rank sends to
rank 0), and the one ``/runs`` record made from the measurements of every rank: as the
paper's single-node run at P = 1, with the per-rank columns under MPI."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.policies import coverage
from ..core.registry import identity
from ..errors import BrokenRun
from ..records import (NO_FAILURE, NOT_MEASURED, TRACE_DTYPE, WORKER_DTYPE, Execution, Failure, RunConfig,
                       RunRecord)

# Per-worker columns that add up when the same local workers run several executions (the
# chunks of a dynamic split)
_SUMMED = ("busy", "frames", "chunks", "user", "system", "iowait")


@dataclass
class Measured:
    """One process's share of one timed run. Tables are relative to ``origin`` (the start of
    the timed region): the backend's own start at P = 1, the barrier's exit under MPI."""

    config: RunConfig
    family: str
    started: float                 # time.time() just before the run
    rank: int = 0
    host: str = ""
    chunk_used: int = 0
    time_s: float = math.nan
    wtime_s: float = 0.0           # MPI.Wtime over the same region (perf_counter at P = 1)
    gen_s: float = 0.0             # a dynamic split's generation inside the timed region
    t_begin: float = math.nan      # perf_counter of the timed region (absolute)
    t_end: float = math.nan
    frames: int = 0
    chunks: int = 0
    bad_rows: int = 0
    error: str = ""
    notes: str = ""
    lost: int = 0
    technique: str = ""            # what auto chose (its last execution)
    dispatch: str = ""             # which chunk loop ran (records.DISPATCH_RAN)
    producer_cpu_s: float = NOT_MEASURED  # pipe-MtoM's producer CPU, over this run's executions
    failure: Failure = NO_FAILURE  # the worker that broke the run
    foreign: float = math.nan      # share of this process's CPUs other processes used
    workers: np.ndarray = field(default_factory=lambda: np.zeros(0, WORKER_DTYPE))
    trace: np.ndarray = field(default_factory=lambda: np.zeros(0, TRACE_DTYPE))
    series: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # what the job asks to store (a profile)
    handout: str = ""              # fingerprint of the hand-out between ranks this rank used

    def add(self, ex: Execution, origin: float, worker_offset: int = 0) -> None:
        """Fold one backend execution in, its times made relative to ``origin``."""
        w, t = ex.workers.copy(), ex.trace.copy()
        for arr in (w, t):
            arr["start"] -= origin
            arr["end"] -= origin
            arr["worker"] += worker_offset
        if len(self.workers) == 0:
            self.workers = w
        else:  # the same local workers ran another chunk of a dynamic split
            acc, n = self.workers, min(len(self.workers), len(w))
            acc["start"][:n] = np.minimum(acc["start"][:n], w["start"][:n])
            acc["end"][:n] = np.maximum(acc["end"][:n], w["end"][:n])
            for f in _SUMMED:
                acc[f][:n] += w[f][:n]
            if len(w) > n:
                self.workers = np.concatenate([acc, w[n:]])
        self.trace = np.concatenate([self.trace, t]) if len(self.trace) else t
        for name, arr in ex.series.items():
            arr = arr.copy()
            if "t" in (arr.dtype.names or ()):
                arr["t"] -= origin
            self.series[name] = arr
        self.lost += ex.lost_workers
        self.chunk_used = ex.chunk_used or self.chunk_used
        self.technique = ex.technique or self.technique
        self.dispatch = ex.dispatch or self.dispatch
        self.producer_cpu_s = _measured_sum([self.producer_cpu_s, ex.producer_cpu_s])
        if ex.notes:
            self.notes = ex.notes
        self.t_begin = ex.t_begin if math.isnan(self.t_begin) else min(self.t_begin, ex.t_begin)
        self.t_end = ex.t_end if math.isnan(self.t_end) else max(self.t_end, ex.t_end)

    def failed(self, error: str, notes: str = "") -> None:
        """The run failed: no time, nothing to verify; the error goes on record."""
        self.error, self.time_s = error, math.nan
        if notes:
            self.notes = notes

    def broken(self, error: str, exc: BrokenRun) -> None:
        """The run failed because one of its workers ended (``exc``): how it ended, which
        loop ran and what auto had chosen go on record with the error."""
        self.failed(error, exc.notes)
        self.failure = Failure.of(exc)
        self.technique = exc.technique or self.technique  # auto's failed pick
        self.dispatch = exc.dispatch or self.dispatch


def _measured_sum(values) -> float:
    """The sum of the measured values (records.NOT_MEASURED where none was)."""
    got = [v for v in values if v >= 0]
    return float(sum(got)) if got else NOT_MEASURED


def single_record(m: Measured) -> RunRecord:
    """The ``/runs`` record of a single-node run (P = 1: the paper's)."""
    technique, digest = identity(m.config.scheduler, m.technique)
    if m.error:
        return RunRecord(m.config, m.family, math.nan, False, chunk_used=m.chunk_used,
                         error=m.error, started_at=m.started, notes=m.notes,
                         technique=technique, technique_hash=digest, dispatch=m.dispatch,
                         producer_cpu_s=m.producer_cpu_s, failure=m.failure)
    extra = dict(m.extra)
    if m.foreign == m.foreign:
        extra["foreign_cpu"] = round(m.foreign, 4)
    return RunRecord(m.config, m.family, m.time_s, m.bad_rows <= 0, bad_rows=m.bad_rows,
                     chunk_used=m.chunk_used, workers_used=len(m.workers),
                     lost_workers=m.lost, notes=m.notes, started_at=m.started,
                     workers=m.workers, trace=m.trace, series=m.series, extra=extra,
                     technique=technique, technique_hash=digest, dispatch=m.dispatch,
                     producer_cpu_s=m.producer_cpu_s)


def _split_identity(split: str, params: dict | None) -> dict:
    """A user technique's identity when it splits the frames between ranks (its source
    hash, so runs of two versions are told apart) and the parameters it was given."""
    if ":" not in split:
        return {}
    from ..core.usertech import resolve

    user = resolve(split, "--split")
    return {"split_technique": user.ref, "split_technique_hash": user.hash,
            "split_params": ",".join(f"{k}={v}" for k, v in sorted((params or {}).items()))}


def _whole_study(results: list[Measured], trace: np.ndarray, split: str) -> str:
    """'' when the ranks, between them, ran every frame of the study exactly once from one
    hand-out; else why the run cannot count as verified. Each rank checks only the frames
    it ran, so a hand-out that differs between ranks (a --split technique whose chunk()
    depends on the rank, the process or chance) would otherwise be stored as verified."""
    L = results[0].config.frames
    differ = [r.rank for r in results if r.handout != results[0].handout]
    if differ:
        return (f"rank {differ[0]} computed another --split {split} hand-out than rank 0, so "
                "the ranks' chunks are not one partition of the frames")
    never, twice = coverage(trace["first"], trace["count"], L)
    if never or twice:
        return (f"the ranks' chunks do not cover the {L} frames exactly once ({never} never "
                f"ran, {twice} ran more than once; --split {split})")
    return ""


def ranks_record(results: list[Measured], total_bad: int, split: str,
                 split_params: dict | None = None) -> RunRecord:
    """One record from every rank's measurement (rank 0, under MPI): the run's time is the
    slowest rank's; per-rank times, frames, chunks and bad rows go into ``extra``. It is
    verified only when every rank verified and the ranks ran every frame exactly once."""
    first = results[0]
    errors = [r.error for r in results if r.error]
    trace = np.concatenate([r.trace for r in results])
    trace = trace[np.argsort(trace["start"], kind="stable")]
    if not errors:
        whole = _whole_study(results, trace, split)
        errors += [whole] if whole else []
    times = [r.time_s for r in results]
    time_s = math.nan if errors else max(times)
    extra = {
        "split": split,
        **_split_identity(split, split_params),
        "rank_host": [r.host for r in results],
        "rank_time_s": times,
        "rank_wtime_s": [r.wtime_s for r in results],
        "rank_frames": [r.frames for r in results],
        "rank_chunks": [r.chunks for r in results],
        "rank_bad_rows": [r.bad_rows for r in results],
    }
    shares = [round(r.foreign, 4) for r in results if r.foreign == r.foreign]
    if shares:  # the most disturbed rank: the run's time is the slowest rank's
        extra["rank_foreign_cpu"] = [round(r.foreign, 4) if r.foreign == r.foreign else None
                                     for r in results]
        extra["foreign_cpu"] = max(shares)
    if split != "static":
        extra["rank_gen_s"] = [r.gen_s for r in results]
        extra["compute_time_s"] = (math.nan if errors else
                                   max(r.time_s - r.gen_s for r in results))
    workers = np.concatenate([r.workers for r in results])
    notes = f"split={split}" + "".join(f"; rank {r.rank}: {r.notes}" for r in results if r.notes)
    technique, digest = identity(first.config.scheduler, first.technique)
    return RunRecord(first.config, first.family, time_s, not errors and total_bad == 0,
                     bad_rows=total_bad, chunk_used=max(r.chunk_used for r in results),
                     workers_used=len(workers), lost_workers=sum(r.lost for r in results),
                     error="; ".join(errors), notes=notes, started_at=first.started,
                     workers=workers, trace=trace, extra=extra, technique=technique,
                     technique_hash=digest,
                     dispatch=next((r.dispatch for r in results if r.dispatch), ""),
                     producer_cpu_s=_measured_sum([r.producer_cpu_s for r in results]),
                     failure=next((r.failure for r in results if r.failure), NO_FAILURE))
