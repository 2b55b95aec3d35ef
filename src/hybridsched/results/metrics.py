"""The metrics of the study (§3); equation numbers refer to the paper.

Pure functions on numbers and numpy arrays: no I/O. ``report`` applies them to a study.
Tables use the nominal k (the paper's convention, §3.3); ``k_eff = min(k, N)`` only in
:func:`karp_flatt_eff` (Eq. 10). Equations the package has no use for are not repeated
here: Eq. 7 (Amdahl's efficiency) is Eq. 5 of :func:`amdahl_speedup`; Eq. 18 (T_ov from
Karp-Flatt) equals Eq. 16 when epsilon is the measured Karp-Flatt value; Eq. 19 is
:func:`amdahl_speedup` at N = P x k units (``fit`` uses it so).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence, TypeVar

import numpy as np

# --- speedup and efficiency (§3.1, §3.2) ----------------------------------------------


def speedup(t_serial: float, t_parallel: float) -> float:
    """Eq. 4: sigma(k) = T_serial / T_parallel(k)."""
    return t_serial / t_parallel


def efficiency(sigma: float, k: int) -> float:
    """Eq. 5: sigma_E(k) = sigma(k) / k (nominal k, the paper's table convention)."""
    return sigma / k


def performance(times: Sequence[float]) -> np.ndarray:
    """§3.1: P = 1/T per repetition."""
    return 1.0 / np.asarray(times, dtype=float)


def performance_efficiency(times: Sequence[float]) -> np.ndarray:
    """§3.1: E_p = P / P_max per repetition, P_max = max_i P_i (so the fastest run has 1)."""
    p = performance(times)
    return p / p.max() if p.size else p


def mean_performance_efficiency(times: Sequence[float]) -> float:
    """§3.1: the mean of E_p over the repetitions (one number per table cell; 0.8 or more
    over 10 repetitions reads as stable)."""
    e = performance_efficiency(times)
    return float(e.mean()) if e.size else math.nan


# --- Amdahl, Karp-Flatt, Gustafson (§3.3 - §3.5) --------------------------------------


class Alpha(NamedTuple):
    """A serial-fraction estimate and whether it is only a diagnostic (§3.3): the Amdahl
    decomposition does not hold where sigma > k (alpha < 0) or sigma < 1 (alpha > 1)."""

    value: float
    diagnostic: bool


# a unit count: one, or an array of them (the models are evaluated both ways)
Units = TypeVar("Units", float, np.ndarray)


def amdahl_speedup(alpha: float, n: Units) -> Units:
    """Eq. 6: sigma(N) = 1 / (alpha + (1 - alpha) / N)."""
    return 1.0 / (alpha + (1.0 - alpha) / n)


def karp_flatt(sigma: float, k: int) -> float:
    """Eq. 8 / Eq. 10: alpha = (1/sigma - 1/k) / (1 - 1/k), defined for k >= 2 (NaN below).

    Same as (1 - sigma_E) / (sigma_E (k - 1)). Read it as a diagnostic where sigma > k
    (alpha < 0) or sigma < 1 (alpha > 1), §3.3; :func:`serial_fraction` says which.
    """
    if k < 2 or not math.isfinite(sigma) or sigma <= 0:
        return math.nan
    return (1.0 / sigma - 1.0 / k) / (1.0 - 1.0 / k)


def alpha_is_diagnostic(sigma: float, k: int) -> bool:
    """True where the Amdahl decomposition does not hold (§3.3): sigma > k or sigma < 1."""
    return sigma > k or sigma < 1.0


def serial_fraction(sigma: float, k: int) -> Alpha:
    """Eq. 8 with its §3.3 flag: Karp-Flatt alpha at the nominal k, flagged as a diagnostic
    where sigma > k or sigma < 1. NaN (not flagged) for k < 2 or an unknown sigma."""
    a = karp_flatt(sigma, k)
    return Alpha(a, (not math.isnan(a)) and alpha_is_diagnostic(sigma, k))


def karp_flatt_eff(sigma: float, k: int, n: int) -> Alpha:
    """Eq. 10: epsilon(k_eff) with the effective parallelism k_eff = min(k, N), flagged like
    Eq. 8 against k_eff. Rising with k beyond N means extra workers only add overhead."""
    return serial_fraction(sigma, min(k, n))


def gustafson_speedup(alpha_scaled: float, n: Units) -> Units:
    """Eq. 9: scaled speedup sigma(N) = N - alpha_scaled (N - 1)."""
    return n - alpha_scaled * (n - 1)


def gustafson_alpha(sigma: float, n: float) -> float:
    """Eq. 9 solved for the scaled serial fraction: alpha_scaled = (N - sigma) / (N - 1)
    (the serial share of the parallel run's time; NaN for N < 2)."""
    return (n - sigma) / (n - 1) if n >= 2 else math.nan


# --- overhead (§3.8) ------------------------------------------------------------------


def overhead_time(t1: float, tk: float, k: int, alpha: float = 0.0) -> float:
    """Eq. 16 (from the decomposition T_k = T_s + T_p / k + T_ov(k), Eq. 15):
    T_ov(k) = T_k - (alpha T_1 + (1 - alpha) T_1 / k). ``alpha`` is the intrinsic
    serial fraction; the row-sorting workload has none (frames are independent), hence 0."""
    return tk - (alpha * t1 + (1.0 - alpha) * t1 / k)


def overhead_fraction(sigma: float, k: int, alpha: float = 0.0) -> float:
    """Eq. 17: f(k) = T_ov(k) / T_1 = 1/sigma(k) - alpha - (1 - alpha) / k."""
    return 1.0 / sigma - alpha - (1.0 - alpha) / k


# --- utilisation (§3.6, §3.7) ---------------------------------------------------------


def thread_utilisation(user, system, iowait, idle):
    """Eq. 11: U_thread = (T_user + T_system + T_iowait) / (... + T_idle); scalars or
    arrays (NaN where the total is 0)."""
    active = np.asarray(user) + np.asarray(system) + np.asarray(iowait)
    total = active + np.asarray(idle)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.where(total > 0, active / np.where(total > 0, total, 1.0), np.nan)
    return float(u) if u.ndim == 0 else u


def worker_utilisations(workers: np.ndarray) -> np.ndarray:
    """Eq. 11 per worker of one run (``records.WORKER_DTYPE``): T_idle is the part of the
    worker's lifetime (end - start) not spent in user, system or iowait time (clamped at 0,
    as the CPU-time clocks tick coarser than the wall clock)."""
    active = workers["user"] + workers["system"] + workers["iowait"]
    idle = np.maximum(workers["end"] - workers["start"] - active, 0.0)
    return np.atleast_1d(thread_utilisation(workers["user"], workers["system"], workers["iowait"], idle))


def system_utilisation(active: Sequence[float], n: int, t_total: float) -> float:
    """Eq. 12/13: U_N = sum_i T_active,i / (N T_total)."""
    return float(np.sum(active)) / (n * t_total) if t_total > 0 else math.nan


def many_core_utilisation(workers: np.ndarray, n: int) -> float:
    """Eq. 14: U_N = sum_i (T_user,i + T_system,i + T_iowait,i) / (N (max t_end - min t_start))
    over the M workers (threads or processes) of one run."""
    if len(workers) == 0:
        return math.nan
    active = workers["user"] + workers["system"] + workers["iowait"]
    span = float(workers["end"].max() - workers["start"].min())
    return system_utilisation(active, n, span)


# --- distributed Amdahl (§3.9) --------------------------------------------------------


def distributed_alpha(sigma: float, p: int, k: int) -> Alpha:
    """Eq. 20: alpha = (P_k / sigma(P_k) - 1) / (P_k - 1), P_k = P x k; the Karp-Flatt
    estimate over all units, flagged like Eq. 8 (NaN for P_k < 2)."""
    pk = p * k
    if pk < 2 or not math.isfinite(sigma) or sigma <= 0:
        return Alpha(math.nan, False)
    a = (pk / sigma - 1.0) / (pk - 1.0)
    return Alpha(a, alpha_is_diagnostic(sigma, pk))


# --- comparisons (§5) -----------------------------------------------------------------

# The paper's noise threshold (§5): differences under 1 % are "practically equivalent".
EQUIVALENT = 0.01


def relative_difference(better: float, worse: float) -> float:
    """How much ``better`` exceeds ``worse``, as a fraction of ``worse`` (the paper's
    "A is x % better than B" on speedups; use 1/T for times)."""
    return better / worse - 1.0


def practically_equivalent(a: float, b: float, threshold: float = EQUIVALENT) -> bool:
    """§5: two speedups (or times) within 1 % of each other are practically equivalent."""
    hi, lo = max(a, b), min(a, b)
    return lo > 0 and hi / lo - 1.0 < threshold


def load_imbalance(workers: np.ndarray) -> float:
    """Percent imbalance of busy time over the workers, as LB4OMP states it:
    (max − mean) / max × P / (P − 1), P the workers; 0 = balanced, 1 = one worker did all.
    NaN with fewer than two workers or no busy time."""
    busy = np.asarray(workers["busy"], float) if len(workers) else np.zeros(0)
    busy = busy[np.isfinite(busy)]
    p = len(busy)
    if p < 2 or busy.max() <= 0:
        return math.nan
    return float((busy.max() - busy.mean()) / busy.max() * p / (p - 1))
