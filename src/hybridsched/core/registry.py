"""The scheduler registry: the only place where a scheduler name is bound to a backend.

An entry says everything the rest of the package would otherwise decide by testing the
name: which backend runs it, how that backend hands out work (the thread dispenser, the
fork tree, the pipe topology), how many workers it starts, whether it needs the
utilisation monitor, its default chunk, and which run options it reads. Backends, the
study layer, MPI and the CLI read the entry. Adding a scheduler is one entry here (plus
its tests); a scheduler the paper does not have is marked ``paper=False`` and is never
part of a preset, so the presets stay the paper's study.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from . import dispatch
from . import policies as pol
from ..errors import UsageError


def _all_k(k: int, n: int) -> int:
    return k


def _at_most_n(k: int, n: int) -> int:
    """§2.3: AIMD's fixed pool is min(k, N) threads."""
    return min(k, n)


def _one(frames: int) -> int:
    return 1


def _blocks(frames: int) -> int:
    return 0  # static without chunk: one block per worker


def _aimd_chunk(frames: int) -> int:
    return pol.AIMD_CHUNK


def _whole(frames: int) -> int:
    return frames


# --- thread dispensers: (frames, workers, chunk, monitor) -> Dispenser -------------------

def _static(n, workers, c, monitor, job=None):
    return dispatch.Preassigned(pol.static_assignment(n, workers, c))


def _fixed(n, workers, c, monitor, job=None):
    return dispatch.fixed_chunks(n, workers, c)


def _guided(n, workers, c, monitor, job=None):
    return dispatch.SharedCounter(n, partial(pol.guided_size, k=workers, c=c))


def _steal(n, workers, c, monitor, job=None):
    return dispatch.StealQueues(pol.static_chunks(n, workers, c))


def _aimd(n, workers, c, monitor, job=None):
    # window initialised to the pool size min(k, N) (§4), limited to it
    return dispatch.AimdGate(n, workers, workers, monitor, c)


# --- hand-outs as fixed sequences: (frames, workers, chunk) -> chunk boundaries -----------
# Only for first-come-first-served policies whose chunk i depends on i alone (claims are
# serialised by one counter): the thread backend may then run them in compiled code
# (backends/compiled.py) with exactly the hand-out of the dispenser above.

def _fixed_sequence(n, workers, c, params=None):
    return pol.fixed_bounds(n, c)


def _guided_sequence(n, workers, c, params=None):
    return pol.fcfs_bounds(n, partial(pol.guided_size, k=workers, c=c))


def _technique_sequence(name: str):
    """A rule technique's hand-out (techniques.bounds: the rule applied in claim order, as
    its RuleCounter does; sized from i or from what remains, it is fixed either way)."""
    def seq(n, workers, c, params=None):
        from . import techniques as tq

        return tq.bounds(name, n, workers, c, params)
    return seq


def _adaptive(reading: str):
    return lambda n, workers, c, monitor, job=None: dispatch.Adaptive(n, workers, reading)


# --- the LB4OMP portfolio (techniques/): one shared-counter dispenser per technique -------

def _technique(name: str):
    """The dispenser factory of a technique, for the threads and the pipe-MtoM producer."""
    def make(n, workers, c, monitor, job=None):
        from .techniques import dispense

        params = dict(job.params) if job is not None else {}
        profile = params.pop("profile", None)
        return dispense.dispenser(name, n, workers, c, params, profile, job)
    return make


def _auto(n, workers, c, monitor, job=None):
    from .techniques import auto, dispense

    key = dispense.loop_key(job) if job is not None else ("auto", n, workers, c)

    def make(name: str):
        # every portfolio entry's thread dispenser: the pipe producer claims from it too
        info = get(name)
        return info.dispenser(n, workers, info.resolve_chunk(c, n), monitor, job)
    return auto.AutoDispenser(auto.racer_for(key), make, n, arm=get)


