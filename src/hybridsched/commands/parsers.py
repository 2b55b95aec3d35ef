"""Every subcommand's parser, in one place (as pyperf keeps them): ``add_<name>(sub)`` adds
one, :data:`SUBCOMMANDS` lists them in ``--help`` order. A parser names the module of
:mod:`hybridsched.commands` that runs it (``command``); nothing heavier than the names its
options offer is imported here, so a command pays only for what it runs."""
from __future__ import annotations

import argparse
from typing import Callable

from .args import (ListsJoined, chunk_list, choice_list, fraction, int_list, name_list,
                   nonnegative_int, param_item, positive, seconds, split_name)

EXAMPLES = """examples:
  hybridsched check                          is this machine quiet enough to time on?
  hybridsched run --preset smoke -o s.h5     a study in seconds (every scheduler, tiny tensor)
  hybridsched run -s dynamic,serial -k 1,2,4 -L 200 --reps 5 -o d.h5
  hybridsched report s.h5                    tables on stdout; CSV and PNG in s_report/
  hybridsched trace s.h5 -s prolific -k 2    Gantt PNG and Perfetto JSON in s_report/
  hybridsched fit d.h5 --model usl --plot usl.png
  mpiexec -n 2 hybridsched run -s dynamic -k 1,2 -L 200 --reps 5 -o p2.h5
  hybridsched merge d.h5 p2.h5 -o all.h5     one study over P = 1 and 2, for fit
  hybridsched plan --policy guided --tasks 20 --workers 3
"""

DESCRIPTION = ("Fork-, pipe- and thread-based scheduler study on a shared-memory row-sorting "
               "workload: every row of every frame of a uint8 L x H x W tensor is sorted, and "
               "each scheduler hands the frames to k workers.")

# one line per subcommand in --help (also for the parsers built by name only)
HELP = {
    "run": "run a study (schedulers x k x L x repetitions)",
    "ge": "cooperative scheduler A0/A1/A2 on blocked Gaussian elimination",
    "colocate": ("co-located jobs (built-in workloads or unmodified commands) under Linux, the "
                 "coop arbiter, gang scheduling or a partition: makespan and interference"),
    "coop": ("unmodified commands on the node's cooperative arbiter: `coop exec CMD` runs one "
             "as a job of it"),
    "trace": "one run's timeline: a Gantt PNG and a Perfetto / chrome://tracing JSON",
    "check": ("what could make timings here untrustworthy (governor, boost, SMT, cpuset, "
              "other load, memory, /dev/shm)"),
    "list": "schedulers with one-line descriptions",
    "plan": "print a policy's chunk hand-out as CSV (worker -1: first come first served)",
    "report": "tables, CSV and speedup plots of a study file",
    "fit": "fit Amdahl, Gustafson or USL to speedups over N = P x k",
    "merge": "combine study files (e.g. one per Slurm job) into one",
    "simulate": ("the study `run` would make, simulated on --cores virtual CPUs and -P nodes "
                 "(or --validate a measured one)"),
    "calibrate": "measure this machine's scheduling overheads for `simulate --calibration`",
}


def _technique_options(p) -> None:
    """LB4OMP's environment parameters as options (its defaults when absent)."""
    p.add_argument("--fiss-stages", type=nonnegative_int("--fiss-stages"), default=None,
                   help="fiss: stages (KMP_FISS_STAGES; default k - 1)")
    p.add_argument("--viss-param", type=positive("--viss-param"), default=None,
                   help="viss: divisor of N/k for the first chunk (KMP_VISS_PARAM; default k)")
    p.add_argument("--pls-swr", type=fraction("--pls-swr"), default=None,
                   help="pls: static workload ratio 0..1 (KMP_PLS_SWR; default 0.5)")
    p.add_argument("--param", type=param_item, action="append", default=None, metavar="KEY=VALUE",
                   help="a technique parameter (repeatable): a user technique's self.params, "
                        "or an LB4OMP one by its name (fiss_stages, viss_param, pls_swr, "
                        "rnd_start, seed) (default: none)")


