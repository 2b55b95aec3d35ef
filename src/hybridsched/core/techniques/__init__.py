"""The loop-scheduling portfolio of LB4OMP (Korndörfer et al., IEEE TPDS 33(4), 2022) as
pure policies, under LB4OMP's ``OMP_SCHEDULE`` names.

``deterministic``  hand-out a function of (N, P, chunk, LB4OMP's environment parameters)
``profiled``       fac, faca, fsc, tap: deterministic given the loop's profile (μ, σ, h)
``adaptive``       wf, awf*, af, af_a, bold: learn from measured chunk times
``dispense``       the thread-safe dispensers that run them (threads, the pipe producer)
``auto``           ``--scheduler auto``: successive halving over a portfolio, across repetitions

For compiled dispatch: :func:`chunk_sizes` / :func:`bounds` give a deterministic
technique's whole hand-out for (N, P, chunk, params) -- chunk i a function of i alone for
the names in :data:`BY_INDEX` -- so it can be precomputed as a bounds array.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import UsageError
from .adaptive import LEARNERS
from .deterministic import PARAM_DEFAULTS, RULES, Rule, Whole, balanced_block, hand_out, steal_blocks
from .profiled import PROFILED, Profile

DESCRIPTIONS = {
    "trapezoidal": "TSS: chunks decreasing linearly from N/(2k) to the chunk parameter",
    "fac2": "factoring, x = 2: batches of k chunks, each batch half the last (formula)",
    "fac2a": "FAC2 computed per batch with a ceiling at each halving (LB4OMP's loop version)",
    "fac2b": "FAC2 by fetch-and-add (same hand-out as fac2)",
    "tfss": "trapezoid factoring: TSS in batches of k, each chunk the batch's mean",
    "fiss": "fixed increase: batches grow by a constant step (--fiss-stages)",
    "viss": "variable increase: batches grow towards twice the first (--viss-param)",
    "mfsc": "modified fixed-size chunking: one size from N/k alone",
    "pls": "performance-based: a static share (--pls-swr) then guided over the rest",
    "rnd": "random chunk sizes in [1, chunk] (chunk 0: up to N-1), counter-seeded",
    "static_steal": "static chunks in per-worker ranges; idle workers steal a quarter",
    "fac": "factoring with the profile's μ, σ: batch chunk R/(x k)",
    "faca": "FAC with each worker computing the batch sizes itself",
    "fsc": "fixed-size chunking from the profile's σ and the overhead h",
    "tap": "taper: guided reduced by the profile's σ/μ",
    "bold": "BOLD: chunks from estimated unfinished work and worker speeds (profile)",
    "wf": "weighted factoring: FAC2a x each worker's speed from the profiling run",
    "awf": "adaptive weighted factoring: weights from earlier executions of the loop",
    "awf_b": "AWF-B: batched, weights updated after every chunk (chunk times)",
    "awf_c": "AWF-C: per-request chunks R/(2k), weights per chunk (chunk times)",
    "awf_d": "AWF-D: AWF-B from total (request-to-request) times",
    "awf_e": "AWF-E: AWF-C from total times",
    "af": "adaptive factoring: chunk from all workers' measured μ_i, σ_i (chunk times)",
    "af_a": "AF from total times",
}
DETERMINISTIC = tuple(RULES) + ("static_steal",)
NEEDS_PROFILE = ("fac", "faca", "fsc", "tap", "bold", "wf")
# Techniques for which chunk 0 means a default of their own (rnd: sizes up to N-1, as
# LB4OMP without a chunk) rather than the minimum chunk 1
OWN_DEFAULT_CHUNK = ("rnd",)
ADAPTIVE = tuple(LEARNERS)
NAMES = tuple(DESCRIPTIONS)
# Rules whose chunk i depends on i alone (compiled dispatch's precomputable bounds)
BY_INDEX = tuple(n for n, r in RULES.items() if r.by_index) + ("faca", "fsc")
# Techniques that hand out without measurements once (N, P, chunk, params, profile) are known
FIXED = tuple(RULES) + tuple(PROFILED)


def check_params(params: dict | None) -> dict:
    """LB4OMP's environment parameters with their defaults; UsageError for a bad value."""
    out: dict[str, Any] = dict(PARAM_DEFAULTS)  # numbers (int or float) or None
    if params is not None and not isinstance(params, dict):
        raise UsageError(f"technique parameters: expected a dict, got {type(params).__name__}")
    for key, v in (params or {}).items():
        if key not in out:
            raise UsageError(f"unknown technique parameter {key!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise UsageError(f"technique parameter {key} must be a number, got {v!r}")
        out[key] = v
    if out["fiss_stages"] is not None and int(out["fiss_stages"]) < 0:
        raise UsageError("--fiss-stages must be at least 0")
    if out["viss_param"] is not None and int(out["viss_param"]) < 1:
        raise UsageError("--viss-param must be at least 1")
    if not 0.0 <= float(out["pls_swr"]) <= 1.0:
        raise UsageError("--pls-swr must be within 0 .. 1")
    return out


def rule(name: str, n: int, p: int, chunk: int = 1, params: dict | None = None,
         profile: Profile | None = None) -> Rule:
    """The first-come-first-served rule of a fixed technique (profiled ones need ``profile``)."""
    params = check_params(params)
    if p <= 1 and name in NAMES:  # LB4OMP at one worker: [0, N) in one chunk
        return Whole(n, p, chunk, params)
    if name in RULES:
        return RULES[name](n, p, chunk, params)
    if name in PROFILED:
        if profile is None:
            raise ValueError(f"{name} needs a profile (mu, sigma)")
        return PROFILED[name](n, p, chunk, profile, params)
    raise KeyError(name)


def sequence(name: str, n: int, p: int, chunk: int = 1, params: dict | None = None,
             profile: Profile | None = None) -> list[tuple[int, int]]:
    """(first, count) of each chunk a fixed technique hands out, in hand-out order."""
    return hand_out(rule(name, n, p, chunk, params, profile))


def chunk_sizes(name: str, n: int, p: int, chunk: int = 1, params: dict | None = None,
                profile: Profile | None = None) -> np.ndarray:
    """The sizes of the whole hand-out (int64), the last one cut at N."""
    return np.array([c for _, c in sequence(name, n, p, chunk, params, profile)], np.int64)


def bounds(name: str, n: int, p: int, chunk: int = 1, params: dict | None = None,
           profile: Profile | None = None) -> np.ndarray:
    """Prefix sums of :func:`chunk_sizes` with a leading 0: chunk i = bounds[i] .. bounds[i+1]."""
    return np.concatenate([[0], np.cumsum(chunk_sizes(name, n, p, chunk, params, profile))])


__all__ = ["ADAPTIVE", "BY_INDEX", "DESCRIPTIONS", "DETERMINISTIC", "FIXED", "NAMES",
           "NEEDS_PROFILE", "OWN_DEFAULT_CHUNK", "Profile", "bounds", "check_params",
           "balanced_block", "chunk_sizes", "rule", "sequence", "steal_blocks"]
