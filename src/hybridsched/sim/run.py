"""A simulated run of one configuration, as a ``/runs`` record: the configuration's own
fields exactly as `run` stores them, ``time_s`` the simulated makespan, ``verified`` when
the simulated hand-out covered every task exactly once, the trace and worker tables, and
``simulated`` set. Over P virtual nodes the MPI splits are simulated too (static blocks,
or chunks claimed through a fetch-and-add on rank 0, each chunk run by the local scheduler
on the node's k workers)."""
from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import numpy as np

from ..core import policies as pol, registry
from ..core.memory import Memory
from ..core.splits import dynamic_chunks, split_technique
from ..errors import HybridschedError
from ..records import TRACE_DTYPE, RunConfig, RunRecord, as_params, params_text, worker_table
from ..core.virtual import Engine, Outcome, Placement
from .models import Overheads, execute


def covered_once(trace: np.ndarray, L: int) -> bool:
    """Whether the chunks of ``trace`` cover tasks 0 .. L-1 exactly once."""
    hits = np.zeros(L + 1, np.int64)
    np.add.at(hits, trace["first"], 1)
    np.add.at(hits, np.minimum(trace["first"] + trace["count"], L), -1)
    return bool(len(trace)) and bool((np.cumsum(hits)[:L] == 1).all()) and \
        int(trace["count"].sum()) == L


