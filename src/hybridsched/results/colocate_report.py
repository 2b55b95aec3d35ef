"""The ``/colocate`` section of a report: per experiment (workload, barrier, jobs, workers,
step) one table with a row per policy — makespan mean ± sd, the jobs' times, Jain's
fairness index over the jobs, interference per worker — the speedup of each policy over
plain Linux, and a makespan plot."""
from __future__ import annotations

import math
import os

import numpy as np

from .colocate_cmd import CMD, cmd_fields, cmd_table, cmd_title, complete_reps
from .data import fmt
from ..store import StudyFile
from .plots import canvas, lay_out, save_png


def jain(values) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all jobs fare alike, 1/n when
    one job gets everything. Over the jobs' speeds 1/time."""
    x = 1.0 / np.asarray(values, float)
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) else math.nan


def _experiments(rows: np.ndarray) -> list[tuple]:
    keys = {(str(r["workload"]), str(r["barrier"]), int(r["jobs"]), int(r["workers"]),
             float(r["step_us"]), int(r["steps"]), _sched(r), str(r["experiment"]))
            for r in rows}
    return sorted(keys)


def _sched(r) -> str:
    return str(r["scheduler"]) if "scheduler" in r.dtype.names else ""


def _title(rows: np.ndarray, wl: str, bar: str, J: int, T: int, step: float, steps: int,
           sched: str, experiment: str = "") -> str:
    if wl == CMD:
        return cmd_title(rows[rows["experiment"] == experiment], J) if len(rows) else \
            f"cmd: {J} co-located commands"
    if wl == "run":
        return f"run: {J} co-located `{sched}` jobs at k = {T}, {steps} frames each"
    if wl == "blas":
        m = rows[(rows["workload"] == wl) & (rows["jobs"] == J)]
        n = int(m["matrix"][0]) if len(m) and "matrix" in m.dtype.names else 0
        return f"blas: {J} jobs × a BLAS pool of {T}, {steps} products of {n}×{n}"
    return f"{wl}: {J} jobs × {T} workers, {bar} barrier, {steps} steps of {step:g} µs"


def ideal_makespan(J: int, T: int, step_us: float, steps: int, n: int) -> float:
    """All the jobs' compute spread over N CPUs, and no less than one job's own chain."""
    work = steps * step_us * 1e-6
    return max(work, work * J * T / n) if n else math.nan


def summary(rows: np.ndarray, n: int) -> list[dict]:
    """One record per experiment and policy, over verified repetitions only."""
    out = []
    for wl, bar, J, T, step, steps, sched, exp in _experiments(rows):
        sel = rows[(rows["workload"] == wl) & (rows["barrier"] == bar) & (rows["jobs"] == J)
                   & (rows["workers"] == T) & (rows["step_us"] == step) & (rows["steps"] == steps)
                   & (rows["experiment"] == exp)]
        if sched:
            sel = sel[sel["scheduler"] == sched]
        for pol in dict.fromkeys(sel["policy"].tolist()):
            p = sel[sel["policy"] == pol]
            reps = complete_reps(p)
            good = [r for r in reps if p[p["rep"] == r]["verified"].all()]
            mk = [float(p[p["rep"] == r]["makespan_s"][0]) for r in good]
            ok = p[np.isin(p["rep"], good)]
            fair = [jain(p[p["rep"] == r]["time_s"]) for r in good]
            out.append(dict(
                workload=wl, barrier=bar, jobs=J, workers=T, step_us=step, steps=steps,
                scheduler=sched, experiment=exp, policy=pol,
                reps=len(good), failed=len(reps) - len(good),
                makespan_s=float(np.mean(mk)) if mk else math.nan,
                makespan_sd=float(np.std(mk)) if mk else math.nan,
                job_time_s=float(ok["time_s"].mean()) if len(ok) else math.nan,
                jain=float(np.mean(fair)) if fair else math.nan,
                ideal_s=ideal_makespan(J, T, step, steps, n) if wl == "bsp" else math.nan,
                invol_ctx=float(ok["invol_ctx"].mean()) if len(ok) else math.nan,
                runq_wait_s=float(ok["runq_wait_s"].mean()) if len(ok) else math.nan,
                spin_s=float(ok["spin_s"].mean()) if len(ok) else math.nan,
                **cmd_fields(ok, p)))
    return out


def _key(r: dict) -> tuple:
    return (r["workload"], r["barrier"], r["jobs"], r["workers"], r["step_us"], r["steps"],
            r["scheduler"], r["experiment"])


