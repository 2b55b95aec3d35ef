"""Block kernels of the Gaussian-elimination solvers (numba, ``nogil=True, cache=True``).

The solvers keep every block row (``rows``) or tile (``tiles``) in its own C-contiguous
array; the matrix is augmented with b as its last column, so the forward stage transforms
b with the same updates. Large products go through numba's ``@`` (BLAS dgemm from SciPy's
OpenBLAS, called inside the nogil function, so the GIL is released around it); the
triangular solves are done as products with explicitly inverted diagonal blocks (the
matrix is strictly diagonally dominant, so the blocks are well conditioned), which turns
them into dgemm too. :func:`prepare` compiles everything and pins that OpenBLAS to one
thread per call: the N scheduler threads are the parallelism, and a multithreaded BLAS
inside each of them would oversubscribe the CPUs (NumPy's own OpenBLAS, used by
``numpy.linalg.solve`` for the reference, is a different library and keeps its threads).
"""
from __future__ import annotations

import ctypes
import glob
import os
import warnings

import numba
import numpy as np

from ..oslayer.signals import loading

_jit = numba.njit(nogil=True, cache=True)


@_jit
def lu_inplace(a):
    """Doolittle LU without pivoting of the leading square block of ``a`` (unit L below
    the diagonal, U on and above it), in place."""
    m = a.shape[0]
    for k in range(m):
        p = a[k, k]
        for i in range(k + 1, m):
            a[i, k] /= p
        for i in range(k + 1, m):
            f = a[i, k]
            if f != 0.0:
                for j in range(k + 1, m):
                    a[i, j] -= f * a[k, j]


@_jit
def inv_unit_lower(a):
    """Inverse of the unit lower triangle stored below the diagonal of ``a`` (m x m)."""
    m = a.shape[0]
    out = np.zeros((m, m))
    for j in range(m):
        out[j, j] = 1.0
        for i in range(j + 1, m):
            s = 0.0
            for k in range(j, i):
                s -= a[i, k] * out[k, j]
            out[i, j] = s
    return out


@_jit
def inv_upper(a):
    """Inverse of the upper triangle (diagonal included) of ``a`` (m x m)."""
    m = a.shape[0]
    out = np.zeros((m, m))
    for j in range(m - 1, -1, -1):
        out[j, j] = 1.0 / a[j, j]
        for i in range(j - 1, -1, -1):
            s = 0.0
            for k in range(i + 1, j + 1):
                s -= a[i, k] * out[k, j]
            out[i, j] = s / a[i, i]
    return out


@_jit
def factor_diag(t, c0, c1):
    """Pivot step on a block row or diagonal tile ``t``: LU of ``t[:, c0:c1]`` in place,
    then ``t[:, c1:] = L^-1 t[:, c1:]`` (the rest of the row, b included). Returns
    (L^-1, U^-1) of the diagonal block."""
    d = t[:, c0:c1]
    lu_inplace(d)
    linv = inv_unit_lower(d)
    uinv = inv_upper(d)
    if t.shape[1] > c1:
        rest = np.ascontiguousarray(t[:, c1:])
        t[:, c1:] = linv @ rest
    return linv, uinv


@_jit
def eliminate_row(ti, tk, c0, c1, uinv):
    """``rows`` update of block row ``ti`` by pivot row ``tk`` (already factored):
    L_ik = t_i[:, c0:c1] U_kk^-1 (stored in place), t_i[:, c1:] -= L_ik t_k[:, c1:]."""
    lik = np.ascontiguousarray(ti[:, c0:c1]) @ uinv
    ti[:, c0:c1] = lik
    uk = np.ascontiguousarray(tk[:, c1:])
    ti[:, c1:] -= lik @ uk


@_jit
def apply_left(t, linv):
    """``tiles`` row-pivot tile: t = L_kk^-1 t (in place)."""
    t[:, :] = linv @ t


@_jit
def apply_right(t, uinv):
    """``tiles`` column-pivot tile: t = t U_kk^-1 (in place)."""
    t[:, :] = t @ uinv


@_jit
def gemm_sub(c, a, b):
    """``tiles`` trailing update: c -= a b (all C-contiguous)."""
    c -= a @ b


@_jit
def back_row(t, c0, c1, n, x):
    """``rows`` back substitution of block row ``t`` (columns c0:c1 of x; the rest of x,
    columns c1:n, is known): x[c0:c1] = U_ii^-1 (y_i - U_i,rest x_rest), y_i = t[:, n]."""
    y = t[:, n].copy()
    if n > c1:
        y -= np.ascontiguousarray(t[:, c1:n]) @ x[c1:n]
    d = t[:, c0:c1]
    m = c1 - c0
    for i in range(m - 1, -1, -1):
        s = y[i]
        for j in range(i + 1, m):
            s -= d[i, j] * x[c0 + j]
        x[c0 + i] = s / d[i, i]


@_jit
def matvec(out, a, v):
    """out = a v (a C-contiguous m x k, v length k)."""
    out[:] = a @ v


@_jit
def back_tile(y, parts, uinv, out):
    """``tiles`` diagonal tile: out = U_ii^-1 (y - sum of the partial products)."""
    r = y.copy()
    for p in range(parts.shape[0]):
        r -= parts[p]
    out[:] = uinv @ r


def _scipy_openblas():
    import scipy

    libs = sorted(glob.glob(os.path.join(os.path.dirname(scipy.__file__), os.pardir,
                                         "scipy.libs", "libscipy_openblas*.so*")))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            return lib.scipy_openblas_set_num_threads
        except (OSError, AttributeError):
            continue
    return None


_PREPARED = False


@loading
def prepare() -> None:
    """Compile (or load from cache) every kernel and run the BLAS used by numba's ``@`` on
    one thread. Call once before any timed run."""
    global _PREPARED
    if _PREPARED:
        return
    setter = _scipy_openblas()
    if setter is not None:
        setter(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
        t = np.eye(3, 4) * 4.0 + 0.5
        linv, uinv = factor_diag(t, 0, 3)
        t2 = np.eye(3, 4) * 4.0 + 0.5
        eliminate_row(t2, t, 0, 3, uinv)
        apply_left(np.ones((3, 3)), linv)
        apply_right(np.ones((3, 3)), uinv)
        gemm_sub(np.ones((3, 3)), np.ones((3, 3)), np.ones((3, 3)))
        gemm_sub(np.ones((3, 4)), np.ones((3, 3)), np.ones((3, 4)))
        x = np.zeros(3)
        back_row(t, 0, 3, 3, x)
        out = np.zeros(3)
        matvec(out, np.ones((3, 3)), x)
        back_tile(np.ones(3), np.ones((2, 3)), uinv, out)
        back_tile(np.ones(3), np.ones((0, 3)), uinv, out)
    _PREPARED = True
