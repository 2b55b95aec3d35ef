"""Thread-safe dispensers: the shared scheduling state that worker threads claim chunks from.

Each dispenser wraps a pure policy from :mod:`policies` with the synchronisation the paper
uses for it: nothing for static, an atomic ticket counter for dynamic/chunk, one mutex and
a counter for guided/adaptive, per-thread queues for chunk stealing, a condition variable
gating the in-flight window for AIMD. ``claim(w)`` returns ``(first, count)`` or None when
worker w should stop; ``done(w, count, seconds)`` is called after each chunk only when
``feedback`` is true.
"""
from __future__ import annotations

import itertools
import sys
import threading
from collections import deque
from time import perf_counter
from typing import Callable

import numpy as np

from . import policies as pol
from ..records import WINDOW_DTYPE


class Dispenser:
    # read-only here: a subclass says it with a class attribute, or a property (auto's
    # depends on the technique it chose)
    @property
    def feedback(self) -> bool:
        """Whether workers must report each completed chunk."""
        return False

    def __init__(self) -> None:
        self.stopped = False

    def claim(self, w: int) -> pol.Chunk | None:  # pragma: no cover - interface
        raise NotImplementedError

    def done(self, w: int, count: int, seconds: float) -> None:
        pass

    def stop(self) -> None:
        """Make every later claim return None (Ctrl-C, a failing worker)."""
        self.stopped = True

    def executed(self, seconds: float) -> None:
        """The backend's word that the execution ended with every frame done, after
        ``seconds`` (auto's racer learns it; most dispensers ignore it)."""

    def notes(self) -> str:
        """What the run's notes should say about this dispenser ('' for nothing)."""
        return ""

    def series(self) -> dict:
        """Named time series worth storing with the run (e.g. AIMD's window)."""
        return {}

    def technique(self) -> str:
        """The technique this execution ran when the scheduler chose one (auto), else ''."""
        return ""

    def remaining(self) -> int:  # pragma: no cover - interface
        """Tasks not handed out yet (the dispensers that auto races say it)."""
        raise NotImplementedError


class Preassigned(Dispenser):
    """Static: each worker walks its own precomputed list; no synchronisation at all."""

    def __init__(self, per_worker: list[list[pol.Chunk]]):
        super().__init__()
        self._iters = [iter(chunks) for chunks in per_worker]

    def claim(self, w):
        if self.stopped:
            return None
        return next(self._iters[w], None)


class SharedCounter(Dispenser):
    """Dynamic, chunk and guided: one lock around the next unassigned frame."""

    def __init__(self, n: int, size: Callable[[int], int]):
        super().__init__()
        self.n = n
        self.next = 0
        self._size = size
        self._lock = threading.Lock()

    def claim(self, w):
        with self._lock:
            first = self.next
            if first >= self.n or self.stopped:
                return None
            count = self._size(self.n - first)
            self.next = first + count
        return first, count


# next() on an itertools.count is a single C call, so the GIL makes it an atomic
# fetch-and-add. A free-threaded interpreter gives no such promise: use the locked counter.
_GIL_ATOMIC = getattr(sys, "_is_gil_enabled", lambda: True)()


class TicketCounter(Dispenser):
    """Dynamic and chunk (a fixed chunk c): whoever draws ticket j gets chunk j, frames
    ``j*c ..``, sized by :func:`policies.dynamic_size`.

    This is how libgomp runs schedule(dynamic): an atomic fetch-and-add, no mutex. The
    thread backend's worker loop spends 0.81 us of CPU per chunk on tickets against 1.26 us
    on :class:`SharedCounter` (`benchmarks/bench_core.py --only hotpath`); every GIL-held
    microsecond per chunk matters for 45-us frames.
    """

    def __init__(self, n: int, k: int, c: int):
        super().__init__()
        if c < 1:
            raise ValueError(f"chunk must be at least 1, got {c}")
        self.n, self.k, self.c = n, k, c
        self._tickets = itertools.count()

    def claim(self, w):
        first = next(self._tickets) * self.c
        remaining = self.n - first
        if remaining <= 0 or self.stopped:
            return None
        return first, pol.dynamic_size(remaining, self.k, self.c)


def fixed_chunks(n: int, k: int, c: int) -> Dispenser:
    """The dispenser for a fixed chunk size: lock-free tickets where the GIL makes them
    atomic, else the locked counter."""
    if _GIL_ATOMIC:
        return TicketCounter(n, k, c)
    return SharedCounter(n, lambda remaining: pol.dynamic_size(remaining, k, c))


