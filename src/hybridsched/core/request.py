"""The one check of a run request, before anything runs: the workers ``k``, the chunk sizes
and the dispatch loop asked of a set of schedulers. `parallel_for` (one scheduler, one k,
one chunk) and the study's spec (`run`'s options) both call :func:`check_request`; a wrong
option is a `BadOption` naming its field, which each surface words with its own names for
its options (`BadOption.named`: ``chunk=`` in the API, ``--chunk`` on the command line).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import BadOption
from . import registry
from .capabilities import Decision, Dispatch, Reason, SchedulerInfo, decide
from .policies import AUTO_CHUNK

# Bound on workers per node that catches typos before the process table runs out: 4096 is
# 128x the paper's largest k and well under Linux's default pid_max (32768).
MAX_WORKERS = 4096


def check_request(schedulers: Sequence[SchedulerInfo], ks: Sequence[int],
                  chunks: Sequence[int], dispatch: str = Dispatch.AUTO, *, kernel: str = "",
                  numba: bool = True, coop: bool = False) -> None:
    """Refuse (`BadOption`) what ``schedulers`` cannot run with any of ``ks`` workers and
    ``chunks`` (0 = the scheduler's default, `AUTO_CHUNK` = searched) under the dispatch
    option ``dispatch`` with the kernel named ``kernel`` (``numba``: a numba function) and
    ``--coop`` or not. Names in the messages' slots: ``k``, ``chunk``, ``sizes`` (the chunk
    sizes a surface takes), ``auto`` (its auto chunk), ``dispatch``, ``compiled`` and
    ``use_auto`` (the option set to compiled and to auto), ``coop``."""
    if dispatch not in tuple(Dispatch):
        raise BadOption("dispatch", "{dispatch} must be one of {modes}, got {v!r}",
                        modes=", ".join(Dispatch), v=dispatch)
    _check_ks(ks)
    _check_chunks(schedulers, chunks)
    decisions = [decide(i, dispatch, numba=numba, coop=coop) for i in schedulers]
    _check_compiled([d for d in decisions if d.refused], kernel)


def _check_ks(ks: Sequence[int]) -> None:
    if not ks:
        raise BadOption("k", "{k} needs at least one value")
    for k in ks:
        if not 1 <= k <= MAX_WORKERS:
            raise BadOption("k", "{k} must be from 1 to {most} workers per node, got {v}",
                            most=MAX_WORKERS, v=k)


def _check_chunks(schedulers: Sequence[SchedulerInfo], chunks: Sequence[int]) -> None:
    searching = any(i.chunk_search for i in schedulers)
    for c in chunks:
        if c < 0 and c != AUTO_CHUNK:
            raise BadOption("chunk", "{chunk} must be {sizes}" + ", or {auto}" * searching
                            + ", got {v}", v=c)
        other = [i.name for i in schedulers if not i.chunk_search]
        if c == AUTO_CHUNK and other:
            raise BadOption("chunk", "{chunk} must be a size for {other}: {auto} applies to "
                            "the pipe schedulers only", other=", ".join(other))


def _check_compiled(refused: list[Decision], kernel: str) -> None:
    """The refusals of the compiled loop, by the first reason of `capabilities.decide`:
    a hand-out it cannot replay whatever the kernel, then the kernel, then --coop."""
    if not refused:
        return
    why = {d.reason for d in refused}
    if Reason.NOT_FIXED in why:
        able = [i.name for i in registry.SCHEDULERS.values() if decide(i).compiled]
        cannot = [d.name for d in refused if d.reason is Reason.NOT_FIXED]
        raise BadOption("dispatch", "{compiled}: {cannot} cannot run compiled (only fixed "
                        "first-come-first-served hand-outs: {able}); use {use_auto}",
                        cannot=", ".join(cannot), able=", ".join(able))
    if Reason.NOT_NUMBA in why:
        raise BadOption("dispatch", "{compiled}: kernel {kernel!r} is not a numba function; "
                        "use {use_auto}", kernel=kernel)
    raise BadOption("dispatch", "{compiled}: {coop} needs a scheduling point between chunks; "
                    "use {use_auto}")
