"""A study, configuration by configuration, over a world of ranks (:class:`world.Solo` for
P = 1, the MPI ranks otherwise): one loop for both; the checks before a study is
continued (``--resume``), and the record of every invocation kept in the file."""
from __future__ import annotations

import json
import time
from typing import Callable, Iterable, Iterator

import numpy as np

from ..errors import UsageError
from ..oslayer.signals import honour_pending
from ..records import RunConfig, RunRecord
from ..store import StudyFile, keys_of, simulated_cores
from ..store.metadata import resume_differences, stored
from ..workloads.build import build
from ..workloads.space import Workspace
from .measure import ranks_record, single_record
from .resources import MakeSpace, Resources
from .runner import Body, TimedRun, warn_unverified
from .spec import StudySpec
from .world import Solo, World


def study_loop(world: World, configs: list[RunConfig], on_record: Callable[[RunRecord], None],
               make_space: MakeSpace, *, cpus: list[int] | None = None,
               body_for: Callable[[RunConfig, Workspace], Body] | None = None,
               split: str = "static", split_params: dict | None = None,
               on_start: Callable[[RunConfig], None] | None = None,
               before_run: Callable[[int], None] | None = None
               ) -> Iterator[tuple[RunRecord | None, bool]]:
    """Run ``configs`` in order on every rank of ``world``, one workspace per tensor shape
    and seed; rank 0 gets each run's record through ``on_record`` (which writes it). Every
    rank yields (the record on rank 0, None on the others; whether the run verified).
    ``body_for(cfg, space)``: what runs in the timed region (default: one backend
    execution); ``on_start(cfg)`` is called just before each timed run (progress);
    ``before_run(i)`` before run number i (a test hook under MPI)."""
    with Resources(configs, make_space) as res:
        for i, cfg in enumerate(configs):
            honour_pending()  # a signal whose exception a finalizer swallowed stops here
            if before_run is not None:
                before_run(i)
            space = res.space(cfg)
            if on_start is not None:
                on_start(cfg)
            body = body_for(cfg, space) if body_for is not None else None
            run = TimedRun(space, cfg, res, cpus, body, rank=world.rank, host=world.host)
            m = run.run()
            total_bad = world.allreduce_sum(m.bad_rows)
            results = world.gather(m)
            record = ok = None
            if world.rank == 0:
                record = ranks_record(results or [], int(total_bad), split, split_params) if world.is_mpi else single_record(m)
                if not record.verified or record.lost_workers:
                    warn_unverified(record)
                on_record(record)
                ok = record.verified
            # nobody starts the next run (where it might fail and abort the job) before
            # rank 0 has stored this one
            yield record, bool(world.bcast(ok))


def run_configurations(configs: Iterable[RunConfig], on_record: Callable[[RunRecord], None],
                       cpus: list[int] | None = None,
                       on_start: Callable[[RunConfig], None] | None = None,
                       input_path: str = "") -> Iterator[RunRecord]:
    """Run configurations in order on this node (P = 1); ``input_path``: the --input file
    the configurations' tensor is read from."""
    for record, _ in study_loop(Solo(), list(configs), on_record,
                                lambda cfg: build(cfg, input_path), cpus=cpus, on_start=on_start):
        if record is not None:  # always at P = 1: this process is rank 0
            yield record


# What a resumed study must share with the stored one: runs of another tensor (seed, shape,
# kernel) or another machine (cores, CPU model) cannot be compared with the stored runs, so
# --resume refuses them. Everything else (schedulers, k, L, chunks, reps, affinity) may grow:
# the resumed run adds the configurations not stored yet.
RESUME_MUST_MATCH = ("seed", "height", "width", "kernel", "workload", "workload_params",
                     "input_hash", "verify")
# what a study stored before a field existed ran (the spec's defaults)
_STUDY_DEFAULTS = {"workload": "uniform", "workload_params": {}, "input_hash": "", "verify": ""}


def _plain(v):
    """A numpy scalar read from a file as the Python value it holds (for messages)."""
    return v.item() if hasattr(v, "item") and not isinstance(v, (list, dict, str)) else v


