"""The user-mode cooperative scheduler in three architectures (seed 002): A0 (OS threads
and OS primitives), A1 (user-mode tasks, one blocked queue under one lock), A2 (per-thread
ready queues, per-primitive blocked queues, lock-free event and semaphore paths). Chosen by data: ``ARCHS[name](cpus)``."""
from __future__ import annotations

from ..errors import UsageError
from .a0 import A0
from .a1 import A1
from .a2 import A2
from .api import Counts, Deadlock, Scheduler, ThreadLimit, UserThreadError

ARCHS: dict[str, type] = {"A0": A0, "A1": A1, "A2": A2}

DESCRIPTIONS = {
    "A0": "one OS thread per user thread, threading primitives, the kernel schedules",
    "A1": "user-mode tasks on N pinned scheduler threads; one ready queue and one blocked "
          "queue behind one lock; signalling scans the blocked queue",
    "A2": "per-scheduler-thread ready queues with stealing; a blocked queue in each "
          "primitive, lock-free under the GIL (publish, then re-check); free/set/has-waiters "
          "states",
}


def get(name: str) -> type:
    try:
        return ARCHS[name]
    except KeyError:
        raise UsageError(f"unknown architecture {name!r} (known: {', '.join(ARCHS)})") from None


__all__ = ["ARCHS", "DESCRIPTIONS", "get", "Counts", "Deadlock", "Scheduler", "ThreadLimit",
           "UserThreadError"]
