"""Compiling (or loading from numba's cache) every compiled path of the arbiter in this
process, on a private state: called before any worker forks, so no child pays a compile
while holding the arbiter's lock on its first hand-off."""
from __future__ import annotations

import numpy as np

from ..oslayer import native
from ..oslayer.signals import loading
from . import handoff, rules
from .state import State


def _rules() -> None:
    st = State.private([0], 1, max_jobs=2, max_workers=4)
    j = st.join_job(1)
    a, b = st.join_worker(j, 1), st.join_worker(j, 1)
    st.acquire(a, 0)
    st.lazy_park(a)
    st.lazy_resume(a)
    st.acquire(b, 0)
    st.expired(a, 2)
    st.boundary(a, 2)
    st.release(b, 3)
    st.try_acquire(b, 3)
    st.revoke_holder(b, 3)
    st.leave_worker(a, 4)
    rules.running_all(st.workers, st.wake[:0])


def _handoff() -> None:
    st = State.private([0], 1, max_jobs=2, max_workers=4)
    S = handoff.regions(st)
    arrive = np.zeros(2, np.int64)
    parked = np.zeros(2, np.int64)
    bslot = np.full(2, -1, np.int32)
    release = np.zeros(1, np.int32)
    arrive[:] = 1
    handoff.open_coop(S, release, parked, bslot, 1)
    handoff.wait_coop(S, arrive, release, parked, bslot, 0, 0, 1, handoff.BLOCK, 0, 0,
                      np.zeros(1, np.int64))
    handoff.wait_token(S, 0, 0)  # slot 0 is free: TAKEN at once
    handoff.post(S, -1)


@loading
def prepare() -> None:
    """Every rule, every hand-off entry point and the Python-side lock helpers."""
    _rules()
    _handoff()
    native.prepare()
