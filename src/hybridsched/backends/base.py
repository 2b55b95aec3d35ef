"""What every backend shares: the job it is given and the per-worker bookkeeping."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from ..core import registry
from ..core.memory import Memory
from ..core.monitor import UtilisationMonitor
from ..core.registry import SchedulerInfo
from ..oslayer.cpus import usable_cpus
from ..records import Execution, RunConfig

if TYPE_CHECKING:  # the arbiter is loaded only by the runs that use it (--coop)
    from ..coop.arbiter import Arbiter
    from ..coop.worker import Worker


@dataclass
class Job:
    """One scheduler execution over the work slab, as handed to a backend. ``info`` is the
    scheduler's registry entry: a backend reads how to hand out work from it, never from
    the scheduler's name."""

    info: SchedulerInfo
    work: np.ndarray              # uint8[L, H, W], the shared-memory work copy
    kernel: str | Callable        # a built-in kernel's name, or the chunk kernel itself
    k: int
    chunk: int                    # resolved chunk (the policy default already applied)
    affinity: bool = True
    monitor: UtilisationMonitor | None = None  # AIMD's (started once per study)
    cpus: list[int] = field(default_factory=usable_cpus)
    # read-only input tensor: lets pipe-MtoM restore a lost worker's chunk before re-sending
    # it and lets --chunk auto rerun trials on unsorted input (None: neither is possible)
    original: np.ndarray | None = None
    pipe_batch: int = 1           # RunConfig.pipe_batch
    inflight: int = 1             # RunConfig.inflight
    dispatch: str = "auto"        # RunConfig.dispatch: threads' chunk loop (backends/compiled.py)
    # --coop: the node's core arbiter (coop.arbiter.Arbiter) and this run's job in it;
    # workers then hold a token to run instead of a fixed CPU
    coop: Arbiter | None = None
    coop_job: int = -1
    # a technique's parameters (techniques.PARAM_DEFAULTS keys; "profile": its Profile)
    params: dict = field(default_factory=dict)
    portfolio: tuple[str, ...] = ()  # RunConfig.portfolio: the techniques auto races
    # what the run's record should store besides the measurements (e.g. the profile)
    extra: dict = field(default_factory=dict)
    # what the loop learned in earlier repetitions (auto's racer, AWF's weights, the
    # profile, --chunk auto's trials): the study's, or the parallel_for call's
    memory: Memory = field(default_factory=Memory)

    def coop_worker(self) -> Worker | None:
        """This worker's arbiter handle (registered, no token yet), or None without --coop."""
        return None if self.coop is None else self.coop.worker(self.coop_job)

    @property
    def scheduler(self) -> str:
        return self.info.name

    @property
    def frames(self) -> int:
        return int(self.work.shape[0])

    def cpu_of(self, w: int) -> int:
        """Round-robin placement: worker w on CPU w mod N (-1 when affinity is off, or under
        --coop, where the token a worker holds says where it runs)."""
        return self.cpus[w % len(self.cpus)] if self.affinity and self.coop is None else -1


def job_for(cfg: RunConfig, work: np.ndarray, monitor=None, cpus: list[int] | None = None,
            original: np.ndarray | None = None, memory: Memory | None = None) -> Job:
    """The backend job for run configuration ``cfg`` on ``work``. The default chunk is the
    one the policy would use on the whole tensor (``cfg.frames``), so a rank of an MPI run
    or a slice of it uses the same chunk as the single-node run it is compared with."""
    info = registry.get(cfg.scheduler)
    job = Job(info, work, cfg.kernel, cfg.k, info.resolve_chunk(cfg.chunk, cfg.frames),
              cfg.affinity, monitor, original=original, pipe_batch=cfg.pipe_batch,
              inflight=cfg.inflight, dispatch=cfg.dispatch, params=dict(cfg.params),
              portfolio=cfg.portfolio)
    if cpus is not None:
        job.cpus = cpus
    if memory is not None:
        job.memory = memory
    return job


class Backend(Protocol):
    """A backend module's entry point (``execute``): run one job, return what it measured
    (:func:`backends.get_backend` picks it by the registry entry's ``backend``)."""

    def __call__(self, job: Job) -> Execution: ...
