"""Gang scheduling of whole jobs (the mechanism of Slurm's gang scheduler, at a finer
quantum): one job at a time holds the node; the others are stopped with SIGSTOP to their
process groups and continued with SIGCONT in round-robin order, every quantum, or earlier
when every thread of the running job is blocked (read from /proc), since it would not use
the CPUs it holds. With an infinite quantum and no early switch it runs the jobs one after
the other (colocate's ``serial`` reference).

Pure Python and blind to what the jobs run: it works on any binary. It assumes what
`colocate` is about, jobs each sized for the whole node; jobs smaller than the node are
still run one at a time. A thread of ours does the switching; the experiment's
:class:`~hybridsched.oslayer.cmdjobs.CommandJobs` (and its guardian, should we be killed)
makes sure that no job is ever left stopped.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from time import perf_counter

from ..errors import HybridschedError
from ..oslayer.procfs import all_threads_blocked, children
from ..oslayer.signals import leave_signals_to_main_thread

# How often the running job's threads are read for an early switch: each look reads a
# /proc stat per thread (tens of µs of our CPU, taken from the jobs), so a short period
# costs the jobs CPU, a long one leaves a blocked job holding the node longer. A quarter
# of the quantum, within 2-10 ms.
_POLL_MIN_S, _POLL_MAX_S = 0.002, 0.010


class GangScheduler:
    """Time-slices the jobs whose process groups are ``pgids`` (their leaders' pids); a
    context manager, entered while every job waits at the start gate."""

    def __init__(self, pgids: list[int], quantum_s: float, early_switch: bool = True):
        self.pgids = list(pgids)
        self.quantum_s = quantum_s
        self.early_switch = early_switch
        self.poll_s = min(_POLL_MAX_S, max(_POLL_MIN_S, quantum_s / 4))
        self.live = list(range(len(pgids)))   # round-robin order of the jobs not ended
        self.running: int | None = None
        self.since = 0.0                      # start of the running job's slice
        self.stopped: dict[int, float] = {}   # job -> when it was stopped
        self.stats = [{"slices": 0, "early_switches": 0, "sigstops": 0, "stopped_s": 0.0}
                      for _ in pgids]
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    # --- lifetime ---------------------------------------------------------------------

    def __enter__(self) -> "GangScheduler":
        with self._lock:
            for j in self.live[1:]:
                self._signal_stop(j)
            if self.live:
                self._give(self.live[0])
        if len(self.live) > 1:
            self._thread = threading.Thread(target=self._run, name="hybridsched-gang",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._continue_all()
        if self.error is not None and exc[0] is None:
            raise HybridschedError(f"gang: the scheduler failed: {self.error}")

    # --- from the experiment ----------------------------------------------------------

    def ended(self, j: int) -> None:
        """Job j's command has exited: never signal its group again; the node passes on."""
        with self._lock:
            if j in self.live:
                self.live.remove(j)
            if j in self.stopped:
                self.stats[j]["stopped_s"] += perf_counter() - self.stopped.pop(j)
            if self.running == j:
                self.running = None
        self._wake.set()

    def counters(self, j: int) -> dict:
        """Job j's counts: slices it was given, early switches away from it (all its threads
        blocked), SIGSTOPs sent to its group, seconds it spent stopped."""
        s = dict(self.stats[j])
        s["stopped_s"] = round(s["stopped_s"], 6)
        return s

    # --- the switching thread ---------------------------------------------------------

    def _run(self) -> None:
        leave_signals_to_main_thread()
        try:
            while not self._stop:
                with self._lock:
                    if self.running is None and self.live:
                        self._give(self._next(None))
                    cur, alone = self.running, len(self.live) <= 1
                if cur is None or alone:
                    self._wake.wait()  # nothing to share until a job ends or we stop
                    self._wake.clear()
                    continue
                left = self.since + self.quantum_s - perf_counter()
                if left <= 0:
                    self._switch(cur, early=False)
                    continue
                look = min(self.poll_s, left) if self.early_switch else left
                if self._wake.wait(look if look != float("inf") else None):
                    self._wake.clear()
                    continue
                if self.early_switch and perf_counter() - self.since < self.quantum_s \
                        and _group_blocked(self.pgids[cur]):
                    self._switch(cur, early=True)
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__; no job left stopped
            self.error = exc
            with self._lock:
                self._continue_all()

    def _switch(self, cur: int, early: bool) -> None:
        with self._lock:
            if self.running != cur or len(self.live) <= 1:
                return  # it ended meanwhile
            nxt = self._next(cur)
            self._signal_stop(cur)
            self.stats[cur]["early_switches"] += early
            self._give(nxt)

    def _next(self, cur: int | None) -> int:
        if cur is None or cur not in self.live:
            return self.live[0]
        return self.live[(self.live.index(cur) + 1) % len(self.live)]

    # --- signals (under the lock) -----------------------------------------------------

    def _give(self, j: int) -> None:
        if j in self.stopped:
            _killpg(self.pgids[j], signal.SIGCONT)
            self.stats[j]["stopped_s"] += perf_counter() - self.stopped.pop(j)
        self.running, self.since = j, perf_counter()
        self.stats[j]["slices"] += 1

    def _signal_stop(self, j: int) -> None:
        _killpg(self.pgids[j], signal.SIGSTOP)
        self.stopped[j] = perf_counter()
        self.stats[j]["sigstops"] += 1
        if self.running == j:
            self.running = None

    def _continue_all(self) -> None:
        for j in list(self.stopped):
            _killpg(self.pgids[j], signal.SIGCONT)
            self.stats[j]["stopped_s"] += perf_counter() - self.stopped.pop(j)


def _killpg(pgid: int, sig: int) -> None:
    """Signal a job's group; one that is gone (its command ended a moment ago, not yet
    reported by :meth:`GangScheduler.ended`) has nothing left to stop or continue."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_blocked(pgid: int) -> bool | None:
    """all_threads_blocked over the job's tree (its leader is ``pgid``) and over the
    processes of its group orphaned to us (colocate is the jobs' subreaper): they run, and
    are stopped, with the group. The tree alone missed a `(cmd &)`: its job was switched
    out at every look while that ran (7 early switches in 0.6 s, the review)."""
    tree = all_threads_blocked(pgid)
    if tree is False:  # the common look, at a job computing: no more to read
        return False
    seen: list[bool | None] = [tree]
    for c in children(os.getpid()) - {pgid}:
        with contextlib.suppress(OSError):
            if os.getpgid(c) == pgid:
                seen.append(all_threads_blocked(c))
    return False if False in seen else (True if True in seen else None)
