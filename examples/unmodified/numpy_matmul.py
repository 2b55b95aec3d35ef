"""Matrix products through numpy's BLAS (OpenBLAS in the numpy wheel), its thread pool at
its default size (the CPUs this process may use), as an unmodified script would run.

    python numpy_matmul.py PRODUCTS N

It checks itself: (A B) x must equal A (B x) for a random vector x; it prints "ok" and exits
0 only then.
"""
import sys

import numpy as np


def main() -> int:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} PRODUCTS N", file=sys.stderr)
        return 2
    products, n = int(sys.argv[1]), int(sys.argv[2])
    rng = np.random.default_rng(7)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n)) / n
    x = rng.standard_normal(n)
    c = np.eye(n)
    bad = 0
    for _ in range(products):
        c = a @ b                   # one threaded BLAS call (dgemm)
        bad += not np.allclose(c @ x, a @ (b @ x), rtol=1e-8, atol=1e-8)
        a, b = b * n, c / n         # the next product depends on this one
    print(f"numpy_matmul products={products} n={n} {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
