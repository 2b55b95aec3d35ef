"""What the workers of one run did: run selection, lanes, load imbalance and the Gantt PNG.

Read-only: everything comes from a run's row and its ``/detail/<id>`` (the chunk trace,
the per-worker table and series such as ``aimd_window``). Times are seconds relative to
the run's start, as stored. Under MPI a worker id is rank × k + w (mpi/runs.py), so a lane
is named by rank and local worker.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..store import Detail, StudyFile, opened
from ..core.capabilities import is_baseline


@dataclass
class RunTrace:
    """One run's row fields that a timeline needs, and its detail."""

    run_id: int
    scheduler: str
    family: str
    P: int
    k: int
    L: int
    rep: int
    time_s: float
    detail: Detail
    simulated: bool = False
    failure: str = ""  # why the run did not verify ('' for a verified run)

    @property
    def title(self) -> str:
        k = f"{self.P}×{self.k}" if self.P > 1 else str(self.k)
        sim = " [simulated]" if self.simulated else ""
        failed = f" [failed: {self.failure}]" if self.failure else ""
        return (f"run {self.run_id}{sim}: {self.scheduler} ({self.family}), k = {k}, "
                f"L = {self.L}, rep {self.rep}{failed}")

    def lane_label(self, worker: int) -> str:
        if self.P > 1 and self.k > 0:
            return f"r{worker // self.k} w{worker % self.k}"
        return f"w{worker}"

    @property
    def lanes(self) -> list[int]:
        """Worker ids with a lane: every worker in the table or the trace, in order."""
        ids = set(int(w) for w in self.detail.workers["worker"])
        ids |= set(int(w) for w in self.detail.trace["worker"])
        return sorted(ids)

    @property
    def end_s(self) -> float:
        """The last worker's end (the run's time where no worker recorded one)."""
        ends = [float(x) for x in self.detail.workers["end"]] + [float(x) for x in self.detail.trace["end"]]
        ends = [e for e in ends if math.isfinite(e)]
        return max(ends) if ends else self.time_s


def select(runs: np.ndarray, run_id: int | None = None, scheduler: str | None = None,
           k: int | None = None, L: int | None = None, rep: int | None = None) -> np.ndarray:
    """The one /runs row asked for: by ``run_id``, or the first verified run (lowest rep,
    then run_id) matching scheduler/k/L/rep, the first failed one where none verified (its
    title says so). UsageError naming what exists otherwise."""
    if run_id is not None:
        hit = runs[runs["run_id"] == run_id]
        if len(hit) == 0:
            raise UsageError(f"--run {run_id}: no such run (run ids {int(runs['run_id'].min())}"
                             f"–{int(runs['run_id'].max())})" if len(runs) else
                             f"--run {run_id}: the study holds no runs")
        return hit[0]
    m = np.ones(len(runs), bool)
    for name, val in (("scheduler", scheduler), ("k", k), ("L", L), ("rep", rep)):
        if val is not None:
            m &= runs[name] == val
    cand = runs[m]
    if len(cand) == 0:
        asked = " ".join(f"{o} {v}" for o, v in (("-s", scheduler), ("-k", k), ("-L", L),
                                                 ("--rep", rep)) if v is not None)
        have = ", ".join(sorted({str(s) for s in runs["scheduler"]}))
        raise UsageError(f"no run matches {asked or 'the selection'} (schedulers in the study: "
                         f"{have}; k {sorted({int(x) for x in runs['k']})}, L "
                         f"{sorted({int(x) for x in runs['L']})})")
    ok = cand[cand["verified"]]
    cand = ok if len(ok) else cand
    order = np.lexsort((cand["run_id"], cand["rep"]))
    return cand[order[0]]


def load(source: str | StudyFile, row: np.ndarray) -> RunTrace:
    """The RunTrace of one /runs row of the study ``source`` (a path, or a study open)."""
    with opened(source) as study:
        d = study.detail(int(row["run_id"]))
    if len(d.trace) == 0 and len(d.workers) == 0:
        why = "" if row["verified"] else f" (it failed: {str(row['error'])[:120] or 'unverified'})"
        raise UsageError(f"{study.path}: run {int(row['run_id'])} has no stored trace{why}")
    sim = "simulated" in (row.dtype.names or ()) and bool(row["simulated"])
    failure = "" if row["verified"] else (" ".join(str(row["error"]).split())[:120]
                                          or "not verified")
    return RunTrace(int(row["run_id"]), str(row["scheduler"]), str(row["family"]), int(row["P"]),
                    int(row["k"]), int(row["L"]), int(row["rep"]), float(row["time_s"]), d, sim,
                    failure)


def step_series(detail: Detail) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, t, value) of each stored time series with a numeric column beside ``t``:
    AIMD's window, and any such series a backend adds (coop tokens, say)."""
    out = []
    for name, arr in sorted(detail.series.items()):
        names = arr.dtype.names or ()
        cols = [c for c in names if c != "t" and arr.dtype[c].kind in "iuf"]
        if "t" in names and cols and len(arr):
            out.append((name, np.asarray(arr["t"], float), np.asarray(arr[cols[0]], float)))
    return out


