"""Unmodified commands on the node's arbiter: :class:`ShimJob` gives one command a job of
its own and the environment that preloads the cooperative shim into it (a C library,
``coop/shim/``), so every thread of every process the command starts runs only while it
holds one of the arbiter's tokens, by the same rules as hybridsched's own workers.

The job is found by its key (``HYBRIDSCHED_COOP_JOB``) by each process the command forks
or execs, and owned by the ShimJob's process: it outlives the command's processes, and
leaving it frees whatever they left behind. While it runs, a watchdog thread (one for
all of a process's jobs on an arbiter) looks at the job's tokens: a holder that keeps its
token past :data:`BOUND_QUANTA` quanta while others wait is asked to rotate (a signal the
shim handles) when it is running — a spin that calls nothing, like OpenBLAS's caller — or
has the token taken away when it sleeps in a call the shim does not see. Both are time
slicing, not cooperation, and are counted.
"""
from __future__ import annotations

import os
import secrets
import threading
import warnings
from dataclasses import asdict, dataclass
from typing import Mapping

from ..errors import ArbiterInUse, ResourceError, UsageError
from ..oslayer import futex
from ..oslayer.procfs import thread_state
from ..oslayer.signals import leave_signals_to_main_thread, signals_held, tgkill
from .arbiter import Arbiter
from .layout import JOB_COUNTERS, NUDGE_SIGNAL, RUNNING
from .paths import SEGMENT_ENV
from .shimbuild import shim_library
from .state import ArbiterError
from .watchlook import Act, NativeLook
from .ops import now_ns

# the variables the shim reads in every process of the command (the segment's is the one
# that names the arbiter for hybridsched's own commands too)
JOB_ENV, CPUS_ENV = "HYBRIDSCHED_COOP_JOB", "HYBRIDSCHED_COOP_CPUS"
# The PID namespace the arbiter's ids mean (its /proc/self/ns/pid inode): a process of the
# job in another one (`unshare --pid`, a container's) would register ids that name other
# threads here, and two such jobs crashed on each other's ids (the review); its shim stays
# dormant instead, said once
PIDNS_ENV = "HYBRIDSCHED_COOP_PIDNS"
# How long a holder may keep its token, in quanta, while others wait, before the watchdog
# acts: a holder reaches no scheduling point of its own only when it never blocks, and
# one quantum more than the arbiter's own rotation leaves a holder that does block time to.
BOUND_QUANTA = 2
# (A holder that spins for its own job's waiting threads, calling nothing, is asked to
# rotate sooner, after 0.5 ms, by those threads themselves: shim/early.c, HS_EARLY_NS.)
# The runtimes' wait policies set to block instead of spinning: colocate's `env` policy,
# and what `coop exec` sets unless told to keep the environment (a spin holds a token).
WAIT_POLICY_ENV = {
    "OMP_WAIT_POLICY": "passive",   # libgomp, LLVM libomp: sleep at once when waiting
    "GOMP_SPINCOUNT": "0",          # libgomp: no spin before the futex wait
    "KMP_BLOCKTIME": "0",           # LLVM libomp / intel-openmp: its passive setting
    # OpenBLAS: idle pool threads spin 2^4 cycles (its minimum) before they sleep, against
    # 2^28 by default (about 70 ms of a CPU after every call, measured here)
    "OPENBLAS_THREAD_TIMEOUT": "4",
}

