"""``simulate --from STUDY.h5``: the task costs and overheads a measured study holds.

Per-task costs come from the chunk traces: a chunk's measured time (the kernel alone, as
the backends stamp it) spread evenly over its tasks, the shape from the runs with the finest
chunks and the total from all (:func:`pooled_costs`). A configuration is re-simulated with
the costs measured by the *other* verified runs of its tensor at the same k and placement
(so no run predicts itself), falling back to every other run of the tensor, then to its
own. Overheads come from the gaps between a worker's consecutive chunks (the claim, the
pipe round trip) and from the forked workers' start times, in the study's runs at the
smallest k; the team's fixed start and end, and what each worker adds, from the worker
tables of the runs at k <= N. Each configuration then takes what its family measured at its
own k and placement (:meth:`MeasuredStudy.overheads_for`): when the workers start, what the
team costs beyond their span, and pipe-MtoM's round trip -- these change with k in ways a
machine-wide figure misses (a producer without a CPU of its own waits to be scheduled
before every answer; children forked onto busy CPUs start late).
"""
from __future__ import annotations

import numpy as np

from ..core import registry
from ..core.capabilities import Dispatch, Family, is_baseline, is_forked, is_forks, is_threaded
from ..errors import UsageError
from ..records import parse_params
from ..store import StudyFile, study_settings
from ..core.techniques.profiled import task_times
from .models import Overheads

# Which runs give the tasks' shape: those whose mean chunk is at most this many times the
# finest run's. 1 would take the shape from the finest scheduler's runs alone (fewer runs,
# a noisier median); larger lets coarse runs, which smear heavy tasks, outvote them.
FINE_SPREAD = 2.0
TENSOR = ("L", "H", "W", "workload", "workload_params", "seed", "kernel", "input_hash")


