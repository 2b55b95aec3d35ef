"""Thread-safe dispensers for the techniques: a single shared counter sized by the
technique (first come, first served), per-worker ranges for static_steal. The same
objects serve the thread backend's workers and the pipe-MtoM producer (which claims on a
worker's behalf when it sends that worker its next chunk).

State that outlives one execution (AWF's weights, the profile) is kept per loop, keyed by
:func:`loop_key`: the same configuration repeated is the same loop; it lives in the job's
:class:`~hybridsched.core.memory.Memory`.
"""
from __future__ import annotations

import threading
from time import perf_counter
from typing import Callable

from ..contract import Technique, learns, recorded, sized
from ..dispatch import Dispenser
from ..memory import Memory
from .adaptive import LEARNERS, AwfHistory, Learner
from .deterministic import RULES, Rule, Whole, balanced_block, steal_blocks
from .profiled import PROFILED

def loop_key(job) -> tuple:
    """What makes two executions the same loop: scheduler, shape, k, kernel, chunk,
    placement and the run options."""
    return (job.scheduler, tuple(job.work.shape), job.k, job.kernel, job.chunk, job.affinity,
            tuple(job.cpus), job.pipe_batch, job.inflight, job.portfolio)


def awf_history(memory: Memory, key: tuple, p: int) -> AwfHistory:
    """The AWF weights of one loop in ``memory``, created at its first execution."""
    h = memory.histories.get(key)
    if h is None or h.p != p:
        h = memory.histories[key] = AwfHistory(p)
    return h


def dispenser(name: str, n: int, p: int, chunk: int, params: dict, profile=None,
               job=None) -> Dispenser:
    """Technique ``name``'s thread-safe dispenser for one execution of the loop ``job``
    (its learned state is per loop), built as :data:`BUILDERS` says; at one worker every
    LB4OMP technique hands out [0, N) as one chunk, as LB4OMP does."""
    if p <= 1:
        return RuleCounter(Whole(n, p, chunk, params))
    return BUILDERS[name](name, n, p, chunk, params, profile, job)


def _rule_counter(name, n, p, chunk, params, profile, job):
    from . import rule

    return RuleCounter(rule(name, n, p, chunk, params, profile))


def _steal(name, n, p, chunk, params, profile, job):
    return StaticSteal(n, p, chunk)


def _learner(name, n, p, chunk, params, profile, job):
    cls = LEARNERS[name]
    if cls.keeps_history and job is not None:
        params = {**params, "awf_history": awf_history(job.memory, loop_key(job), p)}
    return LearnerCounter(cls(n, p, chunk, profile, params))


# How each technique's dispenser is made: a counter sized by a fixed rule (deterministic or
# from the profile), per-worker ranges with stealing, or a counter sized by a learner.
BUILDERS: dict[str, Callable[..., Dispenser]] = {
    **{name: _rule_counter for name in (*RULES, *PROFILED)},
    "static_steal": _steal,
    **{name: _learner for name in LEARNERS},
}


class IndexedCounter(Dispenser):
    """One lock around (next frame, request index): chunk i sized by :meth:`size` from i,
    what remains and the claiming worker (LB4OMP's shared counter)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = int(n)
        self.next = 0
        self.i = 0
        self._lock = threading.Lock()

    def remaining(self) -> int:
        return 0 if self.stopped else self.n - self.next

    def size(self, i: int, remaining: int, w: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def claimed(self, w: int, first: int) -> None:
        """Under the lock, after worker w's claim from ``first`` (nothing by default)."""

    def claim(self, w):
        with self._lock:
            first = self.next
            if first >= self.n or self.stopped:
                return None
            count = min(self.size(self.i, self.n - first, w), self.n - first)
            self.i += 1
            self.next = first + count
            self.claimed(w, first)
        return first, count


class RuleCounter(IndexedCounter):
    """A fixed technique: chunk i sized by the rule."""

    def __init__(self, rule: Rule):
        super().__init__(rule.n)
        self.rule = rule

    def size(self, i, remaining, w):
        return self.rule.size(i, remaining)


