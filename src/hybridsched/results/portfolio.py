"""The report sections of the LB4OMP portfolio: every scheduler's σE at k = N with its
percent load imbalance, per workload, with the best per workload; and how ``auto``
converged across the repetitions of each loop (the technique it chose at each one).

Percent load imbalance of one run is (max_w T_w / mean_w T_w - 1) x 100 over the workers'
finishing times T_w (relative to the run's start), the definition of the LB4OMP paper
(after DeRose et al.). LB4OMP's runtime computes it from a mean thread time kept in an
``std::atomic<int>`` (autoMeanThreadTime), so its integer division truncates the mean; we
follow the paper's formula in floating point.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from .data import Row, Study, fmt, k_at_n, summarise
from ..core.capabilities import is_baseline

# The share of the repetitions, counted from the end, that shows where auto settled: its
# most frequent choice there, and that choice's median time. A larger share averages more
# runs but reaches back into the exploration phase.
SETTLED_SHARE = 0.5


def percent_imbalance(ends: np.ndarray) -> float:
    """(max / mean - 1) x 100 of the workers' finishing times; NaN without a positive mean."""
    ends = np.asarray(ends, float)
    ends = ends[np.isfinite(ends)]
    if not len(ends) or ends.mean() <= 0:
        return math.nan
    return float((ends.max() / ends.mean() - 1.0) * 100.0)


def _label(r) -> str:
    p = str(r["params"]) if "params" in r.dtype.names else ""
    return str(r["scheduler"]) + (f" ({p})" if p else "")


def _key(r) -> tuple:
    return (_label(r), int(r["L"]), int(r["k"]), int(r["chunk"]), bool(r["affinity"]), int(r["P"]),
            int(r["pipe_batch"]), int(r["inflight"]), bool(r["coop"]))


def _row_key(row: Row) -> tuple:
    return (row.scheduler, row.L, row.k, row.chunk, row.affinity, row.P, row.pipe_batch,
            row.inflight, row.coop)


def workloads(runs: np.ndarray) -> list[str]:
    """The study's workloads: the runs' ``workload`` field where the format has one, else
    the one workload of today's studies (uniform random sort rows)."""
    if "workload" in (runs.dtype.names or ()):
        return list(dict.fromkeys(str(w) for w in runs["workload"]))
    return ["uniform"]


def _of(runs: np.ndarray, workload: str) -> np.ndarray:
    if "workload" in (runs.dtype.names or ()):
        return runs[runs["workload"] == workload]
    return runs


def imbalances(study: Study, runs: np.ndarray) -> dict[tuple, float]:
    """Mean percent load imbalance per configuration (summarise's key) over verified runs."""
    ids = runs["run_id"][runs["verified"]]
    by_id = {int(r["run_id"]): r for r in runs}
    acc: dict[tuple, list[float]] = {}
    with study.file() as source:
        for rid, d in source.details(ids):
            lam = percent_imbalance(d.workers["end"]) if d is not None and len(d.workers) else math.nan
            if not math.isnan(lam):
                acc.setdefault(_key(by_id[rid]), []).append(lam)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def has_techniques(study: Study) -> bool:
    """Whether the study ran any LB4OMP technique (or auto): then the sections apply."""
    from ..core.registry import SCHEDULERS

    names = {str(s) for s in study.runs["scheduler"]}
    return any(SCHEDULERS[n].technique for n in names if n in SCHEDULERS)


