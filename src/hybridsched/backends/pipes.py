"""Pipe backend: a producer (the parent) streams chunks of frame ids to forked workers
(§2.1.3). The registry entry's ``topology`` says how: ``shared`` (pipe-1to1: one task pipe
read by all workers), ``dealt`` (pipe-1toN: one task pipe per worker, chunks dealt
round-robin) or ``feedback`` (pipe-MtoM: a task and a done pipe per worker; the next chunk
goes to whichever worker reported done).

The paper's protocol is the default: one chunk per message and one message per write(2)
(``pipe_batch`` 1), and for pipe-MtoM one chunk in flight per worker, the next sent when it
reports done (``inflight`` 1). The producer writes as its pipes accept, as a blocking
producer would: the kernel's pipe buffer bounds how far it runs ahead. ``--pipe-batch B``
(up to :data:`MAX_BATCH` records per write) and ``--inflight D`` are named variants that
cut the IPC cost; they are stored with each run and reported apart.

A message is one fixed-size record (first frame, count), far below PIPE_BUF, so writes are
atomic and a read of one record from a shared pipe never splits a message. The parent
writes with O_NONBLOCK and ``poll``s its pipes together with the workers' pidfds, so a dead
worker is noticed at once instead of blocking the producer. ``pipe-MtoM`` knows which chunk
each worker holds unacknowledged: when a worker dies, that chunk is restored from the
original and re-sent to a survivor, and the run completes with ``lost_workers`` set. The
other two fail the run with :class:`errors.WorkerLost`.

``--chunk auto`` (chunk = :data:`policies.AUTO_CHUNK`): untimed trial runs over
:func:`policies.chunk_candidates` and :func:`policies.chunk_refinements` pick the fastest
chunk for (scheduler, L, H, W, k, affinity, kernel, CPUs); the result is cached for the
process, so repetitions search once, then the timed run uses it.
"""
from __future__ import annotations

import os
import select
import struct
import time
from collections import deque
from functools import partial
from time import perf_counter
from typing import Callable

import numpy as np

from ..core import policies as pol
from ..errors import UsageError
from ..kernels import get_kernel
from ..coop.seat import Seated
from ..oslayer.events import WRITE, readable
from ..oslayer.proctree import ProcessTeam
from ..records import NOT_MEASURED, Execution
from .base import Job
from .chunkloop import team_worker

REC = struct.Struct("<qq")  # task: (first, count), count 0 = stop; done: (worker, first)
assert REC.size <= select.PIPE_BUF
# The most records one producer write may carry: as many as fit in PIPE_BUF, so a write is
# atomic (all or nothing under O_NONBLOCK) and a shared pipe never interleaves two writes.
MAX_BATCH = select.PIPE_BUF // REC.size
# The note that carries the pipe-MtoM producer's CPU seconds in a run's notes.
PRODUCER_CPU = "producer cpu_s="
# The most chunks in flight per pipe-MtoM worker: each is one record in the worker's task
# pipe, and the producer's write must never block, so they must fit one atomic write.
MAX_INFLIGHT = MAX_BATCH

# --chunk auto re-times this many leading sizes once more: more is steadier on a noisy
# machine, each one costs a full untimed run.
AUTO_RECHECK = 3

def _chunks(job: Job, c: int):
    return list(pol.fcfs_chunks(job.frames, partial(pol.dynamic_size, k=job.k, c=c)))


def _pack(chunks) -> bytes:
    return b"".join(REC.pack(f, n) for f, n in chunks)


def _restore(job: Job, first: int, count: int) -> bool:
    """Put frames back to the input before re-running them: a worker killed mid-sort may
    leave a row with a value duplicated (a swap half done)."""
    if job.original is None:
        return False
    np.copyto(job.work[first:first + count], job.original[first:first + count])
    return True


