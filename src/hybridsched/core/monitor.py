"""Per-core utilisation monitor that feeds the AIMD scheduler (§2.3, Eqs. 1-2).

A daemon thread samples the per-core counters of /proc/stat for the CPUs the run may use
(the cpuset), turns each pair of samples into per-core utilisations, keeps a long-term
mean per core, blends them with Eq. 1 and smooths with Eq. 2. The result is published in
``value``, a plain float that readers load without a lock (the paper's lock-free mirror).
It is started once before the timed runs and shared by them, so its start-up is not
charged to AIMD (§4).

The long-term mean of Eq. 1 is reset at the start of every timed AIMD run (``reset``,
outside the timed region): it then covers the samples of that run only, so a repetition
does not depend on what ran before it in the study (a serial run, a k = 32 sweep), and the
repetitions of one configuration are alike.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from ..oslayer.procfs import proc_stat_counters
from .policies import AIMD_A, AIMD_BETA, combined_utilisation, ewma

# Sampling period: §2.3 keeps "a long-term arithmetic mean utilization over the completed
# sampling second intervals", i.e. one sample per second. At 1 s the 10 ms jiffies of
# /proc/stat put at most 1 % of quantisation noise on a core's delta; the cost is that a
# run shorter than a second never sees a sample (U stays 0: slow start up to the window
# limit), which is the paper's behaviour too.
SAMPLE_PERIOD_S = 1.0

Counters = Sequence[tuple[float, float]]  # per core: (busy jiffies, total jiffies)


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
        if last is None or len(last) != len(counters) or not counters:
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
                 source: Callable[[], Counters] = proc_stat_counters):
        self.period = period
        self.source = source
        self.model = UtilisationModel()
        self.value = 0.0
        self.resets = 0
        self._lock = threading.Lock()  # model swap (reset) against a sample in flight
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        with self._wake:
            while not self._stopping:
                generation = self.resets
                self._wake.wait(self.period)
                if self._stopping:
                    break
                if generation != self.resets:
                    continue  # reset meanwhile: a full period from the new baseline
                u = self.model.update(self.source())
                if u is not None:
                    self.value = u

    def reset(self) -> None:
        """Forget all history: a new baseline sample now, U back to 0 until the next
        sample a full period later (called before each timed AIMD run)."""
        with self._wake:
            self.model = UtilisationModel(self.model.a, self.model.beta)
            self.model.update(self.source())
            self.value = 0.0
            self.resets += 1
            self._wake.notify_all()

    def start(self) -> "UtilisationMonitor":
        self.model.update(self.source())
        self._thread = threading.Thread(target=self._loop, name="hybridsched-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "UtilisationMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
