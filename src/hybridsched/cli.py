"""Command line: ``hybridsched <subcommand>``; one ``cmd_<name>`` function per subcommand.

Only this module turns exceptions into exit codes: bad input -> one line on stderr and 2,
Ctrl-C -> 130, SIGTERM -> 143. Everything below raises typed exceptions.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from . import __version__
from .argtypes import _Parser, _chunk_list, _fraction, _int_list, _nonnegative_int, _positive
from .errors import HybridschedError, UsageError

PROG = "hybridsched"


# --- run --------------------------------------------------------------------------------


def _scheduler_names(values: list[str] | None) -> list[str] | None:
    from .core import registry as schedulers

    if not values:
        return None
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                out += schedulers.names(everything=False)
            elif name == "techniques":
                out += schedulers.names("thread", technique=True)
            elif name == "paper":
                out += schedulers.paper_names()
            else:
                schedulers.get(name)
                out.append(name)
    if not out:
        raise UsageError("--scheduler: no scheduler given")
    return list(dict.fromkeys(out))


def build_spec(args):
    from .study.spec import StudySpec, default_spec, preset

    spec: StudySpec = preset(args.preset) if args.preset else default_spec()
    names = _scheduler_names(args.scheduler)
    if names is not None:
        spec.schedulers = names
    if args.k is not None:
        spec.ks = args.k
    if args.frames is not None:
        spec.frames = args.frames
    if args.height is not None:
        spec.height = args.height
    if args.width is not None:
        spec.width = args.width
    if args.chunk is not None:
        spec.chunks = args.chunk
    if args.reps is not None:
        spec.reps = args.reps
    if args.seed is not None:
        spec.seed = args.seed
    from .workloads.options import apply

    apply(args, spec)  # --kernel, --input, --verify, --workload
    if args.affinity is not None:
        spec.affinity = [args.affinity]
    if args.pipe_batch is not None:
        spec.pipe_batch = args.pipe_batch
    if args.inflight is not None:
        spec.inflight = args.inflight
    if getattr(args, "coop", False):
        spec.coop = True
    if getattr(args, "dispatch", None) is not None:
        spec.dispatch = args.dispatch
    spec.params = {k: v for k, v in (("fiss_stages", getattr(args, "fiss_stages", None)),
                                     ("viss_param", getattr(args, "viss_param", None)),
                                     ("pls_swr", getattr(args, "pls_swr", None))) if v is not None}
    spec.validate()
    return spec


def _out_name(out: str | None) -> str:
    """--out as given (an empty name refused), else a fresh name from the time."""
    if out is None:
        return time.strftime("hybridsched-%Y%m%d-%H%M%S.h5")
    if not out.strip():
        raise UsageError("--out: an empty file name")
    return out


def check_test_hooks() -> None:
    """Refuse a malformed test hook (HYBRIDSCHED_FAULT) before the first run, not at it."""
    from .oslayer.proctree import fault_plan
    from .errors import ResourceError

    try:
        fault_plan()
    except ResourceError as exc:
        raise UsageError(str(exc)) from None


def cmd_run(args) -> int:
    from .mpi import world

    w = world()  # P = 1 (no MPI at all) unless mpiexec/mpirun/srun started several ranks
    if w.is_mpi:
        from .mpi.command import cmd_run_mpi

        return cmd_run_mpi(args, w)
    from . import kernels
    from .backends import compiled
    from .progress import Progress, run_cost
    from .results.report import run_summary
    from .store import StudyLock, StudyWriter, check_output
    from .study.session import record_resume, resume_check, run_configurations
    from .machine.probes import LoadCheck
    from .machine.metadata import machine_metadata
    from .oslayer.cpus import n_cpus, usable_cpus

    spec = build_spec(args)
    out = _out_name(args.out)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    check_output(out)
    check_test_hooks()
    # the lock first: nothing is read for --resume or replaced for --overwrite before it
    with StudyLock(out) as lock:
        exists = os.path.lexists(out)
        resume = bool(args.resume) and exists
        if exists and not (args.overwrite or resume):
            raise UsageError(f"--out {out}: file exists (use --resume to continue it or "
                             "--overwrite to replace it)")
        meta = machine_metadata()
        meta["N"] = n_cpus()  # the N of k_eff = min(k, N) and of the presets
        meta["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        configs = spec.configurations()
        done: set = set()
        if resume:
            done = resume_check(out, spec, meta)
        todo = [c for c in configs if c.key() not in done]
        skipped = [c for c in configs if c.key() in done]
        if resume:
            print(f"{PROG}: resuming {out}: {len(skipped)} of {len(configs)} runs already "
                  f"stored, {len(todo)} to go", file=sys.stderr)
        # input is good: the load probe samples while the kernels load
        probe = LoadCheck(usable_cpus()).start()
        meta["check_planned_bytes"] = 2 * max(spec.frames) * spec.height * spec.width
        # compile before any worker or fork exists (a user's or a workload's kernel is
        # compiled with its workspace, workloads.build)
        kernels.prepare(spec.kernel if spec.kernel in kernels.KERNELS else "",
                        loop=compiled.wanted(configs))
        # one warning if the machine looks shared, the load kept with the study
        meta["check_load"] = json.dumps(probe.result())
        failed = 0
        n = n_cpus()
        with Progress(todo, n, spec.reps, done_already=len(skipped),
                      done_cost=sum(run_cost(c, n) for c in skipped)) as progress, \
                (StudyWriter(out, append=True, lock=lock) if resume else
                 StudyWriter(out, meta, spec.to_dict(), lock=lock)) as writer:
            if resume:
                record_resume(writer, spec, meta)

            def on_record(rec):
                nonlocal failed
                writer.append(rec)
                failed += not rec.verified
                progress.done(rec.config)
            for _ in run_configurations(todo, on_record, on_start=progress.start,
                                        input_path=spec.input):
                pass
    print(run_summary(out))
    print(f"\n{len(todo)} runs ({failed} failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0


# --- fit, merge ---------------------------------------------------------------------------


def cmd_fit(args) -> int:
    import json

    from .results import fit, fitplot

    data = fit.load(args.file, args.scheduler, args.frames)
    if args.cores:
        data.cores = args.cores
    res = fit.fit(data, args.model)
    if args.plot:
        fitplot.plot(res, args.plot)
    if args.json:
        print(json.dumps(fit.jsonable(res), indent=2, allow_nan=False))
    else:
        print(fit.text(res))
        if args.plot:
            print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def cmd_merge(args) -> int:
    from .results.merge import merge

    n = merge(args.files, args.out, args.overwrite)
    print(f"{n} runs from {len(args.files)} files written to {args.out}", file=sys.stderr)
    return 0


# --- list, plan, report -----------------------------------------------------------------


def cmd_list(args) -> int:
    from .core.registry import SCHEDULERS, names

    width = max(len(n) for n in SCHEDULERS)
    for n in names():
        info = SCHEDULERS[n]
        tag = "" if info.paper else "(LB4OMP) " if info.technique else "(variant) "
        print(f"{n:<{width}}  {info.family:<7} {tag}{info.description}")
    return 0


def add_technique_options(p) -> None:
    """LB4OMP's environment parameters as options (its defaults when absent)."""
    p.add_argument("--fiss-stages", type=_nonnegative_int("--fiss-stages"), default=None,
                   help="fiss: stages (KMP_FISS_STAGES; default k - 1)")
    p.add_argument("--viss-param", type=_positive("--viss-param"), default=None,
                   help="viss: divisor of N/k for the first chunk (KMP_VISS_PARAM; default k)")
    p.add_argument("--pls-swr", type=_fraction("--pls-swr"), default=None,
                   help="pls: static workload ratio 0..1 (KMP_PLS_SWR; default 0.5)")