class _Source:
    """The chunks pipe-MtoM sends: a precomputed list (the paper's fixed chunk), or a
    technique's dispenser that sizes each chunk when the producer sends it to worker w
    (registry entry ``pipe-MtoM:<technique>``). Chunks of a lost worker are re-sent first."""

    def __init__(self, chunks=None, disp=None, k: int = 1):
        self.queue = deque(chunks or ())
        self.disp = disp
        self.spent: set[int] = set() if disp is not None else set(range(k))
        self.k = k
        self.sent: dict[tuple[int, int], float] = {}

    def more(self, w: int) -> bool:
        """Whether worker w may still get a chunk."""
        return bool(self.queue) or w not in self.spent

    def __bool__(self) -> bool:
        return bool(self.queue) or len(self.spent) < self.k

    def take(self, w: int):
        if self.queue:
            return self.queue.popleft()
        if w in self.spent:
            return None
        chunk = self.disp.claim(w)
        if chunk is None:
            self.spent.add(w)
        elif self.disp.feedback:
            self.sent[chunk] = perf_counter()
        return chunk

    def acked(self, w: int, chunk) -> None:
        t0 = self.sent.pop(chunk, None)
        if t0 is not None:
            self.disp.done(w, chunk[1], perf_counter() - t0)

    def lost(self, w: int, held) -> None:
        """Re-send a dead worker's chunks, and what its own share of the dispenser held."""
        self.queue.extendleft(reversed(held))
        if self.disp is not None and w not in self.spent:
            while (c := self.disp.claim(w)) is not None:
                self.queue.append(c)
            self.spent.add(w)


def _plan(job: Job, c: int, depth: int) -> tuple[_Source | None, list | None, int]:
    """(the chunk source, or 1toN's dealt lists; the most chunks one worker may run)."""
    k, mtom = job.k, job.info.resends
    if job.info.dealt:
        dealt = pol.static_chunks(job.frames, k, c)
        return None, dealt, max(len(d) for d in dealt)
    if job.info.dispenser is not None:  # a technique sizes each chunk as it is sent
        disp = job.info.dispenser(job.frames, k, job.chunk, job.monitor, job=job)
        return _Source(disp=disp, k=k), None, job.frames + depth * k  # each chunk >= 1 frame
    chunks = _Source(_chunks(job, c), k=k)
    # one worker may run every chunk; MtoM also re-runs the chunks lost workers held
    return chunks, None, len(chunks.queue) + (depth * k if mtom else 0)


def _consumer(job: Job, team: ProcessTeam, task_r: list[int], done_w: list[int]):
    """``body(w)``: worker w reads (first, count) records from its task pipe until EOF or
    a stop record, runs each chunk and, for pipe-MtoM, reports it done."""
    kernel = get_kernel(job.kernel)

    def body(w: int) -> None:
        received = partial(_receiver, task_r[w])
        if not done_w:
            team_worker(team, job, w, kernel, received)
            return
        dn = done_w[w]

        def done(first: int, count: int, seconds: float) -> None:
            os.write(dn, REC.pack(w, first))
        # ready: the first handshake, before the worker queues for a token
        team_worker(team, job, w, kernel, received, done, partial(os.write, dn, REC.pack(w, -1)))
    return body


def _receiver(rd: int, seat: Seated) -> Callable[[int], tuple[int, int] | None]:
    """``claim(w)``: the next chunk from the worker's task pipe, None at EOF or a stop
    record; a read that would wait is a scheduling point of its seat on the arbiter."""
    coop = seat.worker is not None

    def claim(w: int) -> tuple[int, int] | None:
        if coop and not readable(rd):
            msg = seat.wait(os.read, rd, REC.size)
        else:
            msg = os.read(rd, REC.size)
        if len(msg) != REC.size:
            if msg:
                raise RuntimeError(f"split message of {len(msg)} bytes")
            return None  # EOF: the producer closed the pipe
        chunk = REC.unpack(msg)
        return chunk if chunk[1] > 0 else None
    return claim


