"""Every quantitative §6 (and §5.1) statement a study can check, one verdict line each."""
from __future__ import annotations

import math

from .. import metrics
from ...core.capabilities import Family
from .common import (COLLAPSE, EQUIVALENT, NEAR_IDEAL, NOT_REPRODUCED, REPRODUCES,
                     CANNOT_TELL, Ctx, Line, faster_by, faster_text, judged, ms, sig)
from ..data import fmt

_1TON = {1000: "σ 15.335, σE 0.479 at k = 32 on N = 24 (Table 6), σ/N = 0.64",
         10000: "σ 15.909, σE 0.497 at k = 32 on N = 24 (Table 6), σ/N = 0.66"}


def pipe_1ton_collapse(ctx: Ctx) -> list[Line]:
    """pipe-1toN collapses beyond N: σ ≤ COLLAPSE × N at the paper's 32, having scaled to
    more than that at k = N (the premise)."""
    out = []
    k = ctx.k_over
    thr = f"σ ≤ {COLLAPSE} N"
    for L in ctx.Ls:
        subject = f"pipe-1toN collapses beyond N at {ctx.k_text(k)}, {ctx.L_text(L)}"
        paper = ctx.paper_fig(_1TON, L)
        if k is None:
            out.append(ctx.no_k_over("6.1a", subject, paper, "pipe-1toN", L))
            continue
        r, rn = ctx.get("pipe-1toN", L, k), ctx.get("pipe-1toN", L, ctx.kn)
        why = ctx.guard({f"pinned pipe-1toN at k={k}": r, f"pinned pipe-1toN at k={ctx.kn}": rn},
                        sigma=True)
        share = r.sigma / ctx.n if r is not None else math.nan
        ours = (f"σ {sig(r)}, σE {fmt(r.sigma_e if r else math.nan, '.3f')}, σ/N = "
                f"{fmt(share, '.3f')} (σ {sig(rn)} at k = {ctx.kn})")
        if not why and rn is not None and rn.sigma <= COLLAPSE * ctx.n:
            why = (f"premise absent: pipe-1toN is already at σ {rn.sigma:.3f} ≤ {COLLAPSE} N at "
                   f"k = {ctx.kn}, so there is no collapse beyond N to judge")
        out.append(judged("6.1a", subject, ours, paper, why,
                          lambda: "" if share <= COLLAPSE else f"σ/N {share:.3f} > {COLLAPSE}",
                          "pipe-1toN", L, k, "sigma_over_n", share, thr))
    return out


_SUSTAIN = {("pipe-1to1", 1000): "σ 23.715 at k = 32 (§6.5); σE 0.738–0.741 (Table 5)",
            ("pipe-1to1", 10000): "σ 'approximately 23.6', σE 0.738–0.741 at k = 32 (Table 5)",
            ("pipe-MtoM", 1000): "σ 'above 23' at k = 32 (§7)",
            ("pipe-MtoM", 10000): "σ 23.608, σE 0.738 at k = 32 (Table 7)"}


def pipes_sustain(ctx: Ctx) -> list[Line]:
    """pipe-1to1 and pipe-MtoM hold σ ≈ N beyond N (σE ≈ 0.74 = 0.98 × N/k at k = 32)."""
    out = []
    k = ctx.k_over
    thr = f"σ ≥ {NEAR_IDEAL} N (σE ≥ {NEAR_IDEAL} × N/k)"
    for name in ("pipe-1to1", "pipe-MtoM"):
        for L in ctx.Ls:
            subject = f"{name} sustains σ ≈ N beyond N at {ctx.k_text(k)}, {ctx.L_text(L)}"
            paper = _SUSTAIN.get((name, ctx.paper_L(L)), "σE 0.738–0.741 at k = 32")
            if k is None:
                out.append(ctx.no_k_over("6.1b", subject, paper, name, L))
                continue
            r = ctx.get(name, L, k)
            why = ctx.guard({f"pinned {name} at k={k}": r}, sigma=True)
            share = r.sigma / ctx.n if r is not None else math.nan
            ours = (f"σ {sig(r)}, σE {fmt(r.sigma_e if r else math.nan, '.3f')}, σ/N = "
                    f"{fmt(share, '.3f')}")
            out.append(judged("6.1b", subject, ours, paper, why,
                              lambda: "" if share >= NEAR_IDEAL else
                              f"σ/N {share:.3f} < {NEAR_IDEAL}",
                              name, L, k, "sigma_over_n", share, thr))
    return out


