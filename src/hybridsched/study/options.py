"""The study that `run`'s options ask for: :func:`build_spec` (the same on every MPI rank)."""
from __future__ import annotations

from ..core import registry as schedulers
from ..core.capabilities import Family
from ..errors import UsageError
from ..workloads.catalogue import file_hash, get, input_dims, load_input, parse
from .spec import StudySpec, default_spec, preset

# The longest name a run row stores (store.format: kernel and verify are 120 bytes).
MAX_REF = 120
MAX_PORTFOLIO = 240  # store.format: the portfolio field


def _scheduler_names(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if not name:  # as -k 1,,2 is
                raise UsageError(f"--scheduler: an empty name in {v!r}")
            if name == "all":
                out += schedulers.names(everything=False)
            elif name == "techniques":
                out += schedulers.names(Family.THREAD, technique=True)
            elif name == "paper":
                out += schedulers.paper_names()
            else:  # a reference to a user's technique is stored under the technique's name
                out.append(schedulers.get(name).name)
    if not out:
        raise UsageError("--scheduler: no scheduler given")
    return list(dict.fromkeys(out))


# Options that, given, replace the preset's value of a spec field: (option, field); an
# --input's shape replaces frames, height and width after them (_tasks)
_OVERRIDES = (("k", "ks"), ("frames", "frames"), ("height", "height"), ("width", "width"),
              ("chunk", "chunks"), ("reps", "reps"), ("seed", "seed"),
              ("pipe_batch", "pipe_batch"), ("inflight", "inflight"), ("dispatch", "dispatch"))


def build_spec(args, virtual: bool = False, split: str = "static") -> StudySpec:
    """The study the options of `run` ask for, validated (UsageError otherwise);
    ``virtual``: for `simulate`, which builds no tensor; ``split``: the --split in force
    (under mpiexec, or simulate -P > 1)."""
    spec: StudySpec = preset(args.preset) if args.preset else default_spec()
    names = _scheduler_names(args.scheduler)
    if names is not None:
        spec.schedulers = names
    for option, field in _OVERRIDES:
        value = getattr(args, option, None)
        if value is not None:
            setattr(spec, field, value)
    spec.interleave = bool(getattr(args, "interleave", False))  # `run` only
    _tasks(args, spec)  # --kernel, --input, --verify, --workload
    if args.affinity is not None:
        spec.affinity = [args.affinity]
    if getattr(args, "coop", False):
        spec.coop = True
    spec.params = technique_params(args)
    if getattr(args, "portfolio", None):
        spec.portfolio = portfolio(args.portfolio)
    spec.validate(virtual, split)
    return spec


def technique_params(args) -> dict:
    """Technique parameters given on the command line (`run` and `plan`), by their
    RunConfig.params names: LB4OMP's own options (--fiss-stages, --viss-param, --pls-swr)
    and every --param KEY=VALUE."""
    given = (("fiss_stages", getattr(args, "fiss_stages", None)),
             ("viss_param", getattr(args, "viss_param", None)),
             ("pls_swr", getattr(args, "pls_swr", None)))
    out = {k: v for k, v in given if v is not None}
    for key, value in getattr(args, "param", None) or ():
        if key in out and out[key] != value:
            raise UsageError(f"--param {key}={value}: {key} is already {out[key]}")
        out[key] = value
    return out


def portfolio(names: list[str]) -> list[str]:
    """--portfolio: the techniques auto races, by name (a reference is registered and
    stored under its technique's name); each a thread technique auto can run."""
    out = []
    for name in names:
        info = schedulers.get(name)
        if not info.raceable:
            raise UsageError(f"--portfolio {name}: auto races thread techniques with their own "
                             "hand-out (not serial, forks, pipes, aimd or auto itself)")
        out.append(info.name)
    if not out:
        raise UsageError("--portfolio: no technique given")
    out = list(dict.fromkeys(out))
    if len(",".join(out).encode()) > MAX_PORTFOLIO:
        raise UsageError(f"--portfolio: the names take more than the {MAX_PORTFOLIO} bytes a "
                         "study stores for them")
    return out


def _tasks(args, spec: StudySpec) -> None:
    """Put the options into ``spec`` (validated later with the rest of it)."""
    for opt in ("kernel", "verify"):
        v = getattr(args, opt, None)
        if v is not None and len(v.encode()) > MAX_REF:
            raise UsageError(f"--{opt}: names longer than {MAX_REF} bytes cannot be stored")
    if args.kernel is not None:
        spec.kernel = args.kernel
    if args.verify is not None:
        spec.verify = args.verify
    if args.workload is not None:
        spec.workload, spec.workload_params = parse(args.workload)
        if args.kernel is not None and not get(spec.workload).sort:
            raise UsageError(f"--workload {spec.workload} computes its own tasks with its own "
                             f"kernel; --kernel {args.kernel} does not apply")
    if args.input is not None:
        arr = load_input(args.input)
        L, H, W = input_dims(arr.shape)
        if args.frames is not None and args.frames != [L]:
            raise UsageError(f"--input {args.input} holds {L} tasks; --frames must be {L} or left out")
        if args.height is not None or args.width is not None:
            raise UsageError("--input gives the shape; leave out --height and --width")
        spec.input, spec.input_hash = args.input, file_hash(args.input)
        spec.frames, spec.height, spec.width = [L], H, W
