"""The paper's four headline claims, each with the figures of a study needed to judge it.

1. dynamic and guided scale near-ideally up to k = N (§6.2, §7);
2. fork-based schedulers (prolific, collective) collapse under pinned oversubscription
   (§6.5, §7: σ 15-16 at k = 32 on N = 24 against > 23 for dynamic threads);
3. the pipe chunk trade-off: chunk 1 against the tuned chunk (§6.1, Tables 8-9);
4. AIMD stays below dynamic on a dedicated machine (§6.2).

Each verdict is a reading of the figures with the threshold stated beside it; the figures
are what matters. Works on any scheduler names: families come from the study.
"""
from __future__ import annotations

import math
import numpy as np

from . import metrics
from .data import Row, dedicated, fmt, k_at_n

# σE at or above this at every k <= N reads as "near-ideal". The paper reports 0.97-0.99
# for dynamic/guided at k = 24; 0.9 leaves room for timing noise on a small shared box
# while still failing a scheduler that loses a tenth of the machine.
NEAR_IDEAL = 0.90
# A fork scheduler "collapses" when, at the first oversubscribed k, its speedup is below
# this share of dynamic's at the same k (the paper: 15.3/23.5 = 0.65). 0.9 separates a
# collapse from the few-percent fork/IPC cost the paper also sees at k <= N.
COLLAPSE = 0.90
# σE above this cannot be scaling (the workload has no super-linear effect worth 5 %): it
# means T_serial was measured slower than the parallel runs (load, frequency), so the
# claim cannot be judged from this study.
SUPERLINEAR = 1.05

_PAPER = {
    1: "paper: σE 0.97–0.99 at k = 24 for dynamic and guided (Tables 11–12).",
    2: "paper: prolific/collective σ ≈ 15–16 at k = 32 on N = 24 (pinned round-robin puts two "
       "workers on 8 cores, bound k/⌈k/N⌉ = 16) against σ > 23 for dynamic (§7).",
    3: "paper (k = 24): chunk 1 σ 22.8–23.6 (Tables 5–7); tuned chunk 12 (L=1000) σ 20.6–20.8, "
       "105 (L=10000) σ 23.2–23.3 (Tables 8–9).",
    4: "paper: AIMD below dynamic and guided at every k (Table 15 vs 11), on an idle machine.",
}


def _index(rows: list[Row]) -> dict:
    return {(r.scheduler, r.L, r.k, r.affinity, r.chunk): r for r in rows
            if r.reps and r.P == 1 and r.paper_protocol}


def _parallel_ks(rows: list[Row]) -> list[int]:
    return sorted({r.k for r in rows if r.family != "serial" and r.reps})


def _claim1(rows, idx, n, recs) -> list[str]:
    out = []
    ks = [k for k in _parallel_ks(rows) if not n or k <= n]
    for name in ("dynamic", "guided"):
        for L in sorted({r.L for r in rows}):
            cells = [idx.get((name, L, k, True, 0)) for k in ks]
            got = [(k, r) for k, r in zip(ks, cells) if r is not None and not math.isnan(r.sigma_e)]
            if not got:
                continue
            worst = min(r.sigma_e for _, r in got)
            ok = worst >= NEAR_IDEAL
            seq = ", ".join(f"k={k}: {r.sigma_e:.3f}" for k, r in got)
            verdict = ("near-ideal — reproduces" if ok else
                       f"below {NEAR_IDEAL} — does not reproduce")
            top = max(r.sigma_e for _, r in got)
            if top > SUPERLINEAR:
                ok = False
                verdict = (f"max σE {top:.3f} > {SUPERLINEAR}: T_serial was disturbed (see the "
                           "header) — inconclusive")
            out.append(f"- {name}, L = {L}: σE {seq} → min {worst:.3f}: {verdict}")
            recs += [dict(claim=1, L=L, k=k, scheduler=name, figure="sigma_e", value=r.sigma_e,
                          verdict=verdict) for k, r in got]
    return out


def _claim2(rows, idx, n, recs) -> list[str]:
    ks = _parallel_ks(rows)
    over = [k for k in ks if n and k > n]
    forks = sorted({r.scheduler for r in rows if r.family == "process"})
    if not forks:
        return ["- no process-family (fork) schedulers in this study."]
    if not over:
        return [f"- no k > N = {n} in this study: oversubscription not measured."]
    out = []
    k_over, kmax = over[0], over[-1]
    kn = k_at_n(rows, n)
    if k_over % n == 0:
        out.append(f"- note: the first oversubscribed k = {k_over} is a multiple of N = {n}, so pinned "
                   "round-robin is balanced there; the paper's collapse needs k like 4N/3.")
    for L in sorted({r.L for r in rows}):
        dyn = idx.get(("dynamic", L, k_over, True, 0))
        for name in forks:
            r_n, r_o, r_m = (idx.get((name, L, k, True, 0)) for k in (kn, k_over, kmax))
            off = idx.get((name, L, k_over, False, 0))
            if r_o is None:
                continue
            ratio = r_o.sigma / dyn.sigma if dyn is not None and dyn.sigma > 0 else math.nan
            bound = k_over / math.ceil(k_over / n)
            verdict = ("—" if math.isnan(ratio) else "collapses — reproduces" if ratio < COLLAPSE
                       else "no collapse — does not reproduce")
            sig = lambda r: fmt(r.sigma if r is not None else math.nan, ".3f")  # noqa: E731
            out.append(
                f"- {name}, L = {L}: σ(k={kn}) {sig(r_n)}, σ(k={k_over}) {sig(r_o)} pinned "
                f"(bound k/⌈k/N⌉ = {bound:.2f}), {sig(off)} unpinned, σ(k={kmax}) {sig(r_m)}; "
                f"ε(k_eff) at k={k_over} {fmt(r_o.epsilon, '.4f')}; dynamic σ(k={k_over}) "
                f"{sig(dyn)} → fork/dynamic {fmt(ratio, '.3f')}: {verdict}")
            recs.append(dict(claim=2, L=L, k=k_over, scheduler=name, figure="sigma_over_dynamic",
                             value=ratio, verdict=verdict))
    return out