def _tables(out: Outcome, k: int, cpus: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
    trace = np.zeros(len(out.trace), TRACE_DTYPE)
    if out.trace:
        cols = list(zip(*out.trace))
        for name, col in zip(("worker", "first", "count", "start", "end"), cols):
            trace[name] = col
        trace = trace[np.argsort(trace["start"], kind="stable")]
    workers = worker_table(k)
    workers["pid"] = -1
    if cpus is not None:
        workers["cpu"] = [cpus[w % len(cpus)] for w in range(k)]
    workers["start"], workers["end"], workers["busy"] = out.start[:k], out.end[:k], out.busy[:k]
    workers["user"] = out.busy[:k]
    for w in range(k):
        mine = trace[trace["worker"] == w]
        workers["frames"][w], workers["chunks"][w] = int(mine["count"].sum()), len(mine)
    return workers, trace


def simulate(cfg: RunConfig, costs: np.ndarray, cum: np.ndarray | None, cores: int, ov: Overheads,
             split: str = "static", source: str = "", split_params: dict | None = None,
             memory: Memory | None = None) -> RunRecord:
    """The simulated record of ``cfg`` (its P, k, chunk, affinity, coop, params) on
    ``cores`` virtual CPUs per node; a technique that misbehaves fails this run alone.
    ``split_params``: what a user technique splitting the frames over P nodes is given;
    ``memory``: the simulated study's, where its loops learn across repetitions (None:
    this run's alone)."""
    memory = Memory() if memory is None else memory
    try:
        return _simulate(cfg, costs, cum, cores, ov, split, source, split_params, memory)
    except HybridschedError as exc:
        info = registry.get(cfg.scheduler)
        tech, digest = registry.identity(cfg.scheduler)  # which code failed stays on record
        return RunRecord(cfg, str(info.family), math.nan, False, error=f"simulated: {exc}",
                         notes=f"simulated on {cores} cores", simulated=True,
                         extra=_extra(cfg, cores, source, split, split_params),
                         technique=tech, technique_hash=digest)


def _extra(cfg: RunConfig, cores: int, source: str, split: str,
           split_params: dict | None) -> dict:
    """What a simulated run's detail says of itself, a failed one's too: where its costs
    came from, and for P > 1 how its frames were split, a user technique's identity and
    parameters with it (so that `report` keeps two ways apart, as for measured runs)."""
    sim: dict = {"cores": cores, "costs": source, "split": split if cfg.P > 1 else ""}
    if cfg.P > 1 and ":" in split:
        with contextlib.suppress(HybridschedError):  # a run failed by its import says why
            sim["split_technique_hash"] = split_technique(split).hash
        if split_params:
            sim["split_params"] = params_text(as_params(split_params))
    return {"simulated": sim}


def _simulate(cfg: RunConfig, costs, cum, cores: int, ov: Overheads, split: str,
              source: str, split_params: dict | None, memory: Memory) -> RunRecord:
    info = registry.get(cfg.scheduler)
    if cum is None:
        cum = np.concatenate([[0.0], np.cumsum(costs)])
    searched = ""
    if cfg.P > 1:
        out, disp, k = _split(cfg, costs, cum, cores, ov, split, split_params, memory), None, cfg.P
    else:
        chunk = cfg.chunk
        if chunk == pol.AUTO_CHUNK and info.chunk_search:
            chunk, searched = auto_chunk(cfg, costs, cum, cores, ov)
        out, disp = execute(cfg.scheduler, costs, cum, cfg.k, chunk, cores, ov,
                            cfg.affinity, cfg.coop, dict(cfg.params), cfg.dispatch, memory)
        k = len(out.start)
    workers, trace = _tables(out, k, None if not cfg.affinity else list(range(cores)))
    ok = covered_once(trace, len(costs))
    technique = disp.technique() if disp is not None else ""
    tech, digest = registry.identity(cfg.scheduler, technique)
    notes = (f"simulated on {cores} cores" + (f"; {searched}" if searched else "")
             + (f"; {disp.notes()}" if disp is not None and disp.notes() else ""))
    extra = _extra(cfg, cores, source, split, split_params)
    chunk_used = info.resolve_chunk(cfg.chunk, len(costs)) if not info.baseline else len(costs)
    if searched:
        chunk_used = chunk
    return RunRecord(cfg, str(info.family), out.makespan, ok, bad_rows=0 if ok else -1,
                     chunk_used=max(0, chunk_used), workers_used=k, notes=notes,
                     workers=workers, trace=trace, extra=extra, technique=tech,
                     technique_hash=digest, simulated=True)


def auto_chunk(cfg: RunConfig, costs: np.ndarray, cum: np.ndarray, cores: int,
               ov: Overheads) -> tuple[int, str]:
    """``--chunk auto`` simulated as the backend runs it (for ``--validate`` of a measured
    study's auto runs; a simulated study takes explicit chunks, and a run over P > 1 ranks
    never searches): :func:`policies.search_chunk` over simulated trial runs (each with a memory of its own, so the trials teach the study's
    loops nothing). Returns (the chunk, the notes' line the real run writes)."""
    def trial(c: int) -> float:
        return execute(cfg.scheduler, costs, cum, cfg.k, c, cores, ov, cfg.affinity, cfg.coop,
                       dict(cfg.params), cfg.dispatch, Memory())[0].makespan

    best, times = pol.search_chunk(len(costs), cfg.k, trial)
    tried = " ".join(f"{c}:{t * 1e3:.0f}" for c, t in sorted(times.items()))
    return best, f"auto chunk={best} (ms per size {tried})"


def _split(cfg: RunConfig, costs, cum, cores: int, ov: Overheads, split: str,
           split_params: dict | None, memory: Memory) -> Outcome:
    """P nodes: each node's share run by the local scheduler on k workers; the nodes are the
    outcome's workers (a chunk row per node claim)."""
    L, P = len(costs), cfg.P
    bytes_per_task = cfg.height * cfg.width

    def local(first: int, count: int) -> float:
        sub = costs[first:first + count]
        out, _ = execute(cfg.scheduler, sub, np.concatenate([[0.0], np.cumsum(sub)]), cfg.k,
                         cfg.chunk, cores, ov, cfg.affinity, cfg.coop, dict(cfg.params),
                         cfg.dispatch, memory)
        return out.makespan

    if split == "static":
        blocks = pol.static_blocks(L, P)
        eng_out = [(r, b[0][0], b[0][1]) for r, b in enumerate(blocks) if b]
        ends = np.zeros(P)
        rows = []
        for r, first, count in eng_out:
            ends[r] = ov.mpi_latency_s + local(first, count)
            rows.append((r, first, count, ov.mpi_latency_s, ends[r]))
        return Outcome(rows, np.zeros(P), ends, ends - ov.mpi_latency_s, float(ends.max()))
    chunks = dynamic_chunks(L, P, cfg.k, split, split_params)
    work = {first: local(first, count) + count * bytes_per_task / ov.mpi_bandwidth
            for first, count in chunks}
    queue = iter(chunks)

    class _Tickets:  # rank 0's fetch-and-add counter: chunk i to the i-th claimer
        feedback = False

        def claim(self, w):
            return next(queue, None)

    # each rank a worker on a node of its own; a claim is one RMA round trip, serialised
    # at rank 0's window
    eng = Engine(_chunk_cum(chunks, work, L), P, Placement(P), ov.mpi_latency_s)
    return eng.run(_Tickets())


def _chunk_cum(chunks, work, L: int) -> np.ndarray:
    """Prefix sums over tasks such that each chunk's tasks add up to its node-level work."""
    per = np.zeros(L)
    for first, count in chunks:
        per[first:first + count] = work[first] / count
    return np.concatenate([[0.0], np.cumsum(per)])


def with_P(cfg: RunConfig, P: int) -> RunConfig:
    return replace(cfg, P=P)
