"""`hybridsched colocate`: J jobs started together on this node, each with T workers, under
plain Linux scheduling, the cooperative arbiter, or a static partition of the CPUs.

Each job's workers are forked processes (one process group for the whole experiment, so
cleanup reaches everyone); a common start gate releases all of them at once. The `bsp`
workload runs S-microsecond compute steps separated by the job's barrier
(:mod:`barrier`). Per job we record its time from the common start to its last worker's
end, the makespan over jobs, and per-worker interference: involuntary context switches and
run-queue wait (from /proc/thread-self/status and schedstat) and time spent spinning.

A worker that dies takes its job with it (its partners would wait at the barrier forever):
the job's other workers are killed and the job is recorded as failed; the other jobs go on,
and the arbiter reclaims the dead job's tokens.
"""
from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Callable

import numpy as np

from ..oslayer.proctree import ProcessTeam
from ..errors import UsageError
from ..oslayer.cpus import usable_cpus
from ..oslayer import futex
from ..oslayer.shm import SharedArrays
from .arbiter import DEFAULT_QUANTUM_S, Arbiter
from .barrier import POLICIES as BARRIERS

WORKLOADS = ("bsp", "blas", "run")
MAX_JOBS = 64
MAX_WORKERS = 1024          # per job
MAX_STEPS = 1_000_000
MAX_STEP_US = 10_000_000    # 10 s per step is surely a typo
MAX_TRACE = 20_000_000      # jobs x workers x steps timestamps kept for the barrier check


# --- placement policies: data, not names tested in the code ------------------------------

def _unpinned(j: int, t: int, jobs: int, cpus: list[int]) -> int:
    return -1


def _partition(j: int, t: int, jobs: int, cpus: list[int]) -> int:
    """Job j on its own N/J CPUs (jobs share CPUs round-robin when J > N)."""
    n = len(cpus)
    if jobs >= n:
        return cpus[j % n]
    share = n // jobs
    mine = cpus[j * share:(j + 1) * share]
    return mine[t % len(mine)]


@dataclass(frozen=True)
class Policy:
    name: str
    place: Callable[[int, int, int, list[int]], int]  # (job, worker, jobs, cpus) -> cpu or -1
    coop: bool = False
    description: str = ""


POLICIES = {p.name: p for p in (
    Policy("linux", _unpinned, description="plain Linux scheduling: every worker runnable, unpinned"),
    Policy("coop", _unpinned, coop=True,
           description="the cooperative arbiter: one token per CPU, switch only at scheduling points"),
    Policy("partition", _partition, description="each job pinned to its own N/J CPUs"),
)}


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

    def validate(self, n: int) -> None:
        if self.workload not in WORKLOADS:
            raise UsageError(f"unknown workload {self.workload!r}; choose from {', '.join(WORKLOADS)}")
        bad = [p for p in self.policies if p not in POLICIES]
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
        if not 0 < self.quantum_s <= 10:
            raise UsageError(f"--quantum-ms must be above 0 and at most 10000, got {self.quantum_s * 1e3}")
        if self.workload == "run":
            from ..core import registry
            from ..workloads.slab import check_sizes

            registry.get(self.scheduler)
            check_sizes(self.steps, self.height, self.width, copies=2 * self.jobs)
        if not 16 <= self.matrix <= 8192:
            raise UsageError(f"--matrix must be from 16 to 8192, got {self.matrix}")
        if self.jobs * self.workers * self.steps > MAX_TRACE:
            raise UsageError(f"{self.jobs} jobs x {self.workers} workers x {self.steps} steps is more "
                             f"than {MAX_TRACE:,} barrier timestamps to keep; fewer --steps")

    def to_dict(self) -> dict:
        return asdict(self)


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


_WORKER = np.dtype([("start", "f8"), ("end", "f8"), ("invol", "i8"), ("runq_ns", "i8"),
                    ("switches", "i8"), ("checksum", "f8"), ("ready", "i4"), ("done", "i4")])


def _shared(workers: int, steps: int) -> SharedArrays:
    """Anonymous shared memory for one experiment: the start gate, per-worker results and
    the per-step arrival/departure times (the barrier check)."""
    return SharedArrays([("gate", np.int32, 1), ("rows", _WORKER, workers),
                         ("arrive", np.float64, (workers, steps)),
                         ("depart", np.float64, (workers, steps))])


