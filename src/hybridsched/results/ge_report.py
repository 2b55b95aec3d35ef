"""The `ge` section of a report: per algorithm, time per stage against user threads for
each architecture (mean over verified repetitions, LAPACK's numpy.linalg.solve beside), the
accelerations A1/A0 and A2/A0 per stage in the seed's form ("A2 is X % faster than A0",
X = (T_A0 / T_A2 - 1) x 100), the counts that explain them, CSV and plots."""
from __future__ import annotations

import math
import os

import numpy as np

from ..store import StudyFile
from .plots import canvas, lay_out, save_png

STAGES = ("create", "forward", "back", "total")
COUNTS = ("blocks", "wakeups", "switches", "scans")


def _mean(rows: np.ndarray, col: str) -> float:
    return float(np.mean(rows[col])) if len(rows) else math.nan


def summarise(ge: np.ndarray) -> list[dict]:
    """One record per (algo, n, threads, arch) over verified runs."""
    out = []
    ok = ge[ge["verified"]]
    keys = sorted({(str(r["algo"]), int(r["n"]), int(r["threads"]), str(r["arch"])) for r in ge})
    for algo, n, t, arch in keys:
        sel = ok[(ok["algo"] == algo) & (ok["n"] == n) & (ok["threads"] == t) & (ok["arch"] == arch)]
        rec = dict(algo=algo, n=n, threads=t, arch=arch, reps=len(sel),
                   sched_threads=int(sel["sched_threads"][0]) if len(sel) else 0)
        for s in STAGES:
            rec[f"t_{s}_s"] = _mean(sel, f"t_{s}_s")
        rec["t_lapack_s"] = _mean(sel, "t_lapack_s")
        for c in COUNTS:
            rec[c] = _mean(sel, c)
        out.append(rec)
    return out


def _f(v: float, scale: float = 1e3, fmt: str = "{:.2f}") -> str:
    return "—" if not math.isfinite(v) else fmt.format(v * scale)


def faster(t0: float, t: float) -> float:
    """How much faster t is than the baseline t0, in percent (the seed's form)."""
    return (t0 / t - 1.0) * 100.0 if t > 0 and math.isfinite(t0) and math.isfinite(t) else math.nan