# Lane height in inches: readable labels at k = 32 without a page-high figure; the figure
# is capped at MAX_HEIGHT_IN, beyond which lanes get thinner instead.
LANE_IN = 0.32
MAX_HEIGHT_IN = 14.0


def gantt(rt: RunTrace, path: str) -> str:
    """Write :func:`figure` of one run to ``path`` as PNG (by rename)."""
    from .plots import save_png

    return save_png(figure(rt), path)


def figure(rt: RunTrace):
    """One run as a Gantt chart: a lane per worker, chunks as bars (gid "chunks"; shades
    alternate so neighbours stay apart), the worker's lifetime as a pale band (gid "alive":
    a late start or an idle gap shows), the run's start and the last worker's end as
    vertical lines, and any series (AIMD's window) as a step line on a second axis."""
    from .plots import canvas, lay_out

    lanes = rt.lanes
    row_of = {w: i for i, w in enumerate(lanes)}
    series = step_series(rt.detail)
    height = min(MAX_HEIGHT_IN, 1.6 + LANE_IN * max(1, len(lanes)) + (1.2 if series else 0))
    fig = canvas((8.0, height))
    if series:
        ax, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    else:
        ax, ax2 = fig.add_subplot(1, 1, 1), None
    ms = 1e3
    for w in rt.detail.workers:
        y = row_of.get(int(w["worker"]))
        if y is not None and math.isfinite(w["start"]) and math.isfinite(w["end"]) and w["end"] > w["start"]:
            ax.broken_barh([(w["start"] * ms, (w["end"] - w["start"]) * ms)], (y - 0.4, 0.8),
                           facecolors="#e8e8e8", edgecolors="none", gid="alive")
    tr = rt.detail.trace
    for w in lanes:
        mine = tr[tr["worker"] == w]
        if not len(mine):
            continue
        mine = mine[np.argsort(mine["start"], kind="stable")]
        bars = [(s * ms, max(e - s, 0.0) * ms) for s, e in zip(mine["start"], mine["end"])]
        shades = ["#3b75af" if i % 2 == 0 else "#87b0d8" for i in range(len(bars))]
        ax.broken_barh(bars, (row_of[w] - 0.3, 0.6), facecolors=shades, edgecolors="none",
                       gid="chunks")
    end = rt.end_s
    ax.axvline(0.0, color="green", lw=1, label="run start")
    ax.axvline(end * ms, color="red", ls="--", lw=1, label=f"last worker ends ({end * ms:.2f} ms)")
    if math.isfinite(rt.time_s) and abs(rt.time_s - end) > 1e-6:
        ax.axvline(rt.time_s * ms, color="black", ls=":", lw=1, label=f"T = {rt.time_s * ms:.2f} ms")
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    handles = [Patch(color="#3b75af", label="chunk (shades alternate)"),
               Patch(color="#e8e8e8", label="worker alive, not in a chunk")] + handles
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([rt.lane_label(w) for w in lanes], fontsize=7 if len(lanes) > 16 else 8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_title(rt.title, fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0)
    if ax2 is not None:
        for name, t, v in series:
            ax2.step(np.concatenate([[0.0], t]) * ms, np.concatenate([[v[0]], v]), where="post",
                     label=name)
        ax2.set_ylabel("series", fontsize=8)
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax2.grid(True, alpha=0.3)
        ax2.set_xlabel("time since the run's start (ms)")
    else:
        ax.set_xlabel("time since the run's start (ms)")
    lay_out(fig)
    return fig


def report_gantts(study, rows, out_dir: str) -> list[str]:
    """One Gantt per scheduler at k = N (the largest k ≤ N the study has), smallest L, first
    verified repetition of its paper-protocol variant (else its first variant):
    ``gantt_<scheduler>.png``. Runs without a stored trace are skipped."""
    from .data import k_at_n

    kn = k_at_n(rows, study.n)
    if kn is None:
        return []
    runs = study.runs[study.runs["verified"] & (study.runs["k"] == kn)]
    with study.file() as source:
        charts = [_gantt_of(source, runs[runs["scheduler"] == name], name, out_dir)
                  for name in dict.fromkeys(r.scheduler for r in rows if not is_baseline(r.family))]
    return [c for c in charts if c is not None]


def _gantt_of(source: StudyFile, mine: np.ndarray, name: str, out_dir: str) -> str | None:
    """The Gantt chart of scheduler ``name``'s paper-protocol run (of its runs ``mine`` at
    k = N); None where none has a stored trace."""
    import os

    from .plots import safe_name

    if not len(mine):
        return None
    paper = mine[(mine["pipe_batch"] == 1) & (mine["inflight"] == 1) & ~mine["coop"]
                 & mine["affinity"] & (mine["chunk"] == 0)]
    mine = paper if len(paper) else mine
    mine = mine[mine["L"] == mine["L"].min()]
    try:
        rt = load(source, select(mine))
    except UsageError:
        return None
    return gantt(rt, os.path.join(out_dir, f"gantt_{safe_name(name)}.png"))
