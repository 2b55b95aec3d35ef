"""The paper's claims judged on a study: the four headline claims (:mod:`headline`), the
control for claim 2 (:mod:`control`, a finding the paper does not make) and every
quantitative §6 statement the study can check (:mod:`section6`).

Each verdict line gives the k and L used and which of the paper's they stand for, our
figure, the paper's figure (quoted), the threshold, and exactly one verdict: reproduces,
does not reproduce, cannot tell here (and why), or does not apply (shared machine). Only
single-node rows of the paper's own protocol decide a verdict (``Row.paper_protocol``).
"""
from __future__ import annotations

from ..data import Row
from . import headline, section6
from .common import (CANNOT_TELL, COLLAPSE, EQUIVALENT, NEAR_IDEAL, SUPERLINEAR, VERDICTS, Ctx, Line,
                     RECORD_FIELDS)
from .control import control

__all__ = ["claims_markdown", "claims_records", "COLLAPSE", "EQUIVALENT", "NEAR_IDEAL",
           "SUPERLINEAR", "VERDICTS", "RECORD_FIELDS"]


def _sections(ctx: Ctx) -> list[tuple[str, list[Line]]]:
    out = [
        ("1. dynamic and guided near-ideal up to k = N (§6.2, §7)", headline.claim1(ctx)),
        ("2. fork-based collapse under pinned oversubscription (§6.5, §7)", headline.claim2(ctx)),
        ("3. the pipe chunk trade-off: the tuned chunk against chunk 1 (§5.1, Tables 8–9)",
         headline.claim3(ctx)),
        ("4. AIMD below dynamic on a dedicated machine (§6.2)", headline.claim4(ctx)),
        ("§6 statements", [ln for f in section6.STATEMENTS for ln in f(ctx)]),
    ]
    return [(t, lines or [Line(t.split(" ")[0].rstrip("."), t, "", "as in the title",
                               CANNOT_TELL, "no rows for it in this study")]) for t, lines in out]


def _preamble(ctx: Ctx) -> list[str]:
    ks = (f"k = {ctx.n} = N stands for the paper's k = 24" if ctx.n in ctx.ks else
          f"the study has no k = N = {ctx.n}; k = {ctx.kn} (the largest k ≤ N) is used for it")
    over = (f"k = {ctx.k_over} = ⌈4N/3⌉ for its k = 32 (its largest k, unbalanced under pinned "
            "round-robin)" if ctx.k_over else
            f"the study has no k = ⌈4N/3⌉ = {ctx.k_over_wanted} > N, which stands for the paper's 32")
    if len(ctx.Ls) >= 2:
        Ls = (f"L = {ctx.Ls[0]} stands for the paper's L = 1000 and L = {ctx.Ls[-1]} for its "
              "L = 10000")
    elif ctx.Ls:
        Ls = f"the study's only L = {ctx.Ls[0]} stands for the paper's smaller L = 1000"
    else:
        Ls = "the study has no parallel runs"
    return [f"N = {ctx.n} here, 24 in the paper: {ks}; {over}. {Ls}. Thresholds: near-ideal "
            f"σE ≥ {NEAR_IDEAL}; collapse σ ≤ {COLLAPSE} × the reference; differences under "
            f"{EQUIVALENT * 100:.0f} % are practically equivalent (§5); σE > {SUPERLINEAR} "
            "means T_serial was disturbed. Only single-node runs of the paper's protocol decide "
            "a verdict (pipe batching and in-flight variants do not).", ""]


def claims_markdown(rows: list[Row], n: int, attrs: dict | None = None,
                    foreign: list[float] | None = None) -> str:
    """The claims section of the report. ``foreign``: every run's share of the CPUs that
    other processes used (data.dedicated decides claim 4's shared machine)."""
    ctx = Ctx(rows, n, list(foreign or []), _simulated(attrs))
    out = _preamble(ctx)
    for title, lines in _sections(ctx):
        out += [f"### {title}", "", *(ln.markdown() for ln in lines), ""]
        if title.startswith("2."):
            md, _ = control(ctx)
            out += ["#### The control for claim 2 (a finding the paper does not make)", "",
                    "Static hand-out with worker w pinned to CPU w mod N bounds any worker type by "
                    "σ ≤ k/⌈k/N⌉. Pinned static threads and unpinned forks tell fork(), pinning "
                    "and static assignment apart.", "", *md, ""]
    return "\n".join(out)


def claims_records(rows: list[Row], n: int, foreign: list[float] | None = None,
                   attrs: dict | None = None) -> list[dict]:
    """One record per verdict line, then the control's cells (claims.csv)."""
    ctx = Ctx(rows, n, list(foreign or []), _simulated(attrs))
    recs = [ln.record(ctx) for _, lines in _sections(ctx) for ln in lines]
    return recs + control(ctx)[1]


def _simulated(attrs: dict | None) -> bool:
    """Whether the study was written by `simulate` (its runs are all simulated)."""
    from ...store import simulated_cores

    return bool(simulated_cores(attrs or {}))
