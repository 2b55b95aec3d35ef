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
            out.append(v)
        return out
    return parse


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
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
    return parse


# --- run --------------------------------------------------------------------------------


def _scheduler_names(values: list[str] | None) -> list[str] | None:
    from . import schedulers

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
            else:
                schedulers.get(name)
                out.append(name)
    if not out:
        raise UsageError("--scheduler: no scheduler given")
    return list(dict.fromkeys(out))


def build_spec(args):
    from .study import StudySpec, default_spec, preset

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
    spec.validate()
    return spec


def cmd_run(args) -> int:
    from tqdm import tqdm

    from . import kernels
    from .report import markdown_summary, summarise
    from .store import StudyWriter, check_writable, read_runs
    from .study import run_configurations
    from .sysinfo import machine_metadata

    spec = build_spec(args)
    out = args.out or time.strftime("hybridsched-%Y%m%d-%H%M%S.h5")
    check_writable(out)
    if os.path.exists(out) and not args.overwrite:
        raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")
    configs = spec.configurations()
    kernels.prepare(spec.kernel)  # compile before any worker or fork exists
    bar = tqdm(total=len(configs), file=sys.stderr, disable=not sys.stderr.isatty(),
               unit="run", dynamic_ncols=True)
    failed = 0
    with bar, StudyWriter(out, machine_metadata(), spec.to_dict()) as writer:
        def on_record(rec):
            nonlocal failed
            writer.append(rec)
            failed += not rec.verified
            c = rec.config
            bar.set_description(f"{c.scheduler} k={c.k} L={c.frames} rep {c.rep + 1}/{spec.reps}")
            bar.update()
        for _ in run_configurations(configs, on_record):
            pass
    print(markdown_summary(summarise(read_runs(out))))
    print(f"\n{len(configs)} runs ({failed} failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0


# --- list, plan, report -----------------------------------------------------------------


def cmd_list(args) -> int:
    from .schedulers import SCHEDULERS, names

    width = max(len(n) for n in SCHEDULERS)
    for n in names():
        info = SCHEDULERS[n]
        print(f"{n:<{width}}  {info.family:<7} {info.description}")
    return 0


def cmd_plan(args) -> int:
    from .policies import plan

    rows = plan(args.policy, args.tasks, args.workers, args.chunk)
    out = ["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]
    print("\n".join(out))
    return 0


def cmd_report(args) -> int:
    from .report import markdown_summary, summarise
    from .store import read_runs

    runs = read_runs(args.file)
    if len(runs) == 0:
        print(f"{args.file}: the study holds no runs yet")
        return 0
    print(markdown_summary(summarise(runs)))
    return 0


# --- parser -----------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    from .kernels import KERNELS
    from .policies import PLAN_POLICIES
    from .study import PRESETS

    p = _Parser(prog=PROG, description="Fork-, pipe- and thread-based scheduler study on a "
                "shared-memory row-sorting workload.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    r = sub.add_parser("run", help="run a study (schedulers x k x L x repetitions)")
    r.add_argument("-s", "--scheduler", action="append", metavar="NAMES",
                   help="scheduler names, comma separated or repeated; 'all' for every one")
    r.add_argument("-k", type=_int_list("-k"), metavar="K[,K...]", help="worker counts")
    r.add_argument("--frames", "-L", type=_int_list("--frames"), metavar="L[,L...]",
                   help="frames per tensor (the paper's L)")
    r.add_argument("--height", type=_positive("--height"), help="rows per frame (H)")
    r.add_argument("--width", type=_positive("--width"), help="bytes per row (W)")
    r.add_argument("--chunk", type=_int_list("--chunk"), metavar="C[,C...]",
                   help="chunk size(s); default: each policy's own")
    r.add_argument("--reps", type=_positive("--reps"), help="repetitions per configuration")
    r.add_argument("--seed", type=_nonnegative_int("--seed"), help="tensor seed")
    r.add_argument("--kernel", choices=list(KERNELS), help="per-frame kernel (default quicksort)")
    r.add_argument("--affinity", action=argparse.BooleanOptionalAction, default=None,
                   help="pin worker w to CPU w mod N (default on)")
    r.add_argument("--out", "-o", metavar="FILE.h5", help="HDF5 output (default hybridsched-<time>.h5)")
    r.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    r.add_argument("--preset", choices=list(PRESETS), help="smoke (seconds), default, paper (§5 matrix)")
    r.set_defaults(func=cmd_run)

    ls = sub.add_parser("list", help="schedulers with one-line descriptions")
    ls.set_defaults(func=cmd_list)

    pl = sub.add_parser("plan", help="print a policy's chunk hand-out as CSV")
    pl.add_argument("--policy", required=True, choices=list(PLAN_POLICIES))
    pl.add_argument("--tasks", required=True, type=_positive("--tasks"))
    pl.add_argument("--workers", required=True, type=_positive("--workers"))
    pl.add_argument("--chunk", type=_positive("--chunk"), default=0)
    pl.set_defaults(func=cmd_plan)

    rp = sub.add_parser("report", help="tables of a study file")
    rp.add_argument("file", metavar="FILE.h5")
    rp.set_defaults(func=cmd_report)
    return p


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hybridsched`` and ``python -m hybridsched``."""
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        args = make_parser().parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError(f"{PROG}: a command is required (run, report, plan, list); see --help")
        return args.func(args)
    except UsageError as exc:
        msg = str(exc)
        print(msg if msg.startswith(PROG) else f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except HybridschedError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; completed runs are kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 141
    finally:
        signal.signal(signal.SIGTERM, old)
