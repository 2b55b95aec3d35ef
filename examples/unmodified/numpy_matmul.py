"""Matrix products through numpy's BLAS (OpenBLAS in the numpy wheel), its thread pool at
its default size (the CPUs this process may use), as an unmodified script would run.

    python numpy_matmul.py PRODUCTS N [PROCESSES]

With PROCESSES (default 1) the script forks that many processes, each doing its share of
the products with a pool of its own (a script that splits its work with os.fork or a
process pool). It checks itself: (A B) x must equal A (B x) for a random vector x in every
process; it prints "ok" and exits 0 only then.
"""
import os
import sys

import numpy as np


def products_ok(products: int, n: int, seed: int) -> bool:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n)) / n
    x = rng.standard_normal(n)
    bad = 0
    for _ in range(products):
        c = a @ b                   # one threaded BLAS call (dgemm)
        bad += not np.allclose(c @ x, a @ (b @ x), rtol=1e-8, atol=1e-8)
        a, b = b * n, c / n         # the next product depends on this one
    return bad == 0


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(f"usage: {sys.argv[0]} PRODUCTS N [PROCESSES]", file=sys.stderr)
        return 2
    products, n = int(sys.argv[1]), int(sys.argv[2])
    procs = int(sys.argv[3]) if len(sys.argv) == 4 else 1
    if procs == 1:
        ok = products_ok(products, n, 7)
    else:
        children = []
        for k in range(procs):
            pid = os.fork()
            if pid == 0:  # the child's share; its own exit status says whether it held
                os._exit(0 if products_ok(products // procs, n, 7 + k) else 1)
            children.append(pid)
        ok = all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children)
    extra = f" processes={procs}" if procs > 1 else ""
    print(f"numpy_matmul products={products} n={n}{extra} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
