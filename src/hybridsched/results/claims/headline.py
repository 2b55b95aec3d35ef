"""The paper's four headline claims (§6.2, §6.5, §7), one verdict line per scheduler and L.

1. dynamic and guided scale near-ideally up to k = N;
2. fork-based schedulers collapse under pinned oversubscription (its control: :mod:`control`);
3. the tuned pipe chunk beats chunk 1 at k = N (Tables 8-9 against 5-7);
4. AIMD is slower than dynamic on a dedicated machine.
"""
from __future__ import annotations

import math

from .. import metrics
from ...core.capabilities import Family
from .common import (COLLAPSE, EQUIVALENT, NEAR_IDEAL, NOT_APPLICABLE, NOT_REPRODUCED,
                     REPRODUCES, CANNOT_TELL, Ctx, Line, bound, faster_by, faster_text, judged, ms,
                     sig)
from ...machine.rule import SHARED_MACHINE
from ..data import fmt

# The paper's σ at k = 24 (§6.2 for guided, §6.5 for dynamic), by scheduler and paper L.
_SIGMA_24 = {("dynamic", 1000): 23.421, ("dynamic", 10000): 23.706,
             ("guided", 1000): 23.497, ("guided", 10000): 23.662}


def claim1(ctx: Ctx) -> list[Line]:
    """dynamic and guided near-ideal (σE ≥ NEAR_IDEAL) at every 2 ≤ k ≤ N."""
    out = []
    ks = [k for k in ctx.ks if 2 <= k <= (ctx.kn or 0)]
    for name in ("dynamic", "guided"):
        for L in ctx.Ls:
            pL = ctx.paper_L(L)
            s24 = _SIGMA_24.get((name, pL))
            paper = (f"σ {s24} at k = 24 (σE = σ/24 = {s24 / 24:.3f})" if s24 else
                     "σE 0.976–0.988 at k = 24 for dynamic and guided")
            subject = f"{name} near-ideal up to k = N, {ctx.L_text(L)}, 2 ≤ k ≤ {ctx.kn}"
            need = {f"pinned {name} at {L=}, k={k}": ctx.get(name, L, k) for k in ks}
            if not need:
                out.append(Line("1", subject, "", paper, CANNOT_TELL,
                                "no k from 2 to N in this study", name, L))
                continue
            why = ctx.guard(need, sigma=True)
            got = [r for r in need.values() if r is not None]
            ours = ", ".join(f"k={r.k}: σE {fmt(r.sigma_e, '.3f')}" for r in got)
            worst = min((r for r in got if not math.isnan(r.sigma_e)), key=lambda r: r.sigma_e,
                        default=None)
            thr = f"σE ≥ {NEAR_IDEAL} at every k"
            if why or worst is None:  # guard passed: a serial time, so a σE at every k
                out.append(Line("1", subject, ours, paper, CANNOT_TELL, why, name, L,
                                worst.k if worst else None, "min sigma_e",
                                worst.sigma_e if worst else math.nan, thr))
                continue
            ok = worst.sigma_e >= NEAR_IDEAL
            out.append(Line("1", subject, ours + f" (min {worst.sigma_e:.3f})", paper,
                            REPRODUCES if ok else NOT_REPRODUCED,
                            "" if ok else f"min σE {worst.sigma_e:.3f} < {NEAR_IDEAL}",
                            name, L, worst.k, "min sigma_e", worst.sigma_e, thr))
    return out


_PAPER_2 = ("fork σ 'roughly 15–16 at k=32, while dynamic threads … sustain speedup above 23' "
            "(§7), about 0.65 of dynamic")


def claim2(ctx: Ctx) -> list[Line]:
    """Fork schedulers pinned at the paper's 32 (k = ⌈4N/3⌉): σ ≤ COLLAPSE × dynamic's σ."""
    out = []
    forks = ctx.names(Family.PROCESS)
    if not forks:
        return [Line("2", "fork collapse under pinned oversubscription", "", _PAPER_2,
                     CANNOT_TELL, "no fork (process-family) scheduler in this study")]
    k = ctx.k_over
    thr = f"σ ≤ {COLLAPSE} × dynamic's σ"
    for name in forks:
        for L in ctx.Ls:
            subject = f"{name} collapses pinned at {ctx.k_text(k)}, {ctx.L_text(L)}"
            if k is None:
                out.append(Line("2", subject, "", _PAPER_2, CANNOT_TELL,
                                f"the study has no k = ⌈4N/3⌉ = {ctx.k_over_wanted} > N = {ctx.n}",
                                name, L))
                continue
            r, d = ctx.get(name, L, k), ctx.get("dynamic", L, k)
            why = ctx.guard({f"pinned {name} at k={k}": r, f"pinned dynamic at k={k}": d})
            pinned = [x for x in ctx.paper_rows if x.scheduler == name and x.L == L
                      and x.affinity and x.chunk == 0 and not math.isnan(x.t_mean)]
            if not why:
                why = ctx.serial_trouble(pinned)
            if not why and max(x.sigma for x in pinned) < 1.0:
                why = (f"premise absent: pinned {name} is below σ = 1 at every k (best "
                       f"{max(x.sigma for x in pinned):.3f}), so there is no speedup to collapse")
            ratio = d.t_mean / r.t_mean if r is not None and d is not None else math.nan
            ours = (f"σ {sig(r)} vs dynamic {sig(d)} → {fmt(ratio, '.3f')} of dynamic "
                    f"(bound k/⌈k/N⌉ = {bound(k, ctx.n):.2f})")
            out.append(judged("2", subject, ours, _PAPER_2, why,
                              lambda: "" if ratio <= COLLAPSE else f"{ratio:.3f} > {COLLAPSE}",
                              name, L, k, "sigma_over_dynamic", ratio, thr))
    return out


