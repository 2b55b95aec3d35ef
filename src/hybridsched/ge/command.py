"""`hybridsched ge`: the A0/A1/A2 cooperative schedulers on blocked Gaussian elimination."""
from __future__ import annotations

import os
import sys
import time

from ..argtypes import _int_list, _name_list, _nonnegative_int, _positive
from ..errors import UsageError

PROG = "hybridsched"


def add_parser(sub) -> None:
    ge = sub.add_parser("ge", help="cooperative scheduler A0/A1/A2 on blocked Gaussian "
                        "elimination (seed 002)")
    ge.add_argument("--arch", type=_name_list, default=["A0", "A1", "A2"], metavar="A[,A...]",
                    help="architectures: A0 (OS threads), A1 (one blocked queue), A2 "
                    "(per-primitive queues); default all three")
    ge.add_argument("--algo", type=_name_list, default=["rows", "tiles"], metavar="ALGO[,...]",
                    help="rows (block rows) and/or tiles (a g x g grid, g = round(sqrt(T)))")
    ge.add_argument("--n", type=_positive("--n"), default=512, help="matrix size (default 512)")
    ge.add_argument("--threads", type=_int_list("--threads"), default=[32], metavar="T[,T...]",
                    help="user threads, 1 to 7936 (default 32); rows: T <= n; tiles: the "
                    "nearest square grid, at most n tiles per side")
    ge.add_argument("--reps", type=_positive("--reps"), default=1, help="repetitions")
    ge.add_argument("--seed", type=_nonnegative_int("--seed"), default=0, help="matrix seed")
    ge.add_argument("--out", "-o", metavar="FILE.h5", help="HDF5 output (default "
                    "hybridsched-ge-<time>.h5)")
    ge.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    ge.set_defaults(func=cmd_ge)


def cmd_ge(args) -> int:
    from . import kernels as ge_kernels
    from .output import GeWriter
    from .runner import check_args
    from .sweep import GeSpec, run_sweep
    from ..store import check_writable
    from ..machine.metadata import machine_metadata
    from ..oslayer.cpus import n_cpus

    spec = GeSpec(args.arch, args.algo, args.n, args.threads, args.reps, args.seed)
    check_args(spec.archs, spec.algos, spec.n, spec.threads, spec.reps)
    out = args.out if args.out is not None else time.strftime("hybridsched-ge-%Y%m%d-%H%M%S.h5")
    check_writable(out)
    if os.path.exists(out) and not args.overwrite:
        raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")
    meta = machine_metadata()
    meta["N"] = n_cpus()
    meta["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ge_kernels.prepare()  # compile before any timed run
    with GeWriter(out, meta, spec.to_dict(), overwrite=args.overwrite) as writer:
        failed = run_sweep(spec, writer.append)
    from ..results.ge_report import ge_markdown
    from .output import read_ge

    print(ge_markdown(read_ge(out)))
    n_runs = len(spec.runs())
    print(f"\n{n_runs} ge runs ({failed} failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0
