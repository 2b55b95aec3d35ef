"""LB4OMP's techniques that need the loop's profile: mean μ and standard deviation σ of
one iteration's time, and the scheduling overhead h per chunk. LB4OMP reads them from the
file its ``profiling`` schedule wrote; here :func:`profile_of` takes them from a profiling
run (dynamic, chunk 1) the package makes itself, and the study stores them with each run.

fac, faca, fsc and tap are deterministic once (μ, σ, h) are known. LB4OMP keeps μ in an
integer variable (``T mu``), truncating it (to 0 for a sub-tick mean, then dividing by
zero); the papers' formulas use the real μ, and so do we. Only σ/μ (fac, faca, tap) or
σ/h (fsc) enter the sizes, so the time unit does not matter as long as it is one unit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .deterministic import Remaining, Rule

# TAP's scaling factor alpha (KMP_ALPHA in LB4OMP); 1 weighs σ/μ as Lucco's paper does.
# Larger tapers harder (smaller chunks, more dispatches), smaller approaches guided.
TAP_ALPHA = 1.0

# h, the scheduling overhead of one chunk, when the profile could not measure it: the
# thread backend's claim costs ~1 us of CPU per chunk (bench_core.py --only hotpath).
# Larger h makes fsc/bold choose larger chunks.
DEFAULT_OVERHEAD_S = 1e-6


@dataclass(frozen=True)
class Profile:
    """One loop's profile: per-iteration time mean and deviation, overhead per chunk
    (seconds), and each worker's relative speed (mean 1; wf's weights)."""

    mu: float
    sigma: float
    h: float = DEFAULT_OVERHEAD_S
    speeds: tuple[float, ...] = ()
    # each iteration's measured time, in iteration order (auto-sim simulates on them);
    # not stored with the runs (to_dict), which keep the summary above
    costs: np.ndarray | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        return {"mu": self.mu, "sigma": self.sigma, "h": self.h, "speeds": list(self.speeds)}


def profile_of(trace: np.ndarray, workers: int, h: float = DEFAULT_OVERHEAD_S) -> Profile:
    """The profile from a chunk-1 run's trace (TRACE_DTYPE): one row per iteration."""
    t = trace["end"] - trace["start"]
    per = t / np.maximum(trace["count"], 1)
    mu = float(per.mean()) if len(per) else 0.0
    sigma = float(per.std(ddof=1)) if len(per) > 1 else 0.0
    rate = []
    for w in range(workers):
        mine = trace[trace["worker"] == w]
        busy = float((mine["end"] - mine["start"]).sum())
        rate.append(float(mine["count"].sum()) / busy if busy > 0 else 0.0)
    live = [r for r in rate if r > 0]
    mean = sum(live) / len(live) if live else 0.0
    speeds = tuple((r / mean if r > 0 else 1.0) if mean else 1.0 for r in rate)
    return Profile(mu, sigma, h, speeds, task_times(trace))


def task_times(trace: np.ndarray) -> np.ndarray:
    """Each task's time from a trace that covers its tasks once: a chunk's measured time
    spread evenly over its tasks, in task order."""
    order = np.argsort(trace["first"], kind="stable")
    each = (trace["end"] - trace["start"]) / np.maximum(trace["count"], 1)
    return np.repeat(each[order], trace["count"][order])


class _Profiled(Rule):
    def __init__(self, n, p, chunk, profile: Profile, params=None):
        self.profile = profile
        super().__init__(n, p, chunk, params or {})

    @property
    def cv(self) -> float:
        """σ/μ; 0 (no variance: plain halving) when μ is not positive."""
        pr = self.profile
        return pr.sigma / pr.mu if pr.mu > 0 else 0.0


def _fac_chunk(remaining: float, p: int, bfac: float, first: bool) -> int:
    """Factoring's batch chunk R / (x P): x0 = 1 + b^2 + b sqrt(b^2 + 2) for the first
    batch, x = 2 + b^2 + b sqrt(b^2 + 4) after, b = P σ / (2 μ sqrt(R))."""
    b = bfac / math.sqrt(remaining)
    x = (1 + b * b + b * math.sqrt(b * b + 2)) if first else (2 + b * b + b * math.sqrt(b * b + 4))
    return math.ceil(remaining / (x * p))


class Fac(_Profiled, Remaining):
    """FAC (Flynn Hummel): batches of P equal chunks, each batch's chunk from the frames
    remaining when the batch starts. Sized from the remaining count, so it is listed as a
    by-remaining rule although its sequence is fixed by (N, P, μ, σ)."""

    def setup(self):
        self.bfac = self.p * self.profile.sigma / (2.0 * self.profile.mu) if self.profile.mu > 0 else 0.0
        self._batch, self._cs = -1, 0

    def size(self, i, remaining):
        b = i // self.p
        if b != self._batch:  # the first request of a batch sizes it (LB4OMP's q_counter)
            self._batch = b
            self._cs = (min(self.n, _fac_chunk(self.n, self.p, self.bfac, True)) if b == 0
                        else _fac_chunk(remaining, self.p, self.bfac, False))
        return max(self.min_chunk, self._cs)


class Faca(_Profiled):
    """FACa: FAC with the batch chunk recomputed by every worker from the formula's own
    remaining count R_b+1 = R_b - P C_b (no shared batch state), so chunk i depends on i."""

    def setup(self):
        self.bfac = self.p * self.profile.sigma / (2.0 * self.profile.mu) if self.profile.mu > 0 else 0.0
        self._chunks = [min(self.n, _fac_chunk(self.n, self.p, self.bfac, True))]
        self._rem = [self.n]

    def size(self, i, remaining):
        b = i // self.p
        while len(self._chunks) <= b:
            r = self._rem[-1] - self.p * self._chunks[-1]
            self._rem.append(r)
            # LB4OMP hands out nothing once the formula's R is spent; the real counter is
            # never behind it, so this only happens past the end: keep the last size
            self._chunks.append(_fac_chunk(r, self.p, self.bfac, False) if r > 0 else self._chunks[-1])
        return max(self.min_chunk, self._chunks[b])


class Fsc(_Profiled):
    """FSC (Kruskal & Weiss): one chunk size (sqrt(2) N h / (σ P sqrt(ln P)))^(2/3)."""

    def setup(self):
        pr, p = self.profile, self.p
        den = pr.sigma * p * math.sqrt(math.log(p)) if p > 1 else 0.0
        # σ = 0 or P = 1: no variance to balance against the overhead; LB4OMP divides by
        # zero; one chunk per worker is then optimal
        c = int((math.sqrt(2.0) * self.n * pr.h / den) ** (2.0 / 3.0)) if den > 0 else -(-self.n // p)
        self.fixed = max(self.min_chunk, c)

    def size(self, i, remaining):
        return self.fixed


class Tap(_Profiled, Remaining):
    """TAP (Lucco's taper): T = R/P; chunk = ceil(T + v^2/2 - v sqrt(2T + v^2/4)),
    v = alpha σ/μ, at least the chunk parameter."""

    def setup(self):
        self.v = TAP_ALPHA * self.cv

    def size(self, i, remaining):
        t, v = remaining / self.p, self.v
        return max(self.min_chunk, math.ceil(t + v * v / 2 - v * math.sqrt(2 * t + v * v / 4)))


PROFILED: dict[str, type[_Profiled]] = {"fac": Fac, "faca": Faca, "fsc": Fsc, "tap": Tap}
