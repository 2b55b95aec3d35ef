"""The report's workload section: what the tasks were (workload and parameters, kernel,
verifier, input file hash), runs left unverified by choice, and the measured per-task
cost distribution (a small table and a histogram PNG)."""
from __future__ import annotations

import json
import os

import numpy as np

from ..core.capabilities import BASELINE
from .data import Study

# Histogram bins: enough to show a heavy tail's shape, few enough that a few thousand tasks
# fill them; on a log axis when the costs span more than LOG_SPAN.
BINS = 40
LOG_SPAN = 20.0
# Runs whose traces are read to find the finest-grained one: more finds a finer trace in a
# big study, each costs one detail read.
CANDIDATES = 8


def _col(runs, name, default=""):
    return runs[name] if name in runs.dtype.names else np.full(len(runs), default)


def _cost_run(study: Study, mask: np.ndarray):
    """Per-task costs from the run whose trace gives them most directly: verified, finest
    chunks (one task per chunk if any), fewest workers (least interference), not serial.
    Only the CANDIDATES most promising by their rows are read (a study has thousands)."""
    runs = study.runs[mask & study.runs["verified"] & (study.runs["scheduler"] != BASELINE)]
    if not len(runs):
        runs = study.runs[mask & study.runs["verified"]]
    if not len(runs):
        return None, np.zeros(0)
    chunk = np.where(runs["chunk_used"] > 0, runs["chunk_used"], runs["L"]).astype(float)
    order = np.lexsort((runs["k"], chunk))[:CANDIDATES]
    best: tuple[float, int | None, np.ndarray] = (np.inf, None, np.zeros(0))
    for rid in runs["run_id"][order]:
        costs, chunks = task_costs(study, int(rid))
        if chunks and len(costs) / chunks < best[0]:
            best = (len(costs) / chunks, int(rid), costs)
    return best[1], best[2]


def task_costs(study: Study, run_id: int) -> tuple[np.ndarray, int]:
    """Per-task seconds from a run's chunk trace (a chunk's time shared by its tasks) and
    the number of chunks."""
    with study.file() as source:
        details = list(source.details([run_id]))
    for _, d in details:
        if d is None or not len(d.trace):
            return np.zeros(0), 0
        t = d.trace
        per = (t["end"] - t["start"]) / np.maximum(t["count"], 1)
        return np.repeat(per, t["count"].astype(np.int64)), len(t)
    return np.zeros(0), 0


def cost_table(costs: np.ndarray) -> dict:
    mean = float(costs.mean())
    return {"tasks": int(len(costs)), "mean_us": mean * 1e6,
            "cv": float(costs.std() / mean) if mean > 0 else float("nan"),
            "p50_us": float(np.percentile(costs, 50)) * 1e6,
            "p99_us": float(np.percentile(costs, 99)) * 1e6,
            "max_over_mean": float(costs.max() / mean) if mean > 0 else float("nan")}


def _histogram(costs: np.ndarray, title: str, path: str) -> str:
    from .plots import figure, lay_out, quiet_glyphs

    fig, ax = figure()
    us = np.maximum(costs * 1e6, 1e-3)
    bins: int | np.ndarray  # edges, or how many
    if us.max() / max(us.min(), 1e-9) > LOG_SPAN:
        bins = np.geomspace(us.min(), us.max() * 1.0001, BINS)
        ax.set_xscale("log")
    elif us.max() - us.min() > 1e-9 * us.max():
        bins = BINS
    else:  # every task the same cost (a uniform cost model): one bar, not 40 empty ones
        bins = np.array([us.min() * 0.99, us.max() * 1.01])
    ax.hist(us, bins=bins, color="#4477aa")
    ax.set_xlabel("task cost (µs, from the chunk trace)")
    ax.set_ylabel("tasks")
    ax.set_title(title, fontsize=10)
    lay_out(fig)
    with quiet_glyphs():
        fig.savefig(path, dpi=110)
    return path


def _describe(workload: str, params: str, kernel: str, verify: str, digest: str) -> str:
    p = ", ".join(f"{k}={v}" for k, v in json.loads(params).items()) if params else ""
    v = {"": "the workload's own check", "none": "none (unverified by choice)"}.get(verify, verify)
    s = f"workload `{workload or 'uniform'}`" + (f" ({p})" if p else "") + f", kernel `{kernel}`, verify: {v}"
    return s + (f", input {digest}" if digest else "")


def task_section(study: Study, out_dir: str | None, plots: bool) -> tuple[list[str], list[str]]:
    """Markdown lines and the files written: one block per distinct workload of the study."""
    runs = study.runs
    keys = np.array([f"{w}|{p}|{k}|{v}|{h}" for w, p, k, v, h in zip(
        _col(runs, "workload", "uniform"), _col(runs, "workload_params"), runs["kernel"],
        _col(runs, "verify"), _col(runs, "input_hash"))])
    lines = ["## Tasks (workload and per-task cost)", ""]
    files: list[str] = []
    rows = []
    for i, key in enumerate(dict.fromkeys(keys.tolist())):
        mask = keys == key
        lines.append(f"- {_describe(*key.split('|'))}: {int(mask.sum())} runs")
        unchecked = int((mask & (_col(runs, "verify") == "none")).sum())
        if unchecked:
            lines.append(f"  - **{unchecked} runs unverified by choice (verify none): "
                         "their times are in the tables, their results were not checked.**")
        rid, costs = _cost_run(study, mask)
        if len(costs):
            row = {"workload": key.split("|")[0] or "uniform", "run_id": rid, **cost_table(costs)}
            rows.append(row)
            if out_dir is not None and plots:
                name = f"task_costs_{i}.png"
                files.append(_histogram(costs, f"per-task cost, {row['workload']} (run {rid})",
                                        os.path.join(out_dir, name)))
    if rows:
        lines += ["", "| workload | run | tasks | mean (µs) | CV | p50 (µs) | p99 (µs) | max/mean |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['workload']} | {r['run_id']} | {r['tasks']} | {r['mean_us']:.1f} | "
                  f"{r['cv']:.2f} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {r['max_over_mean']:.1f} |"
                  for r in rows]
        lines += ["", "Costs from the chunk trace of each workload's finest-grained verified "
                  "run (fewest workers among those); a chunk's time is shared by its tasks."]
    return lines + [""], files