class _HelpWhenShown(argparse.Action):
    """An option stored as given whose help is made when it is read, i.e. when a help is
    printed: the built-in kernels' list lives in :mod:`hybridsched.kernels`, whose import
    (numba's, 0.2 s) parsing a command line must not pay (`run` starts its load probe after
    the parse and hides that import behind the probe's wait)."""

    def __init__(self, *args, make_help: Callable[[], str], **kwargs):
        self._make_help = make_help
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self._make_help()

    @help.setter
    def help(self, _text) -> None:  # argparse.Action.__init__ sets one: the maker replaces it
        pass

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)


def _kernel_help() -> str:
    from ..kernels import KERNELS

    return ("chunk kernel (default: quicksort): "
            + "; ".join(f"{k}: {d}" for k, (_, d) in KERNELS.items())
            + "; or your own package.module:function, fn(data, first, count) or "
            "fn(task), imported and compiled before any fork")


def _tasks_options(r) -> None:
    """--kernel, --input, --verify, --workload: what the tasks are."""
    from ..workloads.catalogue import WORKLOADS

    r.add_argument("--kernel", metavar="NAME|MODULE:FUNCTION", action=_HelpWhenShown,
                   make_help=_kernel_help)
    r.add_argument("--input", metavar="FILE.npy",
                   help="the tasks from a .npy array (first axis) instead of the generator; "
                   "its sha256 is stored with every run (default: none, the generator)")
    r.add_argument("--verify", metavar="MODULE:FUNCTION|none",
                   help="verifier fn(original, result) -> bool, or none to store runs as "
                   "unverified by choice (default: the workload's own check)")
    r.add_argument("--workload", metavar="NAME[:KEY=V,...]",
                   help="tasks and their cost (default: uniform): "
                   + "; ".join(f"{n}: {w.description}" for n, w in WORKLOADS.items())
                   + "; parameters after a colon, e.g. heavytail:alpha=1.2")


def add_run(sub) -> None:
    r = sub.add_parser("run", help=HELP["run"])
    _study_options(r)
    r.add_argument("--resume", action="store_true",
                   help="continue the --out study: run only the configurations not stored yet "
                   "(same seed, shape, kernel and machine required)")
    r.add_argument("--interleave", action="store_true",
                   help="variant: for each L, every configuration's first repetition, then "
                   "every one's second, ... (default: a configuration's repetitions back to "
                   "back, the paper's order); a slow spell of a shared machine then spreads "
                   "over all configurations instead of falling on one")
    _split_option(r, "under mpiexec: ")
    r.set_defaults(command="run")


