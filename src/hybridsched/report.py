"""Tables from a study: the paper's per-scheduler tables (§5, Tables 1-16), the best
scheduler per family (Table 17, §6.5), CSV files beside them; plots in :mod:`plots`,
the paper's claims in :mod:`claims`.

Every mean is over verified repetitions only; a failed or unverified run never enters one.
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from . import metrics

FAMILY_ORDER = ("thread", "process", "pipe")  # then any other family, alphabetically


@dataclass
class Row:
    """One table cell group: a (scheduler, L, k, chunk, affinity) configuration."""

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
    t_min: float = math.nan
    t_std: float = math.nan
    e_p: float = math.nan            # §3.1 mean P/P_max over the repetitions
    epsilon: float = math.nan        # Eq. 10 at k_eff = min(k, N)
    epsilon_flagged: bool = False
    t_ov: float = math.nan           # Eq. 16 with alpha = 0 (seconds)
    f_ov: float = math.nan           # Eq. 17 with alpha = 0
    alpha_scaled: float = math.nan   # Eq. 9 solved for alpha_scaled
    u_thread: float = math.nan       # Eq. 11, mean over workers and repetitions
    u_n: float = math.nan            # Eq. 14, mean over repetitions
    failed: int = 0                  # runs of this configuration not verified
    foreign_cpu: float = math.nan    # median share of the CPUs other processes used (dedicated: ~0)
    chunk_used: str = ""             # chunk(s) the backend reported
    P: int = 1                       # MPI ranks (nodes); sigma_E and alpha use P x k units

    @property
    def variant(self) -> tuple[str, bool, int, int]:
        return (self.scheduler, self.affinity, self.chunk, self.P)


@dataclass
class Study:
    """A study file read for reporting."""

    path: str
    runs: np.ndarray
    attrs: dict
    n: int                                   # N: usable CPUs when the study ran
    util: dict[int, tuple[float, float]] = field(default_factory=dict)  # run_id -> (U_thread, U_N)
    foreign: dict[int, float] = field(default_factory=dict)  # run_id -> share of CPUs used by others


def load_study(path: str, utilisation: bool = True) -> Study:
    """Read runs, attributes and (optionally) each verified run's Eq. 11/14 utilisations."""
    from .store import open_study, read_attrs, read_runs

    runs = read_runs(path)
    attrs = read_attrs(path)
    n = int(attrs.get("machine.N", attrs.get("machine.cpus_usable", 0)) or 0)
    util: dict[int, tuple[float, float]] = {}
    foreign: dict[int, float] = {}
    if utilisation and len(runs):
        with open_study(path) as h5:  # readable while `run` still appends to it
            det = h5["detail"]
            for rid in runs["run_id"][runs["verified"]]:
                name = f"{int(rid):06d}"
                if name not in det or "workers" not in det[name]:
                    continue
                extra = det[name].attrs.get("extra")
                if extra is not None:
                    val = json.loads(extra).get("foreign_cpu")
                    if isinstance(val, (int, float)):
                        foreign[int(rid)] = float(val)
                if n <= 0:
                    continue
                w = det[name]["workers"][()]
                if len(w) == 0:
                    continue
                ut = metrics.worker_utilisations(w)
                util[int(rid)] = (float(np.nanmean(ut)) if np.isfinite(ut).any() else math.nan,
                                  metrics.many_core_utilisation(w, n))
    return Study(path, runs, attrs, n, util, foreign)


# T_serial and the median k = 1 time of the thread schedulers measure the same work on one
# core; beyond this relative gap one of them was disturbed (load, CPU frequency) and every σ
# of that L carries the error. 5 % is well above the run-to-run noise of a quiet machine.
SERIAL_CHECK = 0.05


