"""A study: schedulers x k x L x repetitions on one node, stored run by run."""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator

from . import kernels, schedulers
from .errors import UsageError
from .monitor import UtilisationMonitor
from .records import RunConfig, RunRecord
from .runner import timed_run, warn_unverified
from .sysinfo import n_cpus
from .workload import Slab, check_sizes


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

    def validate(self) -> None:
        for s in self.schedulers:
            schedulers.get(s)
        kernels.get_kernel(self.kernel)
        if not self.schedulers:
            raise UsageError("no scheduler given")
        if not self.ks or min(self.ks) < 1:
            raise UsageError("-k must be at least 1")
        if self.reps < 1:
            raise UsageError(f"--reps must be at least 1, got {self.reps}")
        if min(self.chunks) < 0:
            raise UsageError("--chunk must be at least 1")
        if not self.frames:
            raise UsageError("--frames needs at least one value")
        for L in self.frames:
            check_sizes(L, self.height, self.width)

    def configurations(self) -> list[RunConfig]:
        out: list[RunConfig] = []
        for L in self.frames:
            for s in self.schedulers:
                serial = s == "serial"
                for aff in ([self.affinity[0]] if serial else self.affinity):
                    for c in ([0] if serial else self.chunks):
                        for k in ([1] if serial else self.ks):
                            for rep in range(self.reps):
                                out.append(RunConfig(s, k, L, self.height, self.width, c, aff, rep,
                                                     self.kernel, self.seed))
        seen = {c.key() for c in out}
        out += [c for c in self.extra if c.key() not in seen]
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["extra"] = [asdict(c) for c in self.extra]
        return d


def run_configurations(configs: Iterable[RunConfig], on_record: Callable[[RunRecord], None],
                       cpus: list[int] | None = None) -> Iterator[RunRecord]:
    """Run configurations in order, one slab per tensor shape and seed, reusing it while
    consecutive runs share it; AIMD's monitor starts once before the first timed run."""
    configs = list(configs)
    with contextlib.ExitStack() as stack:
        monitor = None
        if any(c.scheduler == "aimd" for c in configs):
            monitor = stack.enter_context(UtilisationMonitor())
        slab, shape = None, None
        for cfg in configs:
            want = (cfg.frames, cfg.height, cfg.width, cfg.seed)
            if want != shape:
                if slab is not None:
                    slab.close()
                slab = None
                slab = stack.enter_context(Slab(cfg.frames, cfg.height, cfg.width, cfg.seed))
                shape = want
            record = timed_run(slab, cfg, monitor, cpus)
            if not record.verified:
                warn_unverified(record)
            on_record(record)
            yield record


def default_spec() -> StudySpec:
    """`hybridsched run` with no options: about two minutes on a 2-core laptop."""
    n = n_cpus()
    ks = sorted({1, 2, max(2, n), 2 * n})
    return StudySpec(schedulers=schedulers.names(), ks=ks, frames=[120], reps=3)


def preset(name: str) -> StudySpec:
    n = n_cpus()
    if name == "smoke":
        return StudySpec(schedulers=schedulers.names(), ks=sorted({1, 2, n}), frames=[24],
                         height=64, width=64, reps=1)
    if name == "paper":
        return StudySpec(schedulers=schedulers.names(), ks=[1, 2, 4, 8, 16, 24, 32],
                         frames=[1000, 10000], height=640, width=640, reps=10, affinity=[True])
    if name == "default":
        return default_spec()
    raise UsageError(f"unknown preset {name!r}; choose from smoke, default, paper")


PRESETS = ("smoke", "default", "paper")