def _study_options(r, stem: str = "hybridsched") -> None:
    """What a study runs: the options `run` and `simulate` share."""
    from ..study.presets import PRESETS

    r.add_argument("-s", "--scheduler", action="append", metavar="NAMES",
                   help="scheduler names, comma separated or repeated; 'paper' for the "
                   "paper's 13, 'all' for every one (with the named variants and the LB4OMP "
                   "techniques on threads), 'techniques' for those techniques and auto; "
                   "pipe-MtoM:<technique> by name (default: paper)")
    r.add_argument("-k", type=int_list("-k"), metavar="K[,K...]",
                   help="worker counts (default: 1,2,N,2N; N = usable CPUs)")
    r.add_argument("--frames", "-L", type=int_list("--frames"), metavar="L[,L...]",
                   help="frames per tensor (the paper's L) (default: 120)")
    r.add_argument("--height", type=positive("--height"), help="rows per frame (H) (default: 640)")
    r.add_argument("--width", type=positive("--width"), help="bytes per row (W) (default: 640)")
    r.add_argument("--chunk", type=chunk_list, metavar="C[,C...]",
                   help="chunk size(s); default: each policy's own; 'auto' (pipe schedulers "
                   "only) searches the fastest chunk for each L and k, stored as chunk=-1")
    r.add_argument("--reps", type=positive("--reps"), help="repetitions per configuration (default: 3)")
    r.add_argument("--seed", type=nonnegative_int("--seed"), help="tensor seed (default: 0)")
    _tasks_options(r)
    r.add_argument("--affinity", action=argparse.BooleanOptionalAction, default=None,
                   help="pin worker w to CPU w mod N (default on)")
    r.add_argument("--out", "-o", metavar="FILE.h5", help=f"HDF5 output (default {stem}-<time>.h5)")
    r.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    r.add_argument("--preset", choices=list(PRESETS), help="smoke (seconds), default (~2 min on "
                   "2 cores), scaled (the §5 shape on this machine's N cores), paper (the §5 matrix)")
    r.add_argument("--pipe-batch", type=positive("--pipe-batch"), metavar="B",
                   help="variant: pipe records per producer write for pipe-1to1/1toN (default "
                   "1, the paper's one chunk per message; up to 256 = one PIPE_BUF)")
    r.add_argument("--inflight", type=positive("--inflight"), metavar="D",
                   help="variant: pipe-MtoM chunks in flight per worker (default 1, the "
                   "paper's next chunk on done)")
    r.add_argument("--coop", action="store_true",
                   help="workers run on the node's cooperative arbiter: one token per CPU, "
                   "switching only at chunk boundaries and when blocking (SCHED_COOP)")
    r.add_argument("--dispatch", choices=["auto", "python", "compiled"],
                   help="thread workers' chunk loop: auto (default) compiles it, GIL-free, for "
                   "dynamic/guided/chunk with a numba kernel; python always runs the Python "
                   "loop; compiled refuses what cannot be compiled")
    _technique_options(r)
    r.add_argument("--portfolio", type=name_list, default=None, metavar="NAME,...",
                   help="auto: the techniques it races (built-in names and package.module:Class; "
                        "default: static, dynamic, guided and LB4OMP's 24)")


def _split_option(r, where: str, default: str | None = "static") -> None:
    from ..core.techniques.deterministic import RULES

    r.add_argument("--split", default=default, type=split_name(("static", "dynamic", *RULES)),
                   metavar="{static,dynamic," + ",".join(RULES) + ",package.module:Class}",
                   help=f"{where}frames to ranks in blocks (static), by guided chunks "
                   "from an MPI RMA counter (dynamic), by an LB4OMP technique's chunks or by "
                   "a deterministic technique of yours from that counter; none at P = 1")


def add_ge(sub) -> None:
    ge = sub.add_parser("ge", help=HELP["ge"])
    ge.add_argument("--arch", type=name_list, default=["A0", "A1", "A2"], metavar="A[,A...]",
                    help="architectures: A0 (OS threads), A1 (one blocked queue), A2 "
                    "(per-primitive queues); default all three")
    ge.add_argument("--algo", type=name_list, default=["rows", "tiles"], metavar="ALGO[,...]",
                    help="rows (block rows) and/or tiles (a g x g grid, g = round(sqrt(T)))")
    ge.add_argument("--n", type=positive("--n"), default=512, help="matrix size (default 512)")
    ge.add_argument("--threads", type=int_list("--threads"), default=[32], metavar="T[,T...]",
                    help="user threads, 1 to 7936 (default 32); rows: T <= n; tiles: the "
                    "nearest square grid, at most n tiles per side")
    ge.add_argument("--reps", type=positive("--reps"), default=1, help="repetitions")
    ge.add_argument("--seed", type=nonnegative_int("--seed"), default=0, help="matrix seed")
    ge.add_argument("--out", "-o", metavar="FILE.h5", help="HDF5 output (default "
                    "hybridsched-ge-<time>.h5)")
    ge.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    ge.set_defaults(command="ge")