def serial_check(rows: list[Row], ser: list[Row]) -> list[str]:
    """Warn where T_serial disagrees with the thread schedulers' own k = 1 times."""
    out = []
    for s in ser:
        t1 = [r.t_mean for r in rows if r.family == "thread" and r.k == 1 and r.L == s.L
              and r.reps and r.affinity and r.chunk == 0]
        if not t1:
            continue
        gap = s.t_mean / float(np.median(t1)) - 1.0
        if abs(gap) > SERIAL_CHECK:
            out += [f"**Warning: at L = {s.L}, T_serial is {gap * 100:+.1f} % off the median k = 1 "
                    f"time of the thread schedulers ({np.median(t1) * 1e3:.2f} ms): the serial "
                    "or the k = 1 runs were disturbed, and every σ at this L is off by as much. "
                    "Re-run `serial` (e.g. more `--reps`, on a quiet machine).**", ""]
    return out


# Median share of our CPUs that other processes used during the timed runs above which the
# machine counts as shared. /proc/stat's 10 ms ticks put a few percent of noise on one
# short run; 5 % of the median is well above that and well below a real neighbour.
SHARED_MACHINE = 0.05


def dedicated(foreign: list[float]) -> bool:
    """At most one run in ten saw other processes take more than SHARED_MACHINE."""
    return bool(foreign) and float(np.mean(np.asarray(foreign) > SHARED_MACHINE)) <= 0.1


def load_line(study: Study) -> str:
    """How much of our CPUs other processes used while the runs were timed."""
    if not study.foreign:
        return "Other load during the runs: not recorded."
    vals = np.array(list(study.foreign.values()))
    busy = int((vals > SHARED_MACHINE).sum())
    return (f"Other load during the timed runs (share of the N = {study.n or '?'} CPUs used by "
            f"other processes, from /proc/stat minus our own CPU time): median "
            f"{np.median(vals) * 100:.1f} %, max {vals.max() * 100:.1f} %; {busy} of {len(vals)} "
            f"runs above {SHARED_MACHINE * 100:.0f} %"
            + (" — a dedicated machine." if dedicated(list(vals)) else
               " — the machine was shared, so timings include other work."))


def serial_times(runs: np.ndarray) -> dict[int, float]:
    """Mean verified serial time per L (single-node serial runs): T_serial of Eq. 4."""
    out = {}
    ok = runs[(runs["scheduler"] == "serial") & runs["verified"] & (runs["P"] == 1)]
    for L in np.unique(ok["L"]):
        out[int(L)] = float(ok["time_s"][ok["L"] == L].mean())
    return out


