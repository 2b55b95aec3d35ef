"""`hybridsched ge`: the A0/A1/A2 cooperative schedulers on blocked Gaussian elimination."""
from __future__ import annotations

import os
import sys

from ..errors import UsageError
from ..ge import kernels as ge_kernels
from ..ge.output import GeWriter, read_ge
from ..ge.runner import check_args
from ..ge.sweep import GeSpec, run_sweep
from ..results.ge_report import ge_markdown
from ..store import check_output
from ..study.output import this_machine
from .common import out_name


def main(args) -> int:
    spec = GeSpec(args.arch, args.algo, args.n, args.threads, args.reps, args.seed)
    check_args(spec.archs, spec.algos, spec.n, spec.threads, spec.reps)
    out = out_name(args.out, "hybridsched-ge")
    check_output(out)
    if os.path.exists(out) and not args.overwrite:
        raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")
    meta = this_machine()
    ge_kernels.prepare()  # compile before any timed run
    with GeWriter(out, meta, spec.to_dict(), overwrite=args.overwrite) as writer:
        failed = run_sweep(spec, writer.append)
    print(ge_markdown(read_ge(out)))
    print(f"\n{len(spec.runs())} ge runs ({failed} failed or unverified) written to {out}",
          file=sys.stderr)
    return 1 if failed else 0