def _run(job: Job, c: int) -> Execution:
    k = job.k
    mtom, shared = job.info.resends, job.info.streamed
    depth = max(1, job.inflight)
    producer_cpu = NOT_MEASURED  # measured for pipe-MtoM only

    t_begin = perf_counter()
    chunks, dealt, cap = _plan(job, c, depth)
    with ProcessTeam(job.scheduler, k, cap) as team:
        if shared:
            r, w_ = team.pipe()
            task_r, task_w = [r] * k, [w_]
        else:
            pairs = [team.pipe() for _ in range(k)]
            task_r, task_w = [p[0] for p in pairs], [p[1] for p in pairs]
        done_r, done_w = ([], [])
        if mtom:
            pairs = [team.pipe() for _ in range(k)]
            done_r, done_w = [p[0] for p in pairs], [p[1] for p in pairs]

        body = _consumer(job, team, task_r, done_w)
        for w in range(k):
            keep = (task_r[w],) + ((done_w[w],) if mtom else ())
            team.spawn(w, body, keep)
        for fd in set(task_r) | set(done_w):  # the workers' ends
            team.close_fd(fd)
        if mtom:
            assert chunks is not None  # pipe-MtoM sends from one source of chunks
            cpu0 = time.thread_time()  # the producer's own CPU (simulate --from uses it)
            lost, notes = _serve_mtom(team, job, chunks, task_w, done_r, depth)
            producer_cpu = time.thread_time() - cpu0
            notes += f"; {PRODUCER_CPU}{producer_cpu:.6f}"  # for people; the record's field
        else:
            data = [_pack(chunks.queue)] if shared and chunks is not None else [_pack(d) for d in dealt or ()]
            writes, most = _serve_stream(team, task_w, data, max(1, job.pipe_batch) * REC.size)
            lost, notes = 0, f"producer writes={writes} (at most {most} records each)"
        stats = team.stats.copy()
        trace = team.trace()
    ends = stats["end"][stats["end"] > 0]
    t_end = float(ends.max()) if len(ends) else perf_counter()
    disp = getattr(chunks, "disp", None) if chunks is not None else None
    if disp is not None:
        disp.executed(t_end - t_begin)  # auto's racer learns the execution's T
        inner = disp.notes()
        notes = notes + (f"; {inner}" if inner else "")
    return Execution(t_begin, t_end, stats, trace, chunk_used=c, lost_workers=lost, notes=notes,
                     technique=disp.technique() if disp is not None else "",
                     producer_cpu_s=producer_cpu)


