"""Thread backend: k worker threads in this process claim chunks from a dispenser and run
the nogil kernel on the shared slab. One Python scheduling loop serves every thread
scheduler; a fixed first-come-first-served hand-out with a numba kernel runs the same claims
in the compiled loop of :mod:`.compiled` instead (same team, worker table and trace).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from time import monotonic, perf_counter

from ..core import dispatch
from ..errors import ResourceError, WorkerFailed
from ..kernels import direct_entry, get_kernel
from ..records import Execution
from ..oslayer.cpus import pin_current
from . import compiled
from .base import Job
from .chunkloop import run_chunks
from ..coop.seat import Seated
from ..oslayer.procfs import thread_usage
from ..oslayer.signals import ENDING
from ..records import trace_table, worker_table


def pool_size(job: Job) -> int:
    """The workers the scheduler's registry entry starts for k (AIMD: min(k, N), §2.3)."""
    return job.info.workers(job.k, len(job.cpus))


def make_dispenser(job: Job, workers: int) -> dispatch.Dispenser:
    """The scheduler's shared hand-out state, built by its registry entry."""
    if job.info.dispenser is None:
        raise KeyError(f"no thread dispenser for scheduler {job.scheduler!r}")
    return job.info.dispenser(job.frames, workers, job.chunk, job.monitor, job=job)


# How often the main thread, waiting for the workers, wakes to run pending signal handlers:
# the worst-case delay before Ctrl-C/SIGTERM takes effect, against one GIL acquisition of a
# few microseconds per period.
_SIGNAL_POLL_S = 0.1
_HELD_SIGNALS = set(ENDING)
# After Ctrl-C/SIGTERM (or any error), how long the team waits for each worker to finish
# its current chunk before abandoning it as stuck in user code (a kernel, or a technique's
# chunk(), that does not return). Longer lets a slow chunk end cleanly; shorter answers
# the signal sooner. An abandoned thread is a daemon: it ends with the process.
_ABANDON_AFTER_S = 2.0


_OR_TOKEN = ", or a wait for a --coop token that another job holds"  # what else keeps a worker


class ThreadTeam:
    """Owns the worker threads: starts them, and on any exit path (an exception in a
    worker, Ctrl-C in the main thread) stops the dispenser and joins every thread."""

    def __init__(self, target, n: int, dispenser: dispatch.Dispenser, coop: bool = False):
        self.dispenser = dispenser
        self.coop = coop  # its workers may be waiting for a token, not in user code
        self.errors: list[tuple[int, BaseException]] = []
        self.threads = [threading.Thread(target=self._run, args=(target, w), daemon=True,
                                         name=f"hybridsched-w{w}") for w in range(n)]
        # Set by each worker as its last act. The main thread waits on these rather than in
        # Thread.join: on Python < 3.13 a Ctrl-C that interrupts Thread.join marks a thread
        # that is still running as stopped (bpo-45274 workaround), so a later join returns
        # at once and the worker outlives the team.
        self._finished = [threading.Event() for _ in range(n)]
        self.abandoned: list[int] = []

    def _run(self, target, w: int) -> None:
        try:
            target(w)
        except BaseException as exc:  # reported by the main thread after the join
            self.errors.append((w, exc))
            self.dispenser.stop()
        finally:
            self._finished[w].set()

    def __enter__(self) -> "ThreadTeam":
        # Threads inherit the signal mask of the thread that starts them. With SIGINT and
        # SIGTERM blocked while starting: (1) the workers never take these signals, so the
        # kernel delivers Ctrl-C/SIGTERM to the main thread, where the Python handler runs;
        # (2) a signal arriving meanwhile is held until every start() has returned, so no
        # thread is half-started (launched, ident not yet set) when we stop and join.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            try:
                for t in self.threads:
                    t.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a held signal raises here
        except RuntimeError as exc:  # "can't start new thread": fail this run, not the sweep
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise ResourceError(f"cannot start {len(self.threads)} worker threads: {exc}") from exc
        except BaseException as exc:
            # Ctrl-C/SIGTERM while starting: the workers already started stop too, and one
            # already stuck in user code is abandoned as after a signal in the run (a worker
            # can reach its first chunk before the last one starts: an unbounded join here
            # hung a loaded machine's run for ever)
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def join(self) -> None:
        for t, finished in zip(self.threads, self._finished):
            if t.ident is not None:
                # Safe to interrupt (see __init__), and timed: a signal that lands after the
                # main thread released the GIL but before it blocks is only noticed when the
                # wait returns, so an untimed wait could sit on a Ctrl-C/SIGTERM until the
                # whole run ends. The period bounds that delay; each wake-up costs ~us.
                while not finished.wait(_SIGNAL_POLL_S):
                    pass
                t.join()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.join()
            return
        self.dispenser.stop()
        self.abandoned = self._join_within(_ABANDON_AFTER_S)
        if self.abandoned:
            print(f"hybridsched: abandoned worker thread(s) {', '.join(map(str, self.abandoned))}: "
                  f"still in user code {_ABANDON_AFTER_S:g} s after the "
                  f"{_what(exc_type)} (a kernel or a technique's chunk() that does not "
                  f"return{_OR_TOKEN if self.coop else ''}); they end with the process",
                  file=sys.stderr, flush=True)

    def _join_within(self, seconds: float) -> list[int]:
        """Join every worker that finishes within ``seconds`` in all; the others' numbers."""
        deadline = monotonic() + seconds
        stuck = []
        for w, (t, finished) in enumerate(zip(self.threads, self._finished)):
            if t.ident is None:
                continue
            while not finished.is_set() and monotonic() < deadline:
                finished.wait(min(_SIGNAL_POLL_S, max(0.0, deadline - monotonic())))
            if finished.is_set():
                t.join()
            else:
                stuck.append(w)
        return stuck