def mtom_vs_1ton(ctx: Ctx) -> list[Line]:
    """MtoM faster than 1toN at the paper's 32 by at least 1/COLLAPSE - 1 (43 %)."""
    out = []
    k = ctx.k_over
    need_gain = 1.0 / COLLAPSE - 1.0
    thr = f"MtoM faster by ≥ {need_gain * 100:.0f} % (1toN ≤ {COLLAPSE} × MtoM)"
    paper = "'a 48% improvement over the one-to-many scheduler' at k = 32 (§5.1)"
    for L in ctx.Ls:
        subject = f"pipe-MtoM far ahead of pipe-1toN at {ctx.k_text(k)}, {ctx.L_text(L)}"
        if k is None:
            out.append(ctx.no_k_over("6.1c", subject, paper, "pipe-MtoM", L))
            continue
        m, o = ctx.get("pipe-MtoM", L, k), ctx.get("pipe-1toN", L, k)
        why = ctx.guard({f"pinned pipe-MtoM at k={k}": m, f"pinned pipe-1toN at k={k}": o})
        gain = faster_by(m, o) if m is not None and o is not None else math.nan
        ours = f"MtoM {ms(m)} vs 1toN {ms(o)}: {faster_text(gain, 'MtoM')}"
        out.append(judged("6.1c", subject, ours, paper, why,
                          lambda: "" if gain >= need_gain else
                          f"{gain * 100:+.1f} % < {need_gain * 100:.0f} %",
                          "pipe-MtoM", L, k, "mtom_faster_by", gain, thr))
    return out


_PRO = {1000: "prolific 'approximately 1.5% better' (§6.1)",
        10000: "prolific 'approximately 2.4% better' (§6.1)"}


def _faster_line(ctx, claim, subject, a, b, la, lb, paper, scheduler, L, k, figure):
    """a faster than b beyond the 1 % rule (times, so T_serial does not enter)."""
    thr = f"{la} faster by more than {EQUIVALENT * 100:.0f} %"
    why = ctx.guard({f"pinned {la} at k={k}": a, f"pinned {lb} at k={k}": b})
    gain = faster_by(a, b) if a is not None and b is not None else math.nan
    ours = f"{la} {ms(a)} vs {lb} {ms(b)}: {faster_text(gain, la)}"
    return judged(claim, subject, ours, paper, why,
                  lambda: "" if gain > EQUIVALENT else "practically equivalent (within 1 %)"
                  if gain > -EQUIVALENT else f"{lb} faster", scheduler, L, k, figure, gain, thr)


def prolific_vs_collective(ctx: Ctx) -> list[Line]:
    k = ctx.kn
    return [_faster_line(ctx, "6.1d", f"prolific ≈ 2 % faster than collective at {ctx.k_text(k)}, "
                         f"{ctx.L_text(L)}", ctx.get("prolific", L, k), ctx.get("collective", L, k),
                         "prolific", "collective",
                         ctx.paper_fig(_PRO, L, _PRO[1000]) + "; 'overall approximately 2% better'",
                         "prolific", L, k, "prolific_faster_by") for L in ctx.Ls]


