"""The compute of a `bsp` step: a nogil numba loop of a calibrated length."""
from __future__ import annotations

import time

import numba

from ..oslayer.signals import loading


@numba.njit(nogil=True, cache=True)
def busy(iters):
    """A dependent floating-point recurrence: no memory traffic, not vectorisable, so its
    time is set by the core alone (what a compute step of a BSP code costs)."""
    x = 0.0
    for _ in range(iters):
        x = x * 0.9999999 + 1.0
    return x


_calibrated: float | None = None


@loading
def iters_per_us() -> float:
    """Iterations of :func:`busy` per microsecond on this machine (best of 5, so a moment
    of interference does not shorten every step)."""
    global _calibrated
    if _calibrated is None:
        busy(1000)  # compile (cache=True: from disk after the first run)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            busy(200_000)
            best = min(best, time.perf_counter() - t0)
        _calibrated = 200_000 / (best * 1e6)
    return _calibrated
