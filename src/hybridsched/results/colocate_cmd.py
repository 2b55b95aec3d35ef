"""The report's part for unmodified commands (`colocate --cmd`): the experiment's title
(its commands), the per-policy fields from the jobs' rusage and the policies' own
counters, the table, and the failed jobs with the end of their output."""
from __future__ import annotations

import json
import math

import numpy as np

from .data import code, fmt, shown

CMD = "cmd"
_FAILED_SHOWN = 5  # failed jobs listed under a table (all of them are in the study file)


def _commands(rows: np.ndarray) -> list[str]:
    """The experiment's commands, job by job."""
    by_job: dict[int, str] = {}
    for r in rows:
        by_job.setdefault(int(r["job"]), shown(str(r["command"])))
    return [by_job[j] for j in sorted(by_job)]


def cmd_title(rows: np.ndarray, J: int) -> str:
    cmds = _commands(rows)
    if cmds and len(set(cmds)) == 1:
        each = code(cmds[0])
        return f"cmd: {J} co-located jobs, each {each}" if J > 1 else f"cmd: 1 job, {each}"
    return f"cmd: {J} co-located jobs: " + ", ".join(code(c) for c in cmds)


def _mean_counters(rows: np.ndarray) -> dict:
    """Each counter of the policy, averaged over the jobs' rows."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        text = str(r["counters"])
        for k, v in (json.loads(text) if text else {}).items():
            sums.setdefault(k, []).append(float(v))
    return {k: float(np.mean(v)) for k, v in sorted(sums.items())}


def cmd_fields(ok: np.ndarray, every: np.ndarray) -> dict:
    """The summary's fields for commands (NaN or empty for the built-in workloads), over the
    verified repetitions' rows ``ok``; the commands named from all the policy's rows
    ``every`` (from ``ok`` alone, an experiment no repetition of which verified had none:
    "4 co-located commands:" and nothing after, the review)."""
    cmd = len(every) and str(every["workload"][0]) == CMD
    measured = cmd and len(ok)
    return dict(
        commands=" + ".join(dict.fromkeys(_commands(every))) if cmd else "",
        cpu_s=float(ok["cpu_s"].mean()) if measured else math.nan,
        nivcsw=float(ok["nivcsw"].mean()) if measured else math.nan,
        counters=json.dumps(_mean_counters(ok), sort_keys=True) if cmd else "")


def _counters_text(text: str) -> str:
    values = json.loads(text) if text else {}
    return ", ".join(f"{k.replace('_', ' ')} {v:.0f}" if abs(v) >= 100 else
                     f"{k.replace('_', ' ')} {v:.3g}" for k, v in values.items()) or "—"


def complete_reps(p: np.ndarray) -> list[int]:
    """The repetitions of one policy's rows ``p`` that hold every job's row: a run
    interrupted mid-repetition before 2026-12-06 stored some of its jobs alone."""
    return sorted(r for r in set(p["rep"].tolist())
                  if (p["rep"] == r).sum() == int(p["jobs"][p["rep"] == r][0]))


def _makespans(rows: np.ndarray, policy: str) -> dict[int, float]:
    """The makespan of each whole repetition every job of which verified under ``policy``."""
    p = rows[rows["policy"] == policy]
    return {r: float(p[p["rep"] == r]["makespan_s"][0]) for r in complete_reps(p)
            if p[p["rep"] == r]["verified"].all()}


def _vs(rows: np.ndarray, base: str, policy: str) -> float:
    """base's mean makespan over policy's, both over the repetitions verified under both (an
    interrupted or failed repetition of one leaves the other's out too)."""
    a, b = _makespans(rows, base), _makespans(rows, policy)
    both = sorted(a.keys() & b.keys())
    return float(np.mean([a[r] for r in both]) / np.mean([b[r] for r in both])) if both \
        else math.nan


def cmd_table(recs: list[dict], rows: np.ndarray) -> list[str]:
    """Markdown lines: a row per policy, then the failed jobs, if any."""
    lines = ["| policy | reps | makespan (s) | vs linux | job time (s) | Jain | CPU s / job | "
             "invol. ctx / job | the policy's counters / job |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in recs:
        gain = _vs(rows, "linux", r["policy"])
        extra = f" (+{r['failed']} failed)" if r["failed"] else ""
        sd = r["makespan_sd"] if r["reps"] > 1 else math.nan  # no spread from one
        lines.append(
            f"| {r['policy']} | {r['reps']}{extra} | {fmt(r['makespan_s'], '.3f')} ± "
            f"{fmt(sd, '.3f')} | {fmt(gain, '.2f', 'x')} | "
            f"{fmt(r['job_time_s'], '.3f')} | {fmt(r['jain'], '.3f')} | {fmt(r['cpu_s'], '.3f')} | "
            f"{fmt(r['nivcsw'], '.0f')} | {_counters_text(r['counters'])} |")
    lines.append("")
    bad = rows[~rows["verified"]]
    for r in bad[:_FAILED_SHOWN]:
        tail = [ln for ln in str(r["err_tail"]).strip().splitlines() if ln.strip()]
        lines.append(f"- failed: {r['policy']} rep {int(r['rep'])} job {int(r['job'])} "
                     f"{shown(str(r['error']))}"
                     + (f"; its stderr ends: {code(shown(tail[-1][:160]))}" if tail else ""))
    if len(bad) > _FAILED_SHOWN:
        lines.append(f"- ... and {len(bad) - _FAILED_SHOWN} more failed jobs (`out_tail`, "
                     "`err_tail` in /colocate)")
    if len(bad):
        lines.append("")
    return lines
