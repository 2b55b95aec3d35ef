"""Speedup-vs-k plots like the paper's Figures 2-13 (PNG).

Uses matplotlib's object API with the Agg canvas directly, so no global backend is
switched and nothing needs a display.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from typing import Iterator

from ..core.capabilities import BASELINE
from .data import Row, families, variant_label, variants

_DPI = 110  # readable in a Markdown viewer without multi-megabyte files


def canvas(figsize: tuple[float, float]):
    """A matplotlib Figure of ``figsize`` inches on its own Agg canvas: every plot's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


@contextlib.contextmanager
def quiet_glyphs() -> Iterator[None]:
    """Meanwhile, no warning for a glyph the font lacks. A title from a user's command in a
    script the font lacks (CJK) is drawn with boxes for those characters, and matplotlib
    warned once per glyph on stderr, four lines for one command (the hostile review); the
    table beside the plot holds the command in full. Only while we draw: a caller's own
    figures keep their warnings."""
    with warnings.catch_warnings():
        # matplotlib >= 3.8 says "missing from font(s) X", 3.7 "missing from current font"
        warnings.filterwarnings("ignore", r"Glyph \d+ .*missing from (current )?font",
                                UserWarning)
        yield


def lay_out(fig) -> None:
    """``fig.tight_layout()``, quietly (:func:`quiet_glyphs`)."""
    with quiet_glyphs():
        fig.tight_layout()


def figure():
    fig = canvas((8.4, 4.4))  # wider: the legend sits beside the axes
    return fig, fig.add_subplot(1, 1, 1)


def _finish(fig, ax, ks: list[int], sigmas: list[float], n: int, title: str, path: str) -> str:
    if ks:
        hi = max(ks)
        pts = sorted(set(ks) | {1})  # every k, so the line is right on a log axis too
        ax.plot(pts, pts, ls="--", color="grey", lw=1, label="ideal σ = k")
        if n and n < hi:
            ax.axhline(n, ls=":", color="black", lw=1, label=f"N = {n} cores")
            # far into oversubscription (the scaled preset goes to 16 N) the ideal line
            # would squash the measured curves: cap the y range near N
            ax.set_ylim(0, max(max(sigmas, default=1.0), n) * 1.3)
        # k doubles in every preset: log2 spaces the points evenly; ticks at the k run
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(ks)))
        ax.set_xticklabels([str(k) for k in sorted(set(ks))], fontsize=8)
        ax.minorticks_off()
    ax.set_xlabel("k (workers), log2 axis")
    ax.set_ylabel("speedup σ(k) = T_serial / T_k")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    # off the data: to the right of the axes, however many curves there are
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    lay_out(fig)
    return save_png(fig, path)


def save_png(fig, path: str, dpi: int = _DPI) -> str:
    """Write a figure by rename: a planted symlink at ``path`` is replaced, not followed."""
    from ..store import replacing

    with replacing(path) as fh:
        with quiet_glyphs():
            fig.savefig(fh, dpi=dpi, format="png")
    return path


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _curve(rows: list[Row]) -> tuple[list[int], list[float], list[float]]:
    """k, σ and σ's spread: σ·sd(T)/mean(T), the first-order error of T_serial/T (0 where a
    row has one repetition)."""
    pts = sorted((r.k, r.sigma, r.sigma * r.t_std / r.t_mean if r.reps > 1 and r.t_std == r.t_std
                  else 0.0) for r in rows if not math.isnan(r.sigma))
    return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]


def speedup_plots(rows: list[Row], out_dir: str, n: int) -> list[str]:
    """One PNG per scheduler variant (a curve per L) and one per family and L (a curve per
    scheduler variant), each with the ideal line. Needs serial runs (σ); returns the paths."""
    if not any(not math.isnan(r.sigma) for r in rows):
        return []
    out = []
    for v in variants(rows):
        if v[0] == BASELINE:
            continue
        vrows = [r for r in rows if r.variant == v]
        fig, ax = figure()
        allk = []
        for L in sorted({r.L for r in vrows}):
            ks, s, err = _curve([r for r in vrows if r.L == L])
            if ks:
                ax.errorbar(ks, s, yerr=err, marker="o", capsize=3, label=f"L = {L}")
                allk += ks
        if not allk:
            continue
        sig = [r.sigma for r in vrows if not math.isnan(r.sigma)]
        chunk = f"_chunk{v[2]}" if v[2] > 0 else "_chunkauto" if v[2] < 0 else ""
        name = (f"speedup_{safe_name(v[0])}" + ("" if v[1] else "_noaff") + chunk
                + (f"_P{v[3]}" if v[3] > 1 else "") + (f"_batch{v[4]}" if v[4] != 1 else "")
                + (f"_inflight{v[5]}" if v[5] != 1 else "") + ("_coop" if v[6] else ""))
        out.append(_finish(fig, ax, allk, sig, n, variant_label(*v),
                           os.path.join(out_dir, name + ".png")))
    for fam in families(rows):
        for L in sorted({r.L for r in rows}):
            frows = [r for r in rows if r.family == fam and r.L == L]
            fig, ax = figure()
            allk = []
            for v in variants(frows):
                ks, s, err = _curve([r for r in frows if r.variant == v])
                if ks:
                    lab = (v[0] + ("" if v[1] else " no-aff") + (f" c={v[2]}" if v[2] else "")
                           + (f" b={v[4]}" if v[4] != 1 else "") + (f" d={v[5]}" if v[5] != 1 else "")
                           + (" coop" if v[6] else ""))
                    ax.errorbar(ks, s, yerr=err, marker="o", ms=3, capsize=2, label=lab)
                    allk += ks
            if allk:
                sig = [r.sigma for r in frows if not math.isnan(r.sigma)]
                out.append(_finish(fig, ax, allk, sig, n, f"{fam} schedulers, L = {L}",
                                   os.path.join(out_dir, f"family_{safe_name(fam)}_L{L}.png")))
    return out
