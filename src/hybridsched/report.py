"""Tables from a study: mean time over repetitions, speedup, efficiency, Karp-Flatt alpha."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import metrics


@dataclass
class Row:
    scheduler: str
    family: str
    L: int
    k: int
    chunk: int
    affinity: bool
    reps: int          # verified repetitions used
    t_mean: float      # seconds
    sigma: float       # NaN without serial runs for this L
    sigma_e: float
    alpha: float
    alpha_flagged: bool


def serial_times(runs: np.ndarray) -> dict[int, float]:
    """Mean verified serial time per L: T_serial of Eq. 4."""
    out = {}
    ok = runs[(runs["scheduler"] == "serial") & runs["verified"]]
    for L in np.unique(ok["L"]):
        out[int(L)] = float(ok["time_s"][ok["L"] == L].mean())
    return out


def summarise(runs: np.ndarray) -> list[Row]:
    """One row per (scheduler, L, k, chunk, affinity) over its verified runs; unverified or
    failed runs never enter a mean."""
    ok = runs[runs["verified"]]
    ts = serial_times(runs)
    groups: dict[tuple, list[float]] = {}
    fam: dict[str, str] = {}
    for r in ok:
        key = (str(r["scheduler"]), int(r["L"]), int(r["k"]), int(r["chunk"]), bool(r["affinity"]))
        groups.setdefault(key, []).append(float(r["time_s"]))
        fam[key[0]] = str(r["family"])
    rows = []
    for (s, L, k, c, aff), times in groups.items():
        t = float(np.mean(times))
        ser = ts.get(L, math.nan)
        sigma = metrics.speedup(ser, t) if not math.isnan(ser) else math.nan
        se = metrics.efficiency(sigma, k)
        a = metrics.karp_flatt(sigma, k) if not math.isnan(sigma) else math.nan
        rows.append(Row(s, fam[s], L, k, c, aff, len(times), t, sigma, se, a,
                        (not math.isnan(a)) and metrics.alpha_is_diagnostic(sigma, k)))
    order = {n: i for i, n in enumerate(_name_order(rows))}
    rows.sort(key=lambda r: (r.L, order[r.scheduler], not r.affinity, r.chunk, r.k))
    return rows


def _name_order(rows: list[Row]) -> list[str]:
    from .schedulers import ALL_NAMES

    names = {r.scheduler for r in rows}
    return [n for n in ALL_NAMES if n in names] + sorted(names - set(ALL_NAMES))


def _fmt(x: float, spec: str) -> str:
    return "—" if math.isnan(x) else format(x, spec)


def markdown_summary(rows: list[Row]) -> str:
    """The table `hybridsched run` prints: T (ms), sigma, sigma_E and alpha per scheduler and k."""
    lines = ["| scheduler | L | k | chunk | affinity | reps | T (ms) | σ | σE | α |",
             "|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        alpha = _fmt(r.alpha, ".4f") + (" †" if r.alpha_flagged else "")
        lines.append(f"| {r.scheduler} | {r.L} | {r.k} | {r.chunk or 'def'} | "
                     f"{'on' if r.affinity else 'off'} | {r.reps} | {r.t_mean * 1e3:.2f} | "
                     f"{_fmt(r.sigma, '.3f')} | {_fmt(r.sigma_e, '.3f')} | {alpha} |")
    notes = []
    if any(math.isnan(r.sigma) for r in rows):
        notes.append("σ needs the study's serial runs for the same L; — where there are none.")
    if any(r.alpha_flagged for r in rows):
        notes.append("† α is a diagnostic where σ > k or σ < 1 (§3.3), not a serial fraction.")
    return "\n".join(lines + ([""] + notes if notes else []))