def resume_conflicts(stored_study: dict, spec: StudySpec, stored_machine: dict,
                     machine: dict) -> list[str]:
    """Reasons why ``spec`` on ``machine`` cannot continue the stored study (empty: it can);
    both machines' metadata typed (:mod:`store.metadata`)."""
    out = []
    new = spec.to_dict()
    stored_study = {**_STUDY_DEFAULTS, **stored_study}
    for key in RESUME_MUST_MATCH:
        if key in stored_study and stored_study[key] != new[key]:
            out.append(f"{key} {_plain(new[key])!r} differs from the stored {_plain(stored_study[key])!r}")
    for key in resume_differences(stored_machine, machine):  # the keys declared EQUAL
        out.append(f"machine {key} {_plain(machine[key])!r} differs from the stored "
                   f"{_plain(stored_machine[key])!r}")
    return out


def technique_changes(runs: np.ndarray, spec: StudySpec) -> list[str]:
    """User techniques of ``spec`` whose source differs from the version the stored
    ``runs`` of the same name ran (their technique_hash)."""
    from ..core import registry

    problems = []
    for name in dict.fromkeys([*spec.schedulers, *spec.portfolio]):
        user = registry.get(name).user
        if user is None:
            continue
        # its own runs, and the runs where auto raced it (technique = its reference)
        ran = np.isin(runs["scheduler"], [name, registry.pipe_name(name)]) | (runs["technique"] == user.ref)
        problem = _changed(name, user, runs["technique_hash"][ran])
        if problem:
            problems.append(problem)
    return problems


def changed_techniques(runs: np.ndarray) -> list[str]:
    """User techniques, registered here, whose source differs from the version that made
    stored ``runs`` (their technique and technique_hash): re-running or re-simulating those
    rows would run other code under their name."""
    from ..core import registry

    users = {i.user.ref: i.user for i in registry.SCHEDULERS.values() if i.user is not None}
    problems = []
    for ref in sorted({str(t) for t, h in zip(runs["technique"], runs["technique_hash"]) if h}):
        if ref in users:
            problem = _changed(users[ref].name, users[ref], runs["technique_hash"][runs["technique"] == ref])
            if problem:
                problems.append(problem)
    return problems


def _changed(name: str, user, stored) -> str:
    """Why the stored hashes of technique ``name`` are not its code's here ('' if they are)."""
    from ..core.usertech import class_source_hash

    old = sorted({str(h) for h in stored if h and h != user.hash})
    if not old:
        return ""
    if old == [class_source_hash(user.cls)]:
        return (f"technique {name} ({user.ref}): its stored runs were identified by its class's "
                "source alone (hybridsched before module hashing), so a change elsewhere in "
                "its module cannot be ruled out")
    return (f"technique {name} ({user.ref}) changed since its stored runs (source sha256 "
            f"{user.hash[:12]}, stored {old[0][:12]})")


def resume_check(out: str, spec: StudySpec, meta: dict) -> set:
    """Keys of the runs stored in ``out``, after checking that ``spec`` may continue it
    (the file read once)."""
    with StudyFile(out) as study:
        others = [t for t in ("ge", "colocate") if study.has_table(t)]
        if others:
            raise UsageError(f"--resume {out}: a `{others[0]}` study, not one of `run`: use a new --out")
        if simulated_cores(study.attrs):  # its times are a model's: never counted as done
            raise UsageError(f"--resume {out}: a simulated study (`simulate`), not measured "
                             "runs: use a new --out")
        stored = study.spec()
        if int(stored.get("P", 1) or 1) > 1:
            raise UsageError(f"--resume {out}: a study of {stored['P']} MPI ranks cannot be "
                             "continued at P = 1 (nor under mpiexec yet): use a new --out and "
                             "`hybridsched merge`")
        study.spec("study_history")  # record_resume extends it: refuse a bad one now
        machine = study.machine
        runs = study.runs
        problems = resume_conflicts(stored, spec, machine, meta) + technique_changes(runs, spec)
        if problems:
            raise UsageError(f"--resume {out}: cannot continue this study: {'; '.join(problems)}")
        return keys_of(runs)


def record_resume(writer, spec: StudySpec, meta: dict) -> None:
    """Keep the spec of every invocation: ``study`` is the latest, ``study_history`` the rest."""
    a = writer.h5.attrs
    history = json.loads(a.get("study_history", "[]"))  # checked by resume_check
    history.append({"study": json.loads(a.get("study", "{}")),
                    "until": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    a["study_history"] = json.dumps(history, sort_keys=True)
    a["study"] = json.dumps(spec.to_dict(), sort_keys=True)
    a.update(stored({"loadavg_at_resume": meta["loadavg_at_start"]}))
