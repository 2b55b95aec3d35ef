"""A numba ``parallel=True`` loop (its OpenMP threading layer here: libgomp), threads at
numba's default (the CPUs this process may use): STEPS parallel loops over 64 rows of ITERS
each, every loop a fork-join of the pool, as an unmodified numba program would run. The
work does not depend on the thread count.

    python numba_parallel.py STEPS ITERS

It checks itself against the same sums computed serially; prints "ok" and exits 0 only
then. Compiled functions are cached (cache=True): set NUMBA_CACHE_DIR to keep the cache out
of this folder.
"""
import sys

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def step(rows, iters, seed):
    out = np.empty(rows)
    for i in numba.prange(rows):
        x = seed + i
        for _ in range(iters):
            x = x * 0.9999999 + 1.0
        out[i] = x
    return out.sum()


@numba.njit(cache=True)
def serial(rows, iters, seed):
    s = 0.0
    for i in range(rows):
        x = seed + i
        for _ in range(iters):
            x = x * 0.9999999 + 1.0
        s += x
    return s


def main() -> int:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} STEPS ITERS", file=sys.stderr)
        return 2
    steps, iters = int(sys.argv[1]), int(sys.argv[2])
    rows = 64   # an equal share for any thread count dividing 64
    total = sum(step(rows, iters, float(s)) for s in range(steps))
    want = sum(serial(rows, iters, float(s)) for s in range(min(steps, 3)))
    got = sum(step(rows, iters, float(s)) for s in range(min(steps, 3)))
    ok = abs(got - want) <= 1e-9 * abs(want)
    print(f"numba_parallel layer={numba.threading_layer()} threads={numba.get_num_threads()} "
          f"steps={steps} total={total:.6e} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
