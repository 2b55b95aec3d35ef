"""The named schedulers of the study: each is a chunking policy run by a backend."""
from __future__ import annotations

from dataclasses import dataclass

from . import policies as pol
from .errors import UsageError


@dataclass(frozen=True)
class SchedulerInfo:
    name: str
    family: str        # serial | thread | process | pipe
    backend: str       # module under hybridsched.backends
    policy: str        # key for policies.default_chunk
    description: str

    def resolve_chunk(self, requested: int, frames: int) -> int:
        """The chunk actually used: the request, or the policy's default when it is 0."""
        if requested == pol.AUTO_CHUNK and self.family == "pipe":
            return requested  # the pipe backend searches it (--chunk auto)
        return requested if requested > 0 else pol.default_chunk(self.policy, frames)


_ALL = [
    SchedulerInfo("serial", "serial", "serial", "serial",
                  "one kernel call over every frame on one thread: T_serial of Eq. 4"),
    SchedulerInfo("static", "thread", "threads", "static",
                  "OpenMP static: one contiguous block per thread (or chunks round-robin with --chunk)"),
    SchedulerInfo("dynamic", "thread", "threads", "dynamic",
                  "OpenMP dynamic: threads take the next chunk (default 1) from an atomic ticket counter"),
    SchedulerInfo("guided", "thread", "threads", "guided",
                  "OpenMP guided: chunk = max(min_chunk, ceil(remaining / k)), first come first served"),
    SchedulerInfo("chunk", "thread", "threads", "chunk",
                  "fixed chunks from the ticket counter (default L/100, the paper's 10 and 100)"),
    SchedulerInfo("chunk-steal", "thread", "threads", "chunk-steal",
                  "static chunks in per-thread queues; idle threads steal round-robin"),
    SchedulerInfo("aimd", "thread", "threads", "aimd",
                  "AIMD contention window over min(k, N) threads, chunks of 4, fed by /proc/stat (§2.3)"),
    SchedulerInfo("adaptive", "thread", "threads", "adaptive",
                  "adaptive chunks: remaining / k scaled by the thread's speed factor (§2.4, Eq. 3)"),
    SchedulerInfo("prolific", "process", "forks", "prolific",
                  "the parent forks k workers; frame i to worker i mod k (§2.1.1)"),
    SchedulerInfo("collective", "process", "forks", "collective",
                  "workers fork workers in ceil(log2 k) mitosis rounds; frame i to worker i mod k (§2.1.2)"),
    SchedulerInfo("pipe-1to1", "pipe", "pipes", "pipe",
                  "one task pipe read by all workers; chunks of frame ids (default 1, or auto) (§2.1.3)"),
    SchedulerInfo("pipe-1toN", "pipe", "pipes", "pipe",
                  "one task pipe per worker; the parent deals chunks round-robin (§2.1.3)"),
    SchedulerInfo("pipe-MtoM", "pipe", "pipes", "pipe",
                  "task and done pipe per worker; next chunk to whoever reports done; "
                  "re-sends a lost worker's chunk (§2.1.3)"),
]

SCHEDULERS: dict[str, SchedulerInfo] = {s.name: s for s in _ALL}

# The contract's full list, in the order of DESIGN.md; those not built yet are not runnable.
ALL_NAMES = ("serial static dynamic guided chunk chunk-steal aimd adaptive prolific collective "
             "pipe-1to1 pipe-1toN pipe-MtoM").split()


def get(name: str) -> SchedulerInfo:
    try:
        return SCHEDULERS[name]
    except KeyError:
        known = ", ".join(n for n in ALL_NAMES if n in SCHEDULERS)
        raise UsageError(f"unknown scheduler {name!r}; choose from {known} or all") from None


def names(family: str | None = None) -> list[str]:
    """Runnable scheduler names in contract order (optionally of one family)."""
    ordered = [n for n in ALL_NAMES if n in SCHEDULERS] + [n for n in SCHEDULERS if n not in ALL_NAMES]
    return [n for n in ordered if family is None or SCHEDULERS[n].family == family]
