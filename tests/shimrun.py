"""What the shim's tests share: a command's environment under a ShimJob, and a look at
whether the job holds a token."""
from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Iterator

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.layout import RUNNING
from hybridsched.coop.shimjob import WAIT_POLICY_ENV, ShimJob
from hybridsched.oslayer.cpus import usable_cpus
from waiting import wait_until

CPUS = usable_cpus()
ONE = CPUS[:1]  # one token: every wait for it is contended


def environ(job: ShimJob, passive: bool = True) -> dict:
    env = dict(os.environ, **(WAIT_POLICY_ENV if passive else {}))
    env.update(job.env(env))
    return env


def run_under(job: ShimJob, argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=environ(job), capture_output=True, text=True, timeout=120, **kw)


@contextlib.contextmanager
def spinning(exe: str, flag, mode: str, job: ShimJob) -> Iterator[subprocess.Popen]:
    """spin_flag started under ``job`` (``mode`` wait or deaf), once it spins holding its
    token; killed and reaped on the way out."""
    pw = subprocess.Popen([exe, str(flag), mode], env=environ(job), stdout=subprocess.PIPE,
                          text=True)
    try:
        assert pw.stdout.readline() == "spinning\n"
        # its line is out before the write's lazy park ends (nobody waited): past it
        wait_until(lambda: holds_token(job), "the spinner holding its token")
        yield pw
    finally:
        pw.kill()
        pw.wait()


def holds_token(job: ShimJob) -> bool:
    w = job.arbiter.state.workers
    return bool(((w["used"] == 1) & (w["job"] == job.job) & (w["state"] == RUNNING)).any())


def job_slots(a: Arbiter, job: ShimJob) -> int:
    st = a.state
    return int(((st.workers["used"] == 1) & (st.workers["job"] == job.job)).sum())
