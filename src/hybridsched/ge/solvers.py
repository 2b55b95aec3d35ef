"""The two blocked Gaussian-elimination solvers, written ONCE as generator functions that
yield the primitives they wait on (see ``usched.api``); every architecture runs them.

Both work on A augmented with b (n x (n+1)), two stages separated by one barrier of all
user threads:

``rows`` (T threads, T block rows; thread i owns block row i):
  forward: for k < i wait ``piv[k]``, then eliminate block column k from row i with the
  factored pivot row k; then factor its own diagonal block and set ``piv[i]``. Back: wait
  ``xev[i+1]`` (the chain: x of every block below is known), solve x_i, set ``xev[i]``.

``tiles`` (g x g threads, thread (i, j) owns tile (i, j); the last tile column carries b):
  forward step k of tile (i, j), for k < min(i, j): wait ``col[k][i]`` (L_ik) and
  ``row[k][j]`` (U_kj), update A_ij -= L_ik U_kj. At k = min(i, j): the diagonal tile
  factors itself and sets ``diag[k]``; a tile right of it waits ``diag[i]``, applies L_ii^-1
  and sets ``row[i][j]``; a tile below waits ``diag[j]``, applies U_jj^-1, sets ``col[j][i]``.
  Back: a tile right of the diagonal waits ``xev[j]``, computes U_ij x_j into its own slot
  and releases the row's semaphore ``part[i]``; the diagonal tile takes ``part[i]``
  (g - 1 - i) times, solves x_i and sets ``xev[i]``.

Every user thread stamps the end of its forward part and of its back part; the runner takes
the maxima. A ``fault`` name makes that user thread raise at its start (test only).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import kernels as K
from .matrix import bounds, grid_side

_now = time.perf_counter


class InjectedFault(RuntimeError):
    pass


@dataclass
class Ctx:
    n: int
    threads: int
    fwd_done: np.ndarray
    end: np.ndarray
    x: np.ndarray
    fault: str = ""
    data: dict = field(default_factory=dict)


# --- rows -----------------------------------------------------------------------------------

def rows_setup(sched, aug: np.ndarray, threads: int, fault: str = "") -> tuple[Ctx, list]:
    n = aug.shape[0]
    c = bounds(n, threads)
    blocks = [np.ascontiguousarray(aug[c[i]:c[i + 1]]) for i in range(threads)]
    ctx = Ctx(n, threads, np.zeros(threads), np.zeros(threads), np.zeros(n), fault)
    ctx.data = dict(c=c, blocks=blocks, uinv=[None] * threads,
                    piv=[sched.event() for _ in range(threads)],
                    xev=[sched.event() for _ in range(threads)],
                    stage=sched.barrier(threads))
    return ctx, [(rows_thread, (ctx, i), f"row{i}") for i in range(threads)]


def rows_thread(ctx: Ctx, i: int):
    d = ctx.data
    c, blocks, uinv, piv, xev = d["c"], d["blocks"], d["uinv"], d["piv"], d["xev"]
    me = blocks[i]
    if ctx.fault == f"row{i}":
        raise InjectedFault(f"injected fault in row{i}")
    for k in range(i):
        yield piv[k]
        K.eliminate_row(me, blocks[k], c[k], c[k + 1], uinv[k])
    _, uinv[i] = K.factor_diag(me, c[i], c[i + 1])
    piv[i].set()
    ctx.fwd_done[i] = _now()
    yield d["stage"]
    if i + 1 < ctx.threads:
        yield xev[i + 1]
    K.back_row(me, c[i], c[i + 1], ctx.n, ctx.x)
    xev[i].set()
    ctx.end[i] = _now()


# --- tiles ----------------------------------------------------------------------------------

def tiles_setup(sched, aug: np.ndarray, threads: int, fault: str = "") -> tuple[Ctx, list]:
    n = aug.shape[0]
    g = grid_side(threads)
    c = bounds(n, g)
    ce = c[:-1] + [n + 1]  # column bounds: the last tile column carries b
    tiles = [[np.ascontiguousarray(aug[c[i]:c[i + 1], ce[j]:ce[j + 1]]) for j in range(g)]
             for i in range(g)]
    t = g * g
    ctx = Ctx(n, t, np.zeros(t), np.zeros(t), np.zeros(n), fault)
    ctx.data = dict(
        g=g, c=c, tiles=tiles, linv=[None] * g, uinv=[None] * g,
        diag=[sched.event() for _ in range(g)],
        row=[[sched.event() for _ in range(g)] for _ in range(g)],   # row[k][j], j > k
        col=[[sched.event() for _ in range(g)] for _ in range(g)],   # col[k][i], i > k
        xev=[sched.event() for _ in range(g)],
        part=[sched.semaphore(0) for _ in range(g)],
        parts=[np.zeros((g, c[i + 1] - c[i])) for i in range(g)],
        stage=sched.barrier(t))
    return ctx, [(tile_thread, (ctx, i, j), f"tile{i}.{j}") for i in range(g) for j in range(g)]


def tile_thread(ctx: Ctx, i: int, j: int):
    d = ctx.data
    g, c, tiles = d["g"], d["c"], d["tiles"]
    linv, uinv, row, col = d["linv"], d["uinv"], d["row"], d["col"]
    me = tiles[i][j]
    if ctx.fault == f"tile{i}.{j}":
        raise InjectedFault(f"injected fault in tile{i}.{j}")
    k0 = min(i, j)
    for k in range(k0):
        yield col[k][i]
        yield row[k][j]
        K.gemm_sub(me, tiles[i][k], tiles[k][j])
    if i == j:
        linv[i], uinv[i] = K.factor_diag(me, 0, c[i + 1] - c[i])
        d["diag"][i].set()
    elif i < j:
        yield d["diag"][i]
        K.apply_left(me, linv[i])
        row[i][j].set()
    else:
        yield d["diag"][j]
        K.apply_right(me, uinv[j])
        col[j][i].set()
    me_id = i * g + j
    ctx.fwd_done[me_id] = _now()
    yield d["stage"]
    x = ctx.x
    if i < j:
        yield d["xev"][j]
        w = c[j + 1] - c[j]
        K.matvec(d["parts"][i][j], me[:, :w] if me.shape[1] == w else
                 np.ascontiguousarray(me[:, :w]), x[c[j]:c[j + 1]])
        d["part"][i].release()
    elif i == j:
        for _ in range(g - 1 - i):
            yield d["part"][i]
        y = tiles[i][g - 1][:, -1].copy()
        K.back_tile(y, d["parts"][i][i + 1:], uinv[i], x[c[i]:c[i + 1]])
        d["xev"][i].set()
    ctx.end[me_id] = _now()


@dataclass(frozen=True)
class Solver:
    name: str
    setup: Callable  # (sched, aug, threads, fault) -> (ctx, [(fn, args, name)])
    user_threads: Callable[[int], int]  # requested T -> user threads actually run
    max_side: Callable[[int], int]  # requested T -> blocks per side (must be <= n)
    description: str


SOLVERS: dict[str, Solver] = {
    "rows": Solver("rows", rows_setup, lambda t: t, lambda t: t,
                   "T block rows; the pivot row's owner signals an event per step; back "
                   "substitution down a chain of events"),
    "tiles": Solver("tiles", tiles_setup, lambda t: grid_side(t) ** 2, grid_side,
                    "g x g tiles (g = round(sqrt(T))), one user thread per tile; "
                    "point-to-point events per step, semaphores in back substitution"),
}
