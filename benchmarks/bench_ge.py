"""Benchmark of issue 11 (one run, ratios): the cooperative scheduler A0/A1/A2 on blocked
Gaussian elimination.

1. switch: a user-mode switch in A2 (block + wake + resume, a semaphore ping-pong between
   two user threads on one scheduler thread) against an A0 OS-thread hand-off (the same
   ping-pong between two OS threads on threading.Semaphore), in microseconds;
2. forward elimination of `rows` at the smallest thread count (32) against
   numpy.linalg.solve, n = 2048 (LAPACK with all usable CPUs, as many as the scheduler
   threads);
3. per-stage times of A0/A1/A2 over thread counts for `rows` and `tiles`, the accelerations
   over A0 in the seed's form and the counts (blocks, wake-ups, switches, scans) behind them.

    PYTHONPATH=src python benchmarks/bench_ge.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import threading
import time

from hybridsched.ge import kernels
from hybridsched.ge.runner import run_once
from hybridsched.sysinfo import usable_cpus
from hybridsched.usched import ARCHS


def switch_us(arch: str, rounds: int) -> float:
    def ping(a, b):
        for _ in range(rounds):
            b.release()
            yield a

    def pong(a, b):
        for _ in range(rounds):
            yield b
            a.release()
    best = float("inf")
    for _ in range(3):
        with ARCHS[arch](usable_cpus()[:1]) as s:
            a, b = s.semaphore(), s.semaphore()
            t = time.perf_counter()
            s.spawn(ping, a, b)
            s.spawn(pong, a, b)
            s.run()
            best = min(best, (time.perf_counter() - t) / (2 * rounds) * 1e6)
    return best


def os_handoff_us(rounds: int) -> float:
    """Two plain OS threads handing a semaphore back and forth (A0's primitive, no
    generator layer): the hand-off the seed's A0 pays per block/wake."""
    best = float("inf")
    for _ in range(3):
        a, b = threading.Semaphore(0), threading.Semaphore(0)

        def pong():
            for _ in range(rounds):
                b.acquire()
                a.release()
        t = threading.Thread(target=pong)
        t0 = time.perf_counter()
        t.start()
        for _ in range(rounds):
            b.release()
            a.acquire()
        t.join()
        best = min(best, (time.perf_counter() - t0) / (2 * rounds) * 1e6)
    return best


def pct(t0: float, t: float) -> str:
    return f"{(t0 / t - 1) * 100:+.1f} %" if t > 0 else "—"


def stages(label: str, algo: str, n: int, ts: list[int]) -> None:
    print(f"\n## {label}: {algo}, n = {n} (ms; forward includes creation)")
    print(f"{'T':>6} {'arch':>4} {'create':>9} {'forward':>9} {'back':>9} {'total':>9} "
          f"{'blocks':>8} {'wakeups':>8} {'switches':>8} {'scans':>10}  ok")
    for t in ts:
        res = {}
        for arch in ARCHS:
            r = run_once(arch, algo, n, t, 0)
            res[arch] = r
            print(f"{r.threads:>6} {arch:>4} {r.t_create_s * 1e3:9.2f} {r.t_forward_s * 1e3:9.2f} "
                  f"{r.t_back_s * 1e3:9.2f} {r.t_total_s * 1e3:9.2f} {r.blocks:8d} "
                  f"{r.wakeups:8d} {r.switches:8d} {r.scans:10d}  {r.verified} {r.error}",
                  flush=True)
        a0 = res["A0"]
        for arch in ("A1", "A2"):
            r = res[arch]
            print(f"{'':>6} {arch}/A0: forward {pct(a0.t_forward_s, r.t_forward_s)}, back "
                  f"{pct(a0.t_back_s, r.t_back_s)} (x{a0.t_back_s / r.t_back_s:.2f}), total "
                  f"{pct(a0.t_total_s, r.t_total_s)} faster than A0")
        print(f"{'':>6} LAPACK numpy.linalg.solve: {a0.t_lapack_s * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    args = ap.parse_args()
    kernels.prepare()
    print(f"# bench_ge: {len(usable_cpus())} usable CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rounds = 5000 if args.quick else 20000
    a2, a1, a0 = switch_us("A2", rounds), switch_us("A1", rounds), switch_us("A0", rounds)
    osh = os_handoff_us(rounds)
    print("\n## switch (semaphore ping-pong, best of 3, µs per hand-off)")
    print(f"A2 user-mode block+wake+resume: {a2:.2f} µs; A1: {a1:.2f} µs; "
          f"A0 (generator in OS threads): {a0:.2f} µs; plain OS-thread hand-off: {osh:.2f} µs")
    print(f"A0/A2 = {a0 / a2:.1f}x, OS hand-off/A2 = {osh / a2:.1f}x (goal >= 20x)")

    n = 1024 if args.quick else 2048
    r = run_once("A2", "rows", n, 32, 0)
    rr = run_once("A2", "rows", n, 32, 1)
    best = min(r.t_forward_s, rr.t_forward_s)
    lap = min(r.t_lapack_s, rr.t_lapack_s)
    print(f"\n## forward, rows, T = 32, n = {n}: A2 {best * 1e3:.1f} ms vs numpy.linalg.solve "
          f"{lap * 1e3:.1f} ms (whole solve, {len(usable_cpus())} threads): "
          f"{best / lap:.2f}x (goal <= 3x); verified {r.verified and rr.verified}")

    if args.quick:
        stages("stages", "rows", 256, [32, 256])
        stages("stages", "tiles", 256, [36, 1024])
    else:
        stages("stages", "rows", 1024, [32, 256, 1024])
        stages("stages", "tiles", 712, [32, 256, 1024, 7936])


if __name__ == "__main__":
    main()
