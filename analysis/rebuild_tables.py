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


# Fields that older study files lack, at the value those runs used.
DEFAULTS = {"P": 1, "pipe_batch": 1, "inflight": 1}


def load(path):
    """/runs as a dict of columns (str columns decoded), missing fields at DEFAULTS."""
    with h5py.File(path, "r", locking=False) as h5:
        runs = h5["runs"][()]
        n = int(h5.attrs.get("machine.N", h5.attrs.get("machine.cpus_usable", 0)))
    dec = lambda col: np.char.decode(col, "utf-8") if col.dtype.kind == "S" else col  # noqa: E731
    cols = {name: dec(runs[name]) for name in runs.dtype.names}
    for name, value in DEFAULTS.items():
        cols.setdefault(name, np.full(len(runs), value))
    return cols, n


def tables(runs):
    """{(scheduler, affinity, chunk, P, pipe_batch, inflight): {(L, k): row}} over verified
    runs only. MPI runs (P > 1) stay apart from single-node ones; their speedup is over
    P x k units (Eqs. 19-20) against the single-node serial time."""
    ok = runs["verified"].astype(bool)
    times = defaultdict(list)
    for i in np.flatnonzero(ok):
        key = (runs["scheduler"][i], bool(runs["affinity"][i]), int(runs["chunk"][i]),
               int(runs["P"][i]), int(runs["pipe_batch"][i]), int(runs["inflight"][i]),
               int(runs["L"][i]), int(runs["k"][i]))
        times[key].append(float(runs["time_s"][i]))
    serial = {key[6]: np.mean(t) for key, t in times.items() if key[0] == "serial" and key[3] == 1}
    out = defaultdict(dict)
    for (s, aff, chunk, P, batch, inflight, L, k), t in times.items():
        t = np.array(t)
        mean = t.mean()
        units = P * k
        sigma = serial[L] / mean if L in serial else np.nan
        alpha = (1 / sigma - 1 / units) / (1 - 1 / units) if units >= 2 else np.nan
        out[(s, aff, chunk, P, batch, inflight)][(L, k)] = dict(
            scheduler=s, affinity=aff, chunk=chunk, P=P, pipe_batch=batch, inflight=inflight,
            L=L, k=k, reps=len(t), t_ms=mean * 1e3, sigma=sigma, sigma_e=sigma / units,
            alpha=alpha, flagged=bool(sigma > units or sigma < 1), e_p=float(np.mean(t.min() / t)))
    return out


def fmt(x, spec):
    return "—" if x is None or np.isnan(x) else format(x, spec)


def main(path, out_dir="analysis_out"):
    runs, n = load(path)
    tabs = tables(runs)
    os.makedirs(out_dir, exist_ok=True)
    flat = []
    for (s, aff, chunk, P, batch, inflight), cells in sorted(tabs.items()):
        Ls = sorted({L for L, _ in cells})
        extra = (f", P = {P} ranks" if P > 1 else "") + (f", {batch} records per write" if batch != 1
                                                          else "") + (f", {inflight} in flight" if inflight != 1 else "")
        print(f"\n### {s} (affinity {'on' if aff else 'off'}, chunk {chunk or 'default'}{extra})\n")
        print("| k |" + "".join(f" T (ms) L={L} | σ | σE | α | E_p |" for L in Ls))
        print("|---:|" + "---:|" * 5 * len(Ls))
        for k in sorted({k for _, k in cells}):
            line = f"| {k} |"
            for L in Ls:
                r = cells.get((L, k))
                if r is None:
                    line += " | | | | |"
                    continue
                a = fmt(r["alpha"], ".4f") + (" †" if r["flagged"] and r["P"] * k >= 2 else "")
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
               + (f", chunk {chunk}" if chunk else "") + extra)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        name = (f"speedup_{s}" + ("" if aff else "_noaff") + (f"_chunk{chunk}" if chunk else "")
                + (f"_P{P}" if P > 1 else "") + (f"_batch{batch}" if batch != 1 else "")
                + (f"_inflight{inflight}" if inflight != 1 else ""))
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