def add_colocate(sub) -> None:
    from ..colocate.spec import BARRIERS, CMD_DEFAULT_POLICIES, CMD_POLICIES, POLICIES, WORKLOADS as KINDS
    from ..oslayer.cmdjobs import TIMEOUT_GRACE_S

    co = sub.add_parser("colocate", help=HELP["colocate"])
    co.add_argument("--workload", choices=list(KINDS),
                    help="bsp: compute steps separated by a barrier (default); blas: numpy "
                    "matrix products with the BLAS pool at --workers threads; run: one "
                    "scheduler run per job (--scheduler, k = --workers)")
    co.add_argument("--cmd", action="append", metavar="'CMD ...'",
                    help="instead of a --workload: an unmodified command, one job (repeatable; "
                    "or one --cmd with --jobs J for J copies); split into words as "
                    "shlex.split does and run without a shell (default: none, a built-in "
                    "--workload)")
    co.add_argument("--expect", action="append", metavar="REGEX",
                    help="--cmd: a job verifies only if a line of its stdout (all of it, line by "
                    "line) matches REGEX; once for every job, or once per --cmd in their order "
                    "(default: exit status 0 is enough)")
    co.add_argument("--timeout", type=seconds("--timeout"), metavar="SECONDS",
                    help="--cmd: a job still running SECONDS after the start gets SIGTERM, its "
                    f"whole group, then SIGKILL {TIMEOUT_GRACE_S:g} s later if still running, "
                    "and counts as failed (default: none)")
    co.add_argument("--jobs", "-J", type=positive("--jobs"),
                    help="jobs started together (default 2; with --cmd the number of --cmd)")
    co.add_argument("--workers", "-T", type=positive("--workers"),
                    help="workers per job (default N, every job sized for the whole machine)")
    names = list(dict.fromkeys([*POLICIES, *CMD_POLICIES]))
    co.add_argument("--policy", type=choice_list(names, "policy"), action=ListsJoined,
                    help=f"comma list of {', '.join(POLICIES)} (default linux,coop); with --cmd "
                    f"of {', '.join(CMD_POLICIES)} (default {','.join(CMD_DEFAULT_POLICIES)})")
    co.add_argument("--barrier", choices=list(BARRIERS),
                    help="how a barrier waits (default spin-block, libgomp's)")
    co.add_argument("--step-us", type=float, help="compute per step in µs (default 200)")
    co.add_argument("--steps", type=positive("--steps"),
                    help="steps per job (bsp) or matrix products per job (blas) (default 500)")
    co.add_argument("--matrix", type=positive("--matrix"),
                    help="blas: the n of the n x n products (default 384)")
    co.add_argument("--scheduler", "-s",
                    help="run: the scheduler every job runs, on --steps frames (default dynamic)")
    co.add_argument("--height", type=positive("--height"),
                    help="run: rows per frame (default 256)")
    co.add_argument("--width", type=positive("--width"), help="run: bytes per row (default 256)")
    co.add_argument("--reps", type=positive("--reps"), default=3, help="repetitions (default 3)")
    co.add_argument("--quantum-ms", type=float, default=20.0,
                    help="coop: a job's time on a CPU before it yields to a waiting job; gang: "
                    "a job's time slice (default 20)")
    co.add_argument("--out", "-o", metavar="FILE.h5",
                    help="HDF5 output (default hybridsched-colocate-<time>.h5)")
    co.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    co.set_defaults(command="colocate")


def add_coop(sub) -> None:
    co = sub.add_parser("coop", help=HELP["coop"])
    actions = co.add_subparsers(dest="coop_action", parser_class=type(co), metavar="ACTION",
                                required=True)
    ex = actions.add_parser("exec", help="run one unmodified command as a job of the node's "
                            "arbiter, under the cooperative shim (an LD_PRELOAD library); its "
                            "exit status is the command's")
    ex.add_argument("--quantum-ms", type=float, default=None,
                    help="a job's time on a CPU before it yields to a waiting job, when this "
                    "command creates the segment (default 20; a segment in use keeps its "
                    "own, said on stderr)")
    ex.add_argument("--segment", metavar="PATH",
                    help="the arbiter's segment: jobs cooperate when they share one (default: "
                    "$HYBRIDSCHED_COOP_SEGMENT, else the node's, /dev/shm/hybridsched-coop.<uid>)")
    ex.add_argument("--keep-env", action="store_true",
                    help="leave the runtimes' wait policies as given (default: set "
                    "OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=0, KMP_BLOCKTIME=0, "
                    "OPENBLAS_THREAD_TIMEOUT=4, as colocate's coop policy does)")
    ex.add_argument("--counters", action="store_true",
                    help="print the job's shim counters on stderr when it ends")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD ...",
                    help="the command and its arguments (after --, or after the options)")
    ex.set_defaults(command="coop")


