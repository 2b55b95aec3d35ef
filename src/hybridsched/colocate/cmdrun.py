"""One repetition of unmodified commands (`colocate --cmd`) under one policy.

The jobs are forked, placed and given their environment by the policy's session, wait at
the start gate, and exec their commands when it opens (:class:`CommandJobs`); the policy
supervises them while they run (gang: the switching thread); each job's end is seen at
once, its group killed and reaped with its rusage. A job verifies when its command exits
with status 0 and, with --expect, its stdout matches; only a verified job's time is kept.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
from collections.abc import Iterable

from ..errors import ResourceError, UsageError
from ..oslayer.cmdjobs import LINE_MAX, TIMEOUT_GRACE_S, CommandJobs, Exit, Launch
from ..oslayer.cpus import usable_cpus
from .cmdline import parse_command
from .cmdpolicy import CMD_POLICIES, Setup
from .spec import ColocateSpec, JobRecord

TAIL = 1000  # bytes of a failed job's stdout and stderr kept in its row (the table's fields)


def run_commands_once(spec: ColocateSpec, name: str, rep: int, cpus: list[int] | None = None,
                      arbiter_path: str | None = None) -> list[JobRecord]:
    """Every job of ``spec`` together under policy ``name``; one record per job."""
    cpus = cpus or usable_cpus()
    policy = CMD_POLICIES[name]
    try:
        commands = [parse_command(c) for c in spec.commands]
    except UsageError as exc:  # checked as the study began (spec.validate): changed since
        raise ResourceError(f"{exc}, since the study began; the repetitions run so far are "
                            "kept") from None
    setup = _setup(spec, cpus, arbiter_path, [list(c.argv) for c in commands])
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(policy.session(setup))
        launches = []
        for j, c in enumerate(commands):
            env = dict(os.environ)
            env.update(session.env(j))
            mine = session.cpus(j)
            # every job on the run's CPUs at most: those the policies share out
            launches.append(Launch(c.argv, c.path, env, mine or (
                frozenset(cpus) if set(cpus) != os.sched_getaffinity(0) else None)))
        jobs = stack.enter_context(CommandJobs(launches, after=session.after_death()))
        jobs.wait_ready()
        with session.supervise(jobs):
            t0 = jobs.open_gate()
            exits = jobs.wait(session.ended, t0 + spec.timeout_s if spec.timeout_s else None)
        return _records(spec, name, rep, jobs, exits, t0, session)


def _setup(spec: ColocateSpec, cpus: list[int], arbiter_path: str | None,
           argvs: list[list[str]]) -> Setup:
    return Setup(cpus, spec.jobs, spec.quantum_s, argvs, arbiter_path)


def ready(spec: ColocateSpec, cpus: list[int], arbiter_path: str | None = None) -> None:
    """Every policy of ``spec`` ready to run its commands here (UsageError if one is not)."""
    setup = _setup(spec, cpus, arbiter_path,
                   [list(parse_command(c).argv) for c in spec.commands])
    for name in spec.policies:
        CMD_POLICIES[name].ready(setup)


def _verdict(spec: ColocateSpec, job: int, ex: Exit, stdout: Iterable[str | None]) -> str:
    """Why job ``ex`` does not verify ("" when it does); ``stdout``: its lines, all of
    them, which --expect is searched in one by one (None: a line too long to search)."""
    if ex.code < 0:
        return _killed(-ex.code)
    if ex.code:
        return f"exited with status {ex.code}"
    expect = spec.expect_for(job)
    if expect:
        pattern, unsearched = re.compile(expect), 0
        for line in stdout:
            if line is None:
                unsearched += 1
            elif pattern.search(line):
                return ""
        why = f"its stdout does not match --expect {expect!r}"
        return why + (f" ({unsearched} line{'s' * (unsearched > 1)} over {LINE_MAX >> 20} MiB "
                      f"{'were' if unsearched > 1 else 'was'} not searched)"
                      if unsearched else "")
    return ""


def _timed_out(spec: ColocateSpec, killed: bool) -> str:
    how = (f"killed, still running {TIMEOUT_GRACE_S:g} s after SIGTERM" if killed
           else "ended by SIGTERM")
    return f"ran past --timeout {spec.timeout_s:g} s and was {how}"


def _killed(sig: int) -> str:
    try:
        return f"was killed by signal {sig} ({signal.Signals(sig).name})"
    except ValueError:
        return f"was killed by signal {sig}"


def _records(spec, name, rep, jobs, exits, t0, session) -> list[JobRecord]:
    J = spec.jobs
    why, outs, counts = [], [], []
    for j in range(J):
        out, err = jobs.output(j)
        why.append(_timed_out(spec, j in jobs.killed) if j in jobs.timed_out
                   else _verdict(spec, j, exits[j], jobs.stdout_lines(j)))
        full = jobs.capture_full(j) if why[j] else ""
        if full:
            why[j] = f"{why[j]} ({full})"
        counts.append(session.counters(j))
        if not why[j] and counts[j].get("unmanaged"):  # not the policy's measurement
            why[j] = (f"{counts[j]['unmanaged']} of its threads ran unmanaged: the coop "
                      "arbiter's worker slots were all taken")
        outs.append((out, err))
    times = [exits[j].end - t0 if not why[j] else math.nan for j in range(J)]
    # the repetition's makespan only where every job verified: one that ended on a failure
    # (before or after the others) leaves no makespan worth a number
    makespan = max(times) if not any(why) else math.nan
    nan = math.nan
    recs = []
    for j in range(J):
        ex = exits[j]
        out, err = outs[j] if why[j] else ("", "")
        recs.append(JobRecord(
            "cmd", name, "", J, j, 0, rep, 0.0, 0, times[j], makespan, nan, nan, nan, nan,
            not why[j], why[j], 0, "", command=spec.commands[j],
            experiment=spec.experiment_id(), exit_status=ex.code, cpu_s=ex.cpu_s,
            nivcsw=float(ex.nivcsw), counters=json.dumps(counts[j], sort_keys=True),
            out_tail=out[-TAIL:], err_tail=err[-TAIL:]))
    return recs
