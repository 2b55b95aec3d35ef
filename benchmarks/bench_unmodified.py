#!/usr/bin/env python3
"""Unmodified commands co-located (`colocate --cmd`, issue 32): every policy against plain
Linux on the workloads of examples/unmodified/, at J = 1, 2 and 4 jobs of N threads each.

Each (workload, J) is one `colocate --cmd` experiment: the policies interleaved within each
repetition, so a drift of the machine's load hits them all alike. Per policy: the makespan's
mean ± the 95 % confidence interval (Student's t over the repetitions), the jobs' CPU
seconds; then the ratios of the means side by side (linux/env: what the environment alone
buys; linux/partition; linux/gang), each with a 95 % CI from the per-repetition ratios (the
policies of one repetition ran back to back). A repetition counts only if every job of it
verified (exit 0 and its own "ok" / the pipeline's digest).

The targets of the issue are checked at the end (PASS/MISS), never assumed: for J = 2
OpenMP barrier jobs linux/coop >= 2.4, linux/gang >= 2 and env/coop >= 0.90; for J = 2
lock-contended jobs env/coop > 1 with its CI above 1; the best of gang and coop >= 2x linux
for J = 2 numpy jobs (beside serial, the jobs one after the other, which time slicing whole
jobs cannot beat); gang and coop within 5 % of linux at J = 1. Per policy the CPU left
idle (1 - the jobs' CPU seconds / (makespan x N)) says how much any scheduler could still
gain without making the jobs use less CPU.

The C workloads are built with gcc -fopenmp into a temporary folder (left out without a
compiler); numba's cache goes to a temporary folder too and is warmed before timing.

Usage: python benchmarks/bench_unmodified.py [--reps R] [--jobs 1,2,4] [--workloads a,b]
       [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

from hybridsched.colocate.experiment import run_colocate
from hybridsched.colocate.spec import ColocateSpec
from hybridsched.oslayer.cpus import n_cpus

N = n_cpus()
EX = Path(__file__).resolve().parent.parent / "examples" / "unmodified"
PY = shlex.quote(sys.executable)

# The policies compared, each with the policies it is compared against (ratio base/policy:
# above 1 means the policy is faster).
BASES = {
    "env": ["linux"],
    "partition": ["linux"],
    "serial": ["linux"],
    "gang": ["linux", "serial"],
    "coop": ["env", "linux"],
}
POLICIES = ["linux", *BASES]

# Each job asks for N threads on N CPUs (its runtime's default); the work of a job does not
# depend on its thread count (partition's jobs get N/J threads and do the same work), and
# is sized so that one job alone computes for ~0.1-0.3 s here: Linux with libgomp's
# defaults can be 10-30x slower co-located, and a full run must stay near 10 minutes.
# Iterations of the C and numba loops cost ~1.6 ns each here.
PIPE_BYTES = 100_000_000
WORKLOADS = {
    # 200 barrier steps of ~400 µs per thread: N x 250 000 iterations a step in all
    "omp_barrier": (f"{{omp_barrier}} 200 {250_000 * N}", r"\bok$"),
    # 20 000 rounds per thread: ~3 µs outside the lock, ~0.3 µs inside it
    "omp_lock": (f"{{omp_lock}} {20_000 * N} 2000 200", r"\bok$"),
    # the same loop ten times longer (~1.4 s at J = 2): a run's end, where a thread's last
    # turn may leave a CPU idle, weighs a tenth as much
    "omp_lock_long": (f"{{omp_lock}} {200_000 * N} 2000 200", r"\bok$"),
    # 25 000 rounds per thread, half of each under the lock (~1.6 µs outside, ~1.6 µs
    # inside): hot enough that a wait for the lock is the rule, where libgomp's own spin
    # beats a passive wait (a futex sleep and wake-up per wait) even alone
    "omp_lock_hot": (f"{{omp_lock}} {25_000 * N} 1000 1000", r"\bok$"),
    # 12 500 rounds per thread, 90 % of each under the lock (~0.5 µs outside, ~5 µs
    # inside): a job is nearly serial, so a waiter finds the lock held again right after
    # every unlock (where a waiter that went back to sleep each time cost coop 7 %)
    "omp_lock_held": (f"{{omp_lock}} {12_500 * N} 300 3000", r"\bok$"),
    # The same three loops with a pthread spinlock in place of the OpenMP lock: its waiters
    # spin whatever the environment says, so a holder preempted by another job's thread
    # keeps its job's waiters burning CPU (lock-holder preemption, which env cannot remove
    # and SCHED_COOP exists to); an OpenMP lock's waiters sleep under env, and a CPU stays
    # busy with the other job meanwhile.
    "omp_spinlock": (f"{{omp_lock}} {20_000 * N} 2000 200 spin", r"\bok$"),
    "omp_spinlock_hot": (f"{{omp_lock}} {25_000 * N} 1000 1000 spin", r"\bok$"),
    "omp_spinlock_held": (f"{{omp_lock}} {12_500 * N} 300 3000 spin", r"\bok$"),
    # 120 products of 384 x 384 (~2-5 ms each on 2 CPUs): enough that numpy's import
    # (~0.25 s, one thread) does not make up most of a job
    "numpy_matmul": (f"{PY} {EX / 'numpy_matmul.py'} 120 384", r"\bok$"),
    # the same products split among 3 forked processes, each with its own pool: a job of
    # several processes whose holders spin for threads of another process of the job
    "numpy_forks": (f"{PY} {EX / 'numpy_matmul.py'} 120 384 3", r"\bok$"),
    # 300 fork-joins of ~400 µs per thread (64 rows of N x 4000 iterations); numba's import
    # and cache load (~0.5-1 s a job) come on top
    "numba_parallel": (f"{PY} {EX / 'numba_parallel.py'} 300 {4000 * N}", r"\bok$"),
    # 1000 rounds of N x 128 KiB hashed, a barrier between rounds
    "py_threads": (f"{PY} {EX / 'py_threads.py'} 1000 {128 * N}", r"\bok$"),
    "pipeline": (f"sh -c 'yes hybridsched | head -c {PIPE_BYTES} | sha256sum'", None),
}
QUICK = {  # --quick: a smoke run of the benchmark itself
    "omp_barrier": f"{{omp_barrier}} 40 {250_000 * N}",
    "omp_lock": f"{{omp_lock}} {4000 * N} 2000 200",
    "omp_lock_long": f"{{omp_lock}} {40_000 * N} 2000 200",
    "omp_lock_hot": f"{{omp_lock}} {5000 * N} 1000 1000",
    "omp_lock_held": f"{{omp_lock}} {2500 * N} 300 3000",
    "omp_spinlock": f"{{omp_lock}} {4000 * N} 2000 200 spin",
    "omp_spinlock_hot": f"{{omp_lock}} {5000 * N} 1000 1000 spin",
    "omp_spinlock_held": f"{{omp_lock}} {2500 * N} 300 3000 spin",
    "numpy_matmul": f"{PY} {EX / 'numpy_matmul.py'} 10 384",
    "numpy_forks": f"{PY} {EX / 'numpy_matmul.py'} 12 384 3",
    "numba_parallel": f"{PY} {EX / 'numba_parallel.py'} 50 {4000 * N}",
    "py_threads": f"{PY} {EX / 'py_threads.py'} 200 {128 * N}",
    "pipeline": "sh -c 'yes hybridsched | head -c 20000000 | sha256sum'",
}


def build_c(tmp: str) -> dict[str, str]:
    """The OpenMP workloads built into ``tmp``; {} without a compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    out = {}
    for name in ("omp_barrier", "omp_lock"):
        exe = os.path.join(tmp, name)
        if cc and subprocess.run([cc, "-O2", "-fopenmp", str(EX / f"{name}.c"), "-o", exe],
                                 capture_output=True).returncode == 0:
            out[name] = exe
    return out


