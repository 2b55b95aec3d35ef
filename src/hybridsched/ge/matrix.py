"""The test systems: A (n x n, strictly diagonally dominant, so elimination needs no
pivoting), x_true and b = A x_true, all from ``seed``; block boundaries; verification."""
from __future__ import annotations

import math

import numpy as np

# A run is verified when the relative residual ||Ax - b|| / (||A|| ||x||) (infinity norms)
# is below RESIDUAL_MAX and x is within X_TOL of numpy.linalg.solve's (max-abs difference
# relative to max |x_lapack|).
RESIDUAL_MAX = 1e-10
X_TOL = 1e-8


def system(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, x_true, b): entries of A uniform in [-1, 1) plus n on the diagonal, so every
    row's diagonal exceeds the sum of its other entries; x_true uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, (n, n))
    a[np.diag_indices(n)] += n
    x = rng.uniform(-1.0, 1.0, n)
    return a, x, a @ x


def bounds(n: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` blocks over n rows, sizes differing by at most one (the
    larger ones first): [0, ..., n]."""
    q, r = divmod(n, parts)
    out = [0]
    for i in range(parts):
        out.append(out[-1] + q + (i < r))
    return out


def grid_side(threads: int) -> int:
    """``tiles``: the grid for a requested thread count is the nearest square g x g
    (g = round(sqrt(T)); e.g. 32 -> 6 x 6 = 36, 7936 -> 89 x 89 = 7921)."""
    g = max(1, int(round(math.sqrt(threads))))
    return g


def residual(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    r = a @ x - b
    den = np.linalg.norm(a, np.inf) * np.linalg.norm(x, np.inf)
    return float(np.linalg.norm(r, np.inf) / den) if den > 0 else math.inf


def x_error(x: np.ndarray, x_ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(x_ref))) or 1.0
    return float(np.max(np.abs(x - x_ref)) / scale)


def verified(res: float, xerr: float) -> bool:
    return bool(np.isfinite(res) and res < RESIDUAL_MAX and np.isfinite(xerr) and xerr <= X_TOL)
