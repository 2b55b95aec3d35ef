"""The profiling run of fac, faca, fsc, tap, bold, wf and auto: LB4OMP's ``profiling``
schedule (chunk 1, one time per iteration) made by the package itself, untimed, before the
first timed run of a loop; kept per loop in the job's memory, stored with every run that
used it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..backends.base import Job
from ..backends.threads import execute
from ..core import registry
from ..core.techniques.dispense import loop_key
from ..core.techniques.profiled import Profile, profile_of
from ..errors import HybridschedError

def prepare(job: Job) -> None:
    """Run the entry's untimed preparation for ``job``: the loop's profile when its
    technique needs one (registry ``profiled``), then the entry's own (auto-sim's
    predictions); a failure says which of the two failed."""
    if job.info.profiled:
        try:
            attach(job)
        except HybridschedError as exc:
            raise HybridschedError(f"profiling run: {exc}") from exc
    if job.info.prepare is not None:
        try:
            job.info.prepare(job)
        except HybridschedError as exc:
            raise HybridschedError(f"{job.scheduler}'s preparation: {exc}") from exc


def attach(job: Job) -> None:
    """Give ``job`` its loop's profile (``job.params['profile']``, ``job.extra['profile']``)."""
    key = ("profile",) + loop_key(job)[1:]
    pr = job.memory.profiles.get(key)
    if pr is None:
        pr = job.memory.profiles[key] = run_profile(job)
    job.params["profile"] = pr
    job.extra["profile"] = pr.to_dict()


def run_profile(job: Job) -> Profile:
    """One dynamic,1 run of the job's kernel on its workers over its tensor; the tensor
    is put back from ``job.original`` when there is one (the timed run starts from a
    fresh copy anyway)."""
    dyn = replace(job, info=registry.get("dynamic"), chunk=1, params={}, extra={})
    ex = execute(dyn)
    if job.original is not None:
        np.copyto(job.work, job.original)
    return profile_of(ex.trace, len(ex.workers))
