"""`hybridsched run`: one study, written run by run to HDF5 (P = 1 here; under mpiexec the
ranks' flow is :mod:`.run_mpi`)."""
from __future__ import annotations

import os
import sys

from ..coop.sweep import sweep as sweep_coop
from ..errors import UsageError
from ..oslayer.cpus import n_cpus
from ..records import RunConfig
from ..results.summary import run_summary
from ..store import StudyLock, StudyWriter, check_output
from ..study.options import build_spec
from ..study.output import new_study, this_machine
from ..study.progress import Progress, run_cost
from ..study.session import record_resume, resume_check, run_configurations
from ..study.spec import StudySpec
from ..study.world import World
from ..mpi.ranks import Solo, world
from .common import PROG, check_test_hooks, load_checked, out_name


def main(args) -> int:
    w = world()  # P = 1 (no MPI at all) unless mpiexec/mpirun/srun started several ranks
    if not isinstance(w, Solo):  # is_mpi
        from .run_mpi import main_mpi

        return main_mpi(args, w)
    return _single(args, w)


def _single(args, w: World) -> int:
    spec = build_spec(args)
    out = out_name(args.out)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    check_output(out)
    check_test_hooks()
    sweep_coop()  # a coop segment whose participants all died outright
    # the lock first: nothing is read for --resume or replaced for --overwrite before it
    with StudyLock(out) as lock:
        exists = os.path.lexists(out)
        resume = bool(args.resume) and exists
        if exists and not (args.overwrite or resume):
            raise UsageError(f"--out {out}: file exists (use --resume to continue it or "
                             "--overwrite to replace it)")
        meta = this_machine()
        configs = spec.configurations()
        done = resume_check(out, spec, meta) if resume else set()
        todo = [c for c in configs if c.key() not in done]
        skipped = [c for c in configs if c.key() in done]
        if resume:
            print(f"{PROG}: resuming {out}: {len(skipped)} of {len(configs)} runs already "
                  f"stored, {len(todo)} to go", file=sys.stderr)
        meta.update(load_checked(spec, todo))
        writer = (StudyWriter(out, append=True, lock=lock, resumable=True) if resume else
                  new_study(out, spec.to_dict(), overwrite=True, lock=lock, metadata=meta,
                            resumable=True))
        with writer:
            if resume:
                record_resume(writer, spec, meta)
            failed = _runs(spec, todo, skipped, writer)
    print(run_summary(out))
    print(f"\n{len(todo)} runs ({failed} failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0


def _runs(spec: StudySpec, todo: list[RunConfig], skipped: list[RunConfig], writer) -> int:
    """Every configuration to do, each record stored as soon as it is made; the failed ones."""
    failed = 0
    n = n_cpus()
    with Progress(todo, n, spec.reps, done_already=len(skipped),
                  done_cost=sum(run_cost(c, n) for c in skipped)) as progress:
        def on_record(rec):
            nonlocal failed
            writer.append(rec)
            failed += not rec.verified
            progress.done(rec.config)
        for _ in run_configurations(todo, on_record, on_start=progress.start,
                                    input_path=spec.input):
            pass
    return failed
