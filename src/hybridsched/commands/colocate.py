"""`hybridsched colocate`: co-located jobs under Linux, the coop arbiter or a partition."""
from __future__ import annotations

import sys

from ..colocate.experiment import run_colocate
from ..colocate.output import ColocateWriter, read_colocate
from ..colocate.spec import ColocateSpec
from ..coop.sweep import sweep as sweep_coop
from ..errors import UsageError
from ..oslayer.cpus import n_cpus
from ..results.colocate_report import markdown
from ..store import check_output
from ..study.output import this_machine
from .common import PROG, out_name


def main(args) -> int:
    n = n_cpus()
    for workload, options in (("run", ("scheduler", "height", "width")), ("blas", ("matrix",))):
        given = [f"--{o}" for o in options if getattr(args, o) is not None]
        if given and args.workload != workload:
            raise UsageError(f"{', '.join(given)}: for --workload {workload} only, "
                             f"not {args.workload}")
    spec = ColocateSpec(args.workload, args.jobs, args.workers, args.policy, args.barrier,
                        args.step_us, args.steps, args.reps, args.quantum_ms / 1e3,
                        args.matrix or 384,
                        args.scheduler or "dynamic", args.height or 256, args.width or 256)
    spec.validate(n)
    out = out_name(args.out, "hybridsched-colocate")
    check_output(out)
    sweep_coop()  # a coop segment whose participants all died outright
    failed = 0
    with ColocateWriter(out, this_machine(), spec.to_dict(), args.overwrite) as writer:
        def on_record(rec):
            nonlocal failed
            writer.append(rec)
            failed += not rec.verified
            print(f"{rec.policy} rep {rec.rep} job {rec.job}: {rec.time_s:.3f} s "
                  f"(makespan {rec.makespan_s:.3f} s){'' if rec.verified else ' FAILED ' + rec.error}",
                  file=sys.stderr)
        records = run_colocate(spec, on_record)
    print(markdown(read_colocate(out), n)[0])
    print(f"{len(records)} job records ({failed} failed) written to {out}; "
          f"`{PROG} report {out}` for the plots", file=sys.stderr)
    return 1 if failed else 0
