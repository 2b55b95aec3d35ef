"""The study data model that every reader shares: a study file's runs grouped into rows
(one per scheduler variant, L and k) with the paper's metrics, and the helpers that pick
rows out. Reading only: nothing here runs a scheduler or writes a study.

Every mean is over verified repetitions only; a failed or unverified run never enters one.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import ContextManager

import numpy as np

from ..machine.rule import SHARED_MACHINE
from ..store import StudyFile, opened
from . import metrics
from ..core.capabilities import BASELINE, Family, is_baseline, is_threaded

FAMILY_ORDER = (Family.THREAD, Family.PROCESS, Family.PIPE)  # then any other family, alphabetically


@dataclass
class Row:
    """One table cell group: a (scheduler, L, k, chunk, affinity) configuration."""

    scheduler: str
    family: str
    L: int
    k: int
    chunk: int
    affinity: bool
    reps: int          # verified repetitions used
    t_mean: float      # seconds
    sigma: float       # NaN without serial runs for this L
    sigma_e: float
    alpha: float
    alpha_flagged: bool
    t_min: float = math.nan
    t_std: float = math.nan          # sample standard deviation (n - 1); NaN at one repetition
    e_p: float = math.nan            # §3.1 mean P/P_max over the repetitions
    epsilon: float = math.nan        # Eq. 10 at k_eff = min(k, N)
    epsilon_flagged: bool = False
    t_ov: float = math.nan           # Eq. 16 with alpha = 0 (seconds)
    f_ov: float = math.nan           # Eq. 17 with alpha = 0
    alpha_scaled: float = math.nan   # Eq. 9 solved for alpha_scaled
    u_thread: float = math.nan       # Eq. 11, mean over workers and repetitions
    u_n: float = math.nan            # Eq. 14, mean over repetitions
    failed: int = 0                  # runs of this configuration not verified
    foreign_cpu: float = math.nan    # median share of the CPUs other processes used (dedicated: ~0)
    chunk_used: str = ""             # chunk(s) the backend reported
    P: int = 1                       # MPI ranks (nodes); sigma_E and alpha use P x k units
    pipe_batch: int = 1              # pipe records per producer write (1 = the paper's protocol)
    inflight: int = 1                # pipe-MtoM chunks in flight per worker (1 = the paper's)
    coop: bool = False               # ran on the cooperative arbiter's tokens (--coop)
    imbalance: float = math.nan      # mean over repetitions of metrics.load_imbalance

    @property
    def disturbed(self) -> bool:
        """Other processes took more than SHARED_MACHINE of the CPUs (median over its runs)."""
        return not math.isnan(self.foreign_cpu) and self.foreign_cpu > SHARED_MACHINE

    @property
    def variant(self) -> tuple[str, bool, int, int, int, int, bool]:
        return (self.scheduler, self.affinity, self.chunk, self.P, self.pipe_batch, self.inflight,
                self.coop)

    @property
    def paper_protocol(self) -> bool:
        """Run as the paper runs it (no pipe batching, one chunk in flight)."""
        return self.pipe_batch == 1 and self.inflight == 1 and not self.coop


@dataclass
class Study:
    """A study file read for reporting."""

    path: str
    runs: np.ndarray
    attrs: dict
    n: int                                   # N: usable CPUs when the study ran
    util: dict[int, tuple[float, float]] = field(default_factory=dict)  # run_id -> (U_thread, U_N)
    foreign: dict[int, float] = field(default_factory=dict)  # run_id -> share of CPUs used by others
    imbalance: dict[int, float] = field(default_factory=dict)  # run_id -> load imbalance of busy time
    # the open file it was loaded from, for the readers of per-run detail and side tables
    # (None, or closed, when loaded by load_study: each such reader then opens it again)
    source: StudyFile | None = field(default=None, repr=False, compare=False)

    def file(self) -> ContextManager[StudyFile]:
        """The study's file for a ``with`` block: :attr:`source` while it is open, the file at
        :attr:`path` opened again otherwise."""
        return opened(self.source or self.path)

    def machine_line(self) -> str:
        """The report's machine line: the CPUs the study ran on, or for a simulated study
        the virtual cores it was simulated on (and the machine that simulated them)."""
        from ..store import simulated_cores

        a = self.attrs
        cpu, host = a.get("machine.cpu_model", "?"), a.get("machine.hostname", "?")
        load = f"load average at start {a.get('machine.loadavg_at_start', 'not recorded')}"
        cores = simulated_cores(a)
        if cores:
            return (f"Simulated machine: N = {cores} virtual cores per node (simulated on "
                    f"{cpu}, host {host}; {load}).")
        return f"Machine: {cpu}, N = {self.n or '?'} usable CPUs, host {host}; {load}."

    def mpi_line(self) -> str:
        """Which MPI ran the study's ranks, "" when none did; a merged study names it for
        each input that ran under one."""
        from ..store import study_settings

        settings = study_settings(self.attrs)
        sources = settings.get("merged_from") or []
        if isinstance(sources, list) and sources:
            texts = [f"{s['mpi']}{_split_text(s.get('study'))} "
                     f"({os.path.basename(str(s.get('path', '?')))})"
                     for s in sources if isinstance(s, dict) and s.get("mpi")]
        else:
            texts = [t + _split_text(settings) for t in (mpi_text(self.attrs),) if t]
        return f"MPI: {'; '.join(texts)}." if texts else ""


def _split_text(settings) -> str:
    """How the frames were split between the ranks ('; --split dynamic over P = 2'), from a
    study's settings; "" where they do not say."""
    if not isinstance(settings, dict) or not isinstance(settings.get("split"), str):
        return ""
    P = settings.get("P")
    return f"; --split {settings['split']}" + (f" over P = {P}" if isinstance(P, int) else "")


