"""Per-core utilisation monitor that feeds the AIMD scheduler (§2.3, Eqs. 1-2).

A daemon thread samples the per-core /proc/stat counters (through psutil), turns each pair
of samples into per-core utilisations, keeps a long-term mean per core, blends them with
Eq. 1 and smooths with Eq. 2. The result is published in ``value``, a plain float that
readers load without a lock (the paper's lock-free mirror). It is started once before the
timed runs and shared by them, so its start-up is not charged to AIMD.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from .policies import AIMD_A, AIMD_BETA, combined_utilisation, ewma

# Sampling period. /proc/stat advances in 10 ms jiffies, so much below ~50 ms a core's delta
# is mostly quantisation noise; much above it AIMD reacts too late for runs of a few seconds.
SAMPLE_PERIOD_S = 0.1

Counters = Sequence[tuple[float, float]]  # per core: (busy seconds, total seconds)


def psutil_counters() -> list[tuple[float, float]]:
    """Cumulative (busy, total) seconds per core; busy excludes idle and iowait."""
    import psutil

    out = []
    for c in psutil.cpu_times(percpu=True):
        # guest time is already counted in user/nice; adding it again would inflate total
        total = sum(c) - getattr(c, "guest", 0.0) - getattr(c, "guest_nice", 0.0)
        idle = c.idle + getattr(c, "iowait", 0.0)
        out.append((total - idle, total))
    return out


class UtilisationModel:
    """Eq. 1 and Eq. 2 over a stream of per-core counter samples; no threads, no clock."""

    def __init__(self, a: float = AIMD_A, beta: float = AIMD_BETA):
        self.a = a
        self.beta = beta
        self._last: list[tuple[float, float]] | None = None
        self._sum: list[float] = []
        self.samples = 0
        self.value: float | None = None  # U(p), None until the first valid sample

    def update(self, counters: Counters) -> float | None:
        """Feed one cumulative sample; returns the new U(p) (None before two samples)."""
        counters = list(counters)
        last, self._last = self._last, counters
        if last is None or len(last) != len(counters):
            return self.value
        now = []
        for (b0, t0), (b1, t1) in zip(last, counters):
            dt = t1 - t0
            now.append(min(1.0, max(0.0, (b1 - b0) / dt)) if dt > 0 else 0.0)
        if not self._sum:
            self._sum = [0.0] * len(now)
        self.samples += 1
        self._sum = [s + u for s, u in zip(self._sum, now)]
        means = [s / self.samples for s in self._sum]
        self.value = ewma(self.value, combined_utilisation(means, now, self.a), self.beta)
        return self.value


class UtilisationMonitor:
    """The sampling thread; a context manager. ``value`` is U(p) in [0, 1] (0 until known)."""

    def __init__(self, period: float = SAMPLE_PERIOD_S,
                 source: Callable[[], Counters] = psutil_counters):
        self.period = period
        self.source = source
        self.model = UtilisationModel()
        self.value = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            u = self.model.update(self.source())
            if u is not None:
                self.value = u

    def start(self) -> "UtilisationMonitor":
        self.model.update(self.source())
        self._thread = threading.Thread(target=self._loop, name="hybridsched-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "UtilisationMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
