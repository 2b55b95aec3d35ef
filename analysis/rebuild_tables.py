#!/usr/bin/env python3
"""Rebuild the study's tables and speedup figures from a hybridsched HDF5 file.

Standalone on purpose: h5py, numpy and matplotlib only (no hybridsched import), so you can
copy it and change it. Usage:

    python analysis/rebuild_tables.py study.h5 [OUT_DIR]

Prints one Markdown table per (scheduler, affinity, chunk) with rows k and, per L, the
mean time over verified repetitions, speedup (Eq. 4), efficiency (Eq. 5), Karp-Flatt alpha
(Eq. 8; † where sigma > k or sigma < 1) and E_p = mean P/P_max (§3.1); writes
OUT_DIR/tables.csv and OUT_DIR/speedup_<scheduler>.png (default OUT_DIR: analysis_out).
"""
import csv
import os
import sys
from collections import defaultdict

import h5py
import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def load(path):
    """/runs as a numpy structured array with str columns."""
    with h5py.File(path, "r") as h5:
        runs = h5["runs"][()]
        n = int(h5.attrs.get("machine.N", h5.attrs.get("machine.cpus_usable", 0)))
    dec = lambda col: np.char.decode(col, "utf-8") if col.dtype.kind == "S" else col  # noqa: E731
    return {name: dec(runs[name]) for name in runs.dtype.names}, n


def tables(runs):
    """{(scheduler, affinity, chunk): {(L, k): row}} over verified runs only."""
    ok = runs["verified"].astype(bool)
    times = defaultdict(list)
    for i in np.flatnonzero(ok):
        key = (runs["scheduler"][i], bool(runs["affinity"][i]), int(runs["chunk"][i]),
               int(runs["L"][i]), int(runs["k"][i]))
        times[key].append(float(runs["time_s"][i]))
    serial = {L: np.mean(t) for (s, _, _, L, _), t in times.items() if s == "serial"}
    out = defaultdict(dict)
    for (s, aff, chunk, L, k), t in times.items():
        t = np.array(t)
        mean = t.mean()
        sigma = serial[L] / mean if L in serial else np.nan
        alpha = (1 / sigma - 1 / k) / (1 - 1 / k) if k >= 2 else np.nan
        out[(s, aff, chunk)][(L, k)] = dict(
            scheduler=s, affinity=aff, chunk=chunk, L=L, k=k, reps=len(t), t_ms=mean * 1e3,
            sigma=sigma, sigma_e=sigma / k, alpha=alpha, flagged=bool(sigma > k or sigma < 1),
            e_p=float(np.mean(t.min() / t)))
    return out


def fmt(x, spec):
    return "—" if x is None or np.isnan(x) else format(x, spec)


def main(path, out_dir="analysis_out"):
    runs, n = load(path)
    tabs = tables(runs)
    os.makedirs(out_dir, exist_ok=True)
    flat = []
    for (s, aff, chunk), cells in sorted(tabs.items()):
        Ls = sorted({L for L, _ in cells})
        print(f"\n### {s} (affinity {'on' if aff else 'off'}, chunk {chunk or 'default'})\n")
        print("| k |" + "".join(f" T (ms) L={L} | σ | σE | α | E_p |" for L in Ls))
        print("|---:|" + "---:|" * 5 * len(Ls))
        for k in sorted({k for _, k in cells}):
            line = f"| {k} |"
            for L in Ls:
                r = cells.get((L, k))
                if r is None:
                    line += " | | | | |"
                    continue
                a = fmt(r["alpha"], ".4f") + (" †" if r["flagged"] and k >= 2 else "")
                line += (f" {r['t_ms']:.2f} | {fmt(r['sigma'], '.3f')} | "
                         f"{fmt(r['sigma_e'], '.3f')} | {a} | {r['e_p']:.3f} |")
                flat.append(r)
            print(line)
        if s == "serial" or all(np.isnan(r["sigma"]) for r in cells.values()):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for L in Ls:
            pts = sorted((k, r["sigma"]) for (LL, k), r in cells.items() if LL == L)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"L = {L}")
        kmax = max(k for _, k in cells)
        ax.plot([1, kmax], [1, kmax], "--", color="grey", label="ideal σ = k")
        if n and n < kmax:
            ax.axhline(n, ls=":", color="black", label=f"N = {n}")
        ax.set(xlabel="k", ylabel="speedup σ(k)", title=f"{s}, affinity {'on' if aff else 'off'}"
               + (f", chunk {chunk}" if chunk else ""))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        name = f"speedup_{s}" + ("" if aff else "_noaff") + (f"_chunk{chunk}" if chunk else "")
        fig.savefig(os.path.join(out_dir, name + ".png"), dpi=110)
        plt.close(fig)
    if flat:
        with open(os.path.join(out_dir, "tables.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(flat[0]))
            w.writeheader()
            w.writerows(flat)
    print(f"\nCSV and PNG files in {out_dir}/", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