def run_once(spec: ColocateSpec, policy: Policy, rep: int, cpus: list[int] | None = None,
             arbiter_path: str | None = None) -> list[JobRecord]:
    """One repetition of one policy: every job together; one record per job."""
    from .workloads import WORKLOADS as KINDS

    cpus = cpus or usable_cpus()
    kind = KINDS[spec.workload]
    J = spec.jobs
    P = kind.processes_per_job(spec)      # forked processes per job
    sh = _shared(J * P, spec.steps)
    ctx = kind.prepare(spec, J, P)
    arbiter = Arbiter(cpus, spec.quantum_s, arbiter_path) if policy.coop else None
    failed: dict[int, str] = {}
    job_ids: list[int] = []
    try:
        if arbiter is not None:
            arbiter.__enter__()
            job_ids = [arbiter.join_job() for _ in range(J)]
        with ProcessTeam("colocate", J * P, 1) as team:
            def body(w: int) -> None:
                j, t = divmod(w, P)
                cpu = policy.place(j, t, J, cpus) if P > 1 else -1
                if cpu < 0 and os.sched_getaffinity(0) != set(cpus):
                    # unpinned, but on the run's CPUs only: the ones coop's tokens stand for
                    os.sched_setaffinity(0, cpus)
                token = team.begin(w, cpu)
                seat = (arbiter, job_ids[j]) if arbiter is not None else None
                run = kind.worker(spec, ctx, policy, cpus, j, t, w, sh, seat)
                row = sh.rows[w]
                row["ready"] = 1
                addr = futex.address(sh.gate, 0)
                while sh.gate[0] == 0:
                    futex.wait(addr, 0, 0.05)
                inv0, rq0 = kind.counters()
                row["start"] = perf_counter()
                row["checksum"], row["switches"] = run()
                if not getattr(run, "sets_times", False):
                    row["end"] = perf_counter()
                inv1, rq1 = kind.counters()
                row["invol"], row["runq_ns"] = inv1 - inv0, rq1 - rq0
                row["done"] = 1
                team.end(w, token)

            for w in range(J * P):
                team.spawn(w, body)
            t0 = _open_gate(team, sh)
            _wait_jobs(team, J, P, failed)
        return _records(spec, policy, rep, sh, kind, ctx, failed, t0, P)
    finally:
        if arbiter is not None:
            for j in job_ids:
                arbiter.leave_job(j)
            arbiter.close()
        kind.close(ctx)
        sh.close()


def _open_gate(team: ProcessTeam, sh: SharedArrays) -> float:
    """Release every worker at once, after all are forked and waiting (a dead one fails
    the experiment before it starts); returns the common start time."""
    while not (sh.rows["ready"] == 1).all():
        for w, fd in team.pidfds.items():
            if select.select([fd], [], [], 0)[0]:
                raise team.fail(w, " before the start")
        time.sleep(0.001)
    t0 = perf_counter()
    sh.gate[0] = 1
    futex.wake(futex.address(sh.gate, 0), 1 << 30)
    return t0


def _wait_jobs(team: ProcessTeam, J: int, T: int, failed: dict[int, str]) -> None:
    """Wait for every worker; a worker that dies kills the rest of its job only."""
    poller = select.poll()
    worker_of = {}
    for w, fd in team.pidfds.items():
        poller.register(fd, select.POLLIN)
        worker_of[fd] = w
    left = set(range(J * T))
    while left:
        for fd, _ in poller.poll():
            w = worker_of.pop(fd)
            poller.unregister(fd)
            left.discard(w)
            if team.exited(w):
                continue
            j = w // T
            if j not in failed:
                team.reap(w)
                failed[j] = str(team.lost(w))
                for other in range(j * T, (j + 1) * T):
                    if other in left:
                        try:
                            os.kill(int(team.pids[other]), signal.SIGKILL)
                        except ProcessLookupError:
                            pass


def _records(spec, policy, rep, sh, kind, ctx, failed, t0, P) -> list[JobRecord]:
    J, T = spec.jobs, spec.workers
    rows = sh.rows
    times = []
    for j in range(J):
        mine = rows[j * P:(j + 1) * P]
        times.append(float(mine["end"].max() - t0) if j not in failed else float("nan"))
    ok_times = [t for t in times if t == t]
    makespan = max(ok_times) if ok_times else float("nan")
    out = []
    for j in range(J):
        sl = slice(j * P, (j + 1) * P)
        mine = rows[sl]
        good = j not in failed and bool((mine["done"] == 1).all())
        verified = good and kind.verify(spec, ctx, sh, j, sl)
        out.append(JobRecord(spec.workload, policy.name, spec.barrier, J, j, T, rep, spec.step_us,
                             spec.steps, times[j], makespan, float(mine["invol"].sum()) / T,
                             # threads that ended mid-run take their counts with them: >= 0
                             max(0.0, float(mine["runq_ns"].sum()) / 1e9 / T),
                             kind.spin_s(ctx, sh, j, sl, T),
                             float(mine["switches"].sum()) / T, verified, failed.get(j, ""),
                             spec.matrix if spec.workload == "blas" else 0,
                             spec.scheduler if spec.workload == "run" else ""))
    return out


def run_colocate(spec: ColocateSpec, on_record: Callable[[JobRecord], None],
                 cpus: list[int] | None = None, arbiter_path: str | None = None) -> list[JobRecord]:
    """Every policy x repetition, interleaved (rep 0 of each policy, then rep 1, ...) so a
    slow drift of the machine does not favour one policy."""
    from .work import iters_per_us

    iters_per_us()  # calibrate and compile before any fork
    out = []
    for rep in range(spec.reps):
        for name in spec.policies:
            for rec in run_once(spec, POLICIES[name], rep, cpus, arbiter_path):
                on_record(rec)
                out.append(rec)
    return out
