"""Irregular sort workloads: the same uint8[L, H, W] tensor as ``uniform``, with a cost
per frame derived from (seed, global frame id) alone.

Frame g sorts its first ``rows(g)`` rows over their first ``width(g)`` bytes; the rest of
the frame is left as it is (and verified unchanged). The rule is a pure function of g, so
an MPI rank or a single claimed chunk reproduces any task's cost on its own, as the
tensor's bytes already are (:func:`kernels.generate_frames`).

- ``ramp``: rows grow linearly from ``min`` x H (first frame) to H (last frame).
- ``skewed``: a share ``heavy`` of frames (chosen by hash) sorts all H rows, the others
  ``min`` x H rows: a few very costly tasks.
- ``heavytail``: rows = ``min`` x H x U^(-1/alpha), U uniform (0, 1]: Pareto(alpha) cost,
  clipped at H.
- ``varying``: all rows over a width uniform in [``min`` x W, W]: frames of different
  sizes (the paper's "varying resolutions", §6.6).
"""
from __future__ import annotations

import numba
import numpy as np

from ..kernels import Bound, GOLDEN, STACK, introsort, sorted_permutation, splitmix

RULES = {"uniform": 0, "ramp": 1, "skewed": 2, "heavytail": 3, "varying": 4}

_jit = numba.njit(nogil=True, cache=True)
_U = np.uint64


@_jit
def _unit(seed, g):
    """A uniform float in (0, 1] from (seed, g): splitmix64, independent of the bytes'
    stream (a different key constant)."""
    x = splitmix(_U(seed) * GOLDEN + splitmix(_U(g) + _U(0x632BE59BD9B4E019)))
    return (float(x >> _U(11)) + 1.0) / 9007199254740992.0


@_jit
def task_shape(rule, g, seed, total, H, W, a, b):
    """(rows, width) sorted in global frame ``g`` of ``total`` under ``rule``; a = min share,
    b = the rule's second parameter (skewed: heavy share; heavytail: alpha)."""
    rows, width = H, W
    if rule == 1:
        frac = g / (total - 1) if total > 1 else 1.0
        rows = int(round(H * (a + (1.0 - a) * frac)))
    elif rule == 2:
        rows = H if _unit(seed, g) <= b else int(round(H * a))
    elif rule == 3:
        rows = int(round(H * a * _unit(seed, g) ** (-1.0 / b)))
    elif rule == 4:
        width = int(round(W * (a + (1.0 - a) * _unit(seed, g))))
    return max(1, min(H, rows)), max(1, min(W, width))


@_jit
def _count_row(row, hist):
    hist[:] = 0
    for j in range(row.shape[0]):
        hist[row[j]] += 1
    j = 0
    for v in range(256):
        for _ in range(hist[v]):
            row[j] = v
            j += 1


@_jit
def sort_chunk(t, first, count, params):
    """Introsort the active part of local frames first.. (params: see make_kernel)."""
    r, s, f0, total, H, W, a, b = params
    stack_lo = np.empty(STACK, np.uint64)
    stack_hi = np.empty(STACK, np.uint64)
    stack_d = np.empty(STACK, np.int64)
    for f in range(first, first + count):
        rows, w = task_shape(r, f0 + f, s, total, H, W, a, b)
        for i in range(rows):
            introsort(t[f, i, :w], stack_lo, stack_hi, stack_d)


@_jit
def count_chunk(t, first, count, params):
    """Counting sort of the active part of local frames first.. (params: see make_kernel)."""
    r, s, f0, total, H, W, a, b = params
    hist = np.zeros(256, np.int64)
    for f in range(first, first + count):
        rows, w = task_shape(r, f0 + f, s, total, H, W, a, b)
        for i in range(rows):
            _count_row(t[f, i, :w], hist)


def make_kernel(rule: str, seed: int, frame0: int, total: int, height: int, width: int,
                a: float, b: float, counting: bool = False) -> Bound:
    """The chunk kernel of an irregular sort workload for the frames of one node (local
    frame f is global frame frame0 + f): one cached function, its parameters bound."""
    params = (RULES[rule], int(seed), int(frame0), int(total), int(height), int(width),
              float(a), float(b))
    return Bound(count_chunk if counting else sort_chunk, params)


@_jit
def count_bad(orig, work, first, count, rule, seed, frame0, total, a, b):
    """Rows of local frames first.. that are wrong: the active part not sorted or not a
    permutation of the original's, or any byte outside it changed."""
    H, W = work.shape[1], work.shape[2]
    hist = np.zeros(256, np.int64)
    bad = 0
    for f in range(first, first + count):
        rows, w = task_shape(rule, frame0 + f, seed, total, H, W, a, b)
        for i in range(H):
            x, y = orig[f, i], work[f, i]
            ok = True
            active = w if i < rows else 0
            for j in range(active, W):
                if x[j] != y[j]:
                    ok = False
                    break
            if ok and active:
                ok = sorted_permutation(x, y, active, hist)
            if not ok:
                bad += 1
    return bad


@_jit
def _shapes(out, rule, seed, frame0, total, H, W, a, b):
    for j in range(out.shape[0]):
        out[j, 0], out[j, 1] = task_shape(rule, frame0 + j, seed, total, H, W, a, b)


def shapes(rule: str, seed: int, frame0: int, count: int, total: int, height: int, width: int,
           a: float, b: float) -> np.ndarray:
    """(rows, width) of global frames frame0 .. frame0+count-1 (tests, reports and the
    simulator's cost model), computed in one compiled loop."""
    out = np.zeros((count, 2), np.int64)
    _shapes(out, RULES[rule], int(seed), int(frame0), int(total), int(height), int(width),
            float(a), float(b))
    return out