def _nanmean(vals: list[float]) -> float:
    vals = [v for v in vals if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def summarise(runs: np.ndarray, n: int | None = None,
              util: dict[int, tuple[float, float]] | None = None,
              foreign: dict[int, float] | None = None) -> list[Row]:
    """One row per (scheduler, L, k, chunk, affinity) over its verified runs; unverified or
    failed runs never enter a mean (they are counted in ``failed``). ``n`` (N) enables
    Eq. 10; ``util`` (from :func:`load_study`) the utilisation columns."""
    ts = serial_times(runs)
    groups: dict[tuple, list] = {}
    fam: dict[str, str] = {}
    for r in runs:
        key = (str(r["scheduler"]), int(r["L"]), int(r["k"]), int(r["chunk"]), bool(r["affinity"]),
               int(r["P"]))
        g = groups.setdefault(key, [[], [], 0, set()])
        fam[key[0]] = str(r["family"])
        if r["verified"]:
            g[0].append(float(r["time_s"]))
            g[1].append(int(r["run_id"]))
            g[3].add(int(r["chunk_used"]))
        else:
            g[2] += 1
    rows = []
    for (s, L, k, c, aff, P), (times, ids, failed, used) in groups.items():
        if not times:
            rows.append(Row(s, fam[s], L, k, c, aff, 0, math.nan, math.nan, math.nan, math.nan,
                            False, failed=failed, P=P))
            continue
        t = float(np.mean(times))
        ser = ts.get(L, math.nan)
        sigma = metrics.speedup(ser, t) if not math.isnan(ser) else math.nan
        units = P * k  # Eq. 19-20: P nodes x k workers; P = 1 is the single-node table
        a = metrics.serial_fraction(sigma, units)
        row = Row(s, fam[s], L, k, c, aff, len(times), t, sigma, metrics.efficiency(sigma, units),
                  a.value, a.diagnostic, t_min=float(np.min(times)), t_std=float(np.std(times)),
                  e_p=metrics.mean_performance_efficiency(times), failed=failed,
                  chunk_used="/".join(str(u) for u in sorted(used)), P=P)
        if not math.isnan(sigma):
            row.t_ov = metrics.overhead_time(ser, t, units)
            row.f_ov = metrics.overhead_fraction(sigma, units)
            row.alpha_scaled = metrics.gustafson_alpha(sigma, units)
            if n:
                e = metrics.karp_flatt_eff(sigma, units, P * n)
                row.epsilon, row.epsilon_flagged = e.value, e.diagnostic
        if util:
            row.u_thread = _nanmean([util[i][0] for i in ids if i in util])
            row.u_n = _nanmean([util[i][1] for i in ids if i in util])
        if foreign:
            vals = [foreign[i] for i in ids if i in foreign]
            row.foreign_cpu = float(np.median(vals)) if vals else math.nan
        rows.append(row)
    order = {name: i for i, name in enumerate(_name_order(rows))}
    rows.sort(key=lambda r: (r.L, order[r.scheduler], r.P, not r.affinity, r.chunk, r.k))
    return rows


def _name_order(rows: list[Row]) -> list[str]:
    from .schedulers import ALL_NAMES

    names = {r.scheduler for r in rows}
    return [n for n in ALL_NAMES if n in names] + sorted(names - set(ALL_NAMES))


def fmt(x: float, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)



def alpha_text(value: float, flagged: bool) -> str:
    return fmt(value, ".4f") + (" †" if flagged else "")


def markdown_summary(rows: list[Row]) -> str:
    """The flat table `hybridsched run` prints: T (ms), sigma, sigma_E and alpha per row."""
    lines = ["| scheduler | L | k (P×k) | chunk | affinity | reps | T (ms) | σ | σE | α |",
             "|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = r.k if r.P == 1 else f"{r.P}×{r.k}"
        chunk = r.chunk or "def" if r.chunk >= 0 else f"auto→{r.chunk_used or '?'}"
        lines.append(f"| {r.scheduler} | {r.L} | {k} | {chunk} | "
                     f"{'on' if r.affinity else 'off'} | {r.reps} | {fmt(r.t_mean * 1e3, '.2f')} | "
                     f"{fmt(r.sigma, '.3f')} | {fmt(r.sigma_e, '.3f')} | "
                     f"{alpha_text(r.alpha, r.alpha_flagged)} |")
    return "\n".join(lines + _notes(rows))


def _notes(rows: list[Row]) -> list[str]:
    notes = []
    if any(math.isnan(r.sigma) and r.reps for r in rows):
        notes.append("σ needs the study's single-node (P = 1) serial runs for the same L; — where "
                     "there are none (an MPI study can `hybridsched merge` one in).")
    if any(r.alpha_flagged or r.epsilon_flagged for r in rows):
        notes.append("† α is a diagnostic where σ > k or σ < 1 (§3.3), not a serial fraction.")
    if any(r.failed for r in rows):
        notes.append(f"{sum(r.failed for r in rows)} failed or unverified runs are excluded "
                     "from every mean.")
    return [""] + notes if notes else []


# --- the paper's per-scheduler tables -------------------------------------------------


def chunk_text(chunk: int) -> str:
    return f"chunk {chunk}" if chunk > 0 else ("default chunk" if chunk == 0 else "auto chunk")


def variant_label(scheduler: str, affinity: bool, chunk: int, P: int = 1) -> str:
    nodes = f"P = {P} ranks, " if P > 1 else ""
    return f"{scheduler} — {nodes}affinity {'on' if affinity else 'off'}, {chunk_text(chunk)}"


def variants(rows: list[Row]) -> list[tuple[str, bool, int]]:
    """(scheduler, affinity, chunk) in table order."""
    return list(dict.fromkeys(r.variant for r in sorted(rows, key=_table_key)))


def _table_key(r: Row):
    from .schedulers import ALL_NAMES

    pos = ALL_NAMES.index(r.scheduler) if r.scheduler in ALL_NAMES else len(ALL_NAMES)
    return (pos, r.scheduler, not r.affinity, r.chunk, r.L, r.k)


def scheduler_tables(rows: list[Row]) -> str:
    """Per scheduler variant one table in the paper's form: rows k; per L the columns
    T (ms), σ, σE, α and E_p."""
    Ls = sorted({r.L for r in rows})
    index = {(r.variant, r.L, r.k): r for r in rows}
    out = []
    for v in variants(rows):
        vrows = [r for r in rows if r.variant == v]
        fam = vrows[0].family
        if fam == "serial":
            continue  # T_serial is in the header and in every σ
        ks = sorted({r.k for r in vrows})
        vLs = [L for L in Ls if any(r.L == L for r in vrows)]
        head = "| k |" + "".join(f" T (ms) L={L} | σ | σE | α | E_p |" for L in vLs)
        align = "|---:|" + "---:|---:|---:|---:|---:|" * len(vLs)
        out += [f"### {variant_label(*v)} ({fam})", "", head, align]
        for k in ks:
            cells = [f"| {k} |"]
            for L in vLs:
                r = index.get((v, L, k))
                if r is None:
                    cells.append(" | | | | |")
                    continue
                t = fmt(r.t_mean * 1e3, ".2f") + (f" ({r.reps}/{r.reps + r.failed})" if r.failed else "")
                cells.append(f" {t} | {fmt(r.sigma, '.3f')} | {fmt(r.sigma_e, '.3f')} | "
                             f"{alpha_text(r.alpha, r.alpha_flagged)} | {fmt(r.e_p, '.3f')} |")
            out.append("".join(cells))
        out.append("")
    return "\n".join(out)


# --- Table 17 / §6.5: best scheduler per family ---------------------------------------


def families(rows: list[Row]) -> list[str]:
    present = {r.family for r in rows if r.family != "serial"}
    return [f for f in FAMILY_ORDER if f in present] + sorted(present - set(FAMILY_ORDER))


def k_at_n(rows: list[Row], n: int) -> int | None:
    """k = N if the study has it, else the largest k below N (None without parallel rows)."""
    ks = sorted({r.k for r in rows if r.family != "serial" and r.reps})
    below = [k for k in ks if k <= n] if n else []
    return below[-1] if below else (ks[0] if ks else None)


def best_per_family(rows: list[Row], L: int, k: int) -> list[Row]:
    """The fastest verified configuration of each family at (L, k), in family order."""
    out = []
    for f in families(rows):
        cand = [r for r in rows if r.family == f and r.L == L and r.k == k and r.reps]
        if cand:
            out.append(min(cand, key=lambda r: r.t_mean))
    return out


def family_comparison(rows: list[Row], n: int) -> tuple[str, list[dict]]:
    """Markdown and CSV records comparing the best scheduler per family at k = N and at
    the largest k, per L; within 1 % of the fastest = practically equivalent (§5)."""
    ser = {r.L: r.t_mean for r in rows if r.scheduler == "serial" and r.reps}
    k1 = {(r.variant, r.L): r.t_mean for r in rows if r.k == 1 and r.reps}
    kn = k_at_n(rows, n)
    kmax = max((r.k for r in rows if r.family != "serial" and r.reps), default=None)
    lines, recs = [], []
    for L in sorted({r.L for r in rows}):
        for k in dict.fromkeys(x for x in (kn, kmax) if x is not None):
            best = best_per_family(rows, L, k)
            if not best:
                continue
            top = min(best, key=lambda r: r.t_mean)
            tag = "k = N" if k == n else ("largest k" if k == kmax else "k ≤ N")
            lines += [f"**L = {L}, k = {k}** ({tag}; N = {n or '?'})", "",
                      "| family | best | T_serial (ms) | T_1 (ms) | T_k (ms) | σ | σE | vs fastest |",
                      "|---|---|---:|---:|---:|---:|---:|---|"]
            for r in best:
                gap = r.t_mean / top.t_mean - 1.0
                verdict = ("fastest" if r is top else
                           f"+{gap * 100:.1f} % time" + (" — practically equivalent"
                                                         if gap < metrics.EQUIVALENT else ""))
                lab = (r.scheduler + ("" if r.affinity else " (no affinity)")
                       + (f" ({chunk_text(r.chunk)})" if r.chunk else ""))
                t1 = k1.get((r.variant, L), math.nan)
                lines.append(f"| {r.family} | {lab} | {fmt(ser.get(L, math.nan) * 1e3, '.2f')} | "
                             f"{fmt(t1 * 1e3, '.2f')} | {fmt(r.t_mean * 1e3, '.2f')} | "
                             f"{fmt(r.sigma, '.3f')} | {fmt(r.sigma_e, '.3f')} | {verdict} |")
                recs.append(dict(L=L, k=k, family=r.family, scheduler=r.scheduler,
                                 affinity=r.affinity, chunk=r.chunk, t_serial_s=ser.get(L, math.nan),
                                 t1_s=t1, tk_s=r.t_mean, sigma=r.sigma, sigma_e=r.sigma_e,
                                 gap_to_fastest=gap,
                                 practically_equivalent=bool(gap < metrics.EQUIVALENT)))
            lines.append("")
    return "\n".join(lines), recs


# --- files ----------------------------------------------------------------------------


def write_csv(path: str, records: list[dict]) -> None:
    if not records:
        return
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)


def row_records(rows: list[Row]) -> list[dict]:
    names = [f.name for f in fields(Row)]
    return [{n: asdict(r)[n] for n in names} for r in rows]


def default_out_dir(path: str) -> str:
    """``<dir>/<stem>_report`` beside the study file."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.join(os.path.dirname(os.path.abspath(path)), f"{stem}_report")


def build_report(study: Study, out_dir: str | None, plots: bool = True) -> tuple[str, list[str]]:
    """The whole report as Markdown, and the files written (CSV always, PNG unless
    ``plots`` is false) under ``out_dir`` (None: write nothing)."""
    from . import claims

    rows = summarise(study.runs, study.n, study.util, study.foreign)
    a = study.attrs
    ok = int(study.runs["verified"].sum())
    head = [f"# Study {os.path.basename(study.path)}", "",
            f"Machine: {a.get('machine.cpu_model', '?')}, N = {study.n or '?'} usable CPUs, "
            f"host {a.get('machine.hostname', '?')}; load average at start "
            f"{a.get('machine.loadavg_at_start', 'not recorded')}.", "",
            load_line(study), "",
            f"Runs: {len(study.runs)} stored, {ok} verified. T is the mean over verified "
            "repetitions; σ = T_serial/T (Eq. 4), σE = σ/k (Eq. 5), α Karp–Flatt at the "
            "nominal k (Eq. 8), E_p mean P/P_max over repetitions (§3.1).", ""]
    ser = [r for r in rows if r.scheduler == "serial" and r.reps]
    if ser:
        head += ["T_serial (Eq. 4, `serial` runs): " + ", ".join(
            f"L = {r.L}: {r.t_mean * 1e3:.2f} ms ({r.reps} reps)" for r in ser) + ".", ""]
        head += serial_check(rows, ser)
    else:
        head += ["**This study has no verified `serial` runs, so T_serial (Eq. 4) is unknown: "
                 "σ, σE, α and every derived figure are left blank (—). Add `-s serial` "
                 "(resume with `--resume`) to get them.**", ""]
    files: list[str] = []
    fam_md, fam_recs = family_comparison(rows, study.n)
    body = ["## Per scheduler (Tables 1–16 form)", "", scheduler_tables(rows),
            "## Best scheduler per family (Table 17, §6.5)", "",
            fam_md or "(no parallel runs)", "",
            "## The paper's claims", "", claims.claims_markdown(rows, study.n, study.attrs)]
    body += _notes(rows)
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        for name, recs in (("summary.csv", row_records(rows)), ("best_per_family.csv", fam_recs),
                           ("claims.csv", claims.claims_records(rows, study.n))):
            if recs:
                p = os.path.join(out_dir, name)
                write_csv(p, recs)
                files.append(p)
        if plots:
            from . import plots as plotting

            files += plotting.speedup_plots(rows, out_dir, study.n)
    return "\n".join(head + body), files
