"""The metrics of the study (§3); equation numbers refer to the paper."""
from __future__ import annotations

import math


def speedup(t_serial: float, t_parallel: float) -> float:
    """Eq. 4: sigma(k) = T_serial / T_parallel(k)."""
    return t_serial / t_parallel


def efficiency(sigma: float, k: int) -> float:
    """Eq. 5: sigma_E(k) = sigma(k) / k (nominal k, the paper's table convention)."""
    return sigma / k


def karp_flatt(sigma: float, k: int) -> float:
    """Eq. 8 / Eq. 10: alpha = (1/sigma - 1/k) / (1 - 1/k), defined for k >= 2 (NaN below).

    Read it as a diagnostic where sigma > k (alpha < 0) or sigma < 1 (alpha > 1), §3.3.
    """
    if k < 2:
        return math.nan
    return (1.0 / sigma - 1.0 / k) / (1.0 - 1.0 / k)


def alpha_is_diagnostic(sigma: float, k: int) -> bool:
    """True where the Amdahl decomposition does not hold (§3.3): sigma > k or sigma < 1."""
    return sigma > k or sigma < 1.0
