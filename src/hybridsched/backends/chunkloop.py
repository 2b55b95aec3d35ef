"""The claim-run-record loop every backend's worker runs (the compiled loop of
:mod:`.compiled` aside): take a chunk from the hand-out, run the kernel on it, record it,
then give the coop arbiter its scheduling point. The thread backend feeds it from a
dispenser, the fork backend from the worker's dealt list, the pipe backend from the
worker's task pipe; :func:`team_worker` is the frame a forked worker runs it in.
"""
from __future__ import annotations

from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Callable, Iterable

from ..coop.seat import Seated

if TYPE_CHECKING:  # the thread backend, which loads this module, never loads the team's
    from ..oslayer.proctree import ProcessTeam
    from .base import Job

Chunk = tuple[int, int]                 # (first frame, count)
Row = tuple[int, int, float, float]     # (first, count, start, end): one trace row


def run_chunks(claim: Callable[[int], Chunk | None], w: int, kernel: Callable, work,
               record: Callable[[Row], object], boundary: Callable[[], object] | None = None,
               after: Callable[[int, int, float], object] | None = None,
               fault: Callable[[int], None] | None = None) -> None:
    """Worker w's chunks until ``claim(w)`` says None: ``kernel(work, first, count)``
    between two clock reads, ``record((first, count, t0, t1))``, then ``after(first,
    count, seconds)`` (a technique's feedback, a done message) and the arbiter's
    ``boundary()`` where given. ``fault(n)`` (the test hook) runs before the n-th chunk.

    The thread backend's hot path: everything between two kernel calls holds the GIL, and a
    worker that finds it taken sleeps and is woken late (at k=2 on 45-us frames each chunk
    cost 2.5-3.5x its GIL-held time in wall time, measured). Hence nothing per chunk but
    the claim (called directly: an iterator over it cost ~7 % more CPU per chunk), two
    clock reads, one call to record and three tests for None."""
    clock = perf_counter
    nth = 0
    while True:
        chunk = claim(w)
        if chunk is None:
            return
        first, count = chunk
        if fault is not None:
            nth += 1
            fault(nth)
        t0 = clock()
        kernel(work, first, count)
        t1 = clock()
        record((first, count, t0, t1))
        if after is not None:
            after(first, count, t1 - t0)
        if boundary is not None:
            boundary()


def dealt(chunks: Iterable[Chunk]) -> Callable[[int], Chunk | None]:
    """``claim(w)`` over a worker's own list of chunks (the fork backend's hand-out)."""
    it = iter(chunks)
    return lambda w: next(it, None)


def team_worker(team: ProcessTeam, job: Job, w: int, kernel: Callable,
                claims: Callable[[Seated], Callable[[int], Chunk | None]],
                after: Callable[[int, int, float], object] | None = None,
                ready: Callable[[], object] | None = None) -> None:
    """Forked worker w's whole life: pinned and timed by the team, ``ready()`` (a
    handshake, before it queues for a token), then its chunks (``claims(seat)`` is its
    claim, which may wait through the seat) run in its seat on the arbiter, recorded into
    the team's shared trace as each one ends."""
    token = team.begin(w, job.cpu_of(w))
    if ready is not None:
        ready()
    fault = partial(team.check_fault, w) if team.fault is not None else None
    with Seated(job.coop_worker()) as seat:
        run_chunks(claims(seat), w, kernel, job.work, team.recorder(w), seat.boundary, after,
                   fault)
    team.end(w, token)
