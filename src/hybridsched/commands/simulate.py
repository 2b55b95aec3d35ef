"""`hybridsched simulate`: the study `run` would make, simulated on ``--cores`` virtual CPUs
per node and ``-P`` virtual nodes, written as a study file with every row marked simulated;
``--validate STUDY.h5`` re-simulates a measured study and compares."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import numpy as np

from ..core import registry
from ..core.memory import Memory
from ..core.splits import split_technique
from ..errors import UsageError
from ..oslayer.cpus import n_cpus
from ..records import RunConfig, RunRecord
from ..results.summary import run_summary
from ..sim import costs as cost_src
from ..sim.fromstudy import MeasuredStudy
from ..sim.models import Overheads
from ..sim.run import simulate, with_P
from ..sim.validate import compare, print_validation
from ..store import INT32_MAX, LOCK_SUFFIX, MAX_TIME_S, StudyLock, check_output, row_config
from ..study.options import build_spec
from ..study.output import new_study, this_machine
from ..study.session import changed_techniques
from .common import out_name

MAX_CORES = 1 << 20  # virtual CPUs per node: far beyond any machine, far below int32


def main(args) -> int:
    cores = args.cores or n_cpus()
    if not 1 <= cores <= MAX_CORES:
        raise UsageError(f"--cores must be from 1 to {MAX_CORES}, got {cores}")
    _refuse_unmodelled(args)
    _refuse_shape_with_a_study(args)
    args.split = args.split or "static"
    args.out = _check_out(args)  # before anything is measured
    try:
        return _simulate(args, cores)
    except MemoryError as exc:  # a model's per-task arrays (-L 2147483647 of 1 x 1 tasks)
        raise UsageError(f"simulate: the model's tasks do not fit in this machine's memory "
                         f"({exc}); use a smaller -L or --from a study") from None


def _simulate(args, cores: int) -> int:
    ov, calib = _overheads(args)
    if any(P > 1 for P in (args.P or [1])) and ":" in args.split:
        split_technique(args.split)  # refused before anything is measured or written
    if args.validate:
        return _validate(args, cores, ov)
    if args.source is not None:
        return _from_study(args, cores, ov, calib)
    spec = build_spec(args, virtual=True, split=args.split if any(
        P > 1 for P in (args.P or [1])) else "static")
    for opt, v in (("--height", spec.height), ("--width", spec.width),
                   ("--frames", max(spec.frames))):
        if v > INT32_MAX:  # the study file's fields
            raise UsageError(f"{opt} {v}: at most {INT32_MAX} in a study file")
    todo, ov = _from_spec(args, spec, ov)
    return _write(args, _simulated(todo, cores, ov), {**spec.to_dict(), "simulate": {
        "cores": cores, "P": args.P or [1], "split": args.split, "overheads": ov.to_dict(),
        "calibration": calib}})


def _from_study(args, cores: int, ov: Overheads, calib: str) -> int:
    """--from: every run of the measured study re-simulated as it ran (its P, its split)."""
    study = MeasuredStudy(args.source)
    study.every_tensor_measured()
    _register_users(study.runs, "--from", args.source)
    ov = study.overheads(_here(ov, calib, study))
    todo = [(row_config(r), lambda r=r: (study.costs_for(r), None, study.overheads_for(r, ov)),
             f"--from {args.source}", *study.split_for(r)) for r in study.runs]
    splits = sorted({split for cfg, _, _, split, _ in todo if cfg.P > 1})
    return _write(args, _simulated(todo, cores, ov), {"simulated_from": args.source, "simulate": {
        "cores": cores, "P": sorted({int(p) for p in study.runs["P"]}),
        "split": ",".join(splits) or "static", "overheads": ov.to_dict(), "calibration": calib}})


def _refuse_unmodelled(args) -> None:
    """Variants the model does not simulate are refused rather than stored as if it did."""
    for opt, attr in (("--input", "input"), ("--verify", "verify")):
        if getattr(args, attr, None) is not None:
            raise UsageError(f"{opt} is not simulated: the model knows the built-in workloads' "
                             "tasks only (measure yours with `run`, then `simulate --from` it)")
    kernel = getattr(args, "kernel", None)
    if kernel not in (None, "quicksort"):
        raise UsageError(f"--kernel {kernel} is not simulated: the model times the rows of the "
                         "quicksort kernel (measure yours with `run`, then `simulate --from` it)")
    if getattr(args, "costs", None) and getattr(args, "workload", None) is not None:
        raise UsageError(f"--costs {args.costs} gives the tasks' costs; --workload would store "
                         "another workload's name and parameters with them: give one or the other")
    if -1 in (getattr(args, "chunk", None) or []):
        raise UsageError("--chunk auto searches the fastest chunk by timing real runs; "
                         "simulate takes explicit chunks (--chunk C[,C...])")
    for opt, attr in (("--pipe-batch", "pipe_batch"), ("--inflight", "inflight")):
        if (getattr(args, attr, None) or 1) != 1:
            raise UsageError(f"{opt} is not simulated (the model sends one chunk per message, "
                             "the paper's protocol); leave it at 1")


# What a study run would choose; --from and --validate take all of it from the measured
# study's own rows, so given with them it would be silently ignored.
_SHAPE = (("-s", "scheduler"), ("-k", "k"), ("--frames", "frames"), ("--height", "height"),
          ("--width", "width"), ("--chunk", "chunk"), ("--reps", "reps"), ("--seed", "seed"),
          ("--preset", "preset"), ("--workload", "workload"), ("--kernel", "kernel"),
          ("--input", "input"), ("--verify", "verify"), ("--affinity", "affinity"),
          ("-P", "P"), ("--split", "split"), ("--coop", "coop"), ("--dispatch", "dispatch"),
          ("--portfolio", "portfolio"), ("--fiss-stages", "fiss_stages"),
          ("--viss-param", "viss_param"), ("--pls-swr", "pls_swr"), ("--param", "param"))


def _refuse_shape_with_a_study(args) -> None:
    study = ("--from", args.source) if args.source else ("--validate", args.validate)
    if not study[1]:
        return
    unset = {"coop": False}  # a flag's default; every other option's is None
    given = [opt for opt, dest in _SHAPE
             if getattr(args, dest, None) not in (None, unset.get(dest))]
    if given:
        raise UsageError(f"{study[0]} {study[1]} re-simulates that study's own configurations; "
                         f"{', '.join(given)} cannot change them (leave {study[0]} out to "
                         "choose a study)")


def _check_out(args) -> str | None:
    """The output file, checked now: a writable place, absent unless --overwrite, and never
    the study it is simulated from (None: --validate without -o writes nothing)."""
    if args.validate and not args.out:
        return None
    out = out_name(args.out, "hybridsched-sim")
    check_output(out)
    if os.path.lexists(out) and not args.overwrite:
        raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")
    if os.path.lexists(out + LOCK_SUFFIX):  # a live writer of it refused now, not after the
        with StudyLock(out):                 # measuring (the review: 0.6 s of it first)
            pass
    for opt, src in (("--from", args.source), ("--validate", args.validate)):
        if src and os.path.exists(src) and os.path.lexists(out) and os.path.samefile(src, out):
            raise UsageError(f"--out {out} is also the {opt} study; write the simulation "
                             "to another file")
    return out


def _register_users(runs, opt: str, path: str) -> None:
    """A measured study's user techniques, registered from the references it stored (their
    modules must import here) so that their rows can be simulated under their names; one
    whose source changed since those runs is refused, as `run --resume` refuses it (the
    model would run the new code on the old code's measurements)."""
    for name, ref in sorted({(str(r["scheduler"]), str(r["technique"])) for r in runs
                             if r["technique_hash"]}):
        if name not in registry.SCHEDULERS:
            registry.get(registry.pipe_name(ref) if registry.resends_by_name(name) else ref)
    problems = changed_techniques(runs)
    if problems:
        raise UsageError(f"{opt} {path}: cannot re-simulate its runs: {'; '.join(problems)}")


def _overheads(args) -> tuple[Overheads, str]:
    if args.calibration:
        data = cost_src.load_calibration(args.calibration, Overheads.names(), Overheads.listed())
        return Overheads.from_dict(data["overheads"]), args.calibration
    return Overheads(), ""


def _here(ov: Overheads, calibration: str, study: MeasuredStudy) -> Overheads:
    """A calibration file's overheads as they are; otherwise what a study's traces cannot
    show, measured here on the spot (:func:`sim.calibrate.untraced`)."""
    if calibration:
        return ov
    from ..sim.calibrate import untraced

    return untraced(ov, mtom=any(registry.resends_by_name(str(s)) for s in study.runs["scheduler"]))


def _from_spec(args, spec, ov: Overheads) -> tuple[list, Overheads]:
    """(configuration, costs, source) of every simulated run, the costs made on demand
    (once per tensor); the overheads with this machine's per-row sort time."""
    given = cost_src.from_file(args.costs) if args.costs else None
    if given is not None:
        if args.frames not in (None, [len(given)]):
            raise UsageError(f"--costs {args.costs} holds {len(given)} tasks; --frames must be "
                             f"{len(given)} or left out")
        spec.frames = [len(given)]
    if given is None and (ov.row_sort_s <= 0 or ov.row_width != spec.width):
        t0 = time.perf_counter()
        row_s = cost_src.row_sort_seconds(spec.width)
        ov = Overheads.from_dict({**ov.to_dict(), "row_sort_s": row_s, "row_width": spec.width})
        print(f"hybridsched: one row of {spec.width} bytes sorts in {row_s * 1e6:.2f} us here "
              f"(measured in {time.perf_counter() - t0:.2f} s)", file=sys.stderr)
    cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def costs_of(cfg: RunConfig):
        key = (cfg.frames, cfg.height, cfg.width, cfg.workload, cfg.workload_params, cfg.seed)
        if key not in cache:
            c = given if given is not None else cost_src.workload_costs(
                cfg.workload, _workload_params(cfg), cfg.frames, cfg.height, cfg.width,
                cfg.seed, ov.row_sort_s, ov.row_width)
            cache[key] = (c, cost_src.prefix(c))
        return cache[key]

    source = f"--costs {args.costs}" if given is not None else f"model {spec.workload}"
    todo = []
    for P in (args.P or [1]):
        for cfg in spec.configurations():
            if P > 1 and registry.get(cfg.scheduler).baseline:
                continue  # the baseline is a single-node run (as `merge` expects)
            cfg = with_P(cfg, P)
            # a user technique splitting the frames over -P reads the study's --param
            todo.append((cfg, lambda cfg=cfg: costs_of(cfg), source, args.split, spec.params))
    return todo, ov


def _workload_params(cfg: RunConfig) -> dict:
    return json.loads(cfg.workload_params) if cfg.workload_params else {}


def _simulated(todo: list, cores: int, ov: Overheads):
    """Each configuration's simulated record, made as it is asked for; the repetitions of
    a repeatable configuration simulated once. ``todo``: (configuration, its costs on
    demand, their source, how its frames are split between ranks, a user split's
    parameters)."""
    done: dict[tuple, RunRecord] = {}
    memory = Memory()  # the simulated study's: its loops learn across repetitions, as `run`'s
    for cfg, costs_of, source, split, split_params in todo:
        # a merge's runs of one configuration may have split their frames differently
        key = (replace(cfg, rep=0), split, repr(sorted((split_params or {}).items())))
        again = done.get(key)
        if again is not None:  # the same simulation: a repetition changes nothing
            yield replace(again, config=cfg)
            continue
        costs, cum, *own = costs_of()  # --from: the configuration's own overheads
        rec = simulate(cfg, costs, cum, cores, own[0] if own else ov, split, source,
                       split_params, memory)
        if _repeatable(cfg.scheduler):
            done[key] = rec
        yield rec


def _write(args, records, study: dict) -> int:
    """Store each record as it is made (Ctrl-C keeps the finished ones)."""
    out = args.out
    failed = n = 0
    with new_study(out, study, overwrite=args.overwrite, metadata=this_machine()) as writer:
        for rec in records:
            t, c = rec.time_s, rec.config
            if rec.verified and not 0 < t <= MAX_TIME_S:  # read back as a damaged file's
                raise UsageError(f"simulate: the model's time for {c.scheduler} k={c.k} "
                                 f"L={c.frames} is {t:.3g} s, beyond what a study holds "
                                 f"({MAX_TIME_S:.0e} s): the sizes or --calibration are out "
                                 "of range")
            writer.append(rec)
            n += 1
            failed += not rec.verified
            if not rec.verified:  # why, as `run` says it
                c = rec.config
                why = rec.error or "the simulated chunks did not cover every task once"
                print(f"hybridsched: FAILED: {why} [{c.scheduler} k={c.k} L={c.frames} "
                      f"P={c.P} rep={c.rep}]; stored with verified=false", file=sys.stderr)
    print(run_summary(out))
    print(f"\n{n} simulated runs ({failed} failed or not covering every task once) "
          f"written to {out}", file=sys.stderr)
    return 1 if failed else 0


def _repeatable(scheduler: str) -> bool:
    """Whether every repetition of this scheduler's simulation is the same: its hand-out
    learns nothing from one repetition to the next (no chooser, no learner)."""
    info = registry.get(scheduler)
    return info.baseline or (not info.chooses and (info.sequence is not None
                                                   or info.dispenser is None))


def _validate(args, cores: int, ov: Overheads) -> int:
    study = MeasuredStudy(args.validate, "--validate")
    if args.cores and args.cores != study.n:
        raise UsageError(f"--validate {args.validate} compares its runs, measured on {study.n} "
                         f"cores, with the model on as many; --cores {args.cores} would compare "
                         "them with another machine (leave --cores out, or use --from for "
                         "what-ifs)")
    cores = study.n  # the measured machine's, whatever this one has
    _register_users(study.runs, "--validate", args.validate)
    ov = study.overheads(_here(ov, args.calibration, study))
    memory = Memory()  # the simulated study's, as in _simulated
    pairs = [(r, simulate(row_config(r), study.costs_for(r), None, cores,
                          study.overheads_for(r, ov), "static", f"--from {args.validate}",
                          memory=memory))
             for r in study.runs if r["P"] == 1]
    result = compare(pairs)
    print_validation(result, args.validate)
    if args.out:  # the records just compared
        _write(args, [rec for _, rec in pairs], {"simulated_from": args.validate, "simulate": {
            "cores": cores, "P": [1], "split": "static", "overheads": ov.to_dict(),
            "calibration": args.calibration or ""}})
    return 0