def markdown(rows: np.ndarray, n: int) -> tuple[str, list[dict]]:
    """The section's Markdown and its CSV records."""
    recs = summary(rows, n)
    lines = ["## Co-located jobs (`hybridsched colocate`)", "",
             "Makespan: from the common start to the last job's end, mean ± sd over verified "
             "repetitions (the bars of the plots too). The built-in workloads' interference per "
             "worker: involuntary context switches, run-queue wait (schedstat), time spinning in "
             f"the barrier. Ideal: all the jobs' compute spread over the N = {n or '?'} CPUs. "
             "Jain: fairness of the jobs' speeds (1 = equal).", ""]
    if (rows["workload"] == CMD).any():
        lines += ["Unmodified commands (`--cmd`): a job's time runs from the common start "
                        "to its command's exit; CPU seconds and involuntary context switches are "
                        "wait4's, the descendants it waited for included. vs linux: over the "
                        "repetitions verified under both policies.", ""]
    for exp in _experiments(rows):
        mine = [r for r in recs if _key(r) == exp]
        lines += [f"### {_title(rows, *exp)}", ""]
        if exp[0] == CMD:
            lines += cmd_table(mine, rows[rows["experiment"] == exp[-1]])
            continue
        base = next((r for r in mine if r["policy"] == "linux"), None)
        lines += ["| policy | reps | makespan (s) | vs linux | ideal (s) | job time (s) | Jain | "
                  "invol. ctx / worker | run-queue wait / worker (s) | spin / worker (s) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in mine:
            gain = (base["makespan_s"] / r["makespan_s"]) if base and r["reps"] and base["reps"] else math.nan
            extra = f" (+{r['failed']} failed)" if r["failed"] else ""
            lines.append(
                f"| {r['policy']} | {r['reps']}{extra} | "
                f"{fmt(r['makespan_s'], '.3f')} ± {fmt(r['makespan_sd'], '.3f')} | "
                f"{fmt(gain, '.2f', 'x')} | {fmt(r['ideal_s'], '.3f')} | {fmt(r['job_time_s'], '.3f')} | "
                f"{fmt(r['jain'], '.3f')} | {fmt(r['invol_ctx'], '.1f')} | "
                f"{fmt(r['runq_wait_s'], '.3f')} | {fmt(r['spin_s'], '.3f')} |")
        lines.append("")
    return "\n".join(lines), recs


def plot(recs: list[dict], out_dir: str) -> list[str]:
    """One bar chart of makespan per policy for each experiment."""

    files = []
    for exp in sorted({_key(r) for r in recs}):
        wl, bar, J, T, step, steps, sched, ident = exp
        # a policy with no verified repetition has no bar (its failures are in the table);
        # an experiment with none at all, no plot: an empty one said nothing (the review)
        mine = [r for r in recs if _key(r) == exp and r["reps"] > 0]
        if not mine:
            continue
        fig = canvas((5.5, 3.8))
        ax = fig.add_subplot(1, 1, 1)
        names = [r["policy"] for r in mine]
        ax.bar(names, [r["makespan_s"] for r in mine], yerr=[r["makespan_sd"] for r in mine],
               color="tab:blue", alpha=0.8, capsize=4)
        if wl != CMD:
            ax.axhline(mine[0]["ideal_s"], ls="--", color="grey", label="ideal")
            ax.legend()
        ax.set_ylabel("makespan (s), mean ± sd")
        ax.set_title(_plot_title(exp, mine), fontsize=9, wrap=True)
        lay_out(fig)
        if wl == CMD:
            name = f"colocate_cmd_J{J}_{ident}.png"
        else:
            tag = sched if wl == "run" else bar
            name = f"colocate_{wl}_{tag}_J{J}_T{T}_{int(step)}us_{steps}.png"
        files.append(save_png(fig, os.path.join(out_dir, name)))
    return files


def _plot_title(exp: tuple, mine: list[dict]) -> str:
    wl, J, T = exp[0], exp[2], exp[3]
    if wl == "blas":
        return f"blas: {J} jobs × a pool of {T}"
    if wl == CMD:
        cmds = mine[0]["commands"]
        head = "1 command alone" if J == 1 else f"{J} co-located commands"
        return f"{head}: " + (cmds if len(cmds) <= 90 else cmds[:87] + "...")
    return _title(np.zeros(0, [("workload", "U8")]), *exp)


def section(study: StudyFile, out_dir: str | None, plots: bool, n: int) -> tuple[list[str], list[str]]:
    """The co-location section of a report (Markdown lines, files) when the open ``study``
    has rows."""
    from ..colocate.output import read_colocate

    rows = read_colocate(study)
    if len(rows) == 0:
        return [], []
    text, recs = markdown(rows, n)
    files: list[str] = []
    if out_dir is not None:
        from ..store import our_directory
        from .files import write_csv

        our_directory(out_dir)
        p = os.path.join(out_dir, "colocate_summary.csv")
        write_csv(p, recs)
        files.append(p)
        if plots:
            files += plot(recs, out_dir)
    return ["", text], files