def cmd_plan(args) -> int:
    from .core.policies import plan

    params = {k: v for k, v in (("fiss_stages", args.fiss_stages), ("viss_param", args.viss_param),
                                ("pls_swr", args.pls_swr)) if v is not None}
    rows = plan(args.policy, args.tasks, args.workers, args.chunk, params or None)
    out = ["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]
    print("\n".join(out))
    return 0


def cmd_report(args) -> int:
    from .results.files import default_out_dir
    from .results.report import build_report, load_study
    from .results.sections import side_report

    study = load_study(args.file)
    out_dir = args.out_dir or default_out_dir(args.file)
    try:
        if len(study.runs):
            text, files = build_report(study, out_dir, plots=not args.no_plots)
        else:  # a `ge` or `colocate` study: its side tables only
            text, files = side_report(study, out_dir, plots=not args.no_plots)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
    if text is None:
        print(f"{args.file}: the study holds no runs yet")
        return 0
    print(text)
    print(f"{PROG}: {len(files)} files written to {out_dir}", file=sys.stderr)
    return 0


# --- parser -----------------------------------------------------------------------------



def make_parser() -> argparse.ArgumentParser:
    from .helptext import EXAMPLES
    from .core.policies import PLAN_POLICIES
    from .study.spec import PRESETS

    p = _Parser(prog=PROG, description="Fork-, pipe- and thread-based scheduler study on a "
                "shared-memory row-sorting workload: every row of every frame of a uint8 "
                "L x H x W tensor is sorted, and each scheduler hands the frames to k workers.",
                epilog=EXAMPLES)
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    r = sub.add_parser("run", help="run a study (schedulers x k x L x repetitions)")
    r.add_argument("-s", "--scheduler", action="append", metavar="NAMES",
                   help="scheduler names, comma separated or repeated; 'paper' for the "
                   "paper's 13, 'all' for every one (with the named variants and the LB4OMP "
                   "techniques on threads), 'techniques' for those techniques and auto; "
                   "pipe-MtoM:<technique> by name (default: paper)")
    r.add_argument("-k", type=_int_list("-k"), metavar="K[,K...]", help="worker counts (default: 1,2,N,2N; N = usable CPUs)")
    r.add_argument("--frames", "-L", type=_int_list("--frames"), metavar="L[,L...]",
                   help="frames per tensor (the paper's L) (default: 120)")
    r.add_argument("--height", type=_positive("--height"), help="rows per frame (H) (default: 640)")
    r.add_argument("--width", type=_positive("--width"), help="bytes per row (W) (default: 640)")
    r.add_argument("--chunk", type=_chunk_list, metavar="C[,C...]",
                   help="chunk size(s); default: each policy's own; 'auto' (pipe schedulers "
                   "only) searches the fastest chunk for each L and k, stored as chunk=-1")
    r.add_argument("--reps", type=_positive("--reps"), help="repetitions per configuration (default: 3)")
    r.add_argument("--seed", type=_nonnegative_int("--seed"), help="tensor seed (default: 0)")
    from .workloads.options import add_arguments

    add_arguments(r)  # --kernel, --input, --verify, --workload
    r.add_argument("--affinity", action=argparse.BooleanOptionalAction, default=None,
                   help="pin worker w to CPU w mod N (default on)")
    r.add_argument("--out", "-o", metavar="FILE.h5", help="HDF5 output (default hybridsched-<time>.h5)")
    r.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    r.add_argument("--resume", action="store_true",
                   help="continue the --out study: run only the configurations not stored yet "
                   "(same seed, shape, kernel and machine required)")
    r.add_argument("--preset", choices=list(PRESETS), help="smoke (seconds), default (~2 min on 2 cores), scaled (the §5 "
                   "shape on this machine's N cores), paper (the §5 matrix)")
    r.add_argument("--pipe-batch", type=_positive("--pipe-batch"), metavar="B",
                   help="variant: pipe records per producer write for pipe-1to1/1toN (default "
                   "1, the paper's one chunk per message; up to 256 = one PIPE_BUF)")
    r.add_argument("--inflight", type=_positive("--inflight"), metavar="D",
                   help="variant: pipe-MtoM chunks in flight per worker (default 1, the "
                   "paper's next chunk on done)")
    r.add_argument("--coop", action="store_true",
                   help="workers run on the node's cooperative arbiter: one token per CPU, "
                   "switching only at chunk boundaries and when blocking (SCHED_COOP)")
    r.add_argument("--dispatch", choices=["auto", "python", "compiled"],
                   help="thread workers' chunk loop: auto (default) compiles it, GIL-free, for "
                   "dynamic/guided/chunk with a numba kernel; python always runs the Python "
                   "loop; compiled refuses what cannot be compiled")
    add_technique_options(r)
    from .core.techniques.deterministic import RULES

    r.add_argument("--split", choices=["static", "dynamic", *RULES], default="static",
                   help="under mpiexec: frames to ranks in contiguous blocks (static), by "
                   "self-scheduled guided chunks through an MPI RMA counter (dynamic), or "
                   "by an LB4OMP technique's chunks through that counter (e.g. fac2); "
                   "no effect at P = 1")
    r.set_defaults(func=cmd_run)

    from .coop.command import add_parser as add_colocate
    from .ge.command import add_parser as add_ge
    from .machine.probes import add_parser as add_check
    from .results.trace_command import add_parser as add_trace

    add_ge(sub)
    add_colocate(sub)
    add_trace(sub)
    add_check(sub)

    ls = sub.add_parser("list", help="schedulers with one-line descriptions")
    ls.set_defaults(func=cmd_list)

    from .core.policies import PLAN_HELP

    pl = sub.add_parser("plan", help="print a policy's chunk hand-out as CSV (worker -1: "
                        "first come first served)", epilog="policies:\n" + "\n".join(
                            f"  {k:<12} {v}" for k, v in PLAN_HELP.items()))
    pl.add_argument("--policy", required=True, choices=list(PLAN_POLICIES), help="see below")
    pl.add_argument("--tasks", "-L", required=True, type=_positive("--tasks"), help="frames L")
    pl.add_argument("--workers", "-k", required=True, type=_positive("--workers"), help="workers k")
    pl.add_argument("--chunk", type=_positive("--chunk"), default=0,
                    help="chunk size (default 0: the policy's own)")
    add_technique_options(pl)
    pl.set_defaults(func=cmd_plan)

    rp = sub.add_parser("report", help="tables, CSV and speedup plots of a study file")
    rp.add_argument("file", metavar="FILE.h5")
    rp.add_argument("--out-dir", metavar="DIR",
                    help="where CSV and PNG files go (default <stem>_report/ beside FILE)")
    rp.add_argument("--no-plots", action="store_true", help="tables and CSV only, no PNG")
    rp.set_defaults(func=cmd_report)

    ft = sub.add_parser("fit", help="fit Amdahl, Gustafson or USL to speedups over N = P x k")
    ft.add_argument("file", metavar="FILE.h5|FILE.csv",
                    help="a study, or a CSV with columns N and speedup or throughput")
    ft.add_argument("--model", choices=["amdahl", "gustafson", "usl"], default="usl",
                    help="the scalability model (default: usl)")
    ft.add_argument("--scheduler", help="study: the scheduler to fit (default dynamic, "
                    "else the one measured at the most N)")
    ft.add_argument("--frames", "-L", type=_positive("--frames"), help="study: which L "
                    "(default: the L with the most runs)")
    ft.add_argument("--cores", type=_positive("--cores"), help="physical cores per node: N "
                    "beyond are warned about and marked (default: the study's recorded cores; "
                    "none for a CSV)")
    ft.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    ft.add_argument("--plot", metavar="PNG", help="write data and fitted curve to PNG (default: no plot)")
    ft.set_defaults(func=cmd_fit)

    mg = sub.add_parser("merge", help="combine study files (e.g. one per Slurm job) into one")
    mg.add_argument("files", nargs="+", metavar="FILE.h5")
    mg.add_argument("--out", "-o", required=True, metavar="ALL.h5", help="the merged study")
    mg.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    mg.set_defaults(func=cmd_merge)

    return p


_KEPT = "; completed runs are kept in the output file"


def _is_run(argv: list[str] | None) -> bool:
    return "run" in (sys.argv[1:] if argv is None else argv)[:1]


def _launched_rank() -> int:
    """This process's rank as the MPI launcher's environment says (0 without a launcher),
    known before MPI is initialised, e.g. while the command line is parsed."""
    from .mpi import detect_launch

    launch = detect_launch()
    return (launch.rank or 0) if launch is not None else 0


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hybridsched`` and ``python -m hybridsched``."""
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        args = make_parser().parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError(f"{PROG}: a command is required (run, report, trace, fit, merge, plan, list, check, ge, colocate); see --help")
        return args.func(args)
    except UsageError as exc:
        msg = str(exc)
        if _launched_rank() == 0:  # under mpiexec every rank parses: one line, from rank 0
            print(msg if msg.startswith(PROG) else f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except HybridschedError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted{_KEPT if _is_run(argv) else ''}", file=sys.stderr)
        return 130
    except SystemExit as exc:
        if exc.code == 128 + signal.SIGTERM:
            print(f"{PROG}: terminated{_KEPT if _is_run(argv) else ''}", file=sys.stderr)
        raise
    except BrokenPipeError:
        return 141
    finally:
        signal.signal(signal.SIGTERM, old)
