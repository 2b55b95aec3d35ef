#!/usr/bin/env python3
"""The cooperative shim (coop/shim, `hybridsched coop exec`): what it costs, and a first
look at co-located unmodified OpenMP jobs under it.

1. Costs, from one small C program run plain and under the shim (ns per operation):
   - an intercepted call with nobody waiting: an uncontended pthread_mutex_lock (the
     trylock path), and a call that parks and resumes lazily around the real one
     (pthread_barrier_wait on a barrier of one thread, which returns at once);
   - a trapped futex: an inline `syscall` instruction (FUTEX_WAKE, nobody waiting), as
     libgomp makes them, caught by Syscall User Dispatch and emulated;
   - a token hand-off: two threads ping-pong through a futex word with syscall(); plain,
     both on one CPU; under the shim, one token, so every wait hands it to the other.
     (shim - plain) / 2 per round trip is the hand-off's own cost.
2. J co-located copies of a 2-thread OpenMP barrier loop (--steps of --step-us µs) and of
   a lock-contended OpenMP loop, each job asking for N threads (libgomp's defaults), under
   `linux` (as given), `env` (OMP_WAIT_POLICY=passive, ...: coop exec's default
   environment), `coop` (env + the shim: what `hybridsched coop exec CMD` runs) and `shim`
   (the shim with libgomp's defaults: `coop exec --keep-env`). Policies interleaved per
   repetition (their order rotated); makespan from the first start to the last exit; a
   run counts only if every job verified (its own check of the steps or the lock count).
   Mean ± 95 % CI over repetitions; ratios as the mean of the per-repetition ratios ±
   95 % CI. The jobs run on a private arbiter segment (not the node's).

Usage: python benchmarks/bench_shim.py [--reps R] [--jobs 2] [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy import stats

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.shimbuild import shim_library
from hybridsched.coop.shimjob import WAIT_POLICY_ENV, ShimJob
from hybridsched.oslayer.cpus import usable_cpus

COST = r"""
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static long inline_futex(int *w, long op, long v) {   /* libgomp's way: no libc call */
    long r; register long r10 asm("r10") = 0;
    asm volatile("syscall" : "=a"(r) : "a"((long)SYS_futex), "D"(w), "S"(op), "d"(v), "r"(r10) : "rcx", "r11", "memory");
    return r; }
static int word; static long n;
static void *pong(void *a) { for (long i = 0; i < n; i++) {
    while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != 1) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    __atomic_store_n(&word, 0, __ATOMIC_RELEASE); syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); }
    return a; }
int main(int argc, char **argv) {
    n = atol(argv[2]); double t0 = now();
    if (!strcmp(argv[1], "lock")) { pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; t0 = now();
        for (long i = 0; i < n; i++) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); } }
    else if (!strcmp(argv[1], "park")) { pthread_barrier_t b; pthread_barrier_init(&b, 0, 1); t0 = now();
        for (long i = 0; i < n; i++) pthread_barrier_wait(&b); }  /* a barrier of one: never blocks */
    else if (!strcmp(argv[1], "trap")) { int w = 0; t0 = now();
        for (long i = 0; i < n; i++) inline_futex(&w, FUTEX_WAKE_PRIVATE, 1); }
    else { pthread_t t; pthread_create(&t, 0, pong, 0); t0 = now();
        for (long i = 0; i < n; i++) { __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
            while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != 0) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 1, 0, 0, 0); }
        pthread_join(t, 0); }
    printf("%.1f\n", (now() - t0) / n * 1e9);
    return 0;
}
"""

OMP_BARRIER = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int steps = atoi(argv[1]); double us = atof(argv[2]); long done = 0;
    #pragma omp parallel reduction(+:done)
    { for (int s = 0; s < steps; s++) { double e = now() + us * 1e-6; while (now() < e) { } done++;
        #pragma omp barrier
      } }
    return done == (long)steps * omp_get_max_threads() ? 0 : 1;
}
"""