class MeasuredStudy:
    """The verified runs of one study with their traces, indexed for cost look-ups."""

    def __init__(self, path: str, option: str = "--from"):
        self.path = path
        self.option = option  # how the user named it, for messages
        self.traces: dict[int, np.ndarray] = {}
        self.workers: dict[int, np.ndarray] = {}
        self._own: dict[tuple, dict] = {}  # a configuration's own overheads (overheads_for)
        # how each multi-rank run split its frames: its own, never the simulation's --split
        # (a merge holds runs of several)
        self.splits: dict[int, tuple[str, dict | None, str]] = {}
        with StudyFile(path) as study:  # the loader report and fit share: one open
            runs = study.runs
            self.n = max(1, study.n or 1)
            self.runs = runs[runs["verified"] & ~runs["simulated"]]
            if not len(self.runs):
                other = next((t for t in ("ge", "colocate") if study.has_table(t)), None)
                what = (f"a `{other}` study, whose runs the model does not know" if other
                        else "no verified measured runs to take costs from")
                raise UsageError(f"{option} {path}: {what}")
            if not (self.runs["P"] == 1).any():
                raise UsageError(f"{option} {path}: no verified single-node (P = 1) runs; the "
                                 "model takes its task costs from their traces (merge a P = 1 "
                                 "study of the same tensor into this one first)")
            split = study_settings(study.attrs).get("split")
            study_split = split if isinstance(split, str) and split else "static"
            for rid, d in study.details(self.runs["run_id"]):
                if d is not None and len(d.trace):
                    self.traces[rid] = d.trace
                    self.workers[rid] = d.workers
                if d is not None:
                    self.splits[rid] = _split_of(d.extra, study_split)
        if not self.traces:
            raise UsageError(f"{option} {path}: its runs hold no chunk traces to take task costs from")

    def every_tensor_measured(self) -> None:
        """Refuse, before anything is simulated or written, a run whose tensor no verified
        single-node run measured (its costs would be found missing mid-write)."""
        singles = {self.tensor(r) for r in self.runs if r["P"] == 1}
        for row in self.runs:
            if self.tensor(row) not in singles:
                raise UsageError(f"{self.option} {self.path}: no verified single-node (P = 1) "
                                 f"run of the tensor of {row['scheduler']} P={row['P']} "
                                 f"k={row['k']} L={row['L']} to take its task costs from")

    def split_for(self, row) -> tuple[str, dict | None]:
        """How the measured run of ``row`` split its frames between ranks, and the parameters
        a user technique splitting them was given; a user technique whose source changed
        since is refused (the model would run other code under the run's name)."""
        split, params, digest = self.splits.get(int(row["run_id"]), ("static", None, ""))
        if int(row["P"]) > 1 and ":" in split:
            from ..core.splits import split_technique

            if digest and split_technique(split).hash != digest:
                raise UsageError(f"{self.option} {self.path}: run {int(row['run_id'])} split its "
                                 f"frames with {split} as it was then; its source has changed "
                                 "since, so the run cannot be re-simulated")
        return split, params

    def tensor(self, row) -> tuple:
        return tuple(row[f] for f in TENSOR)

    def _per_task(self, rids: list[int], L: int) -> np.ndarray | None:
        traces = [self.traces[r] for r in rids
                  if r in self.traces and int(self.traces[r]["count"].sum()) == L]
        return pooled_costs(traces) if traces else None

    def costs_for(self, row) -> np.ndarray:
        """Seconds per task for re-simulating the configuration of ``row``. Chunk times of
        runs with more workers than CPUs include the time slices of the others, so only
        runs with k <= N serve: the same k where it is within N, else the largest. The
        other schedulers of its family first (the same work costs a forked child more than
        a thread: its copy-on-write faults), then those whose workers are alike (forked or
        threads), then any other; within each, runs whose chunk times hold a pipe-MtoM
        producer's service (it preempts a worker mid-chunk for every message) only when
        nothing else measured the tasks."""
        same = [r for r in self.runs if self.tensor(r) == self.tensor(row) and r["P"] == 1]
        L = int(row["L"])
        fit = [r for r in same if int(r["k"]) <= self.n]
        others = [r for r in fit if r["scheduler"] != row["scheduler"]]
        k = min(int(row["k"]), self.n)
        top = max((int(r["k"]) for r in others), default=0)
        here = [r for r in others if int(r["k"]) == k and r["affinity"] == row["affinity"]]
        clean = [r for r in here if not _served(r)]
        for pool in ([r for r in clean if r["family"] == row["family"]],
                     [r for r in clean if _forked(r) == _forked(row)], clean, here,
                     [r for r in others if int(r["k"]) == min(k, top)], others, fit, same):
            costs = self._per_task([int(r["run_id"]) for r in pool], L)
            if costs is not None:
                return costs
        raise UsageError(f"{self.option} {self.path}: no trace covers the {L} tasks of "
                         f"{row['scheduler']} k={row['k']}")

    def overheads(self, base: Overheads) -> Overheads:
        """``base`` with the overheads this study measured."""
        got = dict(base.to_dict())
        for key, rows in (("claim_python_s", self._rows(Family.THREAD, compiled=False)),
                          ("claim_compiled_s", self._rows(Family.THREAD, compiled=True)),
                          ("pipe_rtt_s", self._rows(Family.PIPE, mtom=True)),
                          ("pipe_msg_s", self._rows(Family.PIPE, mtom=False))):
            gap = self._gap(rows)
            if gap is not None:
                got[key] = gap
        fork = self._fork_interval()
        if fork is not None:
            got["fork_s"] = fork
        for family in [f for f in Family if not is_baseline(f)]:
            fixed = self._fixed(family)
            if fixed is not None:
                got[f"{family}_fixed_s"], got[f"{family}_worker_s"] = fixed
                if not is_threaded(family):
                    got["reap_s"] = 0.0  # in the per-worker figure now
        return Overheads.from_dict(got)

    def overheads_for(self, row, base: Overheads) -> Overheads:
        """``base`` (the study-wide :meth:`overheads`) with the overheads the configuration
        of ``row`` measured at its own k and placement, in the study's runs of it: when its
        workers started, what the team cost beyond their span (a forked tree's exits and
        reaps differ from a parent's), and for pipe-MtoM its round trip and its producer's
        CPU. Its task costs still come from the other schedulers (:meth:`costs_for`): what
        is simulated is the hand-out and the cores' sharing over them."""
        key = (str(row["scheduler"]), str(row["family"]), int(row["k"]), int(row["chunk"]),
               bool(row["affinity"]), bool(row["coop"]), base.exit_s)
        if key not in self._own:  # once per configuration, not per repetition
            self._own[key] = self._measured_at(row, base.exit_s)
        return Overheads.from_dict({**base.to_dict(), **self._own[key]})

    def _measured_at(self, row, exit_s: float) -> dict:
        k, fam = int(row["k"]), str(row["family"])
        near = [r for r in self.runs if r["family"] == fam and int(r["k"]) == k
                and r["P"] == 1 and r["affinity"] == row["affinity"] and r["coop"] == row["coop"]
                and int(r["run_id"]) in self.workers]
        pool = [r for r in near if r["scheduler"] == row["scheduler"]
                and int(r["chunk"]) == int(row["chunk"])]
        got: dict = {}
        starts, beyond = [], []
        for r in pool:
            w = np.sort(self.workers[int(r["run_id"])], order="worker")
            if len(w) != k:
                continue
            starts.append(w["start"] - w["start"].min())
            beyond.append(max(0.0, float(r["time_s"]) - float(w["end"].max() - w["start"].min())))
        if starts:
            got["worker_starts_s"] = tuple(float(x) for x in np.median(starts, axis=0))
            # a forked worker's exit is simulated on its core (Overheads.exit_s): the last
            # one's is part of what the run measured beyond the span
            tail = exit_s if not is_threaded(fam) else 0.0
            got[f"{fam}_fixed_s"] = max(0.0, float(np.median(beyond)) - tail)
            got[f"{fam}_worker_s"] = 0.0
            got["reap_s"] = 0.0
        if _served(row):
            mine = [r for r in near if _served(r)
                    and int(r["run_id"]) in self.traces]
            # per run the mean (the makespan pays every wake-up's tail), over the runs the
            # median (one repetition whose wake-ups all went slow does not speak for all)
            gaps = [g for g in (self._own_gap(r) for r in mine) if g is not None]
            if gaps:
                got["pipe_rtt_s"] = float(np.median(gaps))
            serve = [s for s in (self._producer_cpu(r) for r in mine) if s is not None]
            if serve:  # the producer's own CPU per message at this k
                got["pipe_serve_s"] = float(np.median(serve))
        return got

    def _fixed(self, family: str) -> tuple[float, float] | None:
        """What a run of this family took beyond its workers' span (its first start to its
        last end) as a + b k over the family's runs at k <= N (a least-squares line through
        the median per k; b = 0 with one k): the team's fixed start and end, and what each
        worker adds (a child's exit and reap, a thread's join)."""
        by_k: dict[int, list[float]] = {}
        for r in self.runs:
            w = self.workers.get(int(r["run_id"]))
            if r["family"] != family or w is None or not len(w) or int(r["k"]) > self.n:
                continue
            span = float(w["end"].max() - w["start"].min())
            by_k.setdefault(int(r["k"]), []).append(max(0.0, float(r["time_s"]) - span))
        if not by_k:
            return None
        ks = np.array(sorted(by_k), float)
        med = np.array([np.median(by_k[int(k)]) for k in ks])
        if len(ks) < 2:
            return float(med[0]), 0.0
        b, _ = np.polyfit(ks, med, 1)
        b = max(0.0, float(b))
        return max(0.0, float(np.mean(med - b * ks))), b

    def _rows(self, family: str, compiled: bool | None = None, mtom: bool | None = None):
        out = []
        for r in self.runs:
            if r["family"] != family or r["P"] != 1 or int(r["run_id"]) not in self.traces:
                continue
            if compiled is not None and (r["dispatch"] == Dispatch.COMPILED) != compiled:
                continue
            if mtom is not None and _served(r) != mtom:
                continue
            out.append(r)
        if not out:
            return []
        if mtom:  # at k = 1 the worker and its producer share a CPU and every hand-off
            # waits for a wake-up; from two workers on, the round trip is the protocol's
            within = [r for r in out if int(r["k"]) <= self.n]
            pick = max((int(r["k"]) for r in within), default=min(int(r["k"]) for r in out))
        else:
            pick = min(int(r["k"]) for r in out)
        return [r for r in out if int(r["k"]) == pick]

    def _producer_cpu(self, r) -> float | None:
        """The pipe-MtoM producer's CPU per message in run ``r`` (runs stored before it was
        recorded: None)."""
        cpu = float(r["producer_cpu_s"])
        if cpu < 0:  # records.NOT_MEASURED
            return None
        return cpu / max(1, len(self.traces[int(r["run_id"])]))

    def _own_gap(self, r) -> float | None:
        """The mean wait between a worker's chunks in run ``r`` less the time its CPU ran
        the other workers pinned there (with more workers than CPUs a worker also waits for
        its neighbours' turns, which the simulation's shared cores already charge)."""
        tr, w = self.traces[int(r["run_id"])], self.workers.get(int(r["run_id"]))
        cpu = {int(x["worker"]): int(x["cpu"]) for x in w} if w is not None else {}
        waits = []
        for me in np.unique(tr["worker"]):
            mine = np.sort(tr[tr["worker"] == me], order="start")
            if len(mine) < 2:
                continue
            lo, hi = mine["end"][:-1], mine["start"][1:]
            busy = np.zeros(len(lo))
            if bool(r["affinity"]) and cpu.get(int(me), -1) >= 0:
                near = [o for o, c in cpu.items() if c == cpu[int(me)] and o != int(me)]
                busy = _overlap(lo, hi, tr[np.isin(tr["worker"], near)])
            waits.append(np.maximum(0.0, hi - lo - busy))
        return float(np.mean(np.concatenate(waits))) if waits else None

    def _gap(self, rows, stat=np.median) -> float | None:
        gaps = []
        for r in rows:
            tr = self.traces[int(r["run_id"])]
            for w in np.unique(tr["worker"]):
                mine = np.sort(tr[tr["worker"] == w], order="start")
                if len(mine) > 1:
                    gaps.append(mine["start"][1:] - mine["end"][:-1])
        if not gaps:
            return None
        g = np.concatenate(gaps)
        g = g[g >= 0]
        return float(stat(g)) if len(g) else None

    def _fork_interval(self) -> float | None:
        steps = []
        for r in self.runs:
            w = self.workers.get(int(r["run_id"]))
            if not is_forks(str(r["family"])) or w is None or len(w) < 2:
                continue
            s = np.sort(w["start"])
            steps.append(np.median(np.diff(s)))
        return float(np.median(steps)) if steps else None


