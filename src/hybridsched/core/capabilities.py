"""What a scheduler can do, asked rather than tested: the registry entry's kinds, its
derived properties, and the one decision of how a configuration dispatches.

Callers never compare an entry's family, backend, topology or forker with a literal, nor
test a scheduler name's prefix: they ask :class:`SchedulerInfo`'s properties or
:func:`decide` (as threadpoolctl's callers ask a controller instead of testing its
library's name). ``tests/project/test_layers.py`` keeps it so: such a comparison outside this
module and :mod:`registry` fails it. The kinds are ``str`` enums, so a record that stores
an entry's family stores its plain text.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from . import policies as pol, usertech
from ..errors import UsageError


class _Kind(str, Enum):
    """A kind that is its text: equal to, hashed, printed and formatted as its value."""

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Family(_Kind):
    """How a scheduler's workers run (the study's family column)."""
    SERIAL = "serial"
    THREAD = "thread"
    PROCESS = "process"
    PIPE = "pipe"


class Backend(_Kind):
    """The module under ``hybridsched.backends`` that runs it."""
    SERIAL = "serial"
    THREADS = "threads"
    FORKS = "forks"
    PIPES = "pipes"


class Topology(_Kind):
    """How the pipe backend hands chunks out (NONE off the pipe backend)."""
    NONE = ""
    SHARED = "shared"      # pipe-1to1: one task pipe read by every worker
    DEALT = "dealt"        # pipe-1toN: a pipe per worker, chunks dealt round-robin
    FEEDBACK = "feedback"  # pipe-MtoM: the next chunk to whoever reports done


class Forker(_Kind):
    """Who forks the fork backend's workers (NONE off the fork backend)."""
    NONE = ""
    PARENT = "parent"    # prolific: the parent forks all k
    MITOSIS = "mitosis"  # collective: workers fork workers in ceil(log2 k) rounds


class Dispatch(_Kind):
    """The thread backend's chunk loop: a run's ``dispatch`` option asks AUTO, PYTHON or
    COMPILED; :func:`decide` answers PYTHON or COMPILED."""
    AUTO = "auto"
    PYTHON = "python"
    COMPILED = "compiled"


class Reason(Enum):
    """Why a thread scheduler cannot run in the compiled loop."""
    NOT_FIXED = "{name}'s hand-out is not a fixed first-come-first-served sequence"
    NOT_NUMBA = "the kernel is not a numba function"
    COOP = "--coop needs a scheduling point between chunks"


@dataclass(frozen=True)
class Decision:
    """How one configuration dispatches: ``loop`` PYTHON or COMPILED; ``reason`` why it
    cannot be compiled (None where it can, or off the thread backend); ``refused`` when
    COMPILED was asked and ``reason`` rules it out (the run is refused, before anything
    runs where possible); ``delegates`` when a choosing dispenser (auto) may hand an
    execution to the compiled loop of the technique it picks."""

    name: str
    loop: Dispatch
    reason: Reason | None = None
    refused: bool = False
    delegates: bool = False

    @property
    def compiled(self) -> bool:
        return self.loop is Dispatch.COMPILED

    @property
    def why(self) -> str:
        """The reason as one phrase ('' when there is none)."""
        return self.reason.value.format(name=self.name) if self.reason is not None else ""


def decide(info: SchedulerInfo, mode: str = Dispatch.AUTO, *, numba: bool = True,
           coop: bool = False) -> Decision:
    """How ``info`` dispatches under the run option ``mode`` (auto | python | compiled)
    with a numba kernel or not, under ``--coop`` or not: the one rule that the thread
    backend, the simulator, the API and the study's spec follow. The compiled loop replays
    the entry's fixed hand-out (``sequence``), so whether its dispenser also takes chunk
    reports does not matter; it needs a numba kernel and no scheduling point per chunk.
    The option means nothing off the thread backend: the Python loop, never refused."""
    try:
        mode = Dispatch(mode)
    except ValueError:
        raise UsageError(f"dispatch must be one of {', '.join(Dispatch)}, got {mode!r}") from None
    if not info.threaded:
        return Decision(info.name, Dispatch.PYTHON)
    reason = (Reason.NOT_FIXED if info.sequence is None else Reason.NOT_NUMBA if not numba
              else Reason.COOP if coop else None)
    if mode is Dispatch.PYTHON:
        return Decision(info.name, Dispatch.PYTHON, reason)
    if reason is None:
        return Decision(info.name, Dispatch.COMPILED)
    return Decision(info.name, Dispatch.PYTHON, reason, refused=mode is Dispatch.COMPILED,
                    delegates=(mode is Dispatch.AUTO and info.chooses and numba and not coop))


