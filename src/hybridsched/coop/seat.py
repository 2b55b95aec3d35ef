"""A worker's seat on the arbiter for one stretch of work, as a context manager.

Every backend's worker runs its chunks inside one: the token taken on entry, a scheduling
point after every chunk, the token handed on around a blocking wait, and the slot left on
every way out, a kernel's exception included, so the token moves on at once instead of
when the arbiter next looks for dead holders. Without ``--coop`` it does nothing.

Kept apart from :mod:`worker` so that the backends load it without loading the arbiter's
compiled rules (a run without ``--coop`` never does).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

if TYPE_CHECKING:
    from .worker import Worker

T = TypeVar("T")


class Seated:
    """``with Seated(job.coop_worker()) as seat:`` — ``seat.boundary`` is the worker's
    scheduling point, to call after every chunk (None without an arbiter, so a hot loop
    tests it once per chunk and calls nothing); ``seat.wait(call, ...)`` runs a blocking
    call with the token handed on meanwhile."""

    __slots__ = ("worker", "boundary")

    def __init__(self, worker: Worker | None):
        self.worker = worker
        self.boundary: Callable[[], int] | None = None if worker is None else worker.boundary

    def __enter__(self) -> "Seated":
        if self.worker is not None:
            try:
                self.worker.acquire()
            except BaseException:
                self.worker.leave()  # a registered slot is given back even when no token came
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            self.worker.leave()

    def wait(self, call: Callable[..., T], *args: object) -> T:
        """``call(*args)``, a wait on something else (a pipe), as a scheduling point: the
        token goes to another worker while it waits and is taken back after it."""
        wk = self.worker
        if wk is None:
            return call(*args)
        wk.block()
        result = call(*args)
        wk.acquire()
        return result
