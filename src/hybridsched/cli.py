"""Command line: ``hybridsched <subcommand>``; one ``cmd_<name>`` function per subcommand.

Only this module turns exceptions into exit codes: bad input -> one line on stderr and 2,
Ctrl-C -> 130, SIGTERM -> 143. Everything below raises typed exceptions.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from . import __version__
from .errors import HybridschedError, UsageError

PROG = "hybridsched"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


_INT_LIMIT = 2**63


def _int_list(what: str, minimum: int = 1):
    def parse(text: str) -> list[int]:
        out = []
        for part in text.split(","):
            part = part.strip()
            try:
                v = int(part)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what} must be integers, got {part!r}") from None
            if v < minimum:
                raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {v}")
            if v >= _INT_LIMIT:  # stored as int64 in HDF5
                raise argparse.ArgumentTypeError(f"{what} must be below 2**63, got {v}")
            out.append(v)
        return out
    return parse


def _chunk_list(text: str) -> list[int]:
    """--chunk: sizes >= 1, or 'auto' (policies.AUTO_CHUNK: the pipe backend searches it)."""
    from .policies import AUTO_CHUNK

    parts = [p.strip() for p in text.split(",")]
    sizes = _int_list("--chunk")(",".join(p for p in parts if p.lower() != "auto")) \
        if any(p.lower() != "auto" for p in parts) else []
    return [AUTO_CHUNK] * any(p.lower() == "auto" for p in parts) + sizes


def _positive(what: str, minimum: int = 1):
    parse_list = _int_list(what, minimum)

    def parse(text: str) -> int:
        vals = parse_list(text)
        if len(vals) != 1:
            raise argparse.ArgumentTypeError(f"{what} takes one value, got {text!r}")
        return vals[0]
    return parse


def _nonnegative_int(what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if not 0 <= v < _INT_LIMIT:  # a uint64 for the generator, int64 in HDF5
            raise argparse.ArgumentTypeError(f"{what} must be from 0 to 2**63-1, got {v}")
        return v
    return parse


# --- run --------------------------------------------------------------------------------


def _scheduler_names(values: list[str] | None) -> list[str] | None:
    from . import registry as schedulers

    if not values:
        return None
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                out += schedulers.names()
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
    if args.kernel is not None:
        spec.kernel = args.kernel
    if args.affinity is not None:
        spec.affinity = [args.affinity]
    if args.pipe_batch is not None:
        spec.pipe_batch = args.pipe_batch
    if args.inflight is not None:
        spec.inflight = args.inflight
    if getattr(args, "coop", False):
        spec.coop = True
    spec.validate()
    return spec


def cmd_run(args) -> int:
    from .mpi import world

    w = world()  # P = 1 (no MPI at all) unless mpiexec/mpirun/srun started several ranks
    if w.is_mpi:
        return _cmd_run_mpi(args, w)
    from . import kernels
    from .progress import Progress, run_cost
    from .results.report import markdown_summary, summarise
    from .store import StudyWriter, check_writable, read_runs
    from .study.session import record_resume, resume_check, run_configurations
    from .sysinfo import machine_metadata, n_cpus

    spec = build_spec(args)
    out = args.out or time.strftime("hybridsched-%Y%m%d-%H%M%S.h5")
    check_writable(out)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    resume = bool(args.resume) and os.path.exists(out)
    if os.path.exists(out) and not (args.overwrite or resume):
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
        print(f"{PROG}: resuming {out}: {len(skipped)} of {len(configs)} runs already stored, "
              f"{len(todo)} to go", file=sys.stderr)
    kernels.prepare(spec.kernel)  # compile before any worker or fork exists
    failed = 0
    n = n_cpus()
    with Progress(todo, n, spec.reps, done_already=len(skipped),
                  done_cost=sum(run_cost(c, n) for c in skipped)) as progress, \
            (StudyWriter(out, append=True) if resume else
             StudyWriter(out, meta, spec.to_dict())) as writer:
        if resume:
            record_resume(writer, spec, meta)

        def on_record(rec):
            nonlocal failed
            writer.append(rec)
            failed += not rec.verified
            progress.done(rec.config)
        for _ in run_configurations(todo, on_record, on_start=progress.start):
            pass
    print(markdown_summary(summarise(read_runs(out))))
    print(f"\n{len(todo)} runs ({failed} failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_run_mpi(args, w) -> int:
    """`run` on every rank of an MPI job: all ranks run, rank 0 alone writes and prints.

    Input is checked on rank 0 and its verdict broadcast, so bad input stops every rank
    with one line (exit 2); a rank that fails later aborts the whole job (mpi.ranks).
    """
    from . import kernels
    from .mpi import abort_on_error, agree
    from .mpi.runs import check_split, run_configurations
    from .store import StudyWriter, check_writable
    from .sysinfo import machine_metadata

    def check() -> None:
        if getattr(args, "resume", False):
            raise UsageError("--resume is not supported under mpiexec yet; use a new --out "
                             "and `hybridsched merge`")
        check_writable(out)
        if os.path.exists(out) and not args.overwrite:
            raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")
        check_split(configs, w.size, args.split)

    out = configs = None
    try:
        spec = build_spec(args)  # the same arguments, so the same verdict, on every rank
    except UsageError:
        if w.rank:
            raise SystemExit(2)
        raise
    configs = spec.configurations()
    out = w.bcast(args.out or time.strftime("hybridsched-%Y%m%d-%H%M%S.h5"))
    agree(w, check)
    with abort_on_error(w):
        kernels.prepare(spec.kernel)  # compile before any worker or fork exists
        if w.rank:
            failed = run_configurations(w, configs, lambda rec: None, args.split)
        else:
            study = dict(spec.to_dict(), P=w.size, split=args.split)
            with StudyWriter(out, machine_metadata(), study) as writer:
                def on_record(rec):
                    writer.append(rec)  # flushed: a later abort keeps this run
                    c = rec.config
                    print(f"P={c.P} {c.scheduler} k={c.k} L={c.frames} rep={c.rep}: "
                          f"{rec.time_s * 1e3:.2f} ms{'' if rec.verified else ' UNVERIFIED'}",
                          file=sys.stderr)
                failed = run_configurations(w, configs, on_record, args.split)
            from .results.report import markdown_summary, summarise
            from .store import read_runs

            # sigma needs T_serial from a P = 1 study: merge one in (`hybridsched merge`)
            print(markdown_summary(summarise(read_runs(out))))
            print(f"\n{len(configs)} runs at P={w.size} ({failed} failed or unverified) "
                  f"written to {out}", file=sys.stderr)
    return 1 if failed else 0


# --- fit, merge ---------------------------------------------------------------------------


def cmd_fit(args) -> int:
    import json

    from .results import fit

    data = fit.load(args.file, args.scheduler, args.frames)
    res = fit.fit(data, args.model)
    if args.plot:
        fit.plot(res, args.plot)
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
    from .registry import SCHEDULERS, names

    width = max(len(n) for n in SCHEDULERS)
    for n in names():
        info = SCHEDULERS[n]
        tag = "" if info.paper else "(variant) "
        print(f"{n:<{width}}  {info.family:<7} {tag}{info.description}")
    return 0


def cmd_plan(args) -> int:
    from .policies import plan

    rows = plan(args.policy, args.tasks, args.workers, args.chunk)
    out = ["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]
    print("\n".join(out))
    return 0


def cmd_report(args) -> int:
    from .results.report import build_report, default_out_dir, load_study

    study = load_study(args.file)
    if len(study.runs) == 0:
        print(f"{args.file}: the study holds no runs yet")
        return 0
    out_dir = args.out_dir or default_out_dir(args.file)
    try:
        text, files = build_report(study, out_dir, plots=not args.no_plots)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
    print(text)
    print(f"{PROG}: {len(files)} files written to {out_dir}", file=sys.stderr)
    return 0


# --- colocate ---------------------------------------------------------------------------


def cmd_colocate(args) -> int:
    from .coop.colocate import ColocateSpec, run_colocate
    from .coop.output import ColocateWriter
    from .results.colocate_report import markdown
    from .store import check_writable
    from .sysinfo import machine_metadata, n_cpus

    n = n_cpus()
    spec = ColocateSpec(args.workload, args.jobs, args.workers, args.policy, args.barrier,
                        args.step_us, args.steps, args.reps, args.quantum_ms / 1e3, args.matrix,
                        args.scheduler, args.height, args.width)
    spec.validate(n)
    out = args.out or time.strftime("hybridsched-colocate-%Y%m%d-%H%M%S.h5")
    check_writable(out)
    meta = machine_metadata()
    meta["N"] = n
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
    from .coop.output import read_colocate

    print(markdown(read_colocate(out), n)[0])
    print(f"{len(records)} job records ({failed} failed) written to {out}; "
          f"`{PROG} report {out}` for the plots", file=sys.stderr)
    return 1 if failed else 0


# --- parser -----------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    from .kernels import KERNELS
    from .policies import PLAN_POLICIES
    from .study.spec import PRESETS

    p = _Parser(prog=PROG, description="Fork-, pipe- and thread-based scheduler study on a "
                "shared-memory row-sorting workload.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    r = sub.add_parser("run", help="run a study (schedulers x k x L x repetitions)")
    r.add_argument("-s", "--scheduler", action="append", metavar="NAMES",
                   help="scheduler names, comma separated or repeated; 'paper' for the "
                   "paper's 13, 'all' for every one (with the named variants)")
    r.add_argument("-k", type=_int_list("-k"), metavar="K[,K...]", help="worker counts")
    r.add_argument("--frames", "-L", type=_int_list("--frames"), metavar="L[,L...]",
                   help="frames per tensor (the paper's L)")
    r.add_argument("--height", type=_positive("--height"), help="rows per frame (H)")
    r.add_argument("--width", type=_positive("--width"), help="bytes per row (W)")
    r.add_argument("--chunk", type=_chunk_list, metavar="C[,C...]",
                   help="chunk size(s); default: each policy's own; 'auto' (pipe schedulers "
                   "only) searches the fastest chunk for each L and k, stored as chunk=-1")
    r.add_argument("--reps", type=_positive("--reps"), help="repetitions per configuration")
    r.add_argument("--seed", type=_nonnegative_int("--seed"), help="tensor seed")
    r.add_argument("--kernel", choices=list(KERNELS), help="per-frame kernel (default quicksort)")
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
    r.add_argument("--split", choices=["static", "dynamic"], default="static",
                   help="under mpiexec: frames to ranks in contiguous blocks (static) or by "
                   "self-scheduled guided chunks through an MPI RMA counter (dynamic); "
                   "no effect at P = 1")
    r.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="schedulers with one-line descriptions")
    ls.set_defaults(func=cmd_list)

    pl = sub.add_parser("plan", help="print a policy's chunk hand-out as CSV")
    pl.add_argument("--policy", required=True, choices=list(PLAN_POLICIES))
    pl.add_argument("--tasks", required=True, type=_positive("--tasks"))
    pl.add_argument("--workers", required=True, type=_positive("--workers"))
    pl.add_argument("--chunk", type=_positive("--chunk"), default=0)
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
    ft.add_argument("--model", choices=["amdahl", "gustafson", "usl"], default="usl")
    ft.add_argument("--scheduler", help="study: the scheduler to fit (default dynamic, "
                    "else the one measured at the most N)")
    ft.add_argument("--frames", "-L", type=_positive("--frames"), help="study: which L")
    ft.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    ft.add_argument("--plot", metavar="PNG", help="write data and fitted curve to PNG")
    ft.set_defaults(func=cmd_fit)

    mg = sub.add_parser("merge", help="combine study files (e.g. one per Slurm job) into one")
    mg.add_argument("files", nargs="+", metavar="FILE.h5")
    mg.add_argument("--out", "-o", required=True, metavar="ALL.h5")
    mg.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    mg.set_defaults(func=cmd_merge)

    from .coop.barrier import POLICIES as BARRIERS
    from .coop.colocate import POLICIES, WORKLOADS

    def _names(choices, what):
        def parse(text: str) -> list[str]:
            names = [t.strip() for t in text.split(",") if t.strip()]
            bad = [t for t in names if t not in choices]
            if bad or not names:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {bad[0] if bad else text!r}; choose from {', '.join(choices)}")
            return list(dict.fromkeys(names))
        return parse

    co = sub.add_parser("colocate", help="co-located jobs under Linux, the coop arbiter or a "
                        "partition: makespan and interference")
    co.add_argument("--workload", choices=list(WORKLOADS), default="bsp",
                    help="bsp: compute steps separated by a barrier (default); blas: numpy "
                    "matrix products with the BLAS pool at --workers threads; run: one "
                    "scheduler run per job (--scheduler, k = --workers)")
    co.add_argument("--jobs", "-J", type=_positive("--jobs"), default=2, help="jobs started together (default 2)")
    co.add_argument("--workers", "-T", type=_positive("--workers"), default=0,
                    help="workers per job (default N, every job sized for the whole machine)")
    co.add_argument("--policy", type=_names(list(POLICIES), "policy"), default=["linux", "coop"],
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
    return p


_KEPT = "; completed runs are kept in the output file"


def _is_run(argv: list[str] | None) -> bool:
    return "run" in (sys.argv[1:] if argv is None else argv)[:1]


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hybridsched`` and ``python -m hybridsched``."""
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        args = make_parser().parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError(f"{PROG}: a command is required (run, report, fit, merge, plan, list); see --help")
        return args.func(args)
    except UsageError as exc:
        msg = str(exc)
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