def pipe_ranking_flip(ctx: Ctx) -> list[Line]:
    """At k = N, 1to1 ahead of MtoM at the smaller L and MtoM ahead at the larger L, each by
    more than 1 % (fastest chunk of each, as Tables 8-9 tune it)."""
    k = ctx.kn
    paper = ("L=1000: 1to1 ahead of MtoM by 'approximately 1.7%'; L=10000: MtoM ahead by "
             "'approximately 0.1%' at k=24 (§6.1)")
    subject = f"the pipe ranking flips with L at {ctx.k_text(k)} (1to1 vs MtoM, fastest chunk each)"
    thr = f"each lead beyond {EQUIVALENT * 100:.0f} %, in opposite directions"
    if len(ctx.Ls) < 2:
        return [Line("6.1e", subject, "", paper, CANNOT_TELL, "the study has only one L",
                     "pipe-1to1", None, k, "", math.nan, thr)]
    leads, parts, why = [], [], ""
    for L in (ctx.Ls[0], ctx.Ls[-1]):
        a = min(ctx.configs("pipe-1to1", L, k), key=lambda r: r.t_mean, default=None)
        b = min(ctx.configs("pipe-MtoM", L, k), key=lambda r: r.t_mean, default=None)
        why = why or ctx.guard({f"pinned pipe-1to1 at L={L}, k={k}": a,
                                f"pinned pipe-MtoM at L={L}, k={k}": b})
        if a is None or b is None:
            continue
        lead = faster_by(a, b)
        leads.append(lead)
        parts.append(f"L = {L}: 1to1 (chunk {a.chunk or 1}) {ms(a)} vs MtoM (chunk {b.chunk or 1}) "
                     f"{ms(b)}, {faster_text(lead, '1to1')}")
    ours = "; ".join(parts)
    if not why and any(abs(x) < EQUIVALENT for x in leads):
        why = ("within 1 % at one L: practically equivalent, so the ranking there is noise "
               "(as the paper's own 0.1 % at L = 10000 is)")
    return [judged("6.1e", subject, ours, paper, why,
                   lambda: "" if leads[0] > 0 > leads[1] else
                   "the ranking does not flip from 1to1 to MtoM",
                   "pipe-1to1", None, k, "lead_small_L", leads[0] if leads else math.nan, thr)]


_GA = {1000: "guided σ 23.497 vs adaptive 23.495 at k = 24, 'well within the 1% noise threshold' (§6.2)",
       10000: "guided σ 23.662 vs adaptive 23.565 at k = 24, 'well within the 1% noise threshold' (§6.2)"}


def _apart(a, b) -> str:
    """'' where a and b are practically equivalent (the 1 % rule), else what differs."""
    return "" if metrics.practically_equivalent(a.t_mean, b.t_mean) else "more than 1 % apart"


def guided_vs_adaptive(ctx: Ctx) -> list[Line]:
    out = []
    k = ctx.kn
    thr = f"within {EQUIVALENT * 100:.0f} % (practically equivalent)"
    for L in ctx.Ls:
        subject = f"guided ≈ adaptive at {ctx.k_text(k)}, {ctx.L_text(L)}"
        paper = ctx.paper_fig(_GA, L, _GA[1000])
        g, a = ctx.get("guided", L, k), ctx.get("adaptive", L, k)
        why = ctx.guard({f"pinned guided at k={k}": g, f"pinned adaptive at k={k}": a})
        gap = faster_by(g, a) if g is not None and a is not None else math.nan
        ours = f"guided {ms(g)} vs adaptive {ms(a)}: {faster_text(gap, 'guided')}"
        out.append(judged("6.2", subject, ours, paper, why, lambda: _apart(g, a), "guided", L,
                          k, "guided_faster_by", gap, thr))
    return out


