"""One timed `ge` run: build the system (untimed), start the scheduler, create the user
threads, run them, verify; and the checks of a whole sweep before any work.

Timing (perf_counter): t0 just before the first user thread is created, t1 after the last
one is created (A0: started; A1/A2: queued), t_fwd the latest end of a user thread's forward
part (all then meet at the stage barrier), t_end the latest end of a user thread. Stages:
create = t1 - t0; forward = t_fwd - t0 (the triangular form, creation INCLUDED); back =
t_end - t_fwd; total = max(t_end, t1) - t0, i.e. forward + back unless every user thread
ended before the last was created (tiny A0 runs), when it is the creation time.

Why forward includes creation: user threads start as soon as they are created, as OS
threads do, so in A0 the first threads compute while the main thread, competing with them
for the GIL, still creates the others (measured on 2 cores: 7921 tile threads took 12.8 s
to create, and the forward stage was over before the last one existed); a forward stage
counted from t1 would hide A0's work in `create`. A start gate (every user thread first
waits on one event) was tried and rejected: opening it makes all 7921 OS threads runnable
at once, and their GIL convoy took A0's forward stage from 18 s to 490 s.

The cyclic GC is paused during the timed region.
"""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass

import numpy as np

from ..usched import get as architecture
from ..errors import HybridschedError, UsageError
from ..oslayer.shm import available_memory
from . import kernels
from .matrix import residual, system, verified, x_error
from .solvers import SOLVERS

MAX_THREADS = 7936   # the seed's largest thread count (32 x 248)
MAX_N = 1 << 16


@dataclass
class GeResult:
    arch: str
    algo: str
    n: int
    threads: int          # user threads actually run
    threads_requested: int
    sched_threads: int
    rep: int
    seed: int
    t_create_s: float = math.nan
    t_forward_s: float = math.nan
    t_back_s: float = math.nan
    t_total_s: float = math.nan
    t_lapack_s: float = math.nan
    blocks: int = 0
    wakeups: int = 0
    switches: int = 0
    scans: int = 0
    residual: float = math.nan
    x_err: float = math.nan
    verified: bool = False
    started_at: float = 0.0
    error: str = ""


def check_args(archs: list[str], algos: list[str], n: int, threads: list[int], reps: int) -> None:
    """Every bound, before any work: UsageError (one line, exit 2) otherwise."""
    for a in archs:
        architecture(a)
    for a in algos:
        if a not in SOLVERS:
            raise UsageError(f"--algo: unknown algorithm {a!r} (known: {', '.join(SOLVERS)})")
    if not 1 <= n <= MAX_N:
        raise UsageError(f"--n must be from 1 to {MAX_N}, got {n}")
    if reps < 1:
        raise UsageError(f"--reps must be at least 1, got {reps}")
    for t in threads:
        if not 1 <= t <= MAX_THREADS:
            raise UsageError(f"--threads must be from 1 to {MAX_THREADS}, got {t}")
        for a in algos:
            side = SOLVERS[a].max_side(t)
            if side > n:
                what = "block rows" if a == "rows" else f"tiles per side ({side} x {side} grid)"
                raise UsageError(f"--algo {a} --threads {t} needs {side} {what} but --n {n} "
                                 f"has only {n} rows: use --threads <= {n}" if a == "rows"
                                 else f"--algo {a} --threads {t} needs {what} but --n {n} has "
                                 f"only {n} rows")
    need = 4 * 8 * n * (n + 1)  # A, the augmented copy, the blocks, LAPACK's copy
    if need > available_memory():
        raise UsageError(f"--n {n} needs about {need / 2**30:.1f} GiB, more than available")


def lapack_time(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """numpy.linalg.solve (NumPy's multithreaded OpenBLAS LAPACK, all usable CPUs)."""
    t = time.perf_counter()
    x = np.linalg.solve(a, b)
    return x, time.perf_counter() - t


def run_once(arch: str, algo: str, n: int, threads: int, rep: int, seed: int = 0,
             cpus: list[int] | None = None, fault: str = "") -> GeResult:
    """One run; a failing user thread or a refused OS thread gives an unverified result with
    ``error`` set (one line), every thread joined."""
    kernels.prepare()
    solver = SOLVERS[algo]
    cls = architecture(arch)
    a, _, b = system(n, seed)
    x_ref, t_lapack = lapack_time(a, b)
    aug = np.empty((n, n + 1))
    aug[:, :n] = a
    aug[:, n] = b
    sched = cls(cpus)
    res = GeResult(arch, algo, n, solver.user_threads(threads), threads, sched.sched_threads,
                   rep, seed, t_lapack_s=t_lapack, started_at=time.time())
    gc_was = gc.isenabled()
    gc.disable()
    try:
        with sched:
            ctx, todo = solver.setup(sched, aug, threads, fault)
            t0 = time.perf_counter()
            for fn, args, name in todo:
                sched.spawn(fn, *args, name=name)
            t1 = time.perf_counter()
            sched.run()
        t_fwd, t_end = float(ctx.fwd_done.max()), float(ctx.end.max())
    except HybridschedError as exc:
        res.error = str(exc).splitlines()[0][:240]
        c = sched.counts
        res.blocks, res.wakeups, res.switches, res.scans = c.blocks, c.wakeups, c.switches, c.scans
        return res
    finally:
        if gc_was:
            gc.enable()
    c = sched.counts
    res.blocks, res.wakeups, res.switches, res.scans = c.blocks, c.wakeups, c.switches, c.scans
    res.t_create_s, res.t_forward_s = t1 - t0, t_fwd - t0
    res.t_back_s, res.t_total_s = t_end - t_fwd, max(t_end, t1) - t0
    res.residual = residual(a, ctx.x, b)
    res.x_err = x_error(ctx.x, x_ref)
    res.verified = verified(res.residual, res.x_err)
    if not res.verified:
        res.error = (f"unverified: residual {res.residual:.3g}, |x - x_lapack| "
                     f"{res.x_err:.3g}")
    return res