class LearnerCounter(Dispenser):
    """An adaptive technique: the shared counter, sized by a learner fed with each
    request's time and each chunk's measured time."""

    feedback = True

    def __init__(self, learner: Learner, clock: Callable[[], float] = perf_counter):
        super().__init__()
        self.learner, self.n, self.clock = learner, learner.n, clock
        self.next = 0
        self._lock = threading.Lock()

    def remaining(self) -> int:
        return 0 if self.stopped else self.n - self.next

    def claim(self, w):
        with self._lock:
            now = self.clock()
            first = self.next
            if first >= self.n or self.stopped:
                self.learner.finish(w, now)
                return None
            count = min(max(1, self.learner.size(w, self.n - first, now)), self.n - first)
            self.next = first + count
        return first, count

    def done(self, w, count, seconds):
        with self._lock:
            self.learner.done(w, count, seconds)


class StaticSteal(Dispenser):
    """LB4OMP/LLVM static_steal: worker w owns chunk indices [lo, hi) and takes them from
    the front; an idle worker steals from the back of the next victim with at least two
    chunks left a quarter of them (one of two or three), runs the first and keeps the rest
    as its own range. One lock for all ranges: under the GIL nothing finer would run
    concurrently."""

    def __init__(self, n: int, p: int, chunk: int):
        super().__init__()
        self.n, self.p = n, p
        self.c, ranges = steal_blocks(n, p, chunk)
        self.lo = [a for a, _ in ranges]
        self.hi = [b for _, b in ranges]
        self.victim = [(w + 1) % p for w in range(p)]
        self.steals = 0
        self._lock = threading.Lock()

    def remaining(self) -> int:
        return 0 if self.stopped else sum(max(0, h - l) for l, h in zip(self.lo, self.hi))

    def _chunk(self, idx: int):
        if self.c == 0:  # the balanced-blocks fallback: index w is worker w's block
            return balanced_block(self.n, self.p, idx)
        first = idx * self.c
        return first, min(self.c, self.n - first)

    def claim(self, w):
        with self._lock:
            if self.stopped:
                return None
            if self.lo[w] < self.hi[w]:
                idx = self.lo[w]
                self.lo[w] += 1
                return self._chunk(idx)
            for _ in range(self.p - 1):
                v = self.victim[w]
                if v == w:
                    v = self.victim[w] = (v + 1) % self.p
                left = self.hi[v] - self.lo[v]
                if left < 2:
                    self.victim[w] = (v + 1) % self.p
                    continue
                take = left >> 2 if left > 3 else 1
                top = self.hi[v]
                self.hi[v] -= take
                self.lo[w], self.hi[w] = self.hi[v] + 1, top
                self.steals += 1
                return self._chunk(self.hi[v])
            # the last chunk of a victim with one left is not stolen (LB4OMP): it is its own
            return None

    def notes(self):
        return f"steals={self.steals}"


class TechniqueCounter(IndexedCounter):
    """A user technique on one shared counter: chunk i sized by ``chunk()`` (checked),
    each finished chunk reported to ``record()`` (only when the technique overrides it)."""

    feedback = False  # set per instance: whether the technique learns

    def __init__(self, tech: Technique, tasks: int, ref: str = ""):
        super().__init__(tasks)
        self.tech, self.ref = tech, ref
        self.feedback = learns(tech)
        self._firsts: dict[int, list[int]] = {}  # per worker: chunks in flight, claim order

    def size(self, i, remaining, w):
        return sized(self.tech, remaining, i, w)

    def claimed(self, w, first):
        if self.feedback:
            self._firsts.setdefault(w, []).append(first)

    def done(self, w, count, seconds):
        with self._lock:
            recorded(self.tech, w, self._firsts[w].pop(0), count, seconds)

    def technique(self) -> str:
        return self.ref
