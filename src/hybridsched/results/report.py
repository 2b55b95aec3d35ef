"""The report of a study: the paper's per-scheduler tables (§5, Tables 1-16), the best
scheduler per family (Table 17, §6.5), the claims (:mod:`claims`), CSV files and the
speedup plots (:mod:`plots`).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, fields

import numpy as np

from . import claims, metrics
from ..machine.rule import SHARED_MACHINE, dedicated
from ..store import simulated_cores
from .data import (SERIAL_CHECK, Row, Study, alpha_text, best_per_family, simulated_line,
                   chunk_text, disturbed_mark, fmt, k_at_n, serial_gap, summarise,
                   t_text, variant_label, variants)
from .files import write_csv
from .summary import notes
from ..core.capabilities import is_baseline, is_threaded


def serial_check(rows: list[Row], ser: list[Row]) -> list[str]:
    """Warn where T_serial disagrees with the thread schedulers' own k = 1 times."""
    out = []
    for s in ser:
        t1 = [r.t_mean for r in rows if is_threaded(r.family) and r.k == 1 and r.L == s.L
              and r.reps and r.affinity and r.chunk == 0 and r.P == 1]
        gap = serial_gap(rows, s.L)
        if math.isnan(gap):
            continue
        if abs(gap) > SERIAL_CHECK:
            out += [f"**Warning: at L = {s.L}, T_serial is {gap * 100:+.1f} % off the median k = 1 "
                    f"time of the thread schedulers ({np.median(t1) * 1e3:.2f} ms): the serial "
                    "or the k = 1 runs were disturbed, and every σ at this L is off by as much. "
                    "Re-run `serial` (e.g. more `--reps`, on a quiet machine).**", ""]
    return out


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


# --- the paper's per-scheduler tables -------------------------------------------------


def scheduler_tables(rows: list[Row]) -> str:
    """Per scheduler variant one table in the paper's form: rows k; per L the columns
    T (ms) mean ± sd, min, σ, σE, α, E_p and the load imbalance LI of busy time."""
    Ls = sorted({r.L for r in rows})
    index = {(r.variant, r.L, r.k): r for r in rows}
    out = []
    for v in variants(rows):
        vrows = [r for r in rows if r.variant == v]
        fam = vrows[0].family
        if is_baseline(fam):
            continue  # T_serial is in the header and in every σ
        ks = sorted({r.k for r in vrows})
        vLs = [L for L in Ls if any(r.L == L for r in vrows)]
        head = "| k |" + "".join(f" T (ms) L={L} | min | σ | σE | α | E_p | LI |" for L in vLs)
        align = "|---:|" + "---:|" * 7 * len(vLs)
        out += [f"### {variant_label(*v)} ({fam})", "", head, align]
        for k in ks:
            cells = [f"| {k} |"]
            for L in vLs:
                r = index.get((v, L, k))
                if r is None:
                    cells.append(" | | | | | | |")
                    continue
                t = (t_text(r) + disturbed_mark(r)
                     + (f" ({r.reps}/{r.reps + r.failed})" if r.failed else ""))
                cells.append(f" {t} | {fmt(r.t_min * 1e3, '.2f')} | {fmt(r.sigma, '.3f')} | "
                             f"{fmt(r.sigma_e, '.3f')} | {alpha_text(r.alpha, r.alpha_flagged)} | "
                             f"{fmt(r.e_p, '.3f')} | {fmt(r.imbalance, '.3f')} |")
            out.append("".join(cells))
        out.append("")
    return "\n".join(out)


# --- Table 17 / §6.5: best scheduler per family ---------------------------------------


def family_comparison(rows: list[Row], n: int) -> tuple[str, list[dict]]:
    """Markdown and CSV records comparing the best scheduler per family at k = N and at
    the largest k, per L; within 1 % of the fastest = practically equivalent (§5)."""
    ser = {r.L: r.t_mean for r in rows if is_baseline(r.family) and r.reps and r.P == 1}
    k1 = {(r.variant, r.L): r.t_mean for r in rows if r.k == 1 and r.reps}
    kn = k_at_n(rows, n)
    kmax = max((r.k for r in rows if not is_baseline(r.family) and r.reps), default=None)
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
                             f"{fmt(t1 * 1e3, '.2f')} | {t_text(r)}{disturbed_mark(r)} | "
                             f"{fmt(r.sigma, '.3f')} | {fmt(r.sigma_e, '.3f')} | {verdict} |")
                recs.append(dict(L=L, k=k, family=r.family, scheduler=r.scheduler,
                                 affinity=r.affinity, chunk=r.chunk, t_serial_s=ser.get(L, math.nan),
                                 t1_s=t1, tk_s=r.t_mean, sigma=r.sigma, sigma_e=r.sigma_e,
                                 gap_to_fastest=gap,
                                 practically_equivalent=bool(gap < metrics.EQUIVALENT)))
            lines.append("")
    return "\n".join(lines), recs


# --- files ----------------------------------------------------------------------------


def row_records(rows: list[Row]) -> list[dict]:
    names = [f.name for f in fields(Row)]
    return [{n: asdict(r)[n] for n in names} for r in rows]


