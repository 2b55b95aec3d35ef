"""A study run configuration by configuration, for single-node and MPI runs alike: the
resources every run shares (the tensor slab, AIMD's monitor), the checks before a study
is continued (``--resume``), and the record of every invocation kept in the file."""
from __future__ import annotations

import contextlib
import json
import time
from typing import Callable, Iterable, Iterator

from ..core import registry
from ..errors import UsageError
from ..core.monitor import UtilisationMonitor
from ..records import RunConfig, RunRecord
from ..workloads.slab import Slab
from .runner import timed_run, warn_unverified
from .spec import StudySpec


def _local_slab(cfg: RunConfig, input_path: str = ""):
    from ..workloads.build import build

    return build(cfg, input_path)


class Resources:
    """What consecutive runs share, owned for the whole study: the utilisation monitor
    (started once before the first timed run if any configuration needs it, §4) and the
    slab of the current tensor shape, replaced only when the shape or seed changes."""

    def __init__(self, configs: list[RunConfig], make_slab: Callable[[RunConfig], Slab] = _local_slab):
        self._configs = configs
        self._make_slab = make_slab
        self._stack = contextlib.ExitStack()
        self._slab: Slab | None = None
        self._shape: tuple | None = None
        self.monitor: UtilisationMonitor | None = None
        self.arbiter = None  # coop.arbiter.Arbiter when a configuration runs with --coop

    def __enter__(self) -> "Resources":
        with self._stack as stack:
            if any(registry.get(c.scheduler).needs_monitor for c in self._configs):
                self.monitor = stack.enter_context(UtilisationMonitor())
            if any(c.coop for c in self._configs):
                from ..coop.arbiter import Arbiter

                self.arbiter = stack.enter_context(Arbiter())
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._slab = None
        self._stack.close()

    def slab(self, cfg: RunConfig) -> Slab:
        want = (cfg.frames, cfg.height, cfg.width, cfg.seed, cfg.workload, cfg.workload_params,
                cfg.kernel, cfg.verify, cfg.input_hash)
        if want != self._shape:
            if self._slab is not None:
                self._slab.close()
            self._slab, self._shape = None, None
            self._slab = self._stack.enter_context(self._make_slab(cfg))
            self._shape = want
        return self._slab


def run_configurations(configs: Iterable[RunConfig], on_record: Callable[[RunRecord], None],
                       cpus: list[int] | None = None,
                       on_start: Callable[[RunConfig], None] | None = None,
                       input_path: str = "") -> Iterator[RunRecord]:
    """Run configurations in order on this node, one slab per tensor shape and seed.
    ``on_start(cfg)`` is called just before each timed run (progress display);
    ``input_path``: the --input file the configurations' tensor is read from."""
    configs = list(configs)
    with Resources(configs, lambda cfg: _local_slab(cfg, input_path)) as res:
        for cfg in configs:
            slab = res.slab(cfg)
            if on_start is not None:
                on_start(cfg)
            record = timed_run(slab, cfg, res.monitor, cpus, res.arbiter)
            if not record.verified or record.lost_workers:
                warn_unverified(record)
            on_record(record)
            yield record


# What a resumed study must share with the stored one: runs of another tensor (seed, shape,
# kernel) or another machine (cores, CPU model) cannot be compared with the stored runs, so
# --resume refuses them. Everything else (schedulers, k, L, chunks, reps, affinity) may grow:
# the resumed run adds the configurations not stored yet.
RESUME_MUST_MATCH = ("seed", "height", "width", "kernel", "workload", "workload_params",
                     "input_hash", "verify")
# what a study stored before a field existed ran (the spec's defaults)
_STUDY_DEFAULTS = {"workload": "uniform", "workload_params": {}, "input_hash": "", "verify": ""}
RESUME_MACHINE_MUST_MATCH = ("N", "cpus_usable", "cpu_model")


def _plain(v):
    """A numpy scalar read from a file as the Python value it holds (for messages)."""
    return v.item() if hasattr(v, "item") and not isinstance(v, (list, dict, str)) else v


def resume_conflicts(stored_study: dict, spec: StudySpec, stored_machine: dict,
                     machine: dict) -> list[str]:
    """Reasons why ``spec`` on ``machine`` cannot continue the stored study (empty: it can)."""
    out = []
    new = spec.to_dict()
    stored_study = {**_STUDY_DEFAULTS, **stored_study}
    for key in RESUME_MUST_MATCH:
        if key in stored_study and stored_study[key] != new[key]:
            out.append(f"{key} {_plain(new[key])!r} differs from the stored {_plain(stored_study[key])!r}")
    for key in RESUME_MACHINE_MUST_MATCH:
        if key in stored_machine and key in machine and str(stored_machine[key]) != str(machine[key]):
            out.append(f"machine {key} {_plain(machine[key])!r} differs from the stored "
                       f"{_plain(stored_machine[key])!r}")
    return out


def resume_check(out: str, spec: StudySpec, meta: dict) -> set:
    """Keys of the runs stored in ``out``, after checking that ``spec`` may continue it."""
    from ..store import read_attrs, stored_keys, study_spec

    from ..store import has_table

    attrs = read_attrs(out)
    others = [t for t in ("ge", "colocate") if has_table(out, t)]
    if others:
        raise UsageError(f"--resume {out}: a `{others[0]}` study, not one of `run`: use a new --out")
    stored = study_spec(out, attrs)
    study_spec(out, attrs, "study_history")  # record_resume extends it: refuse a bad one now
    machine = {k[len("machine."):]: v for k, v in attrs.items() if k.startswith("machine.")}
    problems = resume_conflicts(stored, spec, machine, meta)
    if problems:
        raise UsageError(f"--resume {out}: cannot continue this study: {'; '.join(problems)}")
    return stored_keys(out)


def record_resume(writer, spec: StudySpec, meta: dict) -> None:
    """Keep the spec of every invocation: ``study`` is the latest, ``study_history`` the rest."""
    a = writer.h5.attrs
    history = json.loads(a.get("study_history", "[]"))  # checked by resume_check
    history.append({"study": json.loads(a.get("study", "{}")),
                    "until": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    a["study_history"] = json.dumps(history, sort_keys=True)
    a["study"] = json.dumps(spec.to_dict(), sort_keys=True)
    a["machine.loadavg_at_resume"] = meta["loadavg_at_start"]