def mpi_text(attrs: dict) -> str:
    """'MPICH 5.0.2 (MPI 5.0), started by mpiexec (...)' from a study's ``machine.mpi_*``
    attributes (older studies: ``mpi_vendor`` alone); "" for a study MPI did not run."""
    name, version = attrs.get("machine.mpi_implementation"), attrs.get("machine.mpi_version")
    what = f"{name} {version}" if name and version else str(attrs.get("machine.mpi_vendor", ""))
    if not what:
        return ""
    standard, launcher = attrs.get("machine.mpi_standard"), attrs.get("machine.mpi_launcher")
    return (what + (f" (MPI {standard})" if standard else "")
            + (f", started by {launcher}" if launcher else ""))


def load_study(path: str, utilisation: bool = True) -> Study:
    """Read runs, attributes and (optionally) each verified run's Eq. 11/14 utilisations,
    from one open of the file (``store.StudyFile``, which ``fit`` and the simulator share)."""
    with StudyFile(path) as study:
        return load_open(study, utilisation)


def load_open(study: StudyFile, utilisation: bool = True) -> Study:
    """:func:`load_study` from a study the caller holds open; the Study keeps it as its
    :attr:`Study.source`, so a report reads everything through that one open."""
    path = study.path
    runs = versions_apart(study.runs)
    runs = splits_apart(runs, run_splits(study, runs))
    attrs = study.attrs
    n = study.n
    util: dict[int, tuple[float, float]] = {}
    foreign: dict[int, float] = {}
    imbalance: dict[int, float] = {}
    if utilisation and len(runs):
        # a run without readable detail (a version-1 file that filled its disk) still
        # counts in the tables; only its utilisation and foreign-load figures are missing
        for rid, d in study.details(runs["run_id"][runs["verified"]]):
            if d is None:
                continue
            val = d.extra.get("foreign_cpu")
            if isinstance(val, (int, float)) and math.isfinite(val):
                foreign[rid] = float(val)
            if len(d.workers) and not math.isnan(li := metrics.load_imbalance(d.workers)):
                imbalance[rid] = li
            if n <= 0 or len(d.workers) == 0:
                continue
            ut = metrics.worker_utilisations(d.workers)
            util[rid] = (float(np.nanmean(ut)) if np.isfinite(ut).any() else math.nan,
                         metrics.many_core_utilisation(d.workers, n))
    return Study(path, runs, attrs, n, util, foreign, imbalance, source=study)


SIMULATED_MARK = " [sim]"  # a simulated row's scheduler in a study that also holds measured ones


