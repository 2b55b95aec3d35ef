"""``simulate --validate``: measured against simulated median time per configuration, the
median and worst absolute error, and whether the simulation ranks the schedulers of each
workload as the measurements do: is its favourite configuration (scheduler and k), as
measured, within 5 % of the measured best -- per workload, and at each k."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..core import policies as pol
from ..core.capabilities import BASELINE

# The bar for "ranked the same": the simulated favourite, as measured, within this
# much of the measured best (closer schedulers than that swap places in the noise anyway).
RANK_TOLERANCE = 0.05


@dataclass
class Validation:
    rows: list = field(default_factory=list)     # (config label, measured, simulated, error)
    rankings: list = field(default_factory=list)  # (workload/tensor, sim best, measured best, gap)
    # per workload over every k: ((workload, L), (sim best, k), (measured best, k), gap)
    overall: list = field(default_factory=list)

    @property
    def errors(self) -> list[float]:
        return [abs(e) for *_, e in self.rows]


def _label(row) -> tuple:
    return (str(row["workload"]), int(row["L"]), str(row["scheduler"]), int(row["k"]),
            int(row["chunk"]), bool(row["affinity"]), bool(row["coop"]))


def compare(pairs) -> Validation:
    """``pairs``: (measured row, simulated RunRecord) per measured run."""
    groups: dict[tuple, tuple[list, list]] = {}
    for row, rec in pairs:
        m, s = groups.setdefault(_label(row), ([], []))
        m.append(float(row["time_s"]))
        s.append(rec.time_s)
    out = Validation()
    by_tensor: dict[tuple, list] = {}
    for label, (m, s) in sorted(groups.items()):
        mm, sm = statistics.median(m), statistics.median(s)
        out.rows.append((label, mm, sm, sm / mm - 1.0))
        if label[2] != BASELINE:
            by_tensor.setdefault((label[0], label[1], label[3]), []).append((label[2], mm, sm))
    for key, entries in sorted(by_tensor.items()):
        if len(entries) < 2:
            continue
        sim_best = min(entries, key=lambda e: e[2])
        meas_best = min(entries, key=lambda e: e[1])
        out.rankings.append((key, sim_best[0], meas_best[0], sim_best[1] / meas_best[1] - 1.0))
    by_workload: dict[tuple, list] = {}
    for (wl, L, k), entries in by_tensor.items():
        by_workload.setdefault((wl, L), []).extend((s, k, mm, sm) for s, mm, sm in entries)
    for key, entries in sorted(by_workload.items()):
        sb = min(entries, key=lambda e: e[3])
        mb = min(entries, key=lambda e: e[2])
        out.overall.append((key, sb[:2], mb[:2], sb[2] / mb[2] - 1.0))
    return out


def _chunk_text(c: int) -> str:
    return "auto" if c == pol.AUTO_CHUNK else str(c) if c else "def"


def print_validation(v: Validation, path: str) -> None:
    print(f"# simulate --validate {path}\n")
    print("| workload | L | scheduler | k | chunk | affinity | coop | measured (ms) | "
          "simulated (ms) | error |")
    print("|---|---:|---|---:|---:|:---:|:---:|---:|---:|---:|")
    for (wl, L, s, k, c, aff, coop), mm, sm, err in v.rows:
        print(f"| {wl} | {L} | {s} | {k} | {_chunk_text(c)} | {'on' if aff else 'off'} | "
              f"{'yes' if coop else 'no'} | {mm * 1e3:.2f} | {sm * 1e3:.2f} | {err:+.1%} |")
    errs = v.errors
    if errs:
        print(f"\n|error| over {len(errs)} configurations: median {statistics.median(errs):.1%}, "
              f"worst {max(errs):.1%}")
    if v.overall:
        print("\n| workload | L | simulated best (k) | measured best (k) | the simulated best, "
              "as measured, behind the measured best | within 5 %? |")
        print("|---|---:|---|---|---:|:---:|")
        for (wl, L), (ss, sk), (ms, mk), gap in v.overall:
            ok = "yes" if gap <= RANK_TOLERANCE else "no"
            print(f"| {wl} | {L} | {ss} (k={sk}) | {ms} (k={mk}) | {gap:.1%} | {ok} |")
    if v.rankings:
        print("\n| workload | L | k | simulated best | measured best | the simulated best, as "
              "measured, behind the measured best | same? |")
        print("|---|---:|---:|---|---|---:|:---:|")
        for (wl, L, k), sb, mb, gap in v.rankings:
            ok = "yes" if gap <= RANK_TOLERANCE else "no"
            print(f"| {wl} | {L} | {k} | {sb} | {mb} | {gap:.1%} | {ok} |")
