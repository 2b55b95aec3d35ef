"""What a study runs: schedulers x k x L x repetitions, and the presets."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ..core import registry as schedulers
from ..core.capabilities import Dispatch
from ..core.request import check_request
from ..errors import BadOption, UsageError
from ..records import RunConfig
from ..oslayer.cpus import n_cpus
from ..workloads.slab import check_sizes
from .presets import PRESETS  # noqa: F401  (re-exported: the names beside the presets)


# Bound that catches typos before memory runs out: the paper's matrix is 2,040 runs; a
# million configurations is already hours of bookkeeping alone. (Workers: core.request.)
MAX_RUNS = 1_000_000

# How `run` names the options and values of a refused request (core.request)
NAMES = {"k": "-k", "chunk": "--chunk", "sizes": "at least 1", "auto": "auto",
         "dispatch": "--dispatch", "compiled": "--dispatch compiled",
         "use_auto": "--dispatch auto", "coop": "--coop"}


@dataclass
class StudySpec:
    """What to run. ``configurations()`` expands it into the timed runs."""

    schedulers: list[str]
    ks: list[int]
    frames: list[int]
    height: int = 640
    width: int = 640
    chunks: list[int] = field(default_factory=lambda: [0])
    reps: int = 3
    seed: int = 0
    kernel: str = "quicksort"
    affinity: list[bool] = field(default_factory=lambda: [True])
    extra: list[RunConfig] = field(default_factory=list)  # preset-specific additions
    # Families also run without affinity (the paper's Tables 3-4 for the fork schedulers).
    unpinned_families: list[str] = field(default_factory=list)
    # Schedulers also run without affinity (the claim-2 control: static threads unpinned).
    unpinned_schedulers: list[str] = field(default_factory=list)
    # Named variants of the pipe protocol (1 = the paper's); only schedulers whose registry
    # entry reads the option get it.
    pipe_batch: int = 1
    inflight: int = 1
    # Run on the cooperative arbiter's tokens instead of fixed pinning (--coop; issue 10).
    coop: bool = False
    # Thread workers' chunk loop (--dispatch): auto = compiled where the hand-out is a fixed
    # sequence and the kernel numba, python = always the Python loop (backends/compiled.py)
    dispatch: str = "auto"
    # LB4OMP technique parameters {name: value} (--fiss-stages, --viss-param, --pls-swr);
    # each technique gets the ones its registry entry reads, as RunConfig.params
    params: dict = field(default_factory=dict)
    # auto's portfolio (--portfolio): technique names, [] = its default
    portfolio: list = field(default_factory=list)
    # Pipe schedulers also run at k = tuned_k (if in ks) with chunk tuned_chunks[L] (Tables 8-9).
    tuned_k: int = 0
    tuned_chunks: dict[int, int] = field(default_factory=dict)
    # What the tasks are (issue 12): --workload NAME[:params], --input FILE.npy (its
    # sha256 in input_hash), --verify ("" = the workload's own check, "none", or a function)
    workload: str = "uniform"
    workload_params: dict = field(default_factory=dict)
    input: str = ""
    input_hash: str = ""
    verify: str = ""
    # Repetition-major order (--interleave): rep 0 of every configuration, then rep 1, ...,
    # within each tensor (one slab is generated at a time, as in the default order). The
    # default keeps the paper's order (a configuration's repetitions back to back), whose
    # medians a few seconds of a shared host's slowdown can shift for one configuration.
    interleave: bool = False

    def validate(self, virtual: bool = False, split: str = "static") -> None:
        """Refuse what cannot run (UsageError); ``virtual``: a simulated study, which
        builds no tensor, so its size is not bounded by this machine's memory; ``split``:
        how the frames are split between ranks (a user technique there reads --param)."""
        from ..workloads.build import validate_spec

        for s in self.schedulers:
            schedulers.get(s)
        validate_spec(self)
        if not self.schedulers:
            raise UsageError("no scheduler given")
        for name in self.params:
            if ":" in split or any(name in schedulers.get(s).options or schedulers.get(s).user
                                   for s in self.schedulers):
                continue  # a user technique (a scheduler, or the split) reads any
            readers = [n for n in schedulers.names() if name in schedulers.get(n).options]
            if not readers:
                raise UsageError(f"--param {name}: no scheduler of this study reads it (a user "
                                 "technique given to -s, or to --split under mpiexec, reads "
                                 "any; LB4OMP's read fiss_stages, viss_param, pls_swr, "
                                 "rnd_start, seed)")
            raise UsageError(f"--{name.replace('_', '-')} is read by {', '.join(readers[:4])} "
                             "only; no scheduler of this study uses it")
        if self.portfolio and not any("portfolio" in schedulers.get(s).options
                                      for s in self.schedulers):
            raise UsageError("--portfolio is the set auto races; no scheduler of this study "
                             "is auto (add -s auto)")
        from ..core.techniques import check_params

        for s in self.schedulers:  # LB4OMP's parameters checked before anything runs
            info = schedulers.get(s)
            if info.technique:
                check_params({k: v for k, v in self.params.items() if k in info.options})
        if self.reps < 1:
            raise UsageError(f"--reps must be at least 1, got {self.reps}")
        from ..backends.pipes import MAX_BATCH, MAX_INFLIGHT

        if not 1 <= self.pipe_batch <= MAX_BATCH:
            raise UsageError(f"--pipe-batch must be from 1 to {MAX_BATCH} records per write "
                             f"(one atomic write of PIPE_BUF bytes), got {self.pipe_batch}")
        if not 1 <= self.inflight <= MAX_INFLIGHT:
            raise UsageError(f"--inflight must be from 1 to {MAX_INFLIGHT}, got {self.inflight}")
        self._check_request()
        if not self.frames:
            raise UsageError("--frames needs at least one value")
        for L in self.frames:
            if not self.input and not virtual:  # an --input array is already in memory
                check_sizes(L, self.height, self.width)
        runs = (len(self.frames) * len(self.schedulers) * len(self.affinity) * len(self.chunks)
                * len(self.ks) * self.reps)
        if runs > MAX_RUNS:
            raise UsageError(f"the study would have about {runs:,} runs; more than {MAX_RUNS:,} "
                             "is surely a typo (check --reps, -k, --frames, --chunk)")

    def _check_request(self) -> None:
        """-k, --chunk and --dispatch: the one check a run request gets (the API's too)."""
        # the baseline runs at chunk 0 and k = 1 in a study (configurations) and never in
        # the thread workers' loop, so nothing of these is asked of it
        infos = [schedulers.get(s) for s in self.schedulers if not schedulers.get(s).baseline]
        numba = True  # resolved only where it matters: compiled thread workers
        if self.dispatch == Dispatch.COMPILED and any(i.threaded for i in infos):
            from ..workloads import kernelref

            numba = kernelref.resolve(self.kernel).numba
        try:
            check_request(infos, self.ks, self.chunks, self.dispatch, kernel=self.kernel,
                          numba=numba, coop=bool(self.coop))
        except BadOption as exc:
            raise exc.named(NAMES) from None

    def configurations(self) -> list[RunConfig]:
        out: list[RunConfig] = []
        for L in self.frames:
            for s in self.schedulers:
                serial = schedulers.get(s).baseline
                for aff in ([self.affinity[0]] if serial else self.affinity):
                    for c in ([0] if serial else self.chunks):
                        for k in ([1] if serial else self.ks):
                            for rep in range(self.reps):
                                out.append(RunConfig(s, k, L, self.height, self.width, c, aff, rep,
                                                     self.kernel, self.seed))
        for L in self.frames:
            for s in self.schedulers:
                info = schedulers.get(s)
                unpinned = info.family in self.unpinned_families or s in self.unpinned_schedulers
                if unpinned and False not in self.affinity:
                    out += [RunConfig(s, k, L, self.height, self.width, c, False, rep,
                                      self.kernel, self.seed)
                            for c in self.chunks for k in self.ks for rep in range(self.reps)]
                if info.piped and self.tuned_k in self.ks and L in self.tuned_chunks:
                    out += [RunConfig(s, self.tuned_k, L, self.height, self.width,
                                      self.tuned_chunks[L], self.affinity[0], rep, self.kernel,
                                      self.seed) for rep in range(self.reps)]
        out = [self._with_tasks(self._with_options(c)) for c in out]
        seen: dict[tuple, RunConfig] = {}  # the first of each key, in order
        out = [seen.setdefault(c.key(), c) for c in out + self.extra if c.key() not in seen]
        # one tensor shape after the other (stable), so each slab is generated once
        rank = {L: i for i, L in enumerate(self.frames)}
        out.sort(key=lambda c: (rank.get(c.frames, len(rank)), c.frames, c.height, c.width,
                                c.seed, c.rep if self.interleave else 0))
        return out

    def _with_options(self, c: RunConfig) -> RunConfig:
        info = schedulers.get(c.scheduler)
        opts = info.options
        mine = schedulers.run_params(info, self.params)
        return replace(c, pipe_batch=self.pipe_batch if "pipe_batch" in opts else 1,
                       inflight=self.inflight if "inflight" in opts else 1,
                       coop=self.coop and not schedulers.get(c.scheduler).baseline,
                       dispatch=self.dispatch, params=mine,
                       portfolio=tuple(self.portfolio) if "portfolio" in opts else ())

    def _with_tasks(self, c: RunConfig) -> RunConfig:
        """What every run's tasks are: the same for the whole study."""
        from ..workloads.catalogue import params_json

        return replace(c, workload=self.workload, workload_params=params_json(self.workload_params),
                       verify=self.verify, input_hash=self.input_hash)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["extra"] = [asdict(c) for c in self.extra]
        return d


def default_spec() -> StudySpec:
    """`hybridsched run` with no options: about two minutes on a 2-core laptop."""
    n = n_cpus()
    ks = sorted({1, 2, max(2, n), 2 * n})
    return StudySpec(schedulers=schedulers.paper_names(), ks=ks, frames=[120], reps=3)


def preset(name: str) -> StudySpec:
    n = n_cpus()
    if name == "smoke":
        return StudySpec(schedulers=schedulers.paper_names(), ks=sorted({1, 2, n}), frames=[24],
                         height=64, width=64, reps=1)
    if name == "paper":
        # §5 exactly: every scheduler, pinned; fork schedulers also unpinned (Tables 3-4);
        # pipes at their default chunk 1 and at the tuned chunk at k = 24 (Tables 8-9).
        return StudySpec(schedulers=schedulers.paper_names(), ks=list(PAPER_KS), frames=list(PAPER_CHUNKS),
                         height=640, width=640, reps=10, affinity=[True],
                         unpinned_families=["process"], tuned_k=PAPER_N,
                         tuned_chunks=dict(PAPER_CHUNKS))
    if name == "scaled":
        return scaled_spec(n)
    if name == "default":
        return default_spec()
    raise UsageError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")


PAPER_N = 24                          # cores of the paper's server (§5)
PAPER_KS = (1, 2, 4, 8, 16, 24, 32)
PAPER_CHUNKS = {1000: 12, 10000: 105}  # L -> the tuned pipe chunk at k = 24 (§6.1)
# scaled: frames per core at the small L. 75 N frames of 256x256 (about 1.8 ms each here)
# keep the paper's ~40 frames per worker at k = N with room for 4N/3, and bring the whole
# matrix (13 schedulers, 7 k, 2 L, 10 reps) to roughly 35 minutes on 2 cores; more frames
# per core would smooth the tail at large k but lengthen the study linearly.
SCALED_FRAMES_PER_CORE = 75
SCALED_SIDE = 256


def scaled_ks(n: int) -> list[int]:
    """The paper's k shape on N cores: powers of two up to 16 N, plus N and 4N/3 (the
    paper's 32 on 24 cores, where pinned round-robin is unbalanced)."""
    ks = {1 << i for i in range((16 * n).bit_length()) if 1 << i <= 16 * n}
    return sorted(ks | {n, -(-4 * n // 3), 16 * n})


def scaled_spec(n: int) -> StudySpec:
    """The §5 matrix mapped onto this machine's N cores (`--preset scaled`): L in
    {75 N, 750 N} frames of 256 x 256, k from 1 to 16 N, tuned pipe chunks at k = N
    scaled from the paper's so each worker gets as many chunks as there (12 x 1.8 = 22,
    105 x 1.8 = 189 here)."""
    frames = [SCALED_FRAMES_PER_CORE * n, 10 * SCALED_FRAMES_PER_CORE * n]
    tuned = {L: max(1, round(c * (L / pL) * (PAPER_N / n)))
             for L, (pL, c) in zip(frames, PAPER_CHUNKS.items())}
    return StudySpec(schedulers=schedulers.paper_names(), ks=scaled_ks(n), frames=frames,
                     height=SCALED_SIDE, width=SCALED_SIDE, reps=10, affinity=[True],
                     unpinned_families=["process"], unpinned_schedulers=["static"],
                     tuned_k=n, tuned_chunks=tuned)