def _claim3(rows, idx, n, recs) -> list[str]:
    out = []
    pipes = sorted({r.scheduler for r in rows if r.family == "pipe"})
    if not pipes:
        return ["- no pipe-family schedulers in this study."]
    for L in sorted({r.L for r in rows}):
        for name in pipes:
            for k in _parallel_ks(rows):
                cand = sorted((r for r in rows if r.scheduler == name and r.L == L and r.k == k
                               and r.affinity and r.reps and not math.isnan(r.t_mean)),
                              key=lambda r: r.chunk)
                if len(cand) < 2:
                    continue
                best = min(cand, key=lambda r: r.t_mean)
                parts = [f"chunk {r.chunk or 'default (' + r.chunk_used + ')'}: "
                         f"T {r.t_mean * 1e3:.2f} ms, σ {fmt(r.sigma, '.3f')}" for r in cand]
                others = [r for r in cand if r is not best]
                gap = min(r.t_mean for r in others) / best.t_mean - 1.0
                lab = best.chunk or f"default ({best.chunk_used})"
                verdict = (f"chunk {lab} fastest by {gap * 100:.1f} %"
                           + (" — practically equivalent" if gap < metrics.EQUIVALENT else ""))
                out.append(f"- {name}, L = {L}, k = {k}: " + "; ".join(parts) + f" → {verdict}")
                recs += [dict(claim=3, L=L, k=k, scheduler=name, figure=f"t_s chunk={r.chunk}",
                              value=r.t_mean, verdict=verdict) for r in cand]
    return out or ["- no pipe scheduler was run with more than one chunk value at the same k "
                   "(the paper and scaled presets add the tuned chunk at k = N)."]


def _claim4(rows, idx, n, recs, attrs) -> list[str]:
    out = []
    kn = k_at_n(rows, n)
    for L in sorted({r.L for r in rows}):
        for k in _parallel_ks(rows):
            a, d = idx.get(("aimd", L, k, True, 0)), idx.get(("dynamic", L, k, True, 0))
            if a is None or d is None:
                continue
            gap = a.t_mean / d.t_mean - 1.0
            verdict = ("AIMD slower — reproduces" if gap >= metrics.EQUIVALENT else
                       "practically equivalent — does not reproduce" if gap > -metrics.EQUIVALENT
                       else "AIMD faster — does not reproduce")
            mark = " (k = N)" if k == kn else ""
            out.append(f"- L = {L}, k = {k}{mark}: σ aimd {fmt(a.sigma, '.3f')} vs dynamic "
                       f"{fmt(d.sigma, '.3f')} (AIMD time {gap * 100:+.1f} %), U_N {fmt(a.u_n, '.3f')} "
                       f"vs {fmt(d.u_n, '.3f')}: {verdict}")
            recs.append(dict(claim=4, L=L, k=k, scheduler="aimd", figure="time_gap_vs_dynamic",
                             value=gap, verdict=verdict))
    if not out:
        return ["- aimd and dynamic are not both in this study."]
    other = [r.foreign_cpu for r in rows
             if r.scheduler in ("aimd", "dynamic") and not math.isnan(r.foreign_cpu)]
    if other:
        mid = float(np.median(other))
        state = ("a dedicated machine" if dedicated(other) else
                 "a shared machine, where AIMD's throttling is meant to help and this claim does "
                 "not apply")
        out.append(f"- dedicated machine? other processes used a median {mid * 100:.1f} % "
                   f"(max {max(other) * 100:.1f} %) of the N = {n} CPUs during the aimd and "
                   f"dynamic runs: {state}.")
    else:
        out.append("- dedicated machine? not recorded (no foreign-CPU figures in this study).")
    return out


def _collect(rows: list[Row], n: int, attrs: dict | None):
    idx = _index(rows)
    recs: list[dict] = []
    sections = [
        ("1. dynamic and guided near-ideal up to k = N", _claim1(rows, idx, n, recs)),
        ("2. fork-based collapse under pinned oversubscription", _claim2(rows, idx, n, recs)),
        ("3. the pipe chunk trade-off", _claim3(rows, idx, n, recs)),
        ("4. AIMD below dynamic on a dedicated machine", _claim4(rows, idx, n, recs, attrs)),
    ]
    return sections, recs


def claims_markdown(rows: list[Row], n: int, attrs: dict | None = None) -> str:
    """One section per claim: this study's figures, a verdict, and the paper's figure."""
    sections, _ = _collect(rows, n, attrs)
    out = []
    for i, (title, lines) in enumerate(sections, 1):
        out += [f"### {title}", "", *(lines or ["- not measured in this study."]),
                f"- {_PAPER[i]}", ""]
    return "\n".join(out)


def claims_records(rows: list[Row], n: int) -> list[dict]:
    """The figures behind the verdicts, one record each (claims.csv)."""
    return _collect(rows, n, None)[1]
