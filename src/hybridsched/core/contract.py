"""The public technique contract: `Technique`, a user's loop-scheduling rule, and the
dispenser that runs one on every backend.

hybridsched sets ``tasks``, ``workers``, ``min_chunk`` and ``params`` before ``start()``;
``chunk(remaining, request, worker)`` sizes each claim; ``record(worker, first, count,
seconds)`` hears each chunk's measured time. Calls into one technique object never overlap:
the dispenser holds its lock around them, as LB4OMP's shared counter serialises claims.
"""
from __future__ import annotations

import numpy as np

from ..errors import INTERRUPTS, TechniqueError, UsageError

def _own_fault(exc: BaseException) -> bool:
    """What a technique's own code may raise and still only fail its run: anything (its
    sys.exit(), a GeneratorExit, a BaseException of its own: the last two were tracebacks)
    but our own SIGTERM (Terminated) and Ctrl-C."""
    return not isinstance(exc, INTERRUPTS)


class Technique:
    """A loop-scheduling technique: subclass it and define `chunk`.

    ``name`` is the scheduler column (default: the class name in lower case);
    ``deterministic = True`` declares that ``chunk()`` uses neither ``worker`` nor anything
    ``record()`` learned, so the whole hand-out may be precomputed (``plan``, compiled
    dispatch, ``--split``).
    """

    name: str = ""
    deterministic: bool = False
    # set by hybridsched before start(): N, the claiming workers (k, or P ranks under
    # --split), --chunk (1 when absent) and --param KEY=VALUE
    tasks: int = 0
    workers: int = 1
    min_chunk: int = 1
    params: dict = {}

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__.lower()

    def chunk(self, remaining: int, request: int, worker: int) -> int:
        """Tasks for claim number ``request`` by ``worker`` (-1: any) with ``remaining``
        tasks not yet handed out."""
        raise NotImplementedError

    def start(self) -> None:
        """Called before each execution of the loop (each repetition)."""

    def record(self, worker: int, first: int, count: int, seconds: float) -> None:
        """Called after each chunk with its measured time, before ``worker`` claims again."""


def learns(tech: Technique | type) -> bool:
    """Whether the technique overrides record(): it then needs the Python loop."""
    cls = tech if isinstance(tech, type) else type(tech)
    return getattr(cls, "record", None) is not Technique.record


def configure(tech: Technique, tasks: int, workers: int, min_chunk: int, params: dict) -> None:
    """Set what hybridsched promises before start(), then call it."""
    tech.tasks, tech.workers = int(tasks), max(1, int(workers))
    tech.min_chunk, tech.params = max(1, int(min_chunk)), dict(params)
    try:
        tech.start()
    except BaseException as exc:
        if not _own_fault(exc):
            raise
        raise TechniqueError(f"technique {tech.name}: start() raised "
                             f"{type(exc).__name__}: {exc}") from exc


def sized(tech: Technique, remaining: int, request: int, worker: int) -> int:
    """``tech.chunk(...)`` checked and cut to ``remaining``."""
    try:
        value = tech.chunk(remaining, request, worker)
    except BaseException as exc:
        if not _own_fault(exc):
            raise
        raise TechniqueError(f"technique {tech.name}: chunk() raised {type(exc).__name__}: "
                             f"{exc} (worker {worker}, claim {request})") from exc
    # the plain integer it holds, checked and used alike: an int subclass whose '<' or
    # __int__ lies cannot pass the check as one value and be used as another
    count = _plain_int(value)
    if count is None or count < 1:
        raise TechniqueError(f"technique {tech.name}: chunk() returned {value!r:.80} for worker "
                             f"{worker} (claim {request}, {remaining} remaining); it must "
                             "return a positive integer")
    return min(count, remaining)


def _plain_int(value) -> int | None:
    """The exact integer an int or numpy integer holds, read past any method the value's
    class overrides; None for anything else (bool included)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, np.integer):
        return np.generic.item(value)
    return None


def recorded(tech: Technique, worker: int, first: int, count: int, seconds: float) -> None:
    """``tech.record(...)``, a fault of its own failing the run with one line."""
    try:
        tech.record(worker, first, count, seconds)
    except BaseException as exc:
        if not _own_fault(exc):
            raise
        raise TechniqueError(f"technique {tech.name}: record() raised {type(exc).__name__}: "
                             f"{exc} (worker {worker})") from exc


def check_params(params, what: str = "technique parameters") -> dict:
    """A technique's parameters: a dict of names to numbers or short text (no ',' '=' or
    control characters: a run stores them as ``key=value,...``); UsageError otherwise."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise UsageError(f"{what}: expected a dict, got {type(params).__name__}")
    for key, value in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UsageError(f"{what}: the key {key!r} must be a name")
        if key in RESERVED_PARAMS:
            raise UsageError(f"{what}: {key!r} is hybridsched's own (the loop's profile)")
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, str, np.integer, np.floating)) or (
                isinstance(value, str) and (not value or "," in value or "=" in value
                                            or not value.isprintable())):
            raise UsageError(f"{what}: {key}={value!r} must be a number or printable text "
                             "without ',' or '='")
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in params.items()}


# parameter names hybridsched itself passes to techniques
RESERVED_PARAMS = ("profile",)


def hand_out(tech: Technique, tasks: int) -> np.ndarray:
    """A deterministic technique's chunk sizes, claimed as ``chunk(remaining, i, -1)``."""
    if not tech.deterministic:
        raise UsageError(f"technique {tech.name} is not deterministic (deterministic = True "
                         "declares that its hand-out can be computed ahead)")
    sizes, remaining, i = [], int(tasks), 0
    while remaining > 0:
        c = sized(tech, remaining, i, -1)
        sizes.append(c)
        remaining -= c
        i += 1
    return np.array(sizes, np.int64)


def bounds(tech: Technique, tasks: int) -> np.ndarray:
    """Prefix sums of `hand_out` with a leading 0 (compiled dispatch's boundaries)."""
    return np.concatenate([[0], np.cumsum(hand_out(tech, tasks))]).astype(np.int64)