def versions_apart(runs: np.ndarray) -> np.ndarray:
    """Runs that must never be pooled get apart names: two versions of one user technique
    (a different technique_hash under one scheduler name) become ``<name>@<first 8 hex
    digits of its hash>``, and in a study that holds both, simulated runs ``<name> [sim]``."""
    names = runs.dtype.names or ()
    if not len(runs) or "technique_hash" not in names:
        return runs
    split = {s for s in np.unique(runs["scheduler"])
             if len(np.unique(runs["technique_hash"][runs["scheduler"] == s])) > 1}
    mixed = "simulated" in names and 0 < int(runs["simulated"].sum()) < len(runs)
    if not split and not mixed:
        return runs
    names_now = runs["scheduler"].astype(object)
    for i in np.flatnonzero(np.isin(runs["scheduler"], list(split))):
        names_now[i] = f"{runs['scheduler'][i]}@{runs['technique_hash'][i][:8]}"
    if mixed:
        for i in np.flatnonzero(runs["simulated"]):
            names_now[i] += SIMULATED_MARK
    return _renamed(runs, names_now)


def _renamed(runs: np.ndarray, names: np.ndarray) -> np.ndarray:
    """``runs`` with these scheduler names, the column as wide as the longest (a fixed
    width cut a long technique's hash off, and two versions were pooled again)."""
    width = max((len(n) for n in names), default=1) or 1  # numpy has no "U0"
    fields = runs.dtype.names or ()
    out = runs.astype([(n, f"U{width}" if n == "scheduler" else runs.dtype[n])
                       for n in fields])
    out["scheduler"] = names
    return out


def _split_of(extra: dict) -> str:
    """How one multi-rank run split its frames between the ranks ('static', 'dynamic',
    'pkg.mod:Class@<hash>(params)'), from its detail's extra; '' where it does not say."""
    sim = extra.get("simulated")
    where = extra if "split" in extra or not isinstance(sim, dict) else sim  # a simulated run's
    split = where.get("split")
    if not isinstance(split, str):
        return ""
    digest, params = where.get("split_technique_hash"), where.get("split_params")
    return (split + (f"@{digest[:8]}" if isinstance(digest, str) and digest else "")
            + (f"({params})" if isinstance(params, str) and params else ""))


def run_splits(study: StudyFile, runs: np.ndarray) -> dict[int, str]:
    """How each multi-rank run of ``runs`` split its frames, by run_id, where ``study`` is a
    merge (its inputs may have split them differently); {} for a study that is not, whose
    runs all ran under its one ``--split`` (a study simulated from a merge re-simulates each
    run with its own: it is read as one too)."""
    from ..store import study_settings

    settings = study_settings(study.attrs)
    if not (settings.get("merged_from") or settings.get("simulated_from")):
        return {}
    multi = runs["run_id"][runs["P"] > 1] if len(runs) else runs["run_id"]
    return {rid: _split_of(d.extra) if d is not None else ""
            for rid, d in study.details(multi)}


def splits_apart(runs: np.ndarray, splits: dict[int, str]) -> np.ndarray:
    """Multi-rank runs whose ranks split the frames differently are never pooled: where
    ``splits`` (:func:`run_splits`) holds more than one way, a multi-rank run's scheduler
    becomes ``<name> [split <how>]`` (single-rank runs split nothing and keep their name,
    as serial runs do: T_serial is taken at P = 1 alone)."""
    if len(set(splits.values())) <= 1:
        return runs
    names = runs["scheduler"].astype(object)
    for i in np.flatnonzero((runs["P"] > 1) & (runs["scheduler"] != BASELINE)):
        how = splits.get(int(runs["run_id"][i])) or "not recorded"
        names[i] = f"{names[i]} [split {how}]"
    return _renamed(runs, names)


def simulated_line(runs: np.ndarray) -> str:
    """The report's label for simulated runs ('' when there are none)."""
    if "simulated" not in (runs.dtype.names or ()) or not runs["simulated"].any():
        return ""
    n = int(runs["simulated"].sum())
    if n == len(runs):
        return ("**Simulated study** (`hybridsched simulate`): every time below is a simulated "
                "makespan, not a measurement.")
    return (f"**{n} of the {len(runs)} runs are simulated** (`hybridsched simulate`): they are "
            f"reported apart, as `<scheduler>{SIMULATED_MARK}`, never pooled with measured runs.")


def serial_times(runs: np.ndarray, name: str = BASELINE) -> dict[int, float]:
    """Mean verified serial time per L (single-node serial runs): T_serial of Eq. 4; with
    ``name`` "serial [sim]", the simulated baseline of a study that holds both kinds."""
    out = {}
    ok = runs[(runs["scheduler"] == name) & runs["verified"] & (runs["P"] == 1)]
    for L in np.unique(ok["L"]):
        out[int(L)] = float(ok["time_s"][ok["L"] == L].mean())
    return out