def fork_affinity(ctx: Ctx) -> list[Line]:
    """§6.3 for the fork schedulers: pinned and unpinned comparable at k = N; pinned faster
    (less degradation) oversubscribed, at the paper's 32."""
    out = []
    at_n = "affinity on and off 'exhibited comparable execution times' (§6.3); no figure"
    over = ("'in oversubscribed configurations, affinity also served to limit unnecessary "
            "processor migrations … reducing the associated performance degradation' (§6.3); no figure")
    for name in ctx.names(Family.PROCESS):
        for L in ctx.Ls:
            k = ctx.kn
            on, off = ctx.get(name, L, k), ctx.get(name, L, k, False)
            subject = f"{name} affinity on ≈ off at {ctx.k_text(k)}, {ctx.L_text(L)}"
            why = ctx.guard({f"pinned {name} at k={k}": on, f"unpinned {name} at k={k}": off})
            gap = faster_by(on, off) if on is not None and off is not None else math.nan
            ours = f"on {ms(on)} vs off {ms(off)}: {faster_text(gap, 'on')}"
            thr = f"within {EQUIVALENT * 100:.0f} %"
            out.append(judged("6.3", subject, ours, at_n, why, lambda: _apart(on, off), name,
                              L, k, "pinned_faster_by", gap, thr))
            k = ctx.k_over
            subject = f"{name} affinity helps oversubscribed at {ctx.k_text(k)}, {ctx.L_text(L)}"
            if k is None:
                out.append(ctx.no_k_over("6.3", subject, over, name, L))
                continue
            out.append(_faster_line(ctx, "6.3", subject, ctx.get(name, L, k),
                                    ctx.get(name, L, k, False), "pinned", "unpinned", over, name,
                                    L, k, "pinned_faster_by"))
    return out


def alpha_rises(ctx: Ctx) -> list[Line]:
    """§6.4: the Karp-Flatt α (Eq. 8, nominal k as in the tables) is larger at the paper's
    32 than at k = N, for every pinned default-chunk scheduler with both rows."""
    out = []
    paper = ("oversubscription 'resulted in reduced parallel efficiency and increased estimated "
             "serialization fractions α' (§6.4); no figure")
    k0, k1 = ctx.kn, ctx.k_over
    thr = "α(k) > α(N) for every scheduler"
    for L in ctx.Ls:
        subject = f"α rises beyond N, k = {k0} → {ctx.k_text(k1)}, {ctx.L_text(L)}"
        if k1 is None:
            out.append(ctx.no_k_over("6.4", subject, paper, "", L))
            continue
        pairs, skipped = [], []
        for name in ctx.names(Family.THREAD) + ctx.names(Family.PROCESS) + ctx.names(Family.PIPE):
            a, b = ctx.get(name, L, k0), ctx.get(name, L, k1)
            if a is None or b is None:
                continue
            if ctx.disturbed([a, b]):
                skipped.append(name)
                continue
            pairs.append((name, a, b))
        trouble = ctx.serial_trouble([r for _, a, b in pairs for r in (a, b)]) if pairs else \
            ("no scheduler has both k undisturbed" if skipped else "no scheduler has both k")
        ours = ", ".join(f"{s} {fmt(a.alpha, '.3f')}→{fmt(b.alpha, '.3f')} (ε(k_eff) "
                         f"{fmt(b.epsilon, '.3f')})" for s, a, b in pairs)
        if skipped:
            ours += f"; left out (shared machine): {', '.join(skipped)}"
        if trouble:
            out.append(Line("6.4", subject, ours, paper, CANNOT_TELL, trouble, "", L, k1,
                            "schedulers_alpha_rising", math.nan, thr))
            continue
        flat = [s for s, a, b in pairs if not b.alpha > a.alpha]
        out.append(Line("6.4", subject, ours, paper, NOT_REPRODUCED if flat else REPRODUCES,
                        f"α does not rise for {', '.join(flat)}" if flat else "", "", L, k1,
                        "schedulers_alpha_rising", float(len(pairs) - len(flat)), thr))
    return out


STATEMENTS = (pipe_1ton_collapse, pipes_sustain, mtom_vs_1ton, prolific_vs_collective,
              pipe_ranking_flip, guided_vs_adaptive, fork_affinity, alpha_rises)
