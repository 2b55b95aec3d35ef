"""What `run` prints at its end: the flat table of the study (T, σ, σE, α per row) with its
notes, and the command to run next."""
from __future__ import annotations

import math

from ..machine.rule import SHARED_MACHINE
from .data import DISTURBED_MARK, Row, alpha_text, disturbed_mark, fmt, load_study, summarise, t_text


def markdown_summary(rows: list[Row]) -> str:
    """The flat table `hybridsched run` prints: T (ms) mean ± sd and min, sigma, sigma_E and
    alpha per row; ‡ marks rows timed while other processes took the CPUs."""
    lines = ["| scheduler | L | k (P×k) | chunk | affinity | reps | T (ms) | min | σ | σE | α |",
             "|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = r.k if r.P == 1 else f"{r.P}×{r.k}"
        chunk = r.chunk or "def" if r.chunk >= 0 else f"auto→{r.chunk_used or '?'}"
        lines.append(f"| {r.scheduler} | {r.L} | {k} | {chunk} | "
                     f"{'on' if r.affinity else 'off'} | {r.reps} | {t_text(r)}{disturbed_mark(r)} | "
                     f"{fmt(r.t_min * 1e3, '.2f')} | "
                     f"{fmt(r.sigma, '.3f')} | {fmt(r.sigma_e, '.3f')} | "
                     f"{alpha_text(r.alpha, r.alpha_flagged)} |")
    return "\n".join(lines + notes(rows))


def run_summary(path: str) -> str:
    """What `run` prints at the end: the flat table of the study at ``path`` (with spread
    and disturbed rows marked) and the command to run next."""
    study = load_study(path)
    rows = summarise(study.runs, study.n, study.util, study.foreign, study.imbalance)
    return markdown_summary(rows) + f"\n\nNext: hybridsched report {path}"


def notes(rows: list[Row]) -> list[str]:
    notes = []
    if any(r.disturbed for r in rows):
        notes.append(f"{DISTURBED_MARK} other processes took more than {SHARED_MACHINE * 100:.0f} % "
                     "of the CPUs (median over the row's runs): those timings include other work.")
    if any(r.reps >= 2 for r in rows):
        notes.append("± is the sample standard deviation over the verified repetitions; min the "
                     "fastest of them.")
    if any(math.isnan(r.sigma) and r.reps for r in rows):
        notes.append("σ needs the study's single-node (P = 1) serial runs for the same L; — where "
                     "there are none (an MPI study can `hybridsched merge` one in).")
    if any(r.alpha_flagged or r.epsilon_flagged for r in rows):
        notes.append("† α is a diagnostic where σ > k or σ < 1 (§3.3), not a serial fraction.")
    if any(r.failed for r in rows):
        notes.append(f"{sum(r.failed for r in rows)} failed or unverified runs are excluded "
                     "from every mean.")
    return [""] + notes if notes else []
