"""One simulated execution of a scheduler: the backend's overheads around the engine.

Every scheduler hands out work through what its real backend uses -- the registry entry's
thread dispenser (fixed, profiled, adaptive, ``auto``, users' techniques), the fork
backends' frame i to worker i mod k, the pipe producer's chunk source -- and only the
costs around a chunk are modelled, each from :class:`Overheads` (``hybridsched calibrate``
measures them):

threads   thread starts one after the other; each claim holds the hand-out's lock for the
          compiled loop's claim or the Python loop's per-chunk time (the GIL), whichever
          dispatch the real run would use;
forks     the parent forks k children one after the other (prolific), or each child forks
          its own in ceil(log2 k) mitosis rounds (collective); each reaped at the end;
pipes     the forks, then every chunk message passes the producer, one at a time: a
          write and read (1to1, 1toN) or, for pipe-MtoM, the done/next round trip.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..backends.base import Job
from ..core import dispatch, policies as pol, registry
from ..core.capabilities import decide
from ..core.memory import Memory
from ..errors import DispatchError
from ..core.techniques.profiled import Profile
from ..core.virtual import COOP, PINNED, SHARED, Engine, Outcome, Placement, virtual_clock


@dataclass(frozen=True)
class Overheads:
    """The modelled costs, in seconds. The defaults were measured on the project's 2-core
    VM (``hybridsched calibrate``); a calibration file replaces them."""

    claim_compiled_s: float = 8.0e-8    # one claim of the compiled loop (atomic ticket)
    claim_python_s: float = 9.5e-7      # the Python loop's per-chunk time, GIL held
    # the same under contention, k = 1, 2, ... workers claiming empty chunks at once (the
    # shared counter's cache line bouncing, the GIL handed round): the time per chunk, so
    # the hand-out's throughput; beyond the last k measured, the last. Empty: the above.
    claim_compiled_by_k: tuple = ()
    claim_python_by_k: tuple = ()
    pipe_msg_s: float = 6.0e-6          # one chunk message through a pipe (write + read)
    pipe_rtt_s: float = 2.0e-5          # pipe-MtoM: done message, next chunk, both ways
    pipe_serve_s: float = 1.4e-5        # pipe-MtoM: the producer's CPU per message
    fork_s: float = 1.5e-4              # fork() of one worker by its parent
    reap_s: float = 3.0e-5              # waitpid + pidfd close per worker at the end
    thread_start_s: float = 4.0e-5      # starting one worker thread
    wake_s: float = 5.0e-6              # a blocked thread woken (barrier, coop token)
    slice_s: float = 1.0e-3             # the time slice of a shared core (CFS: 6 ms / tasks, at least 0.75 ms)
    switch_s: float = 5.0e-6            # one context switch
    row_sort_s: float = 0.0             # quicksort of one row (the workload cost model)
    row_width: int = 0                  # the width that row_sort_s was measured at
    # what an execution pays once beyond its workers' time (the team's start and end:
    # thread creation and join, the first fork, pinning, the last reap), per family
    thread_fixed_s: float = 1.0e-4
    process_fixed_s: float = 2.0e-3
    pipe_fixed_s: float = 2.0e-3
    # and per worker of the team (a forked child's exit and reap, a thread's join)
    thread_worker_s: float = 0.0
    process_worker_s: float = 0.0
    pipe_worker_s: float = 0.0
    # a forked worker's exit on its own core (its copy-on-write faults and the unmapping of
    # its copy of the parent): CPU its neighbours on that core wait for
    exit_s: float = 2.5e-3
    # when each worker starts after the first, where it was measured for this configuration
    # (``simulate --from``); empty: modelled from thread_start_s or fork_s
    worker_starts_s: tuple = ()
    mpi_latency_s: float = 5.0e-6       # one MPI message or RMA fetch-and-add
    mpi_bandwidth: float = 5.0e9        # bytes per second between ranks

    @classmethod
    def from_dict(cls, d: dict) -> "Overheads":
        known = {f.name for f in fields(cls)}
        got = {k: v for k, v in d.items() if k in known}
        for name in cls.listed():
            if name in got:
                got[name] = tuple(float(x) for x in got[name])
        return cls(**got)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def names(cls) -> frozenset[str]:
        """The overheads a calibration file may set."""
        return frozenset(f.name for f in fields(cls))

    @classmethod
    def listed(cls) -> frozenset[str]:
        """The overheads that are lists (one figure per k or per worker), not numbers."""
        return frozenset(f.name for f in fields(cls) if isinstance(f.default, tuple))


def placement(k: int, cores: int, affinity: bool, coop: bool, ov: Overheads) -> Placement:
    mode = COOP if coop else PINNED if affinity else SHARED
    return Placement(cores, mode, ov.slice_s, ov.switch_s)


def _job(info, L: int, k: int, chunk: int, params: dict, cpus: list[int], memory: Memory) -> Job:
    """A backend job that never touches memory: what a dispenser factory reads (the frame
    count, the loop key, the parameters, the loop's learned state) on a zero-strided
    stand-in for the slab."""
    work = np.broadcast_to(np.zeros(1, np.uint8), (L, 1, 1))
    return Job(info, work, "simulated", k, chunk, params=dict(params), cpus=cpus, memory=memory)


def profile_from_costs(costs: np.ndarray, ov: Overheads, k: int) -> Profile:
    """The loop's profile (μ, σ per task, h the claim overhead) as the untimed dynamic,1
    profiling run would measure it from these costs."""
    return Profile(float(np.mean(costs)), float(np.std(costs)), h=ov.claim_python_s,
                   speeds=tuple([1.0] * max(1, k)), costs=np.asarray(costs, float))


def execute(scheduler: str, costs: np.ndarray, cum: np.ndarray, k: int, chunk: int,
            cores: int, ov: Overheads, affinity: bool = True, coop: bool = False,
            params: dict | None = None, dispatch_mode: str = "auto",
            memory: Memory | None = None) -> tuple[Outcome, dispatch.Dispenser | None]:
    """Simulate one execution of ``scheduler``; returns (outcome, the dispenser or None).
    ``memory``: what the simulated loops learned in earlier repetitions (None: nothing)."""
    memory = Memory() if memory is None else memory
    info = registry.get(scheduler)
    L = len(costs)
    if info.baseline:
        eng = Engine(cum, 1, Placement(max(1, cores)))
        return eng.run(dispatch.Preassigned([[(0, L)]])), None
    c = info.resolve_chunk(chunk, L)
    place = placement(k, cores, affinity, coop, ov)
    if info.threaded:
        return _threads(info, costs, cum, k, c, cores, ov, place, params or {}, dispatch_mode,
                        memory)
    return _processes(info, costs, cum, k, c, ov, place, params or {}, memory)


def _threads(info, costs, cum, k, c, cores, ov, place, params, mode, memory):
    # the backend's rule (a numba kernel, as every simulated workload's is); a refused
    # --dispatch compiled fails the simulated run as it fails the real one
    decided = decide(info, mode, coop=place.mode == COOP)
    if decided.refused:
        raise DispatchError(f"--dispatch compiled: {decided.why}")
    workers = info.workers(k, cores)
    job = _job(info, len(costs), workers, c, params, list(range(cores)), memory)
    if info.profiled:
        job.params["profile"] = profile_from_costs(costs, ov, workers)
    if info.prepare is not None:  # auto-sim: its predictions, from the same costs
        info.prepare(job)
    disp = info.dispenser(len(costs), workers, c, None, job=job)
    arm = getattr(disp, "arm", None)  # auto: its chosen technique may run compiled
    compiled = decided.compiled or (decided.delegates and arm is not None and decide(arm).compiled)
    claim = _claim(ov, compiled, workers)
    starts = _measured(ov, workers) or [w * ov.thread_start_s for w in range(workers)]
    eng = Engine(cum, workers, place, claim, starts)
    virtual_clock(disp, eng.clock)
    out = eng.run(disp)
    out.makespan += ov.thread_fixed_s + workers * ov.thread_worker_s
    disp.executed(out.makespan)
    return out, disp


def _claim(ov: Overheads, compiled: bool, workers: int) -> float:
    """One claim's hold on the hand-out at this many workers: the calibrated contention
    figure for that k (the last one measured beyond it), else the single-worker one."""
    by_k = ov.claim_compiled_by_k if compiled else ov.claim_python_by_k
    if by_k:
        return by_k[min(workers, len(by_k)) - 1]
    return ov.claim_compiled_s if compiled else ov.claim_python_s


def _measured(ov: Overheads, k: int) -> list[float] | None:
    """The measured start offsets of k workers, if the overheads hold them."""
    return list(ov.worker_starts_s) if len(ov.worker_starts_s) == k else None


def _fork_starts(k: int, collective: bool, fork_s: float) -> list[float]:
    """When each forked worker starts: one after the other from the parent, or in mitosis
    rounds where each worker forks its own children in turn."""
    if not collective:  # the first fork is in the fixed cost (process_fixed_s)
        return [w * fork_s for w in range(k)]
    start = [0.0] * k
    for w in range(k):  # a parent is always below its children
        for i, child in enumerate(pol.mitosis_children(w, k)):
            start[child] = start[w] + (i + 1) * fork_s
    return start


def _processes(info, costs, cum, k, c, ov, place, params, memory):
    starts = _measured(ov, k) or _fork_starts(k, info.collective, ov.fork_s)
    disp, claim, latency, per_msg = _source(info, costs, k, c, ov, place, params, memory)
    # the study's process works among the workers: the forks it makes once the first
    # worker runs (every one but the first for a parent that forks the team, none for a
    # mitosis tree's root; the first fork precedes every worker and is in the fixed cost)
    # and, for pipes, serving every message
    forks = 0 if info.collective else k - 1
    parent = forks * ov.fork_s
    if per_msg:  # the messages are known once the hand-out is: a first pass counts them
        dry = Engine(cum, k, place, claim, starts, latency_s=latency)
        virtual_clock(disp, dry.clock)
        parent += len(dry.run(disp).trace) * per_msg
        disp = _source(info, costs, k, c, ov, place, params, memory)[0]  # a fresh one
    eng = Engine(cum, k, place, claim, starts, latency_s=latency, exit_s=ov.exit_s,
                 parent_s=parent)
    virtual_clock(disp, eng.clock)
    out = eng.run(disp)
    fam = info.family  # pipe or process: the overheads' names
    out.makespan += (k * (ov.reap_s + getattr(ov, f"{fam}_worker_s"))
                     + getattr(ov, f"{fam}_fixed_s"))
    disp.executed(out.makespan)
    return out, disp


def _source(info, costs, k, c, ov, place, params, memory):
    """(dispenser, claim cost, claim latency, the producer's CPU per message) of a forked
    team."""
    L = len(costs)
    if not info.piped:
        return dispatch.Preassigned(pol.round_robin_frames(L, k)), 0.0, 0.0, 0.0
    if info.dealt:
        return dispatch.Preassigned(pol.static_chunks(L, k, c)), ov.pipe_msg_s, 0.0, ov.pipe_msg_s
    if not info.resends:  # pipe-1to1: a stream producer fills a pipe per wake-up
        disp = dispatch.SharedCounter(L, lambda rem: pol.dynamic_size(rem, k, c))
        return disp, ov.pipe_msg_s, 0.0, ov.pipe_msg_s
    if info.dispenser is not None:  # pipe-MtoM:<technique>: the producer sizes chunks
        job = _job(info, L, k, c, params, list(range(place.cores)), memory)
        if info.profiled:
            job.params["profile"] = profile_from_costs(costs, ov, k)
        if info.prepare is not None:
            info.prepare(job)
        disp = info.dispenser(L, k, c, None, job=job)
    else:
        disp = dispatch.SharedCounter(L, lambda rem: pol.dynamic_size(rem, k, c))
    # The round trip: the producer serves one message at a time (the lock); the rest, both
    # processes' wake-ups, each worker waits out on its own. With no core of its own, every
    # answer it is woken to give preempts a worker and gives the core back: two switches.
    serve = min(ov.pipe_msg_s, ov.pipe_rtt_s)
    per_msg = ov.pipe_serve_s + (2 * ov.switch_s if k > place.cores else 0.0)
    return disp, serve, max(0.0, ov.pipe_rtt_s - serve), per_msg