@dataclass(frozen=True)
class SchedulerInfo:
    """One registered scheduler. Fields a backend does not use stay at their defaults."""

    name: str
    family: str                 # serial | thread | process | pipe
    backend: str                # module under hybridsched.backends
    description: str
    default_chunk: Callable[[int], int] = _one   # frames -> chunk when --chunk is absent
    pool: Callable[[int, int], int] = _all_k     # (k, N) -> workers started
    dispenser: Callable | None = None            # threads: (frames, workers, chunk, monitor)
    # threads: (frames, workers, chunk, params) -> int64 chunk boundaries when the dispenser's
    # hand-out is a fixed first-come-first-served sequence (compiled dispatch); None when
    # it is preassigned or fed back from timings
    sequence: Callable | None = None
    forker: str = ""            # forks: "parent" (prolific) | "mitosis" (collective)
    topology: str = ""          # pipes: "shared" | "dealt" | "feedback"
    needs_monitor: bool = False  # the AIMD utilisation monitor (started once per study)
    chunk_search: bool = False  # --chunk auto is meaningful (the pipe backend searches it)
    options: tuple[str, ...] = ()  # RunConfig option fields it reads (pipe_batch, inflight)
    paper: bool = True          # one of the paper's schedulers; False = a named variant
    technique: str = ""         # the LB4OMP technique it runs (techniques/), "" for none
    # the loop's profile (μ, σ, h, worker speeds) is measured by an untimed dynamic,1 run
    # before the timed run (LB4OMP's `profiling` schedule; study.profile)
    profiled: bool = False
    in_all: bool = True         # part of `-s all` (the pipe-MtoM:<technique> combinations are not)
    # its dispenser picks another entry per execution (auto): the thread backend may run
    # that entry's fixed hand-out compiled (backends/compiled.delegated)
    chooses: bool = False

    @property
    def baseline(self) -> bool:
        """The serial baseline: one worker, no chunks, no k sweep."""
        return self.family == "serial"

    def resolve_chunk(self, requested: int, frames: int) -> int:
        """The chunk actually used: the request, or the entry's default when it is 0."""
        if requested == pol.AUTO_CHUNK and self.chunk_search:
            return requested  # the backend searches it (--chunk auto)
        return requested if requested > 0 else self.default_chunk(frames)

    def workers(self, k: int, n_cpus: int) -> int:
        return self.pool(k, n_cpus)


_PIPE_OPTS = ("pipe_batch",)

_ALL = [
    SchedulerInfo("serial", "serial", "serial",
                  "one kernel call over every frame on one thread: T_serial of Eq. 4",
                  default_chunk=_whole),
    SchedulerInfo("static", "thread", "threads",
                  "OpenMP static: one contiguous block per thread (or chunks round-robin with --chunk)",
                  default_chunk=_blocks, dispenser=_static),
    SchedulerInfo("dynamic", "thread", "threads",
                  "OpenMP dynamic: threads take the next chunk (default 1) from an atomic ticket counter",
                  dispenser=_fixed, sequence=_fixed_sequence),
    SchedulerInfo("guided", "thread", "threads",
                  "OpenMP guided: chunk = max(min_chunk, ceil(remaining / k)), first come first served",
                  dispenser=_guided, sequence=_guided_sequence),
    SchedulerInfo("chunk", "thread", "threads",
                  "fixed chunks from the ticket counter (default L/100, the paper's 10 and 100)",
                  default_chunk=pol.paper_chunk, dispenser=_fixed, sequence=_fixed_sequence),
    SchedulerInfo("chunk-steal", "thread", "threads",
                  "static chunks in per-thread queues; idle threads steal round-robin",
                  default_chunk=pol.paper_chunk, dispenser=_steal),
    SchedulerInfo("aimd", "thread", "threads",
                  "AIMD contention window over min(k, N) threads, chunks of 4, fed by /proc/stat (§2.3)",
                  default_chunk=_aimd_chunk, pool=_at_most_n, dispenser=_aimd, needs_monitor=True),
    SchedulerInfo("adaptive", "thread", "threads",
                  "adaptive chunks (§2.4, Eq. 3): remaining / k x speed factor, thread_avg = the "
                  "thread's mean time per finished chunk",
                  dispenser=_adaptive(pol.PER_CHUNK)),
    SchedulerInfo("adaptive-frame", "thread", "threads",
                  "variant of adaptive: speeds from the mean time per frame (a slice), not per chunk",
                  dispenser=_adaptive(pol.PER_FRAME), paper=False),
    SchedulerInfo("prolific", "process", "forks",
                  "the parent forks k workers; frame i to worker i mod k (§2.1.1)",
                  forker="parent"),
    SchedulerInfo("collective", "process", "forks",
                  "workers fork workers in ceil(log2 k) mitosis rounds; frame i to worker i mod k (§2.1.2)",
                  forker="mitosis"),
    SchedulerInfo("pipe-1to1", "pipe", "pipes",
                  "one task pipe read by all workers; one chunk (default 1 frame) per message (§2.1.3)",
                  topology="shared", chunk_search=True, options=_PIPE_OPTS),
    SchedulerInfo("pipe-1toN", "pipe", "pipes",
                  "one task pipe per worker; the parent deals chunks round-robin (§2.1.3)",
                  topology="dealt", chunk_search=True, options=_PIPE_OPTS),
    SchedulerInfo("pipe-MtoM", "pipe", "pipes",
                  "task and done pipe per worker; the next chunk to whoever reports done (one in "
                  "flight); re-sends a lost worker's chunk (§2.1.3)",
                  topology="feedback", chunk_search=True, options=("inflight",)),
]