def _split_of(extra: dict, study_split: str) -> tuple[str, dict | None, str]:
    """(split, a user technique's parameters, its source hash) from a multi-rank run's
    extra; the study's --split where the run does not say (older files)."""
    split = extra.get("split")
    if not isinstance(split, str) or not split:
        return study_split, None, ""
    if ":" not in split:
        return split, None, ""
    text = extra.get("split_params")
    params = dict(parse_params(text)) if isinstance(text, str) else {}
    digest = extra.get("split_technique_hash")
    return split, params, digest if isinstance(digest, str) else ""


def _overlap(lo: np.ndarray, hi: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """How long the chunks (merged into disjoint busy spans) cover each interval [lo, hi)."""
    if not len(chunks):
        return np.zeros(len(lo))
    order = np.argsort(chunks["start"])
    starts, ends = chunks["start"][order], np.maximum.accumulate(chunks["end"][order])
    new = np.r_[True, starts[1:] > ends[:-1]]  # a span begins where the last one ended
    idx = np.flatnonzero(new)
    s = starts[idx]
    e = np.r_[ends[idx[1:] - 1], ends[-1]]
    cum = np.r_[0.0, np.cumsum(e - s)]

    def covered(t):  # busy time in spans before t
        i = np.searchsorted(s, t, side="right")
        part = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0.0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(0.0, part)
    return covered(hi) - covered(lo)


def _forked(r) -> bool:
    """Whether the run's workers are forked children (not threads of the study's process)."""
    return is_forked(str(r["family"]))


def _served(r) -> bool:
    """Whether the run's producer served a message per chunk among its workers (pipe-MtoM)."""
    return registry.resends_by_name(str(r["scheduler"]))


def pooled_costs(traces: list[np.ndarray]) -> np.ndarray:
    """The tasks' costs as these runs' chunk traces measured them: their shape from the
    runs with the finest chunks (a chunk's time is spread evenly over its tasks, so a
    coarse run smears a heavy task over its neighbours and hides where a static split
    falls), the median per task over those, scaled to the median total over all the runs
    (the total work is what the makespan rests on most, and a median per task does not
    keep the sum)."""
    est = np.array([task_times(tr) for tr in traces])
    size = np.array([int(tr["count"].sum()) / len(tr) for tr in traces])
    med = np.median(est[size <= FINE_SPREAD * size.min()], axis=0)
    total = float(med.sum())
    return med * (float(np.median(est.sum(axis=1))) / total) if total > 0 else med
