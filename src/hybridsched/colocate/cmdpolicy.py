"""The policies for unmodified commands (`colocate --cmd`): one small class each, chosen
by name from :data:`CMD_POLICIES`, never by testing names in the code.

A policy says, for one repetition (its :class:`Session`, a context manager):

* ``env(j)``: what it adds to job j's environment (on top of ours, which the job inherits);
* ``cpus(j)``: the CPUs job j may use (None: all of the run's);
* ``supervise(jobs)``: what it watches while the jobs run (a context manager entered once
  every job waits at the gate and left before any job is reaped); ``ended(j)`` is its last
  look at job j, whose command has just exited;
* ``counters(j)``: its own counts for job j, stored with the job's row.

and, before anything starts, ``refusal(argvs)``: why it cannot run these commands (one
argv per job; None when it can), and ``environment()``: the variables it sets, stored in
the study.

``coop`` (env plus the cooperative LD_PRELOAD shim) is not in this branch: its entry is a
placeholder that refuses. The real policy is one more class here: a subclass of
:class:`Env` whose session, on entering, attaches to the arbiter (``Setup.cpus``,
``quantum_s``, ``arbiter_path``) and enters a ``ShimJob(arbiter, key)`` per job on its
``stack``; whose ``env(j)`` adds the shim's variables to the normalised environment and
whose ``counters(j)`` are the shim's; whose ``refusal`` is the shim's for any job's argv
(and the arbiter's job table, ``len(argvs)``); registered under ``coop`` in place of
:class:`CoopNeedsShim`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from .gang import GangScheduler
from .placement import partition


@dataclass(frozen=True)
class Setup:
    """What a policy's session is given: the run's CPUs, the number of jobs, the quantum
    (gang, coop), the commands (argv of each job) and the arbiter's segment path (coop;
    None: the node's default)."""

    cpus: list
    jobs: int
    quantum_s: float
    argvs: list = field(default_factory=list)
    arbiter_path: str | None = None


class Session:
    """One repetition under a policy that changes nothing (``linux``)."""

    def __init__(self, policy: "CommandPolicy", setup: Setup):
        self.policy, self.setup = policy, setup
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def env(self, j: int) -> dict:
        return dict(self.policy.environment())

    def cpus(self, j: int) -> frozenset | None:
        return None

    @contextlib.contextmanager
    def supervise(self, jobs):
        yield self

    def ended(self, j: int) -> None:
        pass

    def counters(self, j: int) -> dict:
        return {}


class CommandPolicy:
    """``linux``: the commands as given, nothing changed (the base of every policy)."""

    name = "linux"
    description = "the commands as given: nothing changed"
    session_class = Session

    def refusal(self, argvs: list) -> str | None:
        """Why these jobs (one argv each) cannot run under this policy; None if they can."""
        return None

    def environment(self) -> dict:
        """The variables this policy sets in every job's environment (stored in the study)."""
        return {}

    def session(self, setup: Setup) -> Session:
        return self.session_class(self, setup)


class Env(CommandPolicy):
    """``env``: only the runtimes' wait policies normalised to block instead of spinning;
    thread counts are never touched, so every job still asks for N threads."""

    name = "env"
    description = ("runtimes told to block instead of spin (OMP_WAIT_POLICY=passive, ...); "
                   "thread counts unchanged")
    VARIABLES = {
        "OMP_WAIT_POLICY": "passive",   # libgomp, LLVM libomp: sleep at once when waiting
        "GOMP_SPINCOUNT": "0",          # libgomp: no spin before the futex wait
        "KMP_BLOCKTIME": "0",           # LLVM libomp / intel-openmp: its passive setting
        # OpenBLAS: idle pool threads spin 2^4 cycles (its minimum) before they sleep,
        # against 2^28 by default (about 70 ms of a CPU after every call measured here)
        "OPENBLAS_THREAD_TIMEOUT": "4",
    }

    def environment(self) -> dict:
        return dict(self.VARIABLES)


class _PartitionSession(Session):
    def cpus(self, j: int) -> frozenset:
        cpus, jobs = self.setup.cpus, self.setup.jobs
        return frozenset(partition(j, t, jobs, cpus) for t in range(len(cpus)))


class Partition(CommandPolicy):
    """``partition``: job j confined to its own N/J CPUs (jobs share CPUs round-robin when
    J > N); the static reference. Runtimes size their pools from the CPUs they may use, so
    this is the one policy under which thread counts change."""

    name = "partition"
    description = "each job confined to its own N/J CPUs (affinity)"
    session_class = _PartitionSession


class _GangSession(Session):
    def __init__(self, policy, setup):
        super().__init__(policy, setup)
        self.gang: GangScheduler | None = None

    @contextlib.contextmanager
    def supervise(self, jobs):
        with GangScheduler(jobs.pids, self.setup.quantum_s) as gang:
            self.gang = gang
            yield self

    def ended(self, j: int) -> None:
        if self.gang is not None:
            self.gang.ended(j)

    def counters(self, j: int) -> dict:
        return self.gang.counters(j) if self.gang is not None else {}


class Gang(CommandPolicy):
    """``gang``: whole jobs time-sliced across the node (SIGSTOP/SIGCONT of each job's
    process group), a quantum each in turn, switched early when every thread of the
    running job is blocked."""

    name = "gang"
    description = ("whole jobs time-sliced (SIGSTOP/SIGCONT of each job's group) every "
                   "--quantum-ms, switched early when every thread of the running job is blocked")
    session_class = _GangSession


class CoopNeedsShim(CommandPolicy):
    """``coop`` for unmodified commands needs the cooperative LD_PRELOAD shim, which this
    build does not have: refused before anything starts."""

    name = "coop"
    description = "env plus the cooperative shim (LD_PRELOAD): not available in this build"

    def refusal(self, argvs: list) -> str | None:
        return ("--policy coop with --cmd needs the cooperative shim (an LD_PRELOAD library), "
                "which this hybridsched does not have; use --policy env or gang")


CMD_POLICIES = {p.name: p for p in (CommandPolicy(), Env(), Partition(), Gang(), CoopNeedsShim())}