# The technique parameters (RunConfig.params names) each technique reads; auto reads
# those of the techniques in its portfolio.
_TECH_OPTIONS = {"fiss": ("fiss_stages",), "viss": ("viss_param",), "pls": ("pls_swr",),
                 "auto": ("fiss_stages", "viss_param", "pls_swr")}


def _portfolio() -> list[SchedulerInfo]:
    """Each LB4OMP technique on the thread backend under its bare name and as
    ``pipe-MtoM:<name>`` (the producer sizes each chunk it sends), plus ``auto`` on both.
    A name per (technique, backend) pair rather than an option: the study's scheduler
    column then says what ran, reports group by it, and no run option has to mean
    something for only one scheduler."""
    from . import techniques as tq

    out = []
    for name in tq.NAMES:
        out += _on_both(name, tq.DESCRIPTIONS[name], _technique(name),
                        default_chunk=_blocks if name in tq.OWN_DEFAULT_CHUNK else _one,
                        profiled=name in tq.NEEDS_PROFILE,
                        sequence=_technique_sequence(name) if name in tq.RULES else None)
    # auto's portfolio holds the techniques that need the loop's profile, and rnd
    out += _on_both("auto", "picks a technique per repetition of the loop (successive halving "
                    "over 27 techniques, techniques/auto.py)", _auto, default_chunk=_blocks,
                    profiled=True, chooses=True)
    return out


def _on_both(name: str, desc: str, make: Callable, *, default_chunk: Callable,
             profiled: bool, sequence: Callable | None = None,
             chooses: bool = False) -> list[SchedulerInfo]:
    """A technique's entry on the threads and its ``pipe-MtoM:<name>`` entry."""
    reads = _TECH_OPTIONS.get(name, ())
    return [SchedulerInfo(name, "thread", "threads", f"LB4OMP {name}: {desc}",
                          default_chunk=default_chunk, dispenser=make, paper=False,
                          technique=name, profiled=profiled, options=reads, sequence=sequence,
                          chooses=chooses),
            SchedulerInfo(f"pipe-MtoM:{name}", "pipe", "pipes",
                          f"pipe-MtoM, the producer sizing chunks by {name}",
                          default_chunk=default_chunk, dispenser=make, topology="feedback",
                          options=("inflight",) + reads, paper=False, technique=name,
                          profiled=profiled, in_all=False)]


_ALL += _portfolio()

SCHEDULERS: dict[str, SchedulerInfo] = {s.name: s for s in _ALL}

# The contract's order (DESIGN.md §6): table and report order; entries not listed follow.
ALL_NAMES = tuple(s.name for s in _ALL)


def get(name: str) -> SchedulerInfo:
    if not isinstance(name, str):
        raise UsageError(f"a scheduler is named by a string, got {type(name).__name__}")
    try:
        return SCHEDULERS[name]
    except KeyError:
        shown = [n for n in ALL_NAMES if SCHEDULERS[n].in_all]
        raise UsageError(f"unknown scheduler {name!r}; choose from {', '.join(shown)}, "
                         "pipe-MtoM:<technique>, techniques, paper or all") from None


def names(family: str | None = None, paper_only: bool = False, technique: bool | None = None,
          everything: bool = True) -> list[str]:
    """Scheduler names in registry order (optionally of one family, or the paper's only;
    ``technique`` True/False: only/no LB4OMP technique entries; ``everything`` False: only
    the entries of `-s all`)."""
    return [n for n, s in SCHEDULERS.items()
            if (family is None or s.family == family) and (s.paper or not paper_only)
            and (technique is None or bool(s.technique) == technique)
            and (everything or s.in_all)]


def paper_names() -> list[str]:
    """The paper's schedulers: what every preset runs."""
    return names(paper_only=True)