def portfolio_section(study: Study) -> list[str]:
    """σE and load imbalance of every scheduler at k = N per workload, and the best one."""
    out = ["## Every technique at k = N, per workload", "",
           "σE = T_serial / (k T) (Eq. 5); imbalance = (max/mean − 1) × 100 of the workers' "
           "finishing times (LB4OMP's percent load imbalance), mean over repetitions.", ""]
    any_rows = False
    for wl in workloads(study.runs):
        runs = _of(study.runs, wl)
        rows = summarise(runs, study.n)
        k = k_at_n(rows, study.n)
        at = [r for r in rows if r.k == k and r.reps and not is_baseline(r.family) and r.P == 1]
        if not at:
            continue
        any_rows = True
        lam = imbalances(study, runs[runs["k"] == k])
        out += [f"### Workload {wl}, k = {k}", "",
                "| scheduler | L | chunk | T (ms) | σE | imbalance (%) |",
                "|---|---|---|---|---|---|"]
        for r in sorted(at, key=lambda r: (r.L, r.t_mean)):
            out.append(f"| {r.scheduler} | {r.L} | {r.chunk or 'default'} | {r.t_mean * 1e3:.2f} | "
                       f"{fmt(r.sigma_e, '.3f')} | {fmt(lam.get(_row_key(r), math.nan), '.1f')} |")
        for L in sorted({r.L for r in at}):
            best = min((r for r in at if r.L == L), key=lambda r: r.t_mean)
            out += ["", f"Best at L = {L}: **{best.scheduler}** ({best.t_mean * 1e3:.2f} ms, "
                    f"σE {fmt(best.sigma_e, '.3f')})."]
        out.append("")
    return out if any_rows else []


def _runs_text(choices: list[str]) -> str:
    """Run-length form of auto's choices: 'static, dynamic, fac2a x6'."""
    out, prev, n = [], None, 0
    for c in choices + [None]:
        if c == prev:
            n += 1
            continue
        if prev is not None:
            out.append(prev + (f" ×{n}" if n > 1 else ""))
        prev, n = c, 1
    return ", ".join(out)


def auto_section(study: Study) -> list[str]:
    """Per auto loop: the technique chosen at each repetition, where it settled, and its
    settled time against the best fixed technique measured at the same (L, k)."""
    runs = study.runs
    if "technique" not in (runs.dtype.names or ()):
        return []
    mine = runs[np.char.endswith(runs["scheduler"].astype(str), "auto") & runs["verified"]]
    if not len(mine):
        return []
    fixed = summarise(runs[~np.char.endswith(runs["scheduler"].astype(str), "auto")], study.n)
    out = ["## auto: the technique chosen at each repetition", "",
           f"Settled = the most frequent choice over the last {int(SETTLED_SHARE * 100)} % of "
           "the repetitions, with its median time there; best fixed = the fastest other "
           "scheduler at the same L and k in this study.", "",
           "| scheduler | L | k | reps | choices in order | settled | settled T (ms) "
           "| best fixed (ms) | gap |",
           "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list] = {}
    for r in mine:
        groups.setdefault(_key(r), []).append(r)
    for key, rs in groups.items():
        rs.sort(key=lambda r: (int(r["rep"]), float(r["started_at"])))
        choices = [str(r["technique"]) for r in rs]
        tail = rs[int(len(rs) * (1 - SETTLED_SHARE)):] or rs
        settled, times = Counter(str(r["technique"]) for r in tail).most_common(1)[0]
        t = float(np.median([float(r["time_s"]) for r in tail if str(r["technique"]) == settled]))
        exploring = times == 1 and len(tail) > 1  # every choice different: no settled time
        if exploring:
            settled = "not yet (exploring)"
        same = [f for f in fixed
                if f.L == key[1] and f.k == key[2] and f.reps and not is_baseline(f.family)]
        best = min(same, key=lambda f: f.t_mean) if same else None
        gap = f"{(t / best.t_mean - 1) * 100:+.1f} %" if best and not exploring else "—"
        fixed_t = f"{best.scheduler} {best.t_mean * 1e3:.2f}" if best else "—"
        t_text = "—" if exploring else f"{t * 1e3:.2f}"
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {len(rs)} | {_runs_text(choices)} | "
                   f"{settled} | {t_text} | {fixed_t} | {gap} |")
    return out + [""]