OMP_LOCK = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void work(double us) { double e = now() + us * 1e-6; while (now() < e) { } }
int main(int argc, char **argv) {
    int iters = atoi(argv[1]); double out = atof(argv[2]), in = atof(argv[3]); long shared = 0;
    omp_lock_t l; omp_init_lock(&l);
    #pragma omp parallel
    { for (int i = 0; i < iters; i++) { work(out); omp_set_lock(&l); work(in); shared++; omp_unset_lock(&l); } }
    return shared == (long)iters * omp_get_max_threads() ? 0 : 1;
}
"""

POLICIES = ("linux", "env", "coop", "shim")


def compile_c(folder: str, name: str, text: str, *flags: str) -> str:
    src, exe = os.path.join(folder, name + ".c"), os.path.join(folder, name)
    with open(src, "w") as fh:
        fh.write(text)
    subprocess.run(["cc", "-O2", *flags, src, "-o", exe, "-lpthread"], check=True)
    return exe


def mean_ci(xs) -> tuple[float, float]:
    xs = np.asarray(xs, float)
    if len(xs) < 2:
        return float(xs.mean()), math.nan
    return float(xs.mean()), float(stats.t.ppf(0.975, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs)))


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if k not in WAIT_POLICY_ENV and not k.startswith("HYBRIDSCHED_COOP") and k != "LD_PRELOAD"}


@contextlib.contextmanager
def policy_envs(policy: str, jobs: int, folder: str, cpus=None):
    """Each job's environment under ``policy`` (and the shim's counters after, for coop)."""
    base = clean_env()
    if policy in ("linux", "env"):
        yield [dict(base, **(WAIT_POLICY_ENV if policy == "env" else {})) for _ in range(jobs)], []
        return
    with contextlib.ExitStack() as stack:
        arbiter = stack.enter_context(Arbiter(cpus=cpus, path=os.path.join(folder, "seg")))
        shims = [stack.enter_context(ShimJob(arbiter)) for _ in range(jobs)]
        envs = []
        for s in shims:
            env = dict(base, **(WAIT_POLICY_ENV if policy == "coop" else {}))
            envs.append(dict(env, **s.env(env)))
        yield envs, shims


def costs(folder: str, n: int, rounds: int = 5) -> dict:
    """(plain, shim) ns per operation: the median of ``rounds`` runs of each, alternated
    (a run lasts tens of milliseconds, so a neighbour's time slice can double one)."""
    exe = compile_c(folder, "shimcost", COST)
    cpu0 = [usable_cpus()[0]]
    out = {}
    for what, count in (("lock", 20 * n), ("park", 4 * n), ("trap", n), ("pingpong", n // 4)):
        pin = ["taskset", "-c", str(cpu0[0])] if what == "pingpong" else []
        plain, shim = [], []
        for _ in range(rounds):
            plain.append(float(subprocess.run([*pin, exe, what, str(count)], env=clean_env(),
                                              capture_output=True, text=True, check=True).stdout))
            with policy_envs("shim", 1, folder, cpus=cpu0) as (envs, _):
                shim.append(float(subprocess.run([exe, what, str(count)], env=envs[0],
                                                 capture_output=True, text=True, check=True).stdout))
        out[what] = (float(np.median(plain)), float(np.median(shim)))
    return out


def colocated(exe_args: list[str], jobs: int, reps: int, folder: str) -> dict:
    times = {p: [] for p in POLICIES}
    counters = {p: [] for p in POLICIES}
    for rep in range(reps):
        order = POLICIES[rep % len(POLICIES):] + POLICIES[:rep % len(POLICIES)]
        for policy in order:
            with policy_envs(policy, jobs, folder) as (envs, shims):
                t0 = time.perf_counter()
                procs = [subprocess.Popen(exe_args, env=env) for env in envs]
                codes = [p.wait() for p in procs]
                wall = time.perf_counter() - t0
                if shims:
                    counters[policy].append([s.counters() for s in shims])
            times[policy].append(wall if not any(codes) else math.nan)
    return {"times": times, "counters": counters}


def report(title: str, res: dict) -> None:
    times = res["times"]
    print(f"\n### {title}\n\n| policy | makespan (s) | vs linux |\n|---|---:|---:|")
    for p in POLICIES:
        m, ci = mean_ci([t for t in times[p] if t == t])
        print(f"| {p} | {m:.3f} ± {ci:.3f} | {np.nanmean(times['linux']) / m:.2f}x |")
    print("\n| ratio | mean ± 95 % CI |\n|---|---:|")
    for a, b in (("linux", "env"), ("env", "coop"), ("linux", "coop"), ("linux", "shim"),
                 ("env", "shim")):
        r = [x / y for x, y in zip(times[a], times[b]) if x == x and y == y]
        m, ci = mean_ci(r)
        print(f"| {a}/{b} | {m:.2f} ± {ci:.2f} |")
    for p in ("coop", "shim"):
        cs = [c for rep in res["counters"][p] for c in rep]
        if cs:
            keys = ("threads", "calls", "grants", "handoffs", "traps", "nudges", "revoked")
            print(f"\n{p}, per job and run: " + ", ".join(
                f"{k} {np.mean([getattr(c, k) for c in cs]):.0f}" for k in keys))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--step-us", type=float, default=400.0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 reps, few steps")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.steps = 2, 100
    shim_library()  # built before anything is timed
    with tempfile.TemporaryDirectory(prefix="bench-shim-") as folder:
        n = 20_000 if args.quick else 200_000
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
        print("\n### costs (ns per operation)\n\n| operation | plain | under the shim | shim - plain |\n|---|---:|---:|---:|")
        for what, (plain, shim) in costs(folder, n).items():
            print(f"| {what} | {plain:.0f} | {shim:.0f} | {shim - plain:.0f} |")
        bar = compile_c(folder, "omp_barrier", OMP_BARRIER, "-fopenmp")
        lock = compile_c(folder, "omp_lock", OMP_LOCK, "-fopenmp")
        steps = str(args.steps)
        report(f"J = {args.jobs} OpenMP barrier loops, {steps} steps of {args.step_us:g} µs",
               colocated([bar, steps, str(args.step_us)], args.jobs, args.reps, folder))
        iters = str(4 * args.steps)
        report(f"J = {args.jobs} lock-contended OpenMP loops, {iters} iterations of 5 µs out, "
               "20 µs in the lock", colocated([lock, iters, "5", "20"], args.jobs, args.reps, folder))
        report(f"J = 1 OpenMP barrier loop, {steps} steps of {args.step_us:g} µs",
               colocated([bar, steps, str(args.step_us)], 1, args.reps, folder))
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    sys.exit(main())