def _nanmean(vals: list[float]) -> float:
    vals = [v for v in vals if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def summarise(runs: np.ndarray, n: int | None = None,
              util: dict[int, tuple[float, float]] | None = None,
              foreign: dict[int, float] | None = None,
              imbalance: dict[int, float] | None = None) -> list[Row]:
    """One row per (scheduler, L, k, chunk, affinity, P, pipe variant) over its verified runs; unverified or
    failed runs never enter a mean (they are counted in ``failed``). ``n`` (N) enables
    Eq. 10; ``util`` (from :func:`load_study`) the utilisation columns."""
    ts = serial_times(runs)
    ts_sim = serial_times(runs, BASELINE + SIMULATED_MARK)  # simulated rows: their own
    groups: dict[tuple, list] = {}
    fam: dict[str, str] = {}
    for r in runs:
        # a technique run with its parameters set is its own row, named with them
        label = str(r["scheduler"]) + (f" ({r['params']})" if "params" in r.dtype.names
                                       and str(r["params"]) else "")
        key = (label, int(r["L"]), int(r["k"]), int(r["chunk"]), bool(r["affinity"]),
               int(r["P"]), int(r["pipe_batch"]), int(r["inflight"]),
               bool(r["coop"]) if "coop" in r.dtype.names else False)
        g = groups.setdefault(key, [[], [], 0, set()])
        fam[key[0]] = str(r["family"])
        if r["verified"]:
            g[0].append(float(r["time_s"]))
            g[1].append(int(r["run_id"]))
            g[3].add(int(r["chunk_used"]))
        else:
            g[2] += 1
    rows = []
    for (s, L, k, c, aff, P, pb, inf, coop), (times, ids, failed, used) in groups.items():
        if not times:
            rows.append(Row(s, fam[s], L, k, c, aff, 0, math.nan, math.nan, math.nan, math.nan,
                            False, failed=failed, P=P, pipe_batch=pb, inflight=inf, coop=coop))
            continue
        t = float(np.mean(times))
        ser = (ts_sim if s.endswith(SIMULATED_MARK) else ts).get(L, math.nan)
        sigma = metrics.speedup(ser, t) if not math.isnan(ser) else math.nan
        units = P * k  # Eq. 19-20: P nodes x k workers; P = 1 is the single-node table
        a = metrics.serial_fraction(sigma, units)
        row = Row(s, fam[s], L, k, c, aff, len(times), t, sigma, metrics.efficiency(sigma, units),
                  a.value, a.diagnostic, t_min=float(np.min(times)), t_std=float(np.std(times, ddof=1)) if len(times) > 1 else math.nan,
                  e_p=metrics.mean_performance_efficiency(times), failed=failed,
                  chunk_used="/".join(str(u) for u in sorted(used)), P=P, pipe_batch=pb,
                  inflight=inf, coop=coop)
        if not math.isnan(sigma):
            row.t_ov = metrics.overhead_time(ser, t, units)
            row.f_ov = metrics.overhead_fraction(sigma, units)
            row.alpha_scaled = metrics.gustafson_alpha(sigma, units)
            if n:
                e = metrics.karp_flatt_eff(sigma, units, P * n)
                row.epsilon, row.epsilon_flagged = e.value, e.diagnostic
        if util:
            row.u_thread = _nanmean([util[i][0] for i in ids if i in util])
            row.u_n = _nanmean([util[i][1] for i in ids if i in util])
        if foreign:
            vals = [foreign[i] for i in ids if i in foreign]
            row.foreign_cpu = float(np.median(vals)) if vals else math.nan
        if imbalance:
            row.imbalance = _nanmean([imbalance[i] for i in ids if i in imbalance])
        rows.append(row)
    order = {name: i for i, name in enumerate(_name_order(rows))}
    rows.sort(key=lambda r: (r.L, order[r.scheduler], r.P, not r.affinity, r.chunk,
                             r.pipe_batch, r.inflight, r.coop, r.k))
    return rows


def _name_order(rows: list[Row]) -> list[str]:
    from ..core.registry import ALL_NAMES

    names = {r.scheduler for r in rows}
    return [n for n in ALL_NAMES if n in names] + sorted(names - set(ALL_NAMES))


def t_text(r: Row) -> str:
    """T as mean ± standard deviation in ms (the spread over verified repetitions)."""
    if not r.reps:
        return "—"
    sd = "" if r.reps < 2 or math.isnan(r.t_std) else f" ± {r.t_std * 1e3:.2f}"
    return f"{r.t_mean * 1e3:.2f}{sd}"


DISTURBED_MARK = "‡"


def disturbed_mark(r: Row) -> str:
    return f" {DISTURBED_MARK}" if r.disturbed else ""


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: what it cannot print (escape sequences, bells,
    bytes that were not UTF-8) written as escapes; a study from someone else's commands
    must not retitle or recolour the reader's terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode()
                   for c in text)


