"""`hybridsched colocate`: co-located jobs under Linux, the coop arbiter or a partition."""
from __future__ import annotations

import contextlib
import shlex
import signal
import sys

from ..colocate.experiment import check_ready, run_colocate
from ..colocate.output import ColocateWriter, read_colocate
from ..colocate.spec import CMD_DEFAULT_POLICIES, ColocateSpec
from ..coop.sweep import sweep as sweep_coop
from ..errors import UsageError
from ..oslayer.cpus import n_cpus
from ..results.colocate_report import markdown
from ..results.data import fmt, shown
from ..store import check_output
from ..study.output import this_machine
from .common import PROG, out_name


# Options of the built-in workloads (the ones a --cmd job does not have)
_BUILTIN = ("workload", "workers", "barrier", "step_us", "steps", "matrix", "scheduler",
            "height", "width")


def _expect(given: list[str] | None) -> str | list[str]:
    """--expect as the spec takes it: one pattern for every job, or one per --cmd."""
    if not given:
        return ""
    return given[0] if len(given) == 1 else list(given)


def _spec(args) -> ColocateSpec:
    """The experiment the options ask for; options that do not belong to it refused."""
    if args.cmd is not None:
        given = [f"--{o.replace('_', '-')}" for o in _BUILTIN if getattr(args, o) is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: not with --cmd (its jobs are the commands, "
                             "as they are)")
        return ColocateSpec("cmd", args.jobs or 0, 0, args.policy or list(CMD_DEFAULT_POLICIES),
                            quantum_s=args.quantum_ms / 1e3, reps=args.reps,
                            commands=list(args.cmd), expect=_expect(args.expect),
                            timeout_s=args.timeout or 0.0)
    if args.expect is not None:
        raise UsageError("--expect: for --cmd only (the built-in workloads verify themselves)")
    if args.timeout is not None:
        raise UsageError("--timeout: for --cmd only")
    workload = args.workload or "bsp"
    for kind, options in (("run", ("scheduler", "height", "width")), ("blas", ("matrix",))):
        given = [f"--{o}" for o in options if getattr(args, o) is not None]
        if given and workload != kind:
            raise UsageError(f"{', '.join(given)}: for --workload {kind} only, not {workload}")
    return ColocateSpec(workload, args.jobs or 2, args.workers or 0,
                        args.policy or ["linux", "coop"], args.barrier or "spin-block",
                        200.0 if args.step_us is None else args.step_us, args.steps or 500,
                        args.reps, args.quantum_ms / 1e3, args.matrix or 384,
                        args.scheduler or "dynamic", args.height or 256, args.width or 256)


def main(args) -> int:
    n = n_cpus()
    spec = _spec(args)
    spec.validate(n)
    out = out_name(args.out, "hybridsched-colocate")
    check_output(out)
    sweep_coop()  # a coop segment whose participants all died outright
    check_ready(spec)  # before the file: a coop refusal after other policies' rows left it
    failed = 0
    with ColocateWriter(out, this_machine(), spec.to_dict(), args.overwrite) as writer:
        def on_records(recs):
            nonlocal failed
            writer.append(recs)
            for rec in recs:
                failed += not rec.verified
                print(f"{rec.policy} rep {rec.rep} job {rec.job}: {fmt(rec.time_s, '.3f', ' s')} "
                      f"(makespan {fmt(rec.makespan_s, '.3f', ' s')})"
                      f"{'' if rec.verified else ' FAILED ' + shown(rec.error)}"
                      f"{_last_words(rec.err_tail)}", file=sys.stderr)
        with _not_stopped():
            records = run_colocate(spec, on_records)
    print(markdown(read_colocate(out), n)[0])
    print(f"{len(records)} job records ({failed} failed) written to {out}; "
          f"`{PROG} report {shlex.quote(out)}` for the plots", file=sys.stderr)
    return 1 if failed else 0


@contextlib.contextmanager
def _not_stopped():
    """Held while the jobs run: a SIGTSTP (Ctrl-Z, `kill -TSTP`) is said once and not
    taken. It stopped colocate alone: its jobs ran on, or stayed stopped by `gang` for
    good, the repetition's timings spoiled and its --timeout not kept (the review); a
    measurement cannot be paused."""
    said: list[int] = []

    def refuse(signum, frame) -> None:
        if not said:
            said.append(signum)
            print(f"{PROG} colocate: not stopped: a stop in the middle of a repetition would "
                  "spoil its timings (Ctrl-C ends the study; finished repetitions are kept)",
                  file=sys.stderr)

    old = signal.signal(signal.SIGTSTP, refuse)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, old)


def _last_words(tail: str) -> str:
    """A failed command's last line on stderr, to go with its FAILED line."""
    lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
    return f"; its stderr ends: {shown(lines[-1][:200])}" if lines else ""
