"""`hybridsched run` under mpiexec: every rank runs, rank 0 alone checks the input, writes
the study and prints (the CLI's single-node ``cmd_run`` hands over here when launched as a
rank of more than one)."""
from __future__ import annotations

import os
import sys
import time

from ..errors import UsageError


def cmd_run_mpi(args, w) -> int:
    """`run` on every rank of an MPI job: all ranks run, rank 0 alone writes and prints.

    Input is checked on rank 0 and its verdict broadcast, so bad input stops every rank
    with one line (exit 2); a rank that fails later aborts the whole job (mpi.ranks).
    """
    from ..cli import _out_name, build_spec, check_test_hooks
    from ..store import StudyLock, check_output
    from . import agree
    from .runs import check_split

    def check() -> None:
        if getattr(args, "resume", False):
            raise UsageError("--resume is not supported under mpiexec yet; use a new --out "
                             "and `hybridsched merge`")
        if args.resume and args.overwrite:
            raise UsageError("--resume and --overwrite exclude each other")
        _out_name(out)
        check_output(out)
        check_test_hooks()
        check_split(configs, w.size, args.split)
        lock.acquire()  # held by rank 0 until the study is written
        if os.path.lexists(out) and not args.overwrite:
            raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")

    out = configs = None
    try:
        spec = build_spec(args)  # the same arguments, so the same verdict, on every rank
    except UsageError:
        if w.rank:
            raise SystemExit(2)
        raise
    configs = spec.configurations()
    out = w.bcast(time.strftime("hybridsched-%Y%m%d-%H%M%S.h5") if args.out is None else args.out)
    lock = StudyLock(out)
    from .watchdog import RankWatchdog

    try:
        # a rank killed outright (SIGKILL, OOM) is named by its watchdog (mpi/watchdog.py)
        with RankWatchdog(w.rank, w.size, w.host) as w.watchdog:
            agree(w, check)
            return _mpi_study(args, w, spec, configs, out, lock)
    finally:
        lock.release()


def _mpi_study(args, w, spec, configs, out, lock) -> int:
    from .. import kernels
    from ..backends import compiled
    from ..progress import describe
    from ..store import StudyWriter
    from ..machine.metadata import machine_metadata
    from . import abort_on_error
    from .runs import run_configurations

    with abort_on_error(w):
        # compile before any worker or fork exists (user kernels are refused under MPI)
        kernels.prepare(spec.kernel if spec.kernel in kernels.KERNELS else "",
                        loop=compiled.wanted(configs))
        if w.rank:
            failed = run_configurations(w, configs, lambda rec: None, args.split)
        else:
            study = dict(spec.to_dict(), P=w.size, split=args.split)
            with StudyWriter(out, machine_metadata(), study, lock=lock) as writer:
                done = iter(range(1, len(configs) + 1))

                def on_record(rec):
                    writer.append(rec)  # flushed: a later abort keeps this run
                    # one line per run (mpiexec pipes stderr: no bar), in the bar's words
                    print(f"[{next(done)}/{len(configs)}] P={rec.config.P} "
                          f"{describe(rec.config, spec.reps)}: {rec.time_s * 1e3:.2f} ms"
                          f"{'' if rec.verified else ' UNVERIFIED'}", file=sys.stderr)
                failed = run_configurations(w, configs, on_record, args.split)
            from ..results.report import run_summary

            # sigma needs T_serial from a P = 1 study: merge one in (`hybridsched merge`)
            print(run_summary(out))
            print(f"\n{len(configs)} runs at P={w.size} ({failed} failed or unverified) "
                  f"written to {out}", file=sys.stderr)
    return 1 if failed else 0
