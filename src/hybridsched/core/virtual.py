"""Virtual workers: k of them claim chunks from a dispenser (the same objects the real
backends claim from) and run them on virtual cores, in virtual time -- the event loop of
`hybridsched simulate` and of ``auto-sim``'s predictions (pure scheduling: no OS, no I/O).

Time is virtual (seconds). A chunk's work is the sum of its tasks' costs (prefix sums: O(1)
per chunk). Claims go through one serialised resource, the hand-out's lock: a claim waits
until the lock is free and holds it ``claim_s`` (the shared counter's cache line, the GIL
of the Python loop, the pipe producer's round trip): contention grows with the workers
without any special case.

Cores are shared as a fluid (processor sharing): a worker that is running progresses at
``min(1, C / n)`` of a core times the time-slicing efficiency ``slice / (slice + switch)``
when its group of C cores holds n > C runnable workers. Placement decides the groups:

``pinned``   worker w on core w mod cores (round-robin affinity), each core a group of 1;
``shared``   no affinity: one group of all cores (Linux's fair sharing);
``coop``     cores are tokens: a worker runs only while it holds one, alone on its core,
             and hands it over only at a scheduling point (the end of a chunk) to a
             worker that waits (seed 001's SCHED_COOP), paying ``switch_s``.

Each group keeps a virtual clock V advancing at the per-worker rate; a worker started at
V0 with work x finishes when V reaches V0 + x, so an event costs O(log k) however the
rates change.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

PINNED, SHARED, COOP = "pinned", "shared", "coop"
_EXIT = (-1, 0)  # a worker's exit work, in place of a chunk
_PARENT = -2     # the team's owner, a member of one group while it works


@dataclass(frozen=True)
class Placement:
    """How the k workers share ``cores`` (see the module doc)."""

    cores: int
    mode: str = PINNED
    slice_s: float = 3e-3    # the kernel's time slice under oversubscription (CFS ~3 ms)
    switch_s: float = 5e-6   # one context switch (or a token hand-over under coop)

    def groups(self, k: int) -> tuple[list[int], list[int]]:
        """(each worker's group, each group's capacity in cores)."""
        if self.mode == PINNED:
            return [w % self.cores for w in range(k)], [1] * min(k, self.cores)
        if self.mode == SHARED:
            return [0] * k, [self.cores]
        return [-1] * k, [1] * self.cores  # coop: a worker's group is the token it holds


@dataclass
class _Group:
    capacity: int
    eff: float
    v: float = 0.0
    t: float = 0.0
    members: list = field(default_factory=list)  # heap of (finish V, seq, worker)
    version: int = 0

    def rate(self) -> float:
        n = len(self.members)
        if n <= self.capacity:
            return 1.0
        return self.capacity / n * self.eff

    def advance(self, t: float) -> None:
        if self.members and t > self.t:
            self.v += (t - self.t) * self.rate()
        self.t = t

    def next_time(self) -> float:
        if not self.members:
            return math.inf
        return self.t + max(0.0, self.members[0][0] - self.v) / self.rate()


@dataclass
class Outcome:
    """What one simulated execution produced: per-chunk rows and per-worker times."""

    trace: list            # (worker, first, count, start, end)
    start: np.ndarray      # each worker's start
    end: np.ndarray        # each worker's end
    busy: np.ndarray       # each worker's time running chunks (wall, shared cores included)
    makespan: float


class Engine:
    """One execution: ``run(dispenser)`` with ``cum`` = prefix sums of the task costs."""

    def __init__(self, cum: np.ndarray, k: int, place: Placement, claim_s: float = 0.0,
                 starts: list[float] | None = None, quantum_s: float = 0.02,
                 latency_s: float = 0.0, exit_s: float = 0.0, parent_s: float = 0.0):
        self.cum, self.k, self.place = cum, k, place
        self.claim_s = claim_s
        # what a claim waits beyond the lock without holding it (a blocked worker's
        # wake-up after the producer answered): paid by each worker, not serialised
        self.latency_s = latency_s
        # CPU work a worker does on its own core after its last chunk (a forked process's
        # exit: unmapping its copy of the parent's address space), slowing its neighbours
        self.exit_s = exit_s
        # CPU the process that owns the team spends among its workers from the start (its
        # forks, a pipe producer's service of every message): unpinned, it runs on the
        # core with the fewest workers, and slows them only where none is idle
        self.parent_s = parent_s
        self.starts = starts if starts is not None else [0.0] * k
        self.quantum_s = quantum_s
        member, caps = place.groups(k)
        eff = place.slice_s / (place.slice_s + place.switch_s)
        self.member = member
        self.groups = [_Group(c, eff) for c in caps]
        self.events: list = []
        self.seq = 0
        self.lock_free = 0.0
        # coop: free tokens and the workers waiting for one
        self.free_tokens = deque(range(len(caps))) if place.mode == COOP else deque()
        self.waiting: deque = deque()
        self.token_since = [0.0] * k
        self.now = 0.0
        self.sliced = False  # some core ever ran more workers than it has: time slices

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, a, b))

    def _reschedule(self, g: int) -> None:
        grp = self.groups[g]
        grp.version += 1
        t = grp.next_time()
        if t < math.inf:
            self._push(t, 1, g, grp.version)

    def _start_chunk(self, w: int, t: float, work: float) -> None:
        g = self.member[w]
        grp = self.groups[g]
        grp.advance(t)
        self.seq += 1
        heapq.heappush(grp.members, (grp.v + work, self.seq, w))
        if len(grp.members) > grp.capacity:
            self.sliced = True
        self._reschedule(g)

    def run(self, disp) -> Outcome:
        k = self.k
        self.disp = disp
        self.chunk: list[tuple[int, int]] = [_EXIT] * k  # each worker's chunk, once it claims one
        self.chunk_start = [0.0] * k
        self.trace: list = []
        self.busy = np.zeros(k)
        self.end = np.zeros(k)
        for w in range(k):
            self._push(self.starts[w], 0, w)
        spare = self.place.mode == PINNED and len(self.groups) < self.place.cores
        if self.parent_s > 0 and self.place.mode != COOP and self.groups and not spare:
            counts = [self.member.count(g) for g in range(len(self.groups))]
            g = min(range(len(self.groups)), key=lambda i: counts[i] / self.groups[i].capacity)
            grp = self.groups[g]
            grp.advance(0.0)
            self.seq += 1
            heapq.heappush(grp.members, (grp.v + self.parent_s, self.seq, _PARENT))
            self._reschedule(g)
        while self.events:
            t, _, kind, a, b = heapq.heappop(self.events)
            if kind == 0:      # worker a claims at t
                self._claim(a, t)
            elif kind == 2:    # worker a's claim is granted: it runs (or waits for a token)
                self._begin(a, t)
            else:              # group a's earliest member finishes (if the version holds)
                grp = self.groups[a]
                if b != grp.version:
                    continue
                grp.advance(t)
                _, _, w = heapq.heappop(grp.members)
                self._reschedule(a)
                if w != _PARENT:
                    self._finish(w, t)
        makespan = float(self.end.max()) if k else 0.0
        if self.sliced:
            # the fluid shares a core perfectly; the kernel shares it in slices, so the last
            # worker waits half a slice on average before it gets to finish
            makespan += self.place.slice_s / 2
        return Outcome(self.trace, np.asarray(self.starts, float), self.end, self.busy, makespan)

    def clock(self) -> float:
        """The virtual time (what a learner's clock reads in simulation)."""
        return self.now

    def _claim(self, w: int, t: float) -> None:
        self.now = t
        chunk = self.disp.claim(w)
        self.lock_free = max(t, self.lock_free) + self.claim_s
        granted = self.lock_free + self.latency_s
        if chunk is None:
            if self.exit_s > 0 and self.place.mode != COOP:
                self.chunk[w] = _EXIT
                self._start_chunk(w, granted, self.exit_s)
                return
            self.end[w] = granted
            self._release_token(w, granted)
            return
        self.chunk[w] = chunk
        self._push(granted, 2, w)

    def _begin(self, w: int, t: float) -> None:
        first, count = self.chunk[w]
        self.chunk_start[w] = t
        work = float(self.cum[first + count] - self.cum[first])
        if self.place.mode == COOP and self.member[w] < 0:
            if not self.free_tokens:
                self.waiting.append((w, work))
                return
            self.member[w] = self.free_tokens.popleft()
            self.token_since[w] = t
        self._start_chunk(w, t, work)

    def _finish(self, w: int, t: float) -> None:
        if self.chunk[w] is _EXIT:
            self.end[w] = t
            return
        first, count = self.chunk[w]
        start = self.chunk_start[w]
        self.trace.append((w, first, count, start, t))
        self.busy[w] += t - start
        if self.disp.feedback:
            self.now = t
            self.disp.done(w, count, t - start)
        nxt = t
        if (self.place.mode == COOP and self.waiting
                and t - self.token_since[w] >= self.quantum_s):
            nxt = self._hand_over(w, t)  # a scheduling point with someone waiting
        self._push(nxt, 0, w)

    def _hand_over(self, w: int, t: float) -> float:
        """Worker w yields its token to the first waiter; w claims its next chunk at once and
        then waits in line for a token itself."""
        self._give(w, t)
        return t

    def _release_token(self, w: int, t: float) -> None:
        if self.place.mode != COOP or self.member[w] < 0:
            return
        if self.waiting:
            self._give(w, t)
        else:
            self.free_tokens.append(self.member[w])
            self.member[w] = -1

    def _give(self, w: int, t: float) -> None:
        """w's token to the first waiter, who starts its chunk after the switch."""
        token = self.member[w]
        self.member[w] = -1
        other, work = self.waiting.popleft()
        self.member[other] = token
        t1 = t + self.place.switch_s
        self.token_since[other] = t1
        self.chunk_start[other] = t1
        self._start_chunk(other, t1, work)


def virtual_clock(disp, clock) -> None:
    """Point a dispenser's learner (and a chooser's chosen one) at the virtual clock."""
    for d in (disp, getattr(disp, "_inner", None)):
        if d is not None and hasattr(d, "clock"):
            d.clock = clock
