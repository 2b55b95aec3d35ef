"""The PNG of a scalability fit: measured points, the fitted curve, the ideal line, N* and
the physical cores; under MPI each (P, k) pair of one N gets its own marker and label."""
from __future__ import annotations

import os

import numpy as np

from ..errors import UsageError
from .plots import canvas, lay_out, quiet_glyphs

_MARKERS = "os^Dv<>ph*"  # one per P, cycled


def plot(res: dict, path: str, study: str = "") -> None:
    """Write :func:`figure` of ``res`` (fit.fit's dict) to ``path`` by rename; the format
    follows the extension (png by default). An existing plot is replaced, never ``study``
    (the input) nor a study being written."""
    from ..store import replacing, single_output

    fig = figure(res)
    fmt = os.path.splitext(path)[1][1:].lower() or "png"
    try:
        # a regular file or nothing (never a device or FIFO), replaced by rename (a planted
        # symlink is not followed)
        with single_output(path, "--plot", True, (study,) if study else ()), \
                replacing(path) as fh:
            with quiet_glyphs():
                fig.savefig(fh, dpi=110, format=fmt)
    except ValueError as exc:
        raise UsageError(f"--plot {path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None


def figure(res: dict):
    """Data, fitted curve, ideal line, N*, the cores (oversubscribed points ringed) and,
    where several P share an N, a marker per P and a "P×k" label per point."""

    from .fit import predict
    from .fitcheck import oversubscribed

    n = np.array(res["data"]["N"], float)
    y = np.array(res["data"][res["kind"]], float)
    top = float(n.max()) * 1.25
    if res.get("peak_N") and res["peak_N"] < 4 * n.max():
        top = max(top, res["peak_N"] * 1.3)
    xs = np.linspace(1.0, top, 400)
    fig = canvas((7.6, 4.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, res["lambda"] * xs, ":", color="grey", label="ideal (linear)")
    ax.plot(xs, predict(res, xs), "-", label=f"{res['model']} fit")
    P, k = res["data"].get("P"), res["data"].get("k")
    if P is not None and k is not None and len(set(P)) > 1:
        # several (P, k) give one N: a marker per P and a label per point keep them apart
        for i, p in enumerate(sorted(set(P))):
            m = np.array(P) == p
            ax.plot(n[m], y[m], _MARKERS[i % len(_MARKERS)], label=f"measured, P = {p}")
        for xi, yi, pi, ki in zip(n, y, P, k):
            ax.annotate(f"{pi}×{ki}", (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
    else:
        ax.plot(n, y, "o", label="measured")
    cores = res.get("cores")
    over = oversubscribed(res, cores)
    if over and cores:  # (none without cores)
        # N = cores is the limit at P = 1; with P nodes each node oversubscribes at k > cores,
        # so the points themselves are ringed as well
        if P is None or set(P) == {1}:
            ax.axvline(cores, ls="-.", lw=0.9, color="purple",
                       label=f"N = {cores} physical cores")
            ax.axvspan(cores, top, color="purple", alpha=0.06)
        m = np.isin(n, over) if P is None or k is None else np.array(k) > cores
        ax.plot(n[m], y[m], "o", mfc="none", mec="purple", ms=11,
                label="oversubscribed (more workers than cores)")
    if res.get("peak_N"):
        ax.axvline(res["peak_N"], ls="--", lw=0.8, color="red", label=f"N* = {res['peak_N']:.3g}")
    ax.set_xlabel("N = P × k")
    ax.set_ylabel(res["kind"])
    extra = f", β={res['beta']:.3g}" if res["model"] == "usl" else ""
    warn = f" — {len(res.get('warnings', []))} warning(s), see the text" if res.get("warnings") else ""
    ax.set_title(f"{res['model']}: α={res['alpha']:.3g}{extra}, R²={res['r2']:.4f}{warn}", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    lay_out(fig)
    return fig