def code(text: str) -> str:
    """``text`` as a Markdown code span: fenced by one backtick more than its longest run of
    them, padded where it begins or ends with one (a command's backticks closed the span
    early and broke the heading; the hostile review)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt(x: float, spec: str, unit: str = "") -> str:
    """``x`` formatted, with its unit; a dash, and no unit, where there is no value."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec) + unit



def alpha_text(value: float, flagged: bool) -> str:
    return fmt(value, ".4f") + (" †" if flagged else "")


def chunk_text(chunk: int) -> str:
    return f"chunk {chunk}" if chunk > 0 else ("default chunk" if chunk == 0 else "auto chunk")


def protocol_text(pipe_batch: int = 1, inflight: int = 1) -> str:
    """'' for the paper's pipe protocol, else the variant's options."""
    parts = ([f"{pipe_batch} records per write"] if pipe_batch != 1 else []) + \
        ([f"{inflight} in flight"] if inflight != 1 else [])
    return ", ".join(parts)


def variant_label(scheduler: str, affinity: bool, chunk: int, P: int = 1, pipe_batch: int = 1,
                  inflight: int = 1, coop: bool = False) -> str:
    nodes = f"P = {P} ranks, " if P > 1 else ""
    proto = protocol_text(pipe_batch, inflight) + ("coop" if coop and pipe_batch == inflight == 1
                                                   else ", coop" if coop else "")
    return (f"{scheduler} — {nodes}affinity {'on' if affinity else 'off'}, {chunk_text(chunk)}"
            + (f", variant: {proto}" if proto else ""))


def variants(rows: list[Row]) -> list[tuple]:
    """Row.variant tuples in table order."""
    return list(dict.fromkeys(r.variant for r in sorted(rows, key=_table_key)))


def _table_key(r: Row):
    from ..core.registry import ALL_NAMES

    pos = ALL_NAMES.index(r.scheduler) if r.scheduler in ALL_NAMES else len(ALL_NAMES)
    return (pos, r.scheduler, not r.affinity, r.chunk, r.pipe_batch, r.inflight, r.coop, r.L, r.k)


def families(rows: list[Row]) -> list[str]:
    present = {r.family for r in rows if not is_baseline(r.family)}
    return [str(f) for f in FAMILY_ORDER if f in present] + sorted(present - set(FAMILY_ORDER))


def k_at_n(rows: list[Row], n: int) -> int | None:
    """k = N if the study has it, else the largest k below N (None without parallel rows)."""
    ks = sorted({r.k for r in rows if not is_baseline(r.family) and r.reps})
    below = [k for k in ks if k <= n] if n else []
    return below[-1] if below else (ks[0] if ks else None)


def best_per_family(rows: list[Row], L: int, k: int) -> list[Row]:
    """The fastest verified configuration of each family at (L, k), in family order."""
    out = []
    for f in families(rows):
        cand = [r for r in rows if r.family == f and r.L == L and r.k == k and r.reps
                and not r.scheduler.endswith(SIMULATED_MARK)]  # the machine's own runs
        if cand:
            out.append(min(cand, key=lambda r: r.t_mean))
    return out


# T_serial and the median k = 1 time of the thread schedulers measure the same work on one
# core; beyond this relative gap one of them was disturbed (load, CPU frequency) and every σ
# of that L carries the error. 5 % is well above the run-to-run noise of a quiet machine.
SERIAL_CHECK = 0.05


def serial_gap(rows: list[Row], L: int) -> float:
    """T_serial / median k = 1 time of the pinned default-chunk thread schedulers - 1 at L
    (NaN without both); the claims use the same check."""
    ser = [r.t_mean for r in rows if is_baseline(r.family) and r.L == L and r.reps and r.P == 1]
    t1 = [r.t_mean for r in rows if is_threaded(r.family) and r.k == 1 and r.L == L
          and r.reps and r.affinity and r.chunk == 0 and r.P == 1
          and not r.scheduler.endswith(SIMULATED_MARK)]
    return ser[0] / float(np.median(t1)) - 1.0 if ser and t1 else math.nan
