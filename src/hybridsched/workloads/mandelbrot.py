"""Mandelbrot rows, the classic irregular benchmark of dynamic loop scheduling (as in the
LB4OMP and DLS4LB studies): task g is band g of H image rows, W pixels each, of the
(L x H) x W image of the region ``x0..x1`` x ``y0..y1``; a pixel's cost is its escape
iteration count, so bands through the set cost up to ``iters`` times more than the rest.

Each band depends on its global id alone, so any node computes any subset of tasks; the
reference is the same computation done once per workspace (untimed) and compared exactly.
"""
from __future__ import annotations

import numba
import numpy as np

from ..kernels import Bound

_jit = numba.njit(nogil=True, cache=True)

DTYPE = np.uint16  # escape counts up to 65535 iterations
UNSET = np.iinfo(DTYPE).max  # the input: no pixel computed yet (iters is at most UNSET - 1)


@_jit
def bands(out, g0, first, count, total, x0, x1, y0, y1, iters):
    """Escape counts of local bands first.. (global band g0 + local index) into ``out``."""
    H, W = out.shape[1], out.shape[2]
    rows = total * H
    dx = (x1 - x0) / W
    dy = (y1 - y0) / rows
    for f in range(first, first + count):
        for i in range(H):
            ci = y0 + ((g0 + f) * H + i + 0.5) * dy
            for j in range(W):
                cr = x0 + (j + 0.5) * dx
                zr = 0.0
                zi = 0.0
                n = 0
                while n < iters and zr * zr + zi * zi <= 4.0:
                    zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                    n += 1
                out[f, i, j] = n


@_jit
def band_chunk(t, first, count, params):
    """Local bands first.. of one node (params: see make_kernel)."""
    g0, total, x0, x1, y0, y1, iters = params
    bands(t, g0, first, count, total, x0, x1, y0, y1, iters)


def make_kernel(frame0: int, total: int, x0: float, x1: float, y0: float, y1: float,
                iters: int) -> Bound:
    """The chunk kernel over one node's bands (local band f = global band frame0 + f): one
    cached function, the region bound to it."""
    return Bound(band_chunk, (int(frame0), int(total), float(x0), float(x1), float(y0),
                              float(y1), int(iters)))


@_jit
def count_bad(ref, work, first, count):
    """Rows of local bands first.. that differ from the reference."""
    bad = 0
    for f in range(first, first + count):
        for i in range(work.shape[1]):
            for j in range(work.shape[2]):
                if work[f, i, j] != ref[f, i, j]:
                    bad += 1
                    break
    return bad