BASELINE = "serial"  # the name of the serial baseline's entry (the one of Family.SERIAL)


def is_baseline(family: str) -> bool:
    """Whether a stored run's family is the serial baseline's."""
    return family == Family.SERIAL


def is_threaded(family: str) -> bool:
    """Whether a stored run's family is the thread schedulers'."""
    return family == Family.THREAD


def is_forked(family: str) -> bool:
    """Whether a stored run's workers were forked children (fork and pipe backends)."""
    return family in (Family.PROCESS, Family.PIPE)


def is_forks(family: str) -> bool:
    """Whether a stored run's family is the fork backend's (prolific, collective)."""
    return family == Family.PROCESS


def _kind(field: str, *kinds: Enum, doc: str) -> Any:
    """A capability that one field of the entry says: whether ``field`` is one of ``kinds``
    (a property: the entry is asked, no caller compares the field)."""
    return property(lambda info: getattr(info, field) in kinds, doc=doc)


def _all_k(k: int, n: int) -> int:
    return k


def _one(frames: int) -> int:
    return 1


@dataclass(frozen=True)
class SchedulerInfo:
    """One registered scheduler. Fields a backend does not use stay at their defaults."""

    name: str
    family: Family
    backend: Backend
    description: str
    default_chunk: Callable[[int], int] = _one   # frames -> chunk when --chunk is absent
    pool: Callable[[int, int], int] = _all_k     # (k, N) -> workers started
    dispenser: Callable | None = None            # threads: (frames, workers, chunk, monitor)
    # threads: (frames, workers, chunk, params) -> int64 chunk boundaries when the dispenser's
    # hand-out is a fixed first-come-first-served sequence (compiled dispatch); None when
    # it is preassigned or fed back from timings
    sequence: Callable | None = None
    forker: Forker = Forker.NONE
    topology: Topology = Topology.NONE
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
    # a user's technique (core/contract.Technique): it reads every --param
    user: usertech.UserTechnique | None = None
    # untimed preparation after the profiling run (auto-sim's predictions): (job) -> None
    prepare: Callable | None = None

    # What it is, read off one of its kinds
    baseline = _kind("family", Family.SERIAL,
                     doc="The serial baseline: one worker, no chunks, no k sweep.")
    threaded = _kind("backend", Backend.THREADS,
                     doc="Its workers are threads of the study's process (the thread backend).")
    forked = _kind("family", Family.PROCESS, Family.PIPE,
                   doc="Its workers are forked processes (fork and pipe backends): they share "
                   "only what lives in shared memory.")
    piped = _kind("family", Family.PIPE,
                  doc="Its chunks travel as messages through pipes from a producer.")
    collective = _kind("forker", Forker.MITOSIS,
                       doc="Its workers fork workers (mitosis rounds) rather than the parent "
                       "forking all.")
    dealt = _kind("topology", Topology.DEALT,
                  doc="pipe-1toN: every chunk dealt to its worker's pipe before the run.")
    streamed = _kind("topology", Topology.SHARED,
                     doc="pipe-1to1: one task pipe that every worker reads.")
    resends = _kind("topology", Topology.FEEDBACK,
                    doc="pipe-MtoM: the next chunk to whoever reports done, and a lost worker's "
                    "chunks re-sent (so the run keeps the original to restore them from).")

    @property
    def raceable(self) -> bool:
        """A thread technique with its own hand-out, which auto can race (not serial,
        forks, pipes, aimd or a chooser itself)."""
        return (self.threaded and self.dispenser is not None and not self.chooses
                and not self.needs_monitor)

    @property
    def may_compile(self) -> bool:
        """Some run of it may use the compiled loop (its hand-out is fixed, or it picks one
        per execution that may be): the study then loads the loop before its first run."""
        return self.threaded and (self.sequence is not None or self.chooses)

    def resolve_chunk(self, requested: int, frames: int) -> int:
        """The chunk actually used: the request, or the entry's default when it is 0."""
        if requested == pol.AUTO_CHUNK and self.chunk_search:
            return requested  # the backend searches it (--chunk auto)
        chunk = requested if requested > 0 else self.default_chunk(frames)
        # a chunk above the frames is all of them (as OpenMP does): every hand-out then
        # stays within [0, frames), whatever was asked
        return min(chunk, frames) if chunk > 0 and frames > 0 else chunk

    def workers(self, k: int, n_cpus: int) -> int:
        return self.pool(k, n_cpus)