def ge_markdown(ge: np.ndarray) -> str:
    recs = summarise(ge)
    lines = ["## Cooperative scheduler on Gaussian elimination (`ge`)", "",
             f"Runs: {len(ge)} stored, {int(ge['verified'].sum())} verified (residual < 1e-10, "
             "x within 1e-8 of numpy.linalg.solve). Times in ms, means over verified "
             "repetitions; forward includes the creation of the user threads (they start as created), total = forward + back; LAPACK = numpy.linalg.solve on the same system, all usable CPUs.", ""]
    bad = ge[~ge["verified"]]
    for r in bad[:10]:
        lines.append(f"- failed: {r['arch']} {r['algo']} n={r['n']} T={r['threads']} "
                     f"rep {r['rep']}: {r['error']}")
    if len(bad):
        lines.append("")
    for algo in sorted({r["algo"] for r in recs}):
        for n in sorted({r["n"] for r in recs if r["algo"] == algo}):
            sel = [r for r in recs if r["algo"] == algo and r["n"] == n]
            archs = sorted({r["arch"] for r in sel})
            by = {(r["threads"], r["arch"]): r for r in sel}
            ts = sorted({r["threads"] for r in sel})
            lines += [f"### `{algo}`, n = {n}", ""]
            head = "| threads | " + " | ".join(f"{a} {s}" for a in archs for s in STAGES) + \
                " | LAPACK |"
            lines += [head, "|" + "---|" * (2 + len(archs) * len(STAGES))]
            for t in ts:
                cells = [_f(by[(t, a)][f"t_{s}_s"]) if (t, a) in by else "—"
                         for a in archs for s in STAGES]
                lap = [v for a in archs if (t, a) in by
                       and not math.isnan(v := float(by[(t, a)]["t_lapack_s"]))]
                lines.append(f"| {t} | " + " | ".join(cells) +
                             f" | {_f(float(np.mean(lap)) if lap else math.nan)} |")
            lines.append("")
            if "A0" in archs and len(archs) > 1:
                lines += ["Acceleration over A0 (% faster; negative = slower):", "",
                          "| threads | " + " | ".join(f"{a} {s}" for a in archs if a != "A0"
                                                       for s in STAGES) + " |",
                          "|" + "---|" * (1 + (len(archs) - 1) * len(STAGES))]
                for t in ts:
                    cells = []
                    for a in archs:
                        if a == "A0":
                            continue
                        for s in STAGES:
                            if (t, a) in by and (t, "A0") in by:
                                v = faster(by[(t, "A0")][f"t_{s}_s"], by[(t, a)][f"t_{s}_s"])
                                cells.append("—" if not math.isfinite(v) else f"{v:+.1f} %")
                            else:
                                cells.append("—")
                    lines.append(f"| {t} | " + " | ".join(cells) + " |")
                lines.append("")
                tmax = ts[-1]
                for a in archs:
                    if a != "A0" and (tmax, a) in by and (tmax, "A0") in by:
                        parts = [f"{s} {faster(by[(tmax, 'A0')][f't_{s}_s'], by[(tmax, a)][f't_{s}_s']):+.1f} %"
                                 for s in STAGES]
                        lines.append(f"At T = {tmax}: {a} is faster than A0 by " +
                                     ", ".join(parts) + ".")
                lines.append("")
            lines += ["Counts per run (blocks, wake-ups, user-mode switches, A1 blocked-queue "
                      "entries scanned):", "",
                      "| threads | " + " | ".join(f"{a} {c}" for a in archs for c in COUNTS) + " |",
                      "|" + "---|" * (1 + len(archs) * len(COUNTS))]
            for t in ts:
                cells = [_f(by[(t, a)][c], 1, "{:.0f}") if (t, a) in by else "—"
                         for a in archs for c in COUNTS]
                lines.append(f"| {t} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def _plots(recs: list[dict], out_dir: str) -> list[str]:

    files = []
    for algo, n in sorted({(r["algo"], r["n"]) for r in recs}):
        sel = [r for r in recs if r["algo"] == algo and r["n"] == n]
        fig = canvas((10, 7))
        for k, s in enumerate(STAGES):
            ax = fig.add_subplot(2, 2, k + 1)
            for a in sorted({r["arch"] for r in sel}):
                pts = sorted((r["threads"], r[f"t_{s}_s"] * 1e3) for r in sel
                             if r["arch"] == a and math.isfinite(r[f"t_{s}_s"]))
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=a)
            if s == "total":
                pts = sorted((r["threads"], r["t_lapack_s"] * 1e3) for r in sel
                             if math.isfinite(r["t_lapack_s"]))
                if pts:
                    ax.plot(*zip(*pts), ls="--", color="grey", label="numpy.linalg.solve")
            ax.set_xscale("log")
            ax.set_title(f"{algo} n={n}: {s}")
            ax.set_xlabel("user threads")
            ax.set_ylabel("ms")
            if ax.get_legend_handles_labels()[1]:  # no verified run: nothing to name
                ax.legend(fontsize=8)
        lay_out(fig)
        files.append(save_png(fig, os.path.join(out_dir, f"ge_{algo}_n{n}.png"), dpi=100))
    return files


def write_outputs(ge: np.ndarray, out_dir: str | None, plots: bool) -> list[str]:
    if out_dir is None:
        return []
    from ..store import our_directory
    from .files import write_csv

    our_directory(out_dir)  # fresh, or ours: never through a symlink
    recs = summarise(ge)
    files = []
    if recs:
        p = os.path.join(out_dir, "ge_summary.csv")
        write_csv(p, recs)
        files.append(p)
        if plots:
            files += _plots(recs, out_dir)
    return files


def section(study: StudyFile, out_dir: str | None, plots: bool) -> tuple[list[str], list[str]]:
    """The GE section of a report (Markdown lines, files) when the open ``study`` has /ge
    rows."""
    from ..ge.output import read_ge

    ge = read_ge(study)
    if len(ge) == 0:
        return [], []
    return ["", ge_markdown(ge)], write_outputs(ge, out_dir, plots)