@dataclass(frozen=True)
class ShimCounters:
    """A job's counts from the shim: threads registered, blocking calls intercepted,
    tokens got after waiting (grants), tokens handed to a waiter (hand-offs), system calls
    trapped (Syscall User Dispatch), rotation signals handled, tokens revoked from holders
    asleep in calls the shim does not see, threads that ran unmanaged (every slot of the
    arbiter taken when they started); and rotation signals the watchdog sent."""

    threads: int = 0
    calls: int = 0
    grants: int = 0
    handoffs: int = 0
    traps: int = 0
    nudges: int = 0
    revoked: int = 0
    unmanaged: int = 0
    signals: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _pid_namespace() -> str:
    """This process's PID namespace, as the inode of /proc/self/ns/pid ("" if unknown)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


class ShimJob:
    """One unmodified command's job on ``arbiter``; a context manager.

    On entry it builds (or finds) the shim, registers a job under ``key`` (a fresh random
    one by default; a key in use is refused) owned by this process, and starts the
    watchdog (``watchdog=False``: none). :meth:`env` gives the variables to add to the
    command's environment; :meth:`counters` the job's counts so far (:attr:`final` once
    left). On exit it stops the watchdog and frees the job and every slot of it, tokens
    included: call it once the command's processes are gone (any left run unmanaged).
    ``cpus`` is the mask the command would have had (default: this process's), which the
    shim answers its affinity queries with.
    """

    def __init__(self, arbiter: Arbiter, key: int | None = None, *, cpus=None,
                 watchdog: bool = True):
        if key is not None and not 0 < key < 2**63:
            raise UsageError(f"a coop job key is a positive 63-bit integer, got {key}")
        self.arbiter = arbiter
        self.key = key
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self.job = -1
        self.library = ""
        self.final: ShimCounters | None = None
        self.signals = 0  # rotation signals the watchdog sent the job's holders
        self._watched = watchdog
        self._watchdog: _Watchdog | None = None

    def __enter__(self) -> "ShimJob":
        self.library = shim_library()
        with signals_held(), self.arbiter.locked() as st:
            if self.key is not None and st.find_job(self.key) >= 0:
                raise UsageError(f"coop job key {self.key} is in use on {self.arbiter.path}")
            while self.key is None or st.find_job(self.key) >= 0:
                self.key = secrets.randbits(62) + 1
            try:
                self.job = st.join_job(os.getpid(), self.key)
            except ArbiterError as exc:
                raise ResourceError(f"coop: {exc}") from None
        if self._watched:
            try:
                self._watchdog = _Watchdog.watch(self)
            except BaseException:
                self._leave()
                raise
        return self

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables to add to the command's environment ``base`` (default ours):
        the shim first in LD_PRELOAD, the segment, the job's key, the natural CPU mask."""
        before = (os.environ if base is None else base).get("LD_PRELOAD", "")
        return {"LD_PRELOAD": self.library + (f":{before}" if before else ""),
                SEGMENT_ENV: self.arbiter.path, JOB_ENV: str(self.key),
                CPUS_ENV: ",".join(map(str, self.cpus)), PIDNS_ENV: _pid_namespace()}

    def counters(self) -> ShimCounters:
        """The job's counts so far (after exit: as they were when it was left)."""
        if self.job < 0 or self.arbiter.state is None:
            return self.final or ShimCounters()
        row = self.arbiter.state.jobs[self.job]
        return ShimCounters(**{c: int(row[c]) for c in JOB_COUNTERS}, signals=self.signals)

    def __exit__(self, *exc) -> None:
        try:
            if self._watchdog is not None:
                self._watchdog.unwatch(self)
        finally:
            self._watchdog = None
            self._leave()

    def _leave(self) -> None:
        if self.job < 0:
            return
        self.final = self.counters()
        with signals_held(), self.arbiter.locked() as st:
            woken = st.evict_job(self.job, now_ns())
            self.job = -1
        self.arbiter.post(woken)


class _Watchdog(threading.Thread):
    """A holder of one of the jobs' tokens that keeps it past the bound while others wait
    is signalled to rotate if it runs, or has its token revoked if it sleeps — or if it
    still holds it a bound after the signal (see the module's docstring). One thread for
    all of this process's jobs on one arbiter (colocate's J jobs share it), which looks
    when the first holding it has seen reaches the bound, or a quantum on when it has seen
    none: looking every quantum for each job cost two co-located lock loops ~0.5 % of the
    CPUs. The looks and the sleeps between them are C's (watchlook, shim/watch.c), without
    the GIL: a Python thread woken for each look cost ~0.2 ms of a CPU a job's holder
    wanted, a cold interpreter's; the thread comes back to Python only to act, or when
    its jobs change (:meth:`_poke`). A holding is dated from when it began, but from no
    earlier than the last look that found threads waiting (before it, nobody may have
    waited): one that began after a look is acted on a bound after it began all the
    same. The shared tables are read without the lock, which it takes only to revoke."""

    _guard = threading.Lock()
    _running: dict[Arbiter, "_Watchdog"] = {}

    @classmethod
    def _forget_after_fork(cls) -> None:
        # a fork's child has none of the parent's threads, and the guard may have been
        # held by one of them at the fork
        cls._guard = threading.Lock()
        cls._running = {}

    def __init__(self, arbiter: Arbiter):
        super().__init__(name="hybridsched-coop-watchdog", daemon=True)
        self.arbiter = arbiter
        self.jobs: dict[int, ShimJob] = {}  # job row -> its ShimJob
        self._acting = threading.Lock()  # an act, or a job's removal: one at a time
        self._native = NativeLook()  # the looks, in C, and what the last one saw
        self._halted = False

    @classmethod
    def watch(cls, shim: ShimJob) -> "_Watchdog":
        """The arbiter's watchdog, started if it was not, watching ``shim``'s job too."""
        with cls._guard:
            dog = cls._running.get(shim.arbiter)
            if dog is None or not dog.is_alive():  # not alive: it ended before its first look
                dog = cls(shim.arbiter)
                try:
                    dog.start()
                except RuntimeError:  # a thread limit reached (ulimit -u, a cgroup's pids)
                    raise ResourceError("coop: the OS refused to start the arbiter's watchdog "
                                        "thread (a limit on processes: ulimit -u?)") from None
                cls._running[shim.arbiter] = dog
            dog.jobs[shim.job] = shim
            dog._poke()
        return dog

    def unwatch(self, shim: ShimJob) -> None:
        """No longer ``shim``'s job; the thread ends with the last job it watched."""
        with self._guard:
            with self._acting:  # an act under way for this job ends first
                self.jobs.pop(shim.job, None)
            if self.jobs:
                self._poke()
                return
            if self._running.get(self.arbiter) is self:  # else one replaced it (it had died)
                del self._running[self.arbiter]
            self.halt()
        if self.is_alive():
            self.join()

    def halt(self) -> None:
        """End the watch (the thread ends within a look)."""
        self._halted = True
        self._poke()

    def _poke(self) -> None:
        # the C loop sleeps on the word and returns once it changed: to see the new jobs,
        # or to end; changes are made under the guard (a fork's child: its own guard)
        self._native.ctl[0] += 1
        futex.wake(futex.address(self._native.ctl, 0), 1)

    def run(self) -> None:
        leave_signals_to_main_thread()
        try:
            self._watch(self.arbiter.tables)
        finally:
            self._native.forget()

    def _watch(self, st) -> None:
        quantum = int(st.header["quantum_ns"][0])
        bound, pause = BOUND_QUANTA * quantum, quantum
        warned = False
        while True:
            gen = int(self._native.ctl[0])  # before the jobs are read: a change ends the wait
            if self._halted:
                return
            try:
                acts = self._native.wait(st, tuple(self.jobs), pause, bound, quantum, gen)
                if acts:
                    self._do(acts)
            except Exception as exc:  # noqa: BLE001 - one bad look must not end the watch
                # the thread's end would leave every job of the process unwatched, silently
                if not warned:
                    warnings.warn(f"coop watchdog: a look failed ({exc!r}); it goes on",
                                  RuntimeWarning, stacklevel=1)
                    warned = True
                # a quantum before the next try (the C loop's own sleep was not reached)
                futex.wait(futex.address(self._native.ctl, 0), gen, quantum / 1e9)
            due = self._native.due
            pause = quantum if due is None else max(due - now_ns(), 0)

    def _look(self, st, now: int, bound: int) -> int | None:
        """One look at the jobs' holders (in C: watchlook), and the acts on the holdings
        due; when the first holding seen, not acted on by then, reaches the bound (None:
        none seen, or nobody waits)."""
        acts, due = self._native(st, self.jobs, now, bound)
        self._do(acts)
        return due

    def _do(self, acts: list[Act]) -> None:
        """Act on each holding due, unless its job has left meanwhile."""
        for a in acts:
            with self._acting:
                shim = self.jobs.get(a.job)
                if shim is None:
                    continue
                signalled = self._act(shim, a.slot, a.acquired, a.pid, a.tid, a.signalled)
            self._native.signalled(a.cpu, signalled)

    def _act(self, shim: ShimJob, slot: int, since: int, pid: int, tid: int,
             signalled: bool) -> bool:
        """Signal a running holder of ``shim``'s job, or revoke the token of a sleeping one
        or of one that let a signal go unanswered; whether it signalled."""
        state = thread_state(pid, tid)
        if state == "R" and not signalled:
            sent = tgkill(pid, tid, NUDGE_SIGNAL)
            shim.signals += sent
            return sent
        if state in ("R", "S", "D"):  # a gone or stopped holder is the waiters' reclaim scan's
            woken: list[int] = []
            with self.arbiter.locked() as st:
                w = st.workers[slot]
                if (w["used"] and w["job"] == shim.job and w["state"] == RUNNING
                        and w["acquired_ns"] == since):
                    woken = st.revoke_holder(slot, now_ns())
                    st.jobs["revoked"][shim.job] += 1
            self.arbiter.post(woken)
        return False


os.register_at_fork(after_in_child=_Watchdog._forget_after_fork)


def preflight(cpus: list[int], quantum_s: float, path: str | None = None, *,
              shim: bool = True) -> None:
    """Refuse now what a run on the arbiter at ``path`` (default the node's) with
    ``quantum_s`` would refuse when it came to it: the shim (``shim``: built or found, its
    path one LD_PRELOAD can carry), the segment (another user's, other CPUs while in use),
    and a segment already in use with another quantum (a study would record a quantum it
    did not run with). For an experiment, before it writes anything or runs another
    policy; it attaches and leaves (the segment goes again if nobody else uses it)."""
    if shim:
        shim_library()  # first: a shim that cannot be had makes no segment
    with Arbiter(cpus, quantum_s, path) as arbiter:
        why, used = arbiter.other_quantum(), arbiter.quantum_in_use_ns()
    if why:
        raise ArbiterInUse(f"--quantum-ms {quantum_s * 1e3:g}: {why}; use --quantum-ms "
                           f"{used / 1e6:g}, or wait for them to end")