class Adaptive(Dispenser):
    """The adaptive chunk scheduler (§2.4): guided-like base chunk scaled by the claiming
    thread's speed factor, from per-thread timings reported through ``done``. ``reading``
    says what a thread's average is taken over: finished chunks (the paper) or frames (the
    ``adaptive-frame`` variant), see :data:`policies.READINGS`."""

    feedback = True

    def __init__(self, n: int, k: int, reading: str = pol.PER_CHUNK):
        super().__init__()
        if reading not in pol.READINGS:
            raise ValueError(f"unknown adaptive reading {reading!r}")
        self.n, self.k, self.reading = n, k, reading
        self.next = 0
        self.time = [0.0] * k
        self.chunks = [0] * k
        self.frames = [0] * k
        self._lock = threading.Lock()

    def claim(self, w):
        with self._lock:
            first = self.next
            if first >= self.n or self.stopped:
                return None
            g = pol.global_average(self.time, self.chunks, self.frames, self.reading)
            mine = pol.thread_average(self.time[w], self.chunks[w], self.frames[w], self.reading)
            count = pol.adaptive_size(self.n - first, self.k, pol.speed_factor(mine, g))
            self.next = first + count
        return first, count

    def done(self, w, count, seconds):
        with self._lock:
            self.time[w] += seconds
            self.chunks[w] += 1
            self.frames[w] += count


class StealQueues(Dispenser):
    """Chunk stealing: static pre-assignment to per-thread deques; the owner takes from the
    front, an idle thread steals from the back of the others in round-robin order.
    deque.popleft/pop are atomic, so no lock is needed."""

    def __init__(self, per_worker: list[list[pol.Chunk]]):
        super().__init__()
        self.queues = [deque(chunks) for chunks in per_worker]
        k = len(per_worker)
        self._victims = [pol.steal_victims(w, k) for w in range(k)]
        self.steals = 0

    def claim(self, w):
        if self.stopped:
            return None
        try:
            return self.queues[w].popleft()
        except IndexError:
            pass
        for v in self._victims[w]:
            try:
                chunk = self.queues[v].pop()
            except IndexError:
                continue
            self.steals += 1
            return chunk
        return None

    def notes(self):
        return f"steals={self.steals}"


class AimdGate(Dispenser):
    """AIMD (§2.3): chunks of 4 from a shared counter, at most ``window`` in flight.

    Workers block on a condition variable while the window is full. At every completion the
    window is updated by :func:`policies.aimd_window` from the utilisation U, which is
    re-read from the monitor's lock-free mirror every 32 completions (§4).

    The window starts at the pool size min(k, N), as §4 states. §2.3's "small bootstrap
    value" and its slow start (doubling while U = 0) therefore only come into play after a
    halving has taken the window below N. U reads 0 until the monitor's first sample of the
    run, so a run shorter than the sampling period never halves.
    """

    feedback = True

    def __init__(self, n: int, pool: int, limit: int, monitor, chunk: int = pol.AIMD_CHUNK):
        super().__init__()
        self.n, self.chunk, self.limit = n, chunk, limit
        self.next = 0
        self.window = pool  # initialised to min(k, N)
        self.in_flight = 0
        self.completions = 0
        self.monitor = monitor
        self.u = monitor.value if monitor is not None else 0.0
        # (time, window, U) after every completion: the run's window trace (`series`)
        self.window_trace: list[tuple[float, int, float]] = [(perf_counter(), self.window, self.u)]
        self._cv = threading.Condition(threading.Lock())
        # Threads blocked in claim(). Condition.notify() builds a deque of waiters even when
        # there are none; skipping it then cuts claim+done from 1.5 to 1.3 us of CPU per chunk.
        self._waiting = 0

    def claim(self, w):
        with self._cv:
            while self.in_flight >= self.window and not self.stopped and self.next < self.n:
                self._waiting += 1
                try:
                    self._cv.wait()
                finally:
                    self._waiting -= 1
            first = self.next
            if first >= self.n or self.stopped:
                self._cv.notify_all()  # let the other waiters see the end too
                return None
            count = min(self.chunk, self.n - first)
            self.next = first + count
            self.in_flight += 1
        return first, count

    def done(self, w, count, seconds):
        with self._cv:
            self.in_flight -= 1
            self.completions += 1
            if self.monitor is not None and self.completions % pol.AIMD_MIRROR_EVERY == 0:
                self.u = self.monitor.value
            self.window = pol.aimd_window(self.window, self.u, self.limit)
            self.window_trace.append((perf_counter(), self.window, self.u))
            free = self.window - self.in_flight
            if free > 0 and self._waiting:
                self._cv.notify(free)  # wake only as many as may start, not the whole herd

    def stop(self):
        with self._cv:
            self.stopped = True
            self._cv.notify_all()

    def notes(self):
        wt = [w for _, w, _ in self.window_trace]
        return f"window min={min(wt)} max={max(wt)} final={wt[-1]} U={self.u:.3f}"

    def series(self):
        return {"aimd_window": np.array(self.window_trace, dtype=WINDOW_DTYPE)}