def add_trace(sub) -> None:
    tr = sub.add_parser("trace", help=HELP["trace"])
    tr.add_argument("file", metavar="FILE.h5")
    tr.add_argument("--run", type=nonnegative_int("--run"), metavar="ID",
                    help="the run_id (see /runs) (default: the first verified run, lowest rep, "
                    "matching the options below)")
    tr.add_argument("-s", "--scheduler", help="scheduler of the run (default: any)")
    tr.add_argument("-k", type=positive("-k"), help="workers k (default: any)")
    tr.add_argument("--frames", "-L", type=positive("--frames"), help="L (default: any)")
    tr.add_argument("--rep", type=nonnegative_int("--rep"), help="repetition (default: the lowest)")
    tr.add_argument("--png", metavar="OUT.png",
                    help="Gantt chart (default, with neither --png nor --perfetto: "
                    "<stem>_report/trace_run<ID>.png beside FILE)")
    tr.add_argument("--perfetto", metavar="OUT.json",
                    help="Chrome Trace Event JSON for ui.perfetto.dev or chrome://tracing "
                    "(default as for --png, .json)")
    tr.add_argument("--overwrite", action="store_true",
                    help="replace an existing --png/--perfetto file (default: refuse; the "
                    "default files in <stem>_report/ are always replaced, as report's are)")
    tr.set_defaults(command="trace")


def add_check(sub) -> None:
    ck = sub.add_parser("check", help=HELP["check"])
    ck.add_argument("--frames", "-L", type=positive("--frames"),
                    help="planned L, for the /dev/shm check (default: the default study's)")
    ck.add_argument("--height", type=positive("--height"), help="planned H (default 640)")
    ck.add_argument("--width", type=positive("--width"), help="planned W (default 640)")
    ck.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    ck.set_defaults(command="check")


def add_list(sub) -> None:
    ls = sub.add_parser("list", help=HELP["list"])
    ls.set_defaults(command="listing")


def add_plan(sub) -> None:
    from ..core.policies import PLAN_HELP, PLAN_POLICIES

    pl = sub.add_parser("plan", help=HELP["plan"], epilog="policies:\n" + "\n".join(
                            f"  {k:<12} {v}" for k, v in PLAN_HELP.items()))
    pl.add_argument("--policy", required=True, metavar="POLICY",
                    help=f"one of {', '.join(PLAN_POLICIES)}, or a deterministic technique "
                         "package.module:Class (see below)")
    pl.add_argument("--tasks", "-L", required=True, type=positive("--tasks"), help="frames L")
    pl.add_argument("--workers", "-k", required=True, type=positive("--workers"), help="workers k")
    pl.add_argument("--chunk", type=positive("--chunk", minimum=0), default=0,
                    help="chunk size (default 0: the policy's own)")
    _technique_options(pl)
    pl.set_defaults(command="plan")


def add_report(sub) -> None:
    rp = sub.add_parser("report", help=HELP["report"])
    rp.add_argument("file", metavar="FILE.h5")
    rp.add_argument("--out-dir", metavar="DIR",
                    help="where CSV and PNG files go (default <stem>_report/ beside FILE)")
    rp.add_argument("--no-plots", action="store_true", help="tables and CSV only, no PNG")
    rp.set_defaults(command="report")


