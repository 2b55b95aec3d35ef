"""What a `colocate` experiment is: its options (:class:`ColocateSpec`), the placement
policies (data: a function from (job, worker) to a CPU, not names tested in the code) and
one ``/colocate`` row (:class:`JobRecord`)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable

from ..coop.arbiter import DEFAULT_QUANTUM_S, MAX_JOBS as COOP_TABLE, check_quantum
from ..coop.barrier import POLICIES as BARRIERS
from ..coop.shimjob import JOB_ENV
from ..errors import UsageError
from .cmdline import parse_command
from .cmdpolicy import CMD_POLICIES
from .placement import partition, unpinned

WORKLOADS = ("bsp", "blas", "run")
CMD = "cmd"                 # the workload of unmodified commands (--cmd)
CMD_DEFAULT_POLICIES = ["linux", "env", "gang"]
MAX_JOBS = 64
MAX_WORKERS = 1024          # per job
MAX_STEPS = 1_000_000
MAX_STEP_US = 10_000_000    # 10 s per step is surely a typo
MAX_TRACE = 20_000_000      # jobs x workers x steps timestamps kept for the barrier check


# --- placement policies: data, not names tested in the code ------------------------------

@dataclass(frozen=True)
class Policy:
    name: str
    place: Callable[[int, int, int, list[int]], int]  # (job, worker, jobs, cpus) -> cpu or -1
    coop: bool = False
    description: str = ""


POLICIES = {p.name: p for p in (
    Policy("linux", unpinned, description="plain Linux scheduling: every worker runnable, unpinned"),
    Policy("coop", unpinned, coop=True,
           description="the cooperative arbiter: one token per CPU, switch only at scheduling points"),
    Policy("partition", partition, description="each job pinned to its own N/J CPUs"),
)}


# The longest --timeout accepted: a week, past any run one would leave unattended
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# grep's character classes, which Python's re reads as a set of their letters
_POSIX_CLASS = re.compile(r"\[:(alnum|alpha|blank|cntrl|digit|graph|lower|print|punct|space|"
                          r"upper|xdigit):\]")


@dataclass
class ColocateSpec:
    workload: str = "bsp"
    jobs: int = 2
    workers: int = 0                 # per job; 0 = N
    policies: list[str] = field(default_factory=lambda: ["linux", "coop"])
    barrier: str = "spin-block"
    step_us: float = 200.0
    steps: int = 500
    reps: int = 3
    quantum_s: float = DEFAULT_QUANTUM_S
    matrix: int = 384                # blas: n of the n x n products (~10 ms a call on 2 cores)
    scheduler: str = "dynamic"       # run: the scheduler every job runs (--steps frames of H x W)
    height: int = 256
    width: int = 256
    commands: list[str] = field(default_factory=list)  # cmd: one per job, as given
    # cmd: a regex a job's stdout must match to verify: one for every job, or one per job
    # (a list, as many as the commands); stored as given, so one string keeps the id
    expect: str | list[str] = ""
    timeout_s: float = 0.0           # cmd: a job still running this long is killed (0: never)

    def validate(self, n: int) -> None:
        if os.environ.get(JOB_ENV):  # inherited: "linux" would not be plain Linux
            raise UsageError(f"colocate: this is a command of a coop job ({JOB_ENV} is set), "
                             "whose shim its jobs would run under whatever the policy: run "
                             "colocate outside `coop exec`")
        if self.commands:
            self._validate_commands()
            return
        if self.workload not in WORKLOADS:
            raise UsageError(f"unknown workload {self.workload!r}; choose from {', '.join(WORKLOADS)}")
        bad = [p for p in self.policies if p not in POLICIES]
        if bad and bad[0] in CMD_POLICIES:
            raise UsageError(f"--policy {bad[0]}: for unmodified commands (--cmd) only; "
                             f"--workload {self.workload} takes {', '.join(POLICIES)}")
        if bad or not self.policies:
            raise UsageError(f"unknown policy {bad[0] if bad else ''!r}; choose from {', '.join(POLICIES)}")
        if self.barrier not in BARRIERS:
            raise UsageError(f"unknown barrier {self.barrier!r}; choose from {', '.join(BARRIERS)}")
        if not 1 <= self.jobs <= MAX_JOBS:
            raise UsageError(f"--jobs must be from 1 to {MAX_JOBS}, got {self.jobs}")
        if self.workers == 0:
            self.workers = n
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"--workers must be from 1 to {MAX_WORKERS}, got {self.workers}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(f"--steps must be from 1 to {MAX_STEPS}, got {self.steps}")
        if not 0 < self.step_us <= MAX_STEP_US:
            raise UsageError(f"--step-us must be above 0 and at most {MAX_STEP_US}, got {self.step_us}")
        if self.reps < 1:
            raise UsageError(f"--reps must be at least 1, got {self.reps}")
        check_quantum(self.quantum_s)
        if self.workload == "run":
            from ..core import registry
            from ..workloads.slab import check_sizes

            if self.scheduler in ("paper", "all", "techniques"):
                raise UsageError(f"--scheduler {self.scheduler}: every job runs one scheduler; "
                                 "name one (see `hybridsched list`)")
            # a user technique's reference runs (and is stored) under its name
            self.scheduler = registry.get(self.scheduler).name
            check_sizes(self.steps, self.height, self.width, copies=2 * self.jobs)
        if not 16 <= self.matrix <= 8192:
            raise UsageError(f"--matrix must be from 16 to 8192, got {self.matrix}")
        if "coop" in self.policies and self.jobs > COOP_TABLE - 1:
            # the arbiter's job table also holds the experiment's own attachment
            raise UsageError(f"--jobs {self.jobs}: with --policy coop at most {COOP_TABLE - 1} jobs "
                             "(the arbiter's table holds the experiment's own seat too)")
        if self.jobs * self.workers * self.steps > MAX_TRACE:
            raise UsageError(f"{self.jobs} jobs x {self.workers} workers x {self.steps} steps is more "
                             f"than {MAX_TRACE:,} barrier timestamps to keep; fewer --steps")

    def _validate_commands(self) -> None:
        """--cmd: the commands (all found before anything starts), J, the policies (each
        able to run these commands), --timeout, --expect."""
        self.workload = CMD
        J = len(self.commands)
        if J > 1 and self.jobs not in (0, J):
            raise UsageError(f"--jobs {self.jobs} with {J} --cmd: J is the number of --cmd "
                             "(--jobs copies a single --cmd)")
        if isinstance(self.expect, list) and len(self.expect) != J:
            raise UsageError(f"--expect given {len(self.expect)} times with {J} --cmd: give it "
                             f"once (for every job) or {J} times (one per --cmd, in their order)"
                             if J > 1 else f"--expect given {len(self.expect)} times with one "
                             "--cmd: give it once (it holds for every copy of the command)")
        if J == 1 and self.jobs > 1:
            self.commands = self.commands * self.jobs
        self.jobs = len(self.commands)
        if not 1 <= self.jobs <= MAX_JOBS:
            raise UsageError(f"--jobs must be from 1 to {MAX_JOBS}, got {self.jobs}")
        parsed = {c: list(parse_command(c).argv) for c in dict.fromkeys(self.commands)}
        argvs = [parsed[c] for c in self.commands]  # one per job
        bad = [p for p in self.policies if p not in CMD_POLICIES]
        if bad or not self.policies:
            raise UsageError(f"unknown policy {bad[0] if bad else ''!r} for --cmd; choose from "
                             f"{', '.join(CMD_POLICIES)}")
        check_quantum(self.quantum_s)
        if self.reps < 1:
            raise UsageError(f"--reps must be at least 1, got {self.reps}")
        if not 0 <= self.timeout_s <= MAX_TIMEOUT_S:
            raise UsageError(f"--timeout must be above 0 and at most {MAX_TIMEOUT_S:g} s, "
                             f"got {self.timeout_s:g}")
        for name in self.policies:
            why = CMD_POLICIES[name].refusal(argvs)
            if why:
                raise UsageError(why)
        for pattern in self.expect if isinstance(self.expect, list) else [self.expect]:
            try:
                pattern.encode("utf-8")  # matched against output decoded as UTF-8
                with warnings.catch_warnings():
                    # re's FutureWarnings (a set like [a&&b] whose meaning may change) went
                    # to stderr with the line of our source that compiled it (the review)
                    warnings.simplefilter("ignore", FutureWarning)
                    re.compile(pattern)
            except UnicodeEncodeError:
                raise UsageError(f"--expect {pattern!r}: not UTF-8 text") from None
            except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}; (((...)))
                what = exc if isinstance(exc, re.error) else type(exc).__name__
                raise UsageError(f"--expect {pattern[:60]!r}: not a regular expression we can "
                                 f"use ({what})") from None
            posix = _POSIX_CLASS.search(pattern)
            if posix:  # re reads [[:alpha:]] as a set of '[', ':', 'a'...: every job failed
                raise UsageError(f"--expect {pattern[:60]!r}: {posix.group()} is grep's, not "
                                 "Python's re (write [A-Za-z] or \\w for [:alpha:], \\d for "
                                 "[:digit:], \\s for [:space:])")

    def expect_for(self, job: int) -> str:
        """The --expect of job ``job`` ("" for none)."""
        return self.expect[job] if isinstance(self.expect, list) else self.expect

    def experiment_id(self) -> str:
        """Names one experiment of commands in the table (its rows pooled by the report):
        the commands of the jobs, in order, and --expect."""
        text = json.dumps([self.commands, self.expect])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.commands:
            # what each policy sets in the jobs' environment, and what ours held for those
            # variables (inherited by every job, `linux` included)
            d["environment"] = {p: CMD_POLICIES[p].environment() for p in self.policies}
            names = sorted({k for env in d["environment"].values() for k in env})
            d["inherited_environment"] = {k: os.environ.get(k) for k in names}
        return d

    def not_run(self, policy: str, rep: int, why: str) -> list["JobRecord"]:
        """The records of a turn of ``policy`` that could not start (``why``): every job
        failed, with no time."""
        nan, J = math.nan, self.jobs
        if self.commands:
            return [JobRecord("cmd", policy, "", J, j, 0, rep, 0.0, 0, nan, nan, nan, nan, nan,
                              nan, False, f"not run: {why}", command=self.commands[j],
                              experiment=self.experiment_id(), counters="{}")
                    for j in range(J)]
        return [JobRecord(self.workload, policy, self.barrier, J, j, self.workers, rep,
                          self.step_us, self.steps, nan, nan, nan, nan, nan, nan, False,
                          f"not run: {why}", self.matrix if self.workload == "blas" else 0,
                          self.scheduler if self.workload == "run" else "")
                for j in range(J)]


@dataclass
class JobRecord:
    """One row of ``/colocate``: one job in one repetition of one policy."""

    workload: str
    policy: str
    barrier: str
    jobs: int
    job: int
    workers: int
    rep: int
    step_us: float
    steps: int
    time_s: float
    makespan_s: float
    invol_ctx: float        # involuntary context switches per worker
    runq_wait_s: float      # run-queue wait per worker (schedstat)
    spin_s: float           # time spent spinning in the barrier, per worker
    switches: float         # coop: token grants after waiting, per worker
    verified: bool
    error: str = ""
    matrix: int = 0         # blas: n of the products (0 for bsp)
    scheduler: str = ""     # run: the scheduler every job ran
    # format version 3: unmodified commands (--cmd); "" / 0 / NaN for the built-in workloads
    command: str = ""       # the job's command, as given
    experiment: str = ""    # ColocateSpec.experiment_id(): which rows are one experiment
    exit_status: int = 0    # the command's (negative: killed by that signal)
    cpu_s: float = math.nan  # user + system CPU seconds (wait4: descendants waited for too)
    nivcsw: float = math.nan  # involuntary context switches of the job (wait4)
    counters: str = ""      # the policy's own counts for the job, JSON
    out_tail: str = ""      # a failed job's last stdout ...
    err_tail: str = ""      # ... and stderr
