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

import contextlib
import os
import signal
import time
from time import perf_counter
from typing import Callable

import numpy as np

from ..coop.arbiter import Arbiter
from ..coop.shimjob import preflight
from ..errors import ArbiterInUse
from ..oslayer import futex
from ..oslayer.cpus import usable_cpus
from ..oslayer.events import readable
from ..oslayer.proctree import ProcessTeam
from ..oslayer.shm import SharedArrays
from ..oslayer.signals import signals_held
from .spec import POLICIES, ColocateSpec, JobRecord, Policy

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
    failed: dict[int, str] = {}
    job_ids: list[int] = []
    with contextlib.ExitStack() as stack:
        sh = stack.enter_context(_shared(J * P, spec.steps))
        ctx = kind.prepare(spec, J, P)
        stack.callback(kind.close, ctx)
        with signals_held():  # an attachment and its release registered together
            arbiter = stack.enter_context(Arbiter(cpus, spec.quantum_s, arbiter_path)) \
                if policy.coop else None
            if arbiter is not None:  # after the jobs' teams: their workers die with them
                stack.callback(arbiter.settle)
                arbiter.require_quantum()
            if arbiter is not None:
                for _ in range(J):
                    job_ids.append(arbiter.join_job())
                    stack.callback(arbiter.leave_job, job_ids[-1])
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
                if not kind.sets_times:
                    row["end"] = perf_counter()
                inv1, rq1 = kind.counters()
                row["invol"], row["runq_ns"] = inv1 - inv0, rq1 - rq0
                row["done"] = 1
                team.end(w, token)

            for w in range(J * P):
                team.spawn(w, body)
            t0 = _open_gate(team, sh, P, failed)
            _wait_jobs(team, P, failed)
        return _records(spec, policy, rep, sh, kind, ctx, failed, t0, P)


def _fail_job(team: ProcessTeam, w: int, P: int, failed: dict[int, str], when: str = "") -> None:
    """Worker w died unfinished: its job fails (the reason kept), its partners are killed
    (they would wait for it forever); the other jobs go on."""
    j = w // P
    if j in failed:
        return
    team.reap(w)
    failed[j] = f"{team.lost(w)}{when}"
    for other in range(j * P, (j + 1) * P):
        if other != w and int(team.pids[other]) not in team.statuses:  # never a reaped pid
            try:
                os.kill(int(team.pids[other]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _open_gate(team: ProcessTeam, sh: SharedArrays, P: int, failed: dict[int, str]) -> float:
    """Release every worker at once, once all the workers of the jobs still alive are
    forked and waiting (a job whose worker died meanwhile has failed, before the start);
    returns the common start time."""
    while True:
        alive = [w for w in range(len(sh.rows)) if w // P not in failed]
        if (sh.rows["ready"][alive] == 1).all():
            break
        for w in alive:
            fd = team.pidfds.get(w)
            if fd is not None and readable(fd) and not team.exited(w):
                _fail_job(team, w, P, failed, " before the start")
        time.sleep(0.001)
    t0 = perf_counter()
    sh.gate[0] = 1
    futex.wake(futex.address(sh.gate, 0), 1 << 30)
    return t0


def _wait_jobs(team: ProcessTeam, T: int, failed: dict[int, str]) -> None:
    """Wait for every worker; a worker that dies kills the rest of its job only."""
    team.wait(lambda w: _fail_job(team, w, T, failed))


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


def check_ready(spec: ColocateSpec, cpus: list[int] | None = None,
                arbiter_path: str | None = None) -> None:
    """Refuse now (UsageError) what a policy of ``spec`` would refuse only as its turn came,
    other policies' repetitions run and stored by then: the coop shim (built here if
    missing) and the node's arbiter (another user's segment, other CPUs or another quantum
    while in use)."""
    cpus = cpus or usable_cpus()
    if spec.commands:
        from .cmdrun import ready

        ready(spec, cpus, arbiter_path)
    elif any(POLICIES[name].coop for name in spec.policies):
        preflight(cpus, spec.quantum_s, arbiter_path, shim=False)


def run_colocate(spec: ColocateSpec, on_records: Callable[[list[JobRecord]], None],
                 cpus: list[int] | None = None, arbiter_path: str | None = None) -> list[JobRecord]:
    """Every policy x repetition, interleaved (rep 0 of each policy, then rep 1, ...) so a
    slow drift of the machine does not favour one policy. A caller that stores the records
    calls :func:`check_ready` before it makes its file (the CLI does)."""
    from .work import iters_per_us

    if spec.commands:  # unmodified commands: their own runtimes, their own policies
        from .cmdrun import run_commands_once

        def once(name, rep):
            return run_commands_once(spec, name, rep, cpus, arbiter_path)
    else:
        iters_per_us()  # calibrate and compile before any fork

        def once(name, rep):
            return run_once(spec, POLICIES[name], rep, cpus, arbiter_path)
    out = []
    for rep in range(spec.reps):
        for name in spec.policies:
            try:
                recs = once(name, rep)
            except ArbiterInUse as exc:  # taken since the study began (check_ready passed)
                recs = spec.not_run(name, rep, str(exc))
            on_records(recs)  # a repetition's jobs are stored together
            out.extend(recs)
    return out