# The paper's chunk-1 σ at k = 24 for each pipe scheduler, where it states one.
_PIPE_24 = {("pipe-1to1", 1000): "σ 23.649 (§6.5)", ("pipe-1toN", 1000): "σ 22.753 (Table 6)",
            ("pipe-1toN", 10000): "σ 23.270 (Table 6)", ("pipe-MtoM", 10000): "σ 23.580 (§6.5)",
            ("pipe-MtoM", 1000): "σE ≥ 0.982 up to k = 24 (Table 7)"}
_TUNED = {1000: "chunk 12 'maximized performance in terms of execution time' (§5.1), Table 8 "
                "σ 20.560–20.834 at chunk 12",
          10000: "chunk 105 'maximized performance in terms of execution time' (§5.1), Table 9 "
                 "σ 23.209–23.255 at chunk 105"}


def claim3(ctx: Ctx) -> list[Line]:
    """The tuned pipe chunk is faster than chunk 1 at k = N, beyond the 1 % rule."""
    out = []
    pipes = ctx.names(Family.PIPE)
    if not pipes:
        return [Line("3", "tuned pipe chunk faster than chunk 1", "", _TUNED[1000],
                     CANNOT_TELL, "no pipe scheduler in this study")]
    k = ctx.kn
    thr = f"tuned faster by more than {EQUIVALENT * 100:.0f} %"
    for name in pipes:
        for L in ctx.Ls:
            pL = ctx.paper_L(L)
            paper = ctx.paper_fig(_TUNED, L, _TUNED[1000]) + (
                f"; chunk 1: {_PIPE_24[(name, pL)]}" if (name, pL) in _PIPE_24 else "")
            subject = f"{name} tuned chunk faster than chunk 1 at {ctx.k_text(k)}, {ctx.L_text(L)}"
            one = ctx.get(name, L, k)
            tuned = [r for r in ctx.configs(name, L, k) if r.chunk > 0]
            best = min(tuned, key=lambda r: r.t_mean) if tuned else None
            why = ctx.guard({f"pinned {name} chunk 1 at k={k}": one,
                             f"pinned {name} at a tuned chunk at k={k}": best})
            gain = faster_by(best, one) if one is not None and best is not None else math.nan
            ours = (f"chunk {best.chunk} {ms(best)} (σ {sig(best)}) vs chunk 1 {ms(one)} "
                    f"(σ {sig(one)}): {faster_text(gain, 'tuned')}" if best is not None else
                    f"no tuned chunk; chunk 1 {ms(one)} (σ {sig(one)})")
            out.append(judged("3", subject, ours, paper, why,
                              lambda: "" if gain > EQUIVALENT else
                              "practically equivalent (within 1 %)"
                              if best is not None and one is not None
                              and metrics.practically_equivalent(best.t_mean, one.t_mean)
                              else "chunk 1 faster", name, L, k, "tuned_faster_by", gain, thr))
    return out


_PAPER_4 = ("AIMD 'generally weaker than the dynamic and guided schedulers', on 'an isolated "
            "environment without … external background contention' (§6.2); no figure")


def claim4(ctx: Ctx) -> list[Line]:
    """AIMD slower than dynamic by more than 1 % at k = N and at the paper's 32, on a
    dedicated machine (data.dedicated over every run of the study)."""
    out = []
    shared = ctx.shared_study()
    thr = f"AIMD slower by more than {EQUIVALENT * 100:.0f} %"
    for L in ctx.Ls:
        for k in dict.fromkeys(x for x in (ctx.kn, ctx.k_over) if x is not None):
            subject = f"AIMD slower than dynamic at {ctx.k_text(k)}, {ctx.L_text(L)}"
            a, d = ctx.get("aimd", L, k), ctx.get("dynamic", L, k)
            gap = faster_by(d, a) if a is not None and d is not None else math.nan
            ours = (f"aimd {ms(a)} (σ {sig(a)}) vs dynamic {ms(d)} (σ {sig(d)}): "
                    f"{faster_text(gap, 'dynamic')}")
            why = ctx.missing({f"pinned aimd at k={k}": a, f"pinned dynamic at k={k}": d})
            if not why and shared:
                out.append(Line("4", subject, ours, _PAPER_4, NOT_APPLICABLE,
                                f"more than one run in ten had other processes above "
                                f"{SHARED_MACHINE * 100:.0f} % of the CPUs", "aimd", L, k,
                                "aimd_slower_by", gap, thr))
                continue
            if not why and shared is None:
                why = "dedicated or shared machine not recorded (no foreign-CPU figures)"
            if not why and a is not None and d is not None:  # both: missing() says so
                why = ctx.disturbed([a, d])
            out.append(judged("4", subject, ours, _PAPER_4, why,
                              lambda: "" if gap > EQUIVALENT else
                              "practically equivalent (within 1 %)" if gap > -EQUIVALENT
                              else "AIMD faster", "aimd", L, k, "aimd_slower_by", gap, thr))
    if not out:
        out.append(Line("4", "AIMD slower than dynamic", "", _PAPER_4, CANNOT_TELL,
                        "no k = N in this study"))
    return out