def _serve_stream(team: ProcessTeam, task_w: list[int], data: list[bytes],
                  batch: int) -> tuple[int, int]:
    """1to1 and 1toN: write every pipe's records, ``batch`` bytes per write, as the pipe
    drains, close it at the end (EOF stops its readers), and fail at the first worker that
    dies unfinished. Returns the number of writes and the most records one carried."""
    pending: dict[int, memoryview] = {}
    tally = [0, 0]  # writes, the most records one carried

    def drain(fd: int) -> None:
        buf = pending[fd]
        writes = most = 0  # locals: this loop runs once per record at --pipe-batch 1
        try:
            while len(buf):  # one write per message batch until the pipe is full
                sent = os.write(fd, buf[:batch])
                writes += 1
                if sent > most:
                    most = sent
                buf = buf[sent:]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            buf = buf[:0]  # no reader left: the pidfds tell who died
        tally[0] += writes
        tally[1] = max(tally[1], most // REC.size)
        if len(buf):
            pending[fd] = buf
        else:
            del pending[fd]
            team.close_fd(fd)  # also leaves the event loop

    for fd, buf in zip(task_w, data):
        os.set_blocking(fd, False)
        if buf:
            pending[fd] = memoryview(buf)
            team.events.add(fd, drain, WRITE)
        else:
            team.close_fd(fd)
    team.wait()
    return tally[0], tally[1]


def _serve_mtom(team: ProcessTeam, job: Job, chunks: _Source, task_w: list[int],
                done_r: list[int], depth: int) -> tuple[int, str]:
    """Many-to-many: up to ``depth`` chunks in flight per worker, the next one sent on
    each done record. A dead worker's unacknowledged chunks are restored and re-sent."""
    queue = chunks
    k = team.k
    held: list[deque] = [deque() for _ in range(k)]  # sent, not yet acknowledged, in order
    peak = [0]  # the most chunks any worker held unacknowledged
    stopped: set[int] = set()
    lost: list[str] = []

    def feed(w: int) -> None:
        while queue.more(w) and len(held[w]) < depth:
            chunk = queue.take(w)
            if chunk is None:
                break
            held[w].append(chunk)
            peak[0] = max(peak[0], len(held[w]))
            try:
                # at most `depth` records in an otherwise empty pipe: never blocks
                os.write(task_w[w], REC.pack(*chunk))
            except BrokenPipeError:
                return  # it is dying; its pidfd will re-queue what it holds

    def feed_all() -> None:  # to the workers whose end the team has not seen yet
        # idle workers first, so a re-sent chunk does not queue behind a busy one
        for w in sorted(team.running - stopped, key=lambda v: len(held[v])):
            feed(w)
        if not queue and not any(held[w] for w in team.running):
            for w in team.running - stopped:
                team.close_fd(task_w[w])  # EOF: stop
                stopped.add(w)

    def done(w: int, fd: int) -> None:
        msg = os.read(fd, REC.size)
        if len(msg) != REC.size:  # EOF: it exited; the pidfd says how
            team.events.discard(fd)
            return
        if REC.unpack(msg)[1] >= 0:
            queue.acked(w, held[w].popleft())  # acknowledgements come in sending order
        feed(w)
        if not queue:
            feed_all()

    def died(w: int) -> None:
        lost.append(_bury(team, job, w, held[w], task_w[w], done_r[w]))
        queue.lost(w, list(held[w]))
        held[w].clear()
        if queue and not team.running:
            raise team.fail(w, "; no worker left to take its chunks")
        feed_all()

    for w in range(k):
        team.events.add(done_r[w], partial(done, w))
    team.wait(died)
    notes = f"peak in flight={peak[0]} per worker"
    return len(lost), notes + ("; lost " + "; ".join(lost) if lost else "")


def _bury(team: ProcessTeam, job: Job, w: int, held: deque, task_fd: int, done_fd: int) -> str:
    """Worker w died unfinished: reap it, close its pipes, restore the chunks it held (they
    go to the others); says what happened."""
    team.reap(w)
    team.settle_lost(w)
    how = team.lost(w).how
    team.close_fd(task_fd)
    team.close_fd(done_fd)
    what = f"worker {w} (pid {int(team.pids[w])}) {how}"
    if held:
        restored = all([_restore(job, *c) for c in held])
        what += ("; re-sent chunks " + ",".join(f"{f}+{n}" for f, n in held)
                 + ("" if restored else " (not restored)"))
    return what


def auto_chunk(job: Job) -> tuple[int, dict[int, float]]:
    """The chunk that minimised the run time over untimed trial runs (kept per shape in
    the job's memory)."""
    key = (job.scheduler, job.work.shape, job.k, job.affinity, job.kernel, tuple(job.cpus),
           job.pipe_batch, job.inflight)
    if key in job.memory.chunks:
        return job.memory.chunks[key]
    original = job.original
    if original is None:
        raise UsageError("--chunk auto needs the original tensor to rerun trials on")

    def trial(c: int) -> float:
        np.copyto(job.work, original)
        return _run(job, c).seconds

    best, times = pol.search_chunk(job.frames, job.k, trial, AUTO_RECHECK)
    np.copyto(job.work, original)
    job.memory.chunks[key] = (best, times)
    return best, times


def execute(job: Job) -> Execution:
    if job.chunk != pol.AUTO_CHUNK:
        return _run(job, max(1, job.chunk))
    best, times = auto_chunk(job)
    ex = _run(job, best)
    tried = " ".join(f"{c}:{t * 1e3:.0f}" for c, t in sorted(times.items()))
    ex.notes = (f"auto chunk={best} (ms per size {tried})" + (f"; {ex.notes}" if ex.notes else ""))
    return ex
