"""What consecutive timed runs share, set up once: the workspace of the current tensor
(built on demand, kept while the shape and seed stay the same), AIMD's utilisation monitor
(started before the first timed run when any configuration needs it, §4), the node's
cooperative arbiter (when a configuration runs with ``--coop``) and what the loops learn
across repetitions (``core.memory.Memory``). A single-node study, each
MPI rank, a co-located job and ``parallel_for`` all take theirs from here."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator

from ..core import registry
from ..core.memory import Memory
from ..core.monitor import UtilisationMonitor
from ..records import RunConfig
from ..workloads.space import Workspace

if TYPE_CHECKING:  # the arbiter is loaded only by studies that run with --coop
    from ..coop.arbiter import Arbiter

# A run's place on the cooperative arbiter: (arbiter, job id)
Seat = tuple["Arbiter", int]
MakeSpace = Callable[[RunConfig], Workspace]


def _shape(cfg: RunConfig) -> tuple:
    """What makes two configurations' workspaces the same (the tensor and how it is checked)."""
    return (cfg.frames, cfg.height, cfg.width, cfg.seed, cfg.workload, cfg.workload_params,
            cfg.kernel, cfg.verify, cfg.input_hash)


class Resources:
    """Owned for the whole study; a context manager that releases all of it on every exit."""

    def __init__(self, configs: list[RunConfig], make_space: MakeSpace | None = None,
                 memory: Memory | None = None):
        self._configs = configs
        self._make_space = make_space
        self._stack = contextlib.ExitStack()
        self._space: Workspace | None = None
        self._shape: tuple | None = None
        self.monitor: UtilisationMonitor | None = None
        self.arbiter: Arbiter | None = None
        # the study's loops' learned state: theirs for the whole study, a caller's if given
        self.memory = Memory() if memory is None else memory

    @classmethod
    def given(cls, monitor: UtilisationMonitor | None = None,
              arbiter: Arbiter | None = None, memory: Memory | None = None) -> "Resources":
        """Resources a caller owns already (one timed run on its own workspace)."""
        res = cls([], memory=memory)
        res.monitor, res.arbiter = monitor, arbiter
        return res

    def __enter__(self) -> "Resources":
        with self._stack as stack:
            if any(registry.get(c.scheduler).needs_monitor for c in self._configs):
                self.monitor = stack.enter_context(UtilisationMonitor())
            if any(c.coop for c in self._configs):
                from ..coop.arbiter import Arbiter

                self.arbiter = stack.enter_context(Arbiter())
                self.arbiter.require_quantum()  # the study records the default's
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._drop_space()
        finally:
            self._stack.close()

    def _drop_space(self) -> None:
        space, self._space, self._shape = self._space, None, None
        if space is not None:
            space.close()

    def space(self, cfg: RunConfig) -> Workspace:
        """The workspace of ``cfg``'s tensor: the current one, or a new one in its place
        (the old one released first: one tensor in memory at a time)."""
        want = _shape(cfg)
        if self._make_space is None:  # a colocated job's: its workspace is made elsewhere
            raise TypeError("these resources were given no make_space")
        if want != self._shape or self._space is None:
            self._drop_space()
            self._space = self._make_space(cfg)
            self._shape = want
        return self._space

    @contextlib.contextmanager
    def seat(self, cfg: RunConfig, given: Seat | None = None) -> Iterator[Seat | None]:
        """The run's job on the arbiter for one run (None without --coop): ``given`` when a
        caller registered it already (a co-located job), else joined here and left after."""
        if given is not None or not cfg.coop:
            yield given
            return
        if self.arbiter is None:
            raise ValueError("a --coop run needs the study's arbiter")
        job = self.arbiter.join_job()  # untimed: the job registers once
        try:
            yield self.arbiter, job
        finally:
            self.arbiter.leave_job(job)