def _what(exc_type) -> str:
    if issubclass(exc_type, KeyboardInterrupt):
        return "interrupt"
    return "signal" if issubclass(exc_type, SystemExit) else f"error ({exc_type.__name__})"


def _python_chunks(job: Job, disp: dispatch.Dispenser, run, traces):
    """``chunks(w, boundary)``: worker w's claim-run-record loop in Python, over any
    dispenser (the per-chunk cost is :func:`chunkloop.run_chunks`'s)."""
    claim, done, feedback = disp.claim, disp.done, disp.feedback
    work = job.work

    def chunks(w: int, boundary) -> None:
        after = None
        if feedback:
            def after(first: int, count: int, seconds: float) -> None:
                done(w, count, seconds)
        # the dispenser's lock-free tickets for dynamic/chunk and the kernel's compiled entry
        # point keep the claim and the call cheap: 1.46 -> 0.81 us of CPU per chunk
        # (`bench_core.py --only hotpath`); busy/frames are summed from the trace after the
        # join. Fixed sequences with a numba kernel skip all of it (backends/compiled.py).
        run_chunks(claim, w, run, work, traces[w].append, boundary, after)
    return chunks


def remote_traceback(exc: BaseException) -> str:
    """The traceback a worker thread's exception carries, as the worker saw it."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def execute(job: Job) -> Execution:
    kernel = get_kernel(job.kernel)
    work = job.work
    workers = pool_size(job)
    stats = worker_table(workers)
    traces: list[list[tuple[int, int, float, float]]] = [[] for _ in range(workers)]
    pid = os.getpid()
    native = compiled.use_compiled(job, kernel)
    if native or compiled.may_delegate(job, kernel):
        compiled.compile_for(kernel, work)  # untimed; a no-op once compiled

    t_begin = perf_counter()
    disp: dispatch.Dispenser
    if native and job.info.sequence is not None:  # (use_compiled: it has one)
        bounds = job.info.sequence(job.frames, workers, job.chunk, job.params or None, job=job)
        disp = compiled.CompiledTickets(bounds, workers, job.frames, job.scheduler)
    else:
        disp = make_dispenser(job, workers)
        # auto: the technique it chose runs compiled when its hand-out is fixed
        disp = compiled.delegated(job, disp, kernel, workers) or disp
    if isinstance(disp, compiled.CompiledTickets):  # native
        run_compiled = disp.runner(kernel, work)
        chunks = lambda w, boundary: run_compiled(w)  # noqa: E731  (never with --coop: compiled.decision)
    else:
        chunks = _python_chunks(job, disp, direct_entry(kernel, work), traces)

    def worker(w: int) -> None:
        cpu = job.cpu_of(w)
        if cpu >= 0:
            pin_current(cpu)
        wk = job.coop_worker()
        u0 = thread_usage()
        start = perf_counter()
        with Seated(wk) as seat:  # no chunk left (or the kernel raised): the token moves on
            try:
                chunks(w, seat.boundary)
            finally:
                end = perf_counter()
        u1 = thread_usage()
        row = stats[w]
        row["pid"], row["cpu"], row["start"], row["end"] = pid, cpu, start, end
        row["user"], row["system"], row["iowait"] = (b - a for a, b in zip(u0, u1))

    ran = (compiled.COMPILED if native else compiled.PYTHON).value  # the record's dispatch
    with ThreadTeam(worker, workers, disp, job.coop is not None) as team:
        team.join()
    if team.errors:
        w, exc = team.errors[0]
        # which loop failed (compiled or Python) and what auto had chosen stay on record
        raise WorkerFailed(job.scheduler, w, exc, remote_traceback(exc), notes=disp.notes(),
                           technique=disp.technique(), dispatch=ran) from exc
    t_end = float(stats["end"].max()) if workers else perf_counter()
    disp.executed(t_end - t_begin)  # auto's racer learns the execution's T
    trace = disp.trace() if isinstance(disp, compiled.CompiledTickets) else trace_table(traces)
    for w in range(workers):
        mine = trace[trace["worker"] == w]
        stats[w]["busy"] = float((mine["end"] - mine["start"]).sum())
        stats[w]["frames"], stats[w]["chunks"] = int(mine["count"].sum()), len(mine)
    return Execution(t_begin, t_end, stats, trace, chunk_used=job.chunk, notes=disp.notes(),
                     series=disp.series(), technique=disp.technique(), dispatch=ran)
