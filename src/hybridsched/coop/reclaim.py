"""The reclaim of participants that cannot give their tokens back, by /proc's word: the
dead (a process, or a shim thread, gone) and the holders that are stopped (Ctrl-Z,
SIGSTOP, a tracer), whose tokens the waiters take rather than wait until they are
continued."""
from __future__ import annotations

from ..oslayer.procfs import pid_alive, thread_alive, thread_stopped
from ..oslayer.signals import queue_to_thread
from .layout import BLOCKED, NUDGE_SIGNAL, RUNNING
from .state import State


def reclaim(st: State, now: int) -> list[int]:
    """The dead participants' rows freed and stopped holders' tokens taken (State.reclaim),
    by /proc's word: the slots their tokens went to. The caller holds the lock.

    A shim thread whose token was taken is sent the rotation request, queued with its
    job's key: it takes the signal once continued and queues for a token at once, rather
    than running without one until its next intercepted call."""
    held = [int(h) for h in st.cpus["holder"] if h >= 0]
    shim = [w for w in held if st.workers["thread"][w] == 1 and st.workers["state"][w] == RUNNING]
    woken = st.reclaim(pid_alive, now, thread_alive, thread_stopped)
    for w in shim:  # under the lock, only a reclaim makes a holder BLOCKED
        row = st.workers[w]
        if row["used"] == 1 and row["state"] == BLOCKED:
            queue_to_thread(int(row["pid"]), int(row["tid"]), NUDGE_SIGNAL,
                            int(st.jobs["key"][int(row["job"])]))
    return woken
