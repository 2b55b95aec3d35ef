"""`hybridsched colocate`: co-located jobs under Linux, the coop arbiter or a partition."""
from __future__ import annotations

import os
import sys
import time

from ..argtypes import _choice_list, _positive
from .barrier import POLICIES as BARRIERS
from .colocate import POLICIES, WORKLOADS

PROG = "hybridsched"


def add_parser(sub) -> None:

    co = sub.add_parser("colocate", help="co-located jobs under Linux, the coop arbiter or a "
                        "partition: makespan and interference")
    co.add_argument("--workload", choices=list(WORKLOADS), default="bsp",
                    help="bsp: compute steps separated by a barrier (default); blas: numpy "
                    "matrix products with the BLAS pool at --workers threads; run: one "
                    "scheduler run per job (--scheduler, k = --workers)")
    co.add_argument("--jobs", "-J", type=_positive("--jobs"), default=2, help="jobs started together (default 2)")
    co.add_argument("--workers", "-T", type=_positive("--workers"), default=0,
                    help="workers per job (default N, every job sized for the whole machine)")
    co.add_argument("--policy", type=_choice_list(list(POLICIES), "policy"), default=["linux", "coop"],
                    help=f"comma list of {', '.join(POLICIES)} (default linux,coop)")
    co.add_argument("--barrier", choices=list(BARRIERS), default="spin-block",
                    help="how a barrier waits (default spin-block, libgomp's)")
    co.add_argument("--step-us", type=float, default=200.0, help="compute per step in µs (default 200)")
    co.add_argument("--steps", type=_positive("--steps"), default=500,
                    help="steps per job (bsp) or matrix products per job (blas) (default 500)")
    co.add_argument("--matrix", type=_positive("--matrix"), default=384,
                    help="blas: the n of the n x n products (default 384)")
    co.add_argument("--scheduler", "-s", default="dynamic",
                    help="run: the scheduler every job runs, on --steps frames (default dynamic)")
    co.add_argument("--height", type=_positive("--height"), default=256, help="run: rows per frame")
    co.add_argument("--width", type=_positive("--width"), default=256, help="run: bytes per row")
    co.add_argument("--reps", type=_positive("--reps"), default=3, help="repetitions (default 3)")
    co.add_argument("--quantum-ms", type=float, default=20.0,
                    help="coop: a job's time on a CPU before it yields to a waiting job (default 20)")
    co.add_argument("--out", "-o", metavar="FILE.h5", help="HDF5 output (default hybridsched-colocate-<time>.h5)")
    co.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    co.set_defaults(func=cmd_colocate)


def cmd_colocate(args) -> int:
    from .colocate import ColocateSpec, run_colocate
    from .output import ColocateWriter
    from ..results.colocate_report import markdown
    from ..store import check_writable
    from ..machine.metadata import machine_metadata
    from ..oslayer.cpus import n_cpus

    n = n_cpus()
    spec = ColocateSpec(args.workload, args.jobs, args.workers, args.policy, args.barrier,
                        args.step_us, args.steps, args.reps, args.quantum_ms / 1e3, args.matrix,
                        args.scheduler, args.height, args.width)
    spec.validate(n)
    out = args.out if args.out is not None else time.strftime("hybridsched-colocate-%Y%m%d-%H%M%S.h5")
    check_writable(out)
    meta = machine_metadata()
    meta["N"] = n
    meta["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    failed = 0
    with ColocateWriter(out, meta, spec.to_dict(), args.overwrite) as writer:
        def on_record(rec):
            nonlocal failed
            writer.append(rec)
            failed += not rec.verified
            print(f"{rec.policy} rep {rec.rep} job {rec.job}: {rec.time_s:.3f} s "
                  f"(makespan {rec.makespan_s:.3f} s){'' if rec.verified else ' FAILED ' + rec.error}",
                  file=sys.stderr)
        records = run_colocate(spec, on_record)
    from .output import read_colocate

    print(markdown(read_colocate(out), n)[0])
    print(f"{len(records)} job records ({failed} failed) written to {out}; "
          f"`{PROG} report {out}` for the plots", file=sys.stderr)
    return 1 if failed else 0
