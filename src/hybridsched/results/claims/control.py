"""The control for claim 2, a finding the paper does not make.

With static hand-out (prolific and collective give frame i to worker i mod k, §4; `static`
threads one block each) and worker w pinned to CPU w mod N, the busiest CPU runs ⌈k/N⌉
equal shares, so any worker type is bounded by σ ≤ k/⌈k/N⌉. Pinned static threads and
unpinned forks separate the three suspects: fork(), pinning, static assignment.
"""
from __future__ import annotations

import math

from .common import COLLAPSE, Ctx, bound, record, sig
from ..data import fmt
from ...core.capabilities import is_baseline

# (scheduler, pinned) in table order; dynamic pinned is the reference.
_CELLS = (("prolific", True), ("prolific", False), ("collective", True), ("collective", False),
          ("static", True), ("static", False), ("dynamic", True))


def control_ks(ctx: Ctx) -> list[int]:
    """The first unbalanced oversubscribed k (k > N, not a multiple of N) and the largest
    pinned k of the study."""
    pinned = sorted({r.k for r in ctx.paper_rows if r.affinity and not is_baseline(r.family)})
    unbal = [k for k in pinned if ctx.n and k > ctx.n and k % ctx.n]
    over = [k for k in pinned if ctx.n and k > ctx.n]
    return list(dict.fromkeys(([unbal[0]] if unbal else []) + ([over[-1]] if over else [])))


def _ratio(r, d) -> float:
    return d.t_mean / r.t_mean if r is not None and d is not None else math.nan


def attribution(ctx: Ctx, L: int, k: int) -> tuple[str, str]:
    """(finding label, the sentence the data supports) at (L, k)."""
    get = {(s, p): ctx.get(s, L, k, p) for s, p in _CELLS}
    d = get[("dynamic", True)]
    fork_on = {s: get[(s, True)] for s in ("prolific", "collective") if get[(s, True)]}
    fork_off = {s: get[(s, False)] for s in ("prolific", "collective") if get[(s, False)]}
    st_on, st_off = get[("static", True)], get[("static", False)]
    gone = ([] if d else ["pinned dynamic"]) + ([] if fork_on else ["pinned forks"]) + \
        ([] if st_on else ["pinned static threads"]) + ([] if fork_off else ["unpinned forks"])
    if gone:
        return "incomplete", (f"the control is incomplete at L = {L}, k = {k}: the study has no "
                              + ", ".join(gone) + " (the scaled preset runs them all).")
    rat = lambda r: _ratio(r, d)  # noqa: E731
    col = lambda r: rat(r) <= COLLAPSE  # noqa: E731
    def names(rows):
        return ", ".join(f"{s} {rat(r):.2f}" for s, r in rows.items())
    f_on = any(col(r) for r in fork_on.values())
    f_off = any(col(r) for r in fork_off.values())
    s_on = col(st_on)
    b = bound(k, ctx.n)
    thr = f"collapse = σ ≤ {COLLAPSE} × dynamic's σ; bound k/⌈k/N⌉ = {b:.2f}"
    figs = (f"pinned forks {names(fork_on)}, pinned static {rat(st_on):.2f}, unpinned forks "
            f"{names(fork_off)}" + (f", unpinned static {rat(st_off):.2f}" if st_off else "")
            + f" of dynamic's σ ({thr})")
    if not f_on:
        return "no collapse", f"pinned forks do not collapse here: {figs}; nothing to attribute."
    if s_on and not f_off:
        tail = (" and unpinned static threads do not either" if st_off and not col(st_off) else "")
        return ("static assignment under pinning",
                f"pinned static threads collapse as far as pinned forks and unpinned forks do "
                f"not{tail}: the collapse comes from static assignment under pinning, not from "
                f"fork() ({figs}).")
    if not s_on and f_off:
        return ("fork()", f"forks collapse pinned and unpinned while pinned static threads do "
                          f"not: the collapse comes from fork(), not from pinning or static "
                          f"assignment ({figs}).")
    if not s_on and not f_off:
        return ("fork() and pinning together",
                f"only pinned forks collapse; pinned static threads and unpinned forks do not: "
                f"the collapse needs fork() and pinning together ({figs}).")
    return ("not separable", f"pinned static threads and unpinned forks collapse too: the data "
                             f"cannot separate fork() from static assignment ({figs}).")


def control(ctx: Ctx) -> tuple[list[str], list[dict]]:
    """Markdown lines (a table per L and k, then the finding) and claims.csv records."""
    ks = control_ks(ctx)
    if not ks:
        return ([f"- not measured: the study has no pinned k > N = {ctx.n}; the control needs "
                 f"k = ⌈4N/3⌉ = {ctx.k_over_wanted} or another k > N."],
                [record(claim="2-control", finding="not measured",
                        why=f"no pinned k > N = {ctx.n}")])
    out, recs = [], []
    for L in ctx.Ls:
        for k in ks:
            d = ctx.get("dynamic", L, k)
            tag = ("first unbalanced oversubscribed k" if k % ctx.n else "largest pinned k, "
                   "a multiple of N: pinned round-robin is balanced here")
            if k == ks[-1] and k % ctx.n:
                tag += ", also the largest pinned k"
            finding, sentence = attribution(ctx, L, k)
            shared = ctx.disturbed([r for r in (ctx.get(s, L, k, p) for s, p in _CELLS) if r])
            if shared:
                sentence += f" Caution: {shared}."
            out += [f"**{ctx.L_text(L)}, {ctx.k_text(k)}** ({tag}; N = {ctx.n})", "",
                    "| scheduler | affinity | T (ms) | σ | bound | σ / bound | σ / dynamic's σ |",
                    "|---|:---:|---:|---:|---:|---:|---:|"]
            for s, pinned in _CELLS:
                r = ctx.get(s, L, k, pinned)
                if r is None:
                    out.append(f"| {s} | {'on' if pinned else 'off'} | not run | | | | |")
                    continue
                # the bound is static hand-out's; unpinned, Linux can share the N CPUs fairly
                b = (math.nan if s == "dynamic" else bound(k, ctx.n) if pinned
                     else float(min(k, ctx.n)))
                ratio = _ratio(r, d)
                out.append(f"| {s} | {'on' if pinned else 'off'} | {r.t_mean * 1e3:.2f} | "
                           f"{sig(r)} | {fmt(b, '.2f')}{'' if pinned else ' (N)'} | "
                           f"{fmt(r.sigma / b, '.3f')} | {fmt(ratio, '.3f')} |")
                recs.append(record(claim="2-control", statement=f"control at L = {L}, k = {k}",
                                   scheduler=s, affinity=pinned, L=L, paper_L=ctx.paper_L(L), k=k,
                                   paper_k=ctx.paper_k(k), figure="sigma", value=r.sigma, bound=b,
                                   ratio_to_dynamic=ratio,
                                   threshold=f"collapse: ratio <= {COLLAPSE}", finding=finding))
            out += ["", f"- finding: {sentence}", ""]
    return out, recs
