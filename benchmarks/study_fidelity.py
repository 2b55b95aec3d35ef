#!/usr/bin/env python3
"""The fidelity check of the paper's defaults on this machine (issue 8's measurement).

Runs the `scaled` preset (the §5 matrix on this machine's N cores) with the paper's
defaults, then resumes the same file with the named variants beside them: the batched pipe
protocol (``--pipe-batch 256 --inflight 2``, the previous defaults) and ``adaptive-frame``.
Then writes the report and prints what the issue asks for:

- the pipe schedulers' sigma_E at k = N and k = 16 N, paper protocol against batched;
- AIMD's window trace and sigma_E at k = N with the per-run monitor;
- adaptive against adaptive-frame;
- the claims section of the report (verdicts with both figures, the claim-2 control).

Usage: python benchmarks/study_fidelity.py [--reps R] [--out FILE.h5] [--report-only]
Run it on a quiet machine: other load is recorded with every run and shown in the report.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

from hybridsched.results.data import load_study, summarise
from hybridsched.store import read_detail, read_runs
from hybridsched.oslayer.cpus import n_cpus


def hybridsched(*args: str) -> None:
    cmd = [sys.executable, "-m", "hybridsched", *args]
    print("+", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    rc = subprocess.call(cmd)
    if rc not in (0, 1):  # 1: some run failed or was unverified (reported in the file)
        sys.exit(rc)


def pipe_table(rows, n: int) -> list[str]:
    out = ["| scheduler | L | k | σE paper protocol | σE batched (256/write, 2 in flight) | batched / paper |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.family != "pipe" or r.chunk != 0 or not r.paper_protocol or r.k not in (n, 16 * n):
            continue
        var = [v for v in rows if (v.scheduler, v.L, v.k, v.chunk, v.affinity) ==
               (r.scheduler, r.L, r.k, r.chunk, r.affinity) and not v.paper_protocol]
        b = var[0].sigma_e if var else float("nan")
        out.append(f"| {r.scheduler} | {r.L} | {r.k} | {r.sigma_e:.3f} | {b:.3f} | {b / r.sigma_e:.3f} |")
    return out


def aimd_lines(path: str, rows, n: int) -> list[str]:
    runs = read_runs(path)
    out = []
    for L in sorted({r.L for r in rows}):
        a = [r for r in rows if r.scheduler == "aimd" and r.L == L and r.k == n and r.affinity]
        d = [r for r in rows if r.scheduler == "dynamic" and r.L == L and r.k == n and r.affinity]
        if not a:
            continue
        out.append(f"- L = {L}, k = N = {n}: aimd σE {a[0].sigma_e:.3f} (T {a[0].t_mean * 1e3:.1f} ms)"
                   + (f" vs dynamic σE {d[0].sigma_e:.3f}" if d else ""))
        sel = runs[(runs["scheduler"] == "aimd") & (runs["L"] == L) & (runs["k"] == n)
                   & runs["verified"] & (runs["rep"] == 0)]
        for rid in sel["run_id"][:1]:
            win = read_detail(path, int(rid)).series.get("aimd_window")
            if win is None or len(win) == 0:
                out.append("  (no window trace stored)")
                continue
            w = win["window"]
            changes = [0] + [i for i in range(1, len(w)) if w[i] != w[i - 1]]
            steps = ", ".join(f"t={win['t'][i] * 1e3:.0f} ms: {w[i]} (U={win['u'][i]:.2f})"
                              for i in changes[:12])
            out.append(f"  window trace (run {int(rid)}, {len(w)} entries): {steps}"
                       + (" …" if len(changes) > 12 else "")
                       + f"; time at window 1: {np.mean(w == 1) * 100:.0f} % of completions")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="fidelity.h5")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    n = n_cpus()
    if not a.report_only:
        hybridsched("run", "--preset", "scaled", "--reps", str(a.reps), "--out", a.out,
                    *(["--resume"] if os.path.exists(a.out) else []))
        hybridsched("run", "--preset", "scaled", "--reps", str(a.reps), "--out", a.out, "--resume",
                    "-s", "pipe-1to1,pipe-1toN,pipe-MtoM", "--pipe-batch", "256", "--inflight", "2")
        hybridsched("run", "--preset", "scaled", "--reps", str(a.reps), "--out", a.out, "--resume",
                    "-s", "adaptive-frame")
    study = load_study(a.out)
    rows = summarise(study.runs, study.n, study.util, study.foreign)
    print(f"# Fidelity study on N = {n}: {len(study.runs)} runs, "
          f"{int(study.runs['verified'].sum())} verified\n")
    print("## Pipe schedulers, paper protocol against batched\n")
    print("\n".join(pipe_table(rows, n)))
    print("\n## AIMD with the per-run monitor (1 s samples over the cpuset)\n")
    print("\n".join(aimd_lines(a.out, rows, n)))
    print("\n## adaptive (per chunk, the paper) against adaptive-frame (variant)\n")
    for r in rows:
        if r.scheduler == "adaptive" and r.affinity and r.k in (n, 16 * n):
            v = [x for x in rows if x.scheduler == "adaptive-frame" and (x.L, x.k, x.affinity) == (r.L, r.k, True)]
            if v:
                print(f"- L = {r.L}, k = {r.k}: adaptive σE {r.sigma_e:.3f}, adaptive-frame σE "
                      f"{v[0].sigma_e:.3f}")
    report_dir = os.path.splitext(a.out)[0] + "_report"
    text = subprocess.run([sys.executable, "-m", "hybridsched", "report", a.out, "--out-dir",
                           report_dir], capture_output=True, text=True).stdout
    claims = text[text.find("## The paper's claims"):]
    print("\n" + claims)


if __name__ == "__main__":
    main()