def _simulated_claims(study: Study) -> list[str]:
    """The line that says whose times the claims' verdicts rest on, when any are simulated."""
    sim = study.runs["simulated"] if "simulated" in (study.runs.dtype.names or ()) else None
    if sim is None or not sim.any():
        return []
    if sim.all():
        return ["*Every verdict below rests on simulated times: it says what the model "
                "predicts, not what was measured.*", ""]
    return ["*The verdicts below rest on the measured runs alone; the simulated ones "
            "(`<scheduler> [sim]` above) are left out of them.*", ""]


def _runs_line(runs) -> str:
    """How many runs are stored and verified; those of verify none (`--verify none`, or
    parallel_for without verify=) are stored as passed, and said apart (the review read
    "2 verified (2 of them unverified ...)")."""
    ok = int(runs["verified"].sum())
    by_choice = int(((runs["verify"] == "none") & runs["verified"]).sum())
    return (f"Runs: {len(runs)} stored, {ok - by_choice} verified"
            + (f", {by_choice} not checked by choice (verify none)" if by_choice else ""))


def build_report(study: Study, out_dir: str | None, plots: bool = True) -> tuple[str, list[str]]:
    """The whole report as Markdown, and the files written (CSV always, PNG unless
    ``plots`` is false) under ``out_dir`` (None: write nothing)."""
    rows = summarise(study.runs, study.n, study.util, study.foreign, study.imbalance)
    sim = simulated_line(study.runs)
    modelled = bool(simulated_cores(study.attrs))  # written by `simulate`: no run measured
    mpi = study.mpi_line()
    head = [f"# Study {os.path.basename(study.path)}", "",
            study.machine_line(), "",
            *([mpi, ""] if mpi else []),
            load_line(study), "",
            *([sim, ""] if sim else []),
            _runs_line(study.runs) + ". T is the mean over verified "
            "repetitions (± their sample standard deviation, min the fastest); σ = T_serial/T "
            "(Eq. 4), σE = σ/k (Eq. 5), α Karp–Flatt at the nominal k (Eq. 8), E_p mean "
            "P/P_max over repetitions (§3.1), LI the load imbalance of the workers' busy time "
            "(max − mean)/max × k/(k − 1), LB4OMP's percent imbalance (0 balanced, 1 one "
            "worker did everything).", ""]
    ser = [r for r in rows if is_baseline(r.family) and r.reps and r.P == 1]  # Eq. 4: one node
    if ser:
        head += ["T_serial (Eq. 4, `serial` runs): " + ", ".join(
            f"L = {r.L}: {r.t_mean * 1e3:.2f} ms ({r.reps} reps)" for r in ser) + ".", ""]
        if not modelled:  # a model's serial is never disturbed
            head += serial_check(rows, ser)
    else:
        if modelled:
            how = "simulate again with `-s serial` added and `--overwrite`"
        elif len(study.runs) and (study.runs["P"] > 1).any():
            # runs on several ranks are never resumed, and T_serial is a P = 1 figure
            how = ("run `-s serial` at P = 1 (no mpiexec) into a new study and `hybridsched "
                   "merge` the two")
        else:
            how = "add `-s serial` (resume with `--resume`)"
        head += ["**This study has no verified `serial` runs, so T_serial (Eq. 4) is unknown: "
                 f"σ, σE, α and every derived figure are left blank (—). To get them, {how}.**",
                 ""]
    files: list[str] = []
    fam_md, fam_recs = family_comparison(rows, study.n)
    body = ["## Per scheduler (Tables 1–16 form)", "", scheduler_tables(rows),
            "## Best scheduler per family (Table 17, §6.5)", "",
            fam_md or "(no parallel runs)", "",
            "## The paper's claims", "", *_simulated_claims(study), claims.claims_markdown(rows, study.n, study.attrs,
                                                             foreign=list(study.foreign.values()))]
    body += notes(rows)
    from .portfolio import auto_section, has_techniques, portfolio_section

    if has_techniques(study):  # the LB4OMP portfolio's sections (issue 13)
        body += [""] + portfolio_section(study) + auto_section(study)
    if out_dir is not None:
        from ..store import our_directory

        our_directory(out_dir)  # fresh, or ours: never through a symlink
        for name, recs in (("summary.csv", row_records(rows)), ("best_per_family.csv", fam_recs),
                           ("claims.csv", claims.claims_records(
                               rows, study.n, list(study.foreign.values()), study.attrs))):
            if recs:
                p = os.path.join(out_dir, name)
                write_csv(p, recs)
                files.append(p)
        if plots:
            from . import plots as plotting

            files += plotting.speedup_plots(rows, out_dir, study.n)
            from .timeline import report_gantts

            files += report_gantts(study, rows, out_dir)
    from .tasks import task_section  # what the tasks were and their measured costs

    task_md, task_files = task_section(study, out_dir, plots)
    body += task_md
    files += task_files
    from .sections import side_sections  # the file's `ge` and `colocate` tables, if any

    side_md, side_files = side_sections(study, out_dir, plots)
    return "\n".join(head + body + side_md), files + side_files