def pipeline_digest(nbytes: int) -> str:
    import hashlib

    line = b"hybridsched\n"
    whole, part = divmod(nbytes, len(line))
    h = hashlib.sha256()
    block = line * 65536
    for _ in range(whole // 65536):
        h.update(block)
    h.update(line * (whole % 65536) + line[:part])
    return h.hexdigest()


def ci95(values) -> float:
    v = np.asarray(values, float)
    if len(v) < 2:
        return math.nan
    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def experiment(cmd: str, expect: str, jobs: int, reps: int, quantum_ms: float) -> dict:
    spec = ColocateSpec("cmd", jobs, 0, list(POLICIES), reps=reps, quantum_s=quantum_ms / 1e3,
                        commands=[cmd], expect=expect)
    spec.validate(N)
    recs = run_colocate(spec, lambda r: None)
    good = {(p, r) for p in POLICIES for r in range(reps)
            if all(x.verified for x in recs if x.policy == p and x.rep == r)}
    out = {"failed": sorted({f"{x.policy} rep {x.rep}: {x.error}" for x in recs
                             if not x.verified})}
    for p in POLICIES:
        mk = {r: next(x.makespan_s for x in recs if x.policy == p and x.rep == r)
              for r in range(reps) if (p, r) in good}
        cpu = [x.cpu_s for x in recs if x.policy == p and (p, x.rep) in good]
        # the share of the N CPUs' makespan that no job used: where a preempted lock holder
        # or a waiter that sleeps costs anything, it is here (a spinning waiter's time is
        # CPU time instead); no policy can make a run shorter than its CPU seconds / N
        idle = [1 - sum(x.cpu_s for x in recs if x.policy == p and x.rep == r) / (mk[r] * N)
                for r in mk]
        out[p] = dict(makespan=mk, mean=float(np.mean(list(mk.values()))) if mk else math.nan,
                      ci=ci95(list(mk.values())), cpu_s=float(np.mean(cpu)) if cpu else math.nan,
                      idle=float(np.mean(idle)) if idle else math.nan, idle_ci=ci95(idle))
    for p, bases in BASES.items():
        for b in bases:
            out[f"{b}/{p}"] = paired(out, b, p)
    return out


def paired(out: dict, b: str, p: str) -> dict:
    """b/p: the ratio of the mean makespans, and the 95 % CI of the per-repetition ratios."""
    both = sorted(set(out[p]["makespan"]) & set(out[b]["makespan"]))
    per = [out[b]["makespan"][r] / out[p]["makespan"][r] for r in both]
    return dict(ratio=out[b]["mean"] / out[p]["mean"], ci=ci95(per))


def ratio_names() -> list[str]:
    return [f"{b}/{p}" for p, bases in BASES.items() for b in bases]


def table(results: dict, J: int) -> str:
    heads = [f"{p} (s)" for p in POLICIES] + ratio_names()
    lines = [f"### J = {J} ({J} jobs x N = {N} threads on {N} CPUs)", "",
             "| workload | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    for wl, by_j in results.items():
        res = by_j.get(J)
        if res is None:
            continue
        cells = [f"{res[p]['mean']:.3f} ± {res[p]['ci']:.3f}" for p in POLICIES]
        cells += [f"{res[r]['ratio']:.2f}x ± {res[r]['ci']:.2f}" for r in ratio_names()]
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
        for f in res["failed"][:3]:
            lines.append(f"|  ↳ failed: {f[:100]} |")
    lines += ["", f"CPU left idle at J = {J}: 1 - (the jobs' CPU seconds) / (makespan x N), "
              "mean ± 95 % CI over the repetitions", "",
              "| workload | " + " | ".join(POLICIES) + " |", "|---|" + "---:|" * len(POLICIES)]
    for wl, by_j in results.items():
        res = by_j.get(J)
        if res is not None:
            lines.append(f"| {wl} | " + " | ".join(
                f"{res[p]['idle'] * 100:.1f} % ± {res[p]['idle_ci'] * 100:.1f}" for p in POLICIES) + " |")
    return "\n".join(lines)


def targets(results: dict) -> list[str]:
    """The issue's targets, each PASS or MISS from this run's figures."""
    out = []

    def check(label, fig, bound, whole_ci=False):
        """PASS when the ratio reaches ``bound`` (with ``whole_ci``: its CI's lower end)."""
        v = fig["ratio"]
        low = v - fig["ci"] if whole_ci else v
        out.append(f"- {'PASS' if low >= bound else 'MISS'}: {label}: {v:.3f}x "
                   f"(± {fig['ci']:.2f}, the per-repetition ratios' 95 % CI)")

    bar = results.get("omp_barrier", {}).get(2)
    if bar:
        check("J = 2 OpenMP barrier jobs, linux/coop >= 2.4", bar["linux/coop"], 2.4)
        check("J = 2 OpenMP barrier jobs, linux/gang >= 2", bar["linux/gang"], 2)
        check("J = 2 OpenMP barrier jobs, env/coop >= 0.90", bar["env/coop"], 0.90)
    for wl in ("omp_lock", "omp_lock_long", "omp_lock_hot", "omp_lock_held",
               "omp_spinlock", "omp_spinlock_hot", "omp_spinlock_held"):
        lock = results.get(wl, {}).get(2)
        if not lock:
            continue
        kind = "a spinlock" if "spin" in wl else "an OpenMP lock"
        check(f"J = 2 lock-contended jobs ({wl}, {kind}), env/coop > 1 with a CI that "
              f"excludes 1", lock["env/coop"], 1.0 + 1e-9, whole_ci=True)
        e = lock["env"]
        best = min(("env", "partition"), key=lambda p: lock[p]["mean"])
        vs = paired(lock, best, "coop")
        # the static partition (one thread a job: no lock waits at all) against env, by the
        # same test: whether any policy could meet the target here
        part = paired(lock, "env", "partition")
        out.append(f"  (env left {e['idle'] * 100:.1f} % ± {e['idle_ci'] * 100:.1f} of the CPUs "
                   f"idle: the most any policy could gain there without using less CPU is "
                   f"{1 / max(1 - e['idle'], 1e-9):.3f}x; env {e['mean']:.4f} s, partition "
                   f"{lock['partition']['mean']:.4f} s, coop {lock['coop']['mean']:.4f} s; "
                   f"the faster of env and partition, {best}, against coop: {best}/coop "
                   f"{vs['ratio']:.3f} ± {vs['ci']:.3f}; env/partition {part['ratio']:.3f} "
                   f"± {part['ci']:.3f})")
    mm = results.get("numpy_matmul", {}).get(2)
    if mm:
        best = max((mm[f"linux/{p}"] for p in ("gang", "coop") if f"linux/{p}" in mm),
                   key=lambda f: f["ratio"])
        check("J = 2 numpy jobs, best of gang/coop >= 2x linux", best, 2)
        # whole jobs one after the other, in the same run: what time slicing whole jobs is
        # bound by, so linux/gang >= 2 needs Linux co-located twice as slow as that
        out.append(f"  (serial, the jobs one after the other: {mm['serial']['mean']:.3f} s; "
                   f"serial/gang {mm['serial/gang']['ratio']:.2f}x ± {mm['serial/gang']['ci']:.2f}, "
                   f"linux/serial {mm['linux/serial']['ratio']:.2f}x ± {mm['linux/serial']['ci']:.2f}; "
                   f"partition, one OpenBLAS thread per job, {mm['partition']['mean']:.3f} s)")
    for wl, by_j in results.items():
        one = by_j.get(1)
        for p in ("gang", "coop") if one else ():
            check(f"J = 1 {wl}, {p} within 5 % of linux (linux/{p} >= 0.95)",
                  one[f"linux/{p}"], 0.95)
        if one and "linux/serial" in one:
            # serial at J = 1 runs the one job as linux does: the spread of identical runs,
            # against which a miss by a few per cent above is read
            same = one["linux/serial"]
            out.append(f"  (two identical runs at J = 1, linux/serial: {same['ratio']:.3f}x "
                       f"± {same['ci']:.3f})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--jobs", default="1,2,4")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--quantum-ms", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="small sizes, 2 repetitions")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args()
    reps = 2 if a.quick else a.reps
    js = [int(j) for j in a.jobs.split(",")]
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-unmodified-") as tmp:
        os.environ["NUMBA_CACHE_DIR"] = os.path.join(tmp, "numba")  # the jobs inherit it
        bins = build_c(tmp)
        results: dict = {}
        for wl in a.workloads.split(","):
            cmd, expect = WORKLOADS[wl]
            cmd = QUICK[wl] if a.quick else cmd
            if "{" in cmd:
                try:
                    cmd = cmd.format(**bins)
                except KeyError:
                    print(f"{wl}: left out (no C compiler with OpenMP)", file=sys.stderr)
                    continue
            if expect is None:
                expect = "^" + pipeline_digest(int(cmd.split("head -c ")[1].split()[0])) + " "
            if wl == "numba_parallel":  # compile into the cache once, untimed
                subprocess.run(shlex.split(cmd)[:-2] + ["1", "1"], check=True,
                               capture_output=True)
            for J in js:
                t0 = time.time()
                results.setdefault(wl, {})[J] = experiment(cmd, expect, J, reps, a.quantum_ms)
                print(f"{wl} J={J}: {time.time() - t0:.1f} s", file=sys.stderr)
    load = os.getloadavg()
    print(f"## Unmodified commands: {reps} repetitions, policies interleaved, quantum "
          f"{a.quantum_ms:g} ms, N = {N}; load average at the end {load[0]:.2f}; "
          f"{time.time() - t_start:.0f} s in all\n")
    print("Makespan mean ± 95 % CI (s); ratios of the means (above 1: the second is faster) "
          "± the 95 % CI of the per-repetition ratios.\n")
    for J in js:
        print(table(results, J) + "\n")
    print("Targets (issue 32):\n")
    print("\n".join(targets(results)))
    if 1 in js:
        print("\nAt J = 1, gang starts no thread and sends no signal (one job is never "
              "stopped): its ratio to linux there is the spread of two identical runs.")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"reps": reps, "N": N, "results": results}, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