def add_fit(sub) -> None:
    ft = sub.add_parser("fit", help=HELP["fit"])
    ft.add_argument("file", metavar="FILE.h5|FILE.csv",
                    help="a study, or a CSV with columns N and speedup or throughput")
    ft.add_argument("--model", choices=["amdahl", "gustafson", "usl"], default="usl",
                    help="the scalability model (default: usl)")
    ft.add_argument("--scheduler", help="study: the scheduler to fit (default dynamic, "
                    "else the one measured at the most N)")
    ft.add_argument("--frames", "-L", type=positive("--frames"), help="study: which L "
                    "(default: the L with the most runs)")
    ft.add_argument("--cores", type=positive("--cores"), help="physical cores per node: N "
                    "beyond are warned about and marked (default: the study's recorded cores; "
                    "none for a CSV)")
    ft.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    ft.add_argument("--plot", metavar="PNG", help="write data and fitted curve to PNG (default: no plot)")
    ft.set_defaults(command="fit")


def add_merge(sub) -> None:
    mg = sub.add_parser("merge", help=HELP["merge"])
    mg.add_argument("files", nargs="+", metavar="FILE.h5")
    mg.add_argument("--out", "-o", required=True, metavar="ALL.h5", help="the merged study")
    mg.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    mg.set_defaults(command="merge")


def add_simulate(sub) -> None:
    sm = sub.add_parser("simulate", help=HELP["simulate"])
    _study_options(sm, "hybridsched-sim")
    sm.add_argument("--cores", type=positive("--cores"),
                    help="virtual CPUs per node (default: this machine's N)")
    sm.add_argument("-P", type=int_list("-P"), metavar="P[,P...]",
                    help="virtual nodes; the frames split across them by --split (default: 1)")
    src = sm.add_mutually_exclusive_group()
    src.add_argument("--from", dest="source", metavar="STUDY.h5",
                     help="re-simulate every run of a measured study with the task costs and "
                     "overheads its traces hold (default: the workload's cost model)")
    src.add_argument("--costs", metavar="FILE.npy",
                     help="seconds per task, a 1-D .npy array (default: the workload's cost model)")
    src.add_argument("--validate", metavar="STUDY.h5",
                     help="re-simulate a measured study and print measured against simulated "
                     "time, the errors and the rankings (default: off)")
    sm.add_argument("--calibration", metavar="FILE.json",
                    help="overheads measured by `hybridsched calibrate` (default: the built-in "
                    "figures of a 2-core VM; the per-row sort time measured now)")
    _split_option(sm, "over the -P virtual nodes (default static; --from and --validate: each "
                  "run's own): ", None)
    sm.set_defaults(command="simulate")


def add_calibrate(sub) -> None:
    cb = sub.add_parser("calibrate", help=HELP["calibrate"])
    cb.add_argument("-o", "--out", metavar="FILE.json", default="hybridsched-calibration.json",
                    help="where to write it (default: hybridsched-calibration.json)")
    cb.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    cb.add_argument("--width", type=positive("--width"), default=640,
                    help="row width of the per-row sort time (default: 640)")
    cb.set_defaults(command="calibrate")


# The subcommands every rank of a launch runs: `run` (each rank a part of one study), `coop`
# (each task a job of its node's arbiter), and those that write nothing (`check` on every
# node of an allocation, `list`, `plan`). Every other runs once: under a launch of several
# ranks each would run it again, racing the others for one output (`mpiexec -n 2
# hybridsched merge` wrote its file, then failed "file exists"), so cli refuses it there.
PER_RANK = frozenset({"run", "coop", "check", "list", "plan"})

# name -> parser builder, in --help order
SUBCOMMANDS = {"run": add_run, "ge": add_ge, "colocate": add_colocate, "coop": add_coop,
               "trace": add_trace, "check": add_check, "list": add_list, "plan": add_plan,
               "report": add_report, "fit": add_fit, "merge": add_merge,
               "simulate": add_simulate, "calibrate": add_calibrate}
