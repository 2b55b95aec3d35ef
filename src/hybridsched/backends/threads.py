"""Thread backend: k worker threads in this process claim chunks from a dispenser and run
the nogil kernel on the shared slab. One scheduling loop serves all seven thread schedulers.
"""
from __future__ import annotations

import os
import threading
from functools import partial
from time import perf_counter

from .. import dispatch
from .. import policies as pol
from ..errors import HybridschedError
from ..kernels import get_kernel
from ..records import Execution
from ..sysinfo import pin_current
from .base import Job, thread_usage, trace_table, worker_table


def pool_size(job: Job) -> int:
    """AIMD keeps a fixed pool of min(k, N) threads (§2.3); the others use k."""
    return min(job.k, len(job.cpus)) if job.scheduler == "aimd" else job.k


def make_dispenser(job: Job, workers: int) -> dispatch.Dispenser:
    n, c = job.frames, job.chunk
    s = job.scheduler
    if s == "static":
        return dispatch.Preassigned(pol.static_assignment(n, workers, c))
    if s in ("dynamic", "chunk"):
        return dispatch.SharedCounter(n, partial(pol.dynamic_size, k=workers, c=c))
    if s == "guided":
        return dispatch.SharedCounter(n, partial(pol.guided_size, k=workers, c=c))
    if s == "adaptive":
        return dispatch.Adaptive(n, workers)
    if s == "chunk-steal":
        return dispatch.StealQueues(pol.static_chunks(n, workers, c))
    if s == "aimd":
        return dispatch.AimdGate(n, workers, workers, job.monitor, c)
    raise KeyError(f"no thread dispenser for scheduler {s!r}")


class WorkerFailed(HybridschedError):
    pass


class ThreadTeam:
    """Owns the worker threads: starts them, and on any exit path (an exception in a
    worker, Ctrl-C in the main thread) stops the dispenser and joins every thread."""

    def __init__(self, target, n: int, dispenser: dispatch.Dispenser):
        self.dispenser = dispenser
        self.errors: list[tuple[int, BaseException]] = []
        self.threads = [threading.Thread(target=self._run, args=(target, w), daemon=True,
                                         name=f"hybridsched-w{w}") for w in range(n)]

    def _run(self, target, w: int) -> None:
        try:
            target(w)
        except BaseException as exc:  # reported by the main thread after the join
            self.errors.append((w, exc))
            self.dispenser.stop()

    def __enter__(self) -> "ThreadTeam":
        try:
            for t in self.threads:
                t.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def join(self) -> None:
        for t in self.threads:
            t.join()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.dispenser.stop()
        for t in self.threads:
            if t.ident is not None:
                t.join()


def execute(job: Job) -> Execution:
    kernel = get_kernel(job.kernel)
    work = job.work
    workers = pool_size(job)
    stats = worker_table(workers)
    traces: list[list[tuple[int, int, float, float]]] = [[] for _ in range(workers)]
    pid = os.getpid()

    t_begin = perf_counter()
    disp = make_dispenser(job, workers)
    claim, done, feedback = disp.claim, disp.done, disp.feedback

    def worker(w: int) -> None:
        cpu = job.cpu_of(w)
        if cpu >= 0:
            pin_current(cpu)
        u0 = thread_usage()
        record = traces[w].append
        busy = 0.0
        frames = 0
        start = perf_counter()
        while True:
            chunk = claim(w)
            if chunk is None:
                break
            first, count = chunk
            t0 = perf_counter()
            kernel(work, first, count)
            t1 = perf_counter()
            record((first, count, t0, t1))
            if feedback:
                done(w, count, t1 - t0)
            busy += t1 - t0
            frames += count
        end = perf_counter()
        u1 = thread_usage()
        row = stats[w]
        row["pid"], row["cpu"], row["start"], row["end"] = pid, cpu, start, end
        row["busy"], row["frames"], row["chunks"] = busy, frames, len(traces[w])
        row["user"], row["system"], row["iowait"] = (b - a for a, b in zip(u0, u1))

    with ThreadTeam(worker, workers, disp) as team:
        team.join()
    if team.errors:
        w, exc = team.errors[0]
        raise WorkerFailed(f"{job.scheduler}: worker thread {w} raised {type(exc).__name__}: {exc}") from exc
    t_end = float(stats["end"].max()) if workers else perf_counter()
    notes = ""
    if isinstance(disp, dispatch.StealQueues):
        notes = f"steals={disp.steals}"
    elif isinstance(disp, dispatch.AimdGate):
        wt = disp.window_trace
        notes = f"window min={min(wt)} max={max(wt)} final={wt[-1]} U={disp.u:.3f}"
    return Execution(t_begin, t_end, stats, trace_table(traces), chunk_used=job.chunk, notes=notes)
