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

``coop`` is ``env`` plus the cooperative shim: each job a job of the arbiter
(:class:`~hybridsched.coop.shimjob.ShimJob`), every thread of its command running only
while it holds a token.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Callable, cast

from ..coop.arbiter import MAX_JOBS, Arbiter
from ..coop.refusal import shim_refusal
from ..coop.shimjob import WAIT_POLICY_ENV, ShimJob, preflight
from ..coop.sweep import sweep
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

    def after_death(self) -> Callable[[], None] | None:
        """What the jobs' guardian runs once they are gone, should colocate be killed
        outright (the policy's shared state to clean; none)."""
        return None


class CommandPolicy:
    """``linux``: the commands as given, nothing changed (the base of every policy)."""

    name = "linux"
    description = "the commands as given: nothing changed"
    session_class = Session

    def refusal(self, argvs: list) -> str | None:
        """Why these jobs (one argv each) cannot run under this policy; None if they can."""
        return None

    def ready(self, setup: Setup) -> None:
        """Refuse (UsageError) what a session with ``setup`` would, before an experiment
        writes anything or runs another policy: what needs the node's state (a segment in
        use) or a build, which :meth:`refusal` does not look at."""

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
    # the runtimes' wait policies set to block (one definition, shared with `coop exec`)
    VARIABLES = WAIT_POLICY_ENV

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
    def __init__(self, policy: "CommandPolicy", setup: Setup):
        super().__init__(policy, setup)
        self.scheduler = cast("Gang", policy).scheduler  # the session of Gang and Serial
        self.gang: GangScheduler | None = None

    @contextlib.contextmanager
    def supervise(self, jobs):
        with self.scheduler(jobs.pids, self.setup.quantum_s) as gang:
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

    def scheduler(self, pgids: list, quantum_s: float) -> GangScheduler:
        return GangScheduler(pgids, quantum_s)


class Serial(Gang):
    """``serial``: the jobs one after the other, each alone on the node until its command
    ends (gang's stop and continue, with neither a quantum nor an early switch): what a
    batch queue gives, the reference co-location is measured against, and the bound of
    time slicing whole jobs, which cannot beat it."""

    name = "serial"
    description = "the jobs one after the other, each alone on the node (the reference)"

    def scheduler(self, pgids: list, quantum_s: float) -> GangScheduler:
        return GangScheduler(pgids, math.inf, early_switch=False)


class _CoopSession(Session):
    """The arbiter attached and one ShimJob per job, entered before the jobs are forked
    (the first builds the shim: never inside the timed region) and left after they are
    reaped (leaving frees whatever the command's threads still held)."""

    def __enter__(self) -> "_CoopSession":
        setup = self.setup
        try:
            arbiter = self.arbiter = self.stack.enter_context(
                Arbiter(setup.cpus, setup.quantum_s, setup.arbiter_path))
            arbiter.require_quantum()
            self.shims = [self.stack.enter_context(ShimJob(arbiter, cpus=setup.cpus))
                          for _ in range(setup.jobs)]
        except BaseException:  # no __exit__ for a failed __enter__: the segment went with it
            self.stack.close()
            raise
        return self

    def env(self, j: int) -> dict:
        base = dict(self.policy.environment())
        return {**base, **self.shims[j].env()}

    def counters(self, j: int) -> dict:
        return self.shims[j].counters().as_dict()

    def after_death(self) -> Callable[[], None] | None:
        # the segment goes if no participant is left (the node's: others may use it)
        return functools.partial(sweep, self.arbiter.path)


class Coop(Env):
    """``coop``: ``env`` plus the cooperative shim (an LD_PRELOAD library): every thread of
    each job runs only while it holds one of the arbiter's tokens, and gives it up when it
    blocks (seed 001's SCHED_COOP)."""

    name = "coop"
    description = ("env plus the cooperative shim (LD_PRELOAD): a thread runs only while it "
                   "holds one of the arbiter's tokens, and leaves its CPU only when it blocks")
    session_class = _CoopSession

    def refusal(self, argvs: list) -> str | None:
        if len(argvs) > MAX_JOBS - 1:  # the arbiter's table also holds colocate's own seat
            return (f"--policy coop runs at most {MAX_JOBS - 1} jobs (the arbiter's table holds "
                    f"colocate's own seat too), got {len(argvs)}")
        return next((why for why in map(shim_refusal, argvs) if why), None)

    def ready(self, setup: Setup) -> None:
        preflight(setup.cpus, setup.quantum_s, setup.arbiter_path)


CMD_POLICIES = {p.name: p for p in (CommandPolicy(), Env(), Partition(), Gang(), Serial(), Coop())}
