"""The primitive API every architecture implements (the contract the solvers are written to).

A *user thread* is a generator function. It waits by yielding a primitive::

    def worker(ev, sem, bar):
        yield ev          # wait until the event is set (it stays set)
        yield sem         # take one unit of the counting semaphore (FIFO among waiters)
        yield bar         # arrive at the barrier and wait for the other parties
        ev.set()          # signals never block: call them directly
        sem.release(2)

and signals by calling ``Event.set()`` / ``Semaphore.release(n)`` directly (a barrier is
signalled by its last arrival). The same generator runs under every architecture:

- A0 (``a0.py``) runs each generator in its own OS thread and carries out each yielded wait
  with the matching ``threading`` primitive (blocking in the kernel);
- A1 (``a1.py``) and A2 (``a2.py``) resume the generators from N scheduler threads, one per
  usable CPU, pinned to it; a yielded wait that cannot be satisfied parks the generator.

A scheduler is a context manager: ``__enter__`` starts its scheduler threads (A1/A2),
``spawn`` creates a user thread, ``run()`` waits until every user thread has finished and
raises :class:`UserThreadError` if one raised (or :class:`Deadlock`), and ``__exit__`` stops
and joins every OS thread it started on every path (normal, error, Ctrl-C).

Counts (:class:`Counts`, per run): ``blocks`` (a wait found its primitive unavailable and the
user thread had to wait), ``wakeups`` (a waiting user thread made ready / released),
``switches`` (user-mode resumes of a user thread taken from a ready queue; 0 for A0, whose
switches the kernel makes), ``scans`` (A1: blocked-queue entries examined while signalling).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Generator, Iterator, Protocol, cast

from ..errors import Deadlock, ThreadLimit, UserThreadError

UserFn = Callable[..., Iterator]  # a generator function: yields the primitives it waits on


@dataclass
class Counts:
    blocks: int = 0
    wakeups: int = 0
    switches: int = 0
    scans: int = 0

    def add(self, other: "Counts") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class Event(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...


class Semaphore(Protocol):
    def release(self, n: int = 1) -> None: ...


class Barrier(Protocol):
    parties: int


class Scheduler(Protocol):
    """What a solver may use. ``cpus`` are the CPUs the scheduler threads are pinned to."""

    name: str
    counts: Counts
    sched_threads: int

    def event(self) -> Event: ...
    def semaphore(self, value: int = 0) -> Semaphore: ...
    def barrier(self, parties: int) -> Barrier: ...
    def spawn(self, fn: UserFn, *args, name: str = "") -> None: ...
    def run(self) -> None: ...
    def __enter__(self) -> "Scheduler": ...
    def __exit__(self, *exc) -> None: ...


def _driven(it: Iterator) -> Generator:
    yield from it


def start(fn: UserFn, args: tuple) -> Generator:
    """The generator of a user thread (a plain function that returns no generator runs
    to completion at once: it is wrapped in an empty generator; an iterator without
    ``send`` is driven by one, so the thread can always be closed)."""
    gen = fn(*args)
    if gen is None:
        return _driven(iter(()))
    return cast(Generator, gen) if hasattr(gen, "send") else _driven(gen)
