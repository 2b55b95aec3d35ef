"""The one event loop (oslayer/events.py, ProcessTeam.wait) and the one seat on the coop
arbiter (coop/seat.py) that every backend's worker runs its chunks in."""
from __future__ import annotations

import os

import pytest

from hybridsched.backends import get_backend
from hybridsched.backends.base import job_for
from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.seat import Seated
from hybridsched.errors import BrokenRun, WorkerLost
from hybridsched.oslayer.events import READ, WRITE, EventLoop
from hybridsched.oslayer.proctree import ProcessTeam
from hybridsched.oslayer.cpus import usable_cpus
from hybridsched.records import RunConfig
from hybridsched.workloads.slab import Slab


def test_the_loop_calls_every_ready_handler_and_none_removed_in_the_same_round():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    r3, w3 = os.pipe()
    try:
        os.write(w1, b"a")
        os.write(w2, b"b")
        loop = EventLoop()
        seen = []

        def first(fd):
            seen.append(os.read(fd, 1))
            loop.discard(r2)  # ready too, but removed before its turn

        loop.add(r1, first)
        loop.add(r2, lambda fd: seen.append(os.read(fd, 1)))
        loop.add(w3, lambda fd: seen.append("writable"), WRITE)
        loop.add(r3, lambda fd: seen.append("never"), READ)  # nothing written to it
        loop.once()
        assert seen == [b"a", "writable"]
        assert r2 not in loop and len(loop) == 3
        loop.discard(r1)
        loop.discard(w3)
        loop.once(0)  # r3 still empty: returns at once, no handler
        assert seen == [b"a", "writable"]
    finally:
        for fd in (r1, w1, r2, w2, r3, w3):
            os.close(fd)


def _reader(team, got):
    def read(fd):
        data = os.read(fd, 16)
        if data:
            got.append(data)
        else:
            team.events.discard(fd)  # EOF: every writer has ended
    return read


def _team_of_two(body):
    team = ProcessTeam("loops", 2, 1)
    team.__enter__()
    r, w = team.pipe()
    for i in range(2):
        team.spawn(i, lambda i: body(i, w), keep_fds=(w,))
    team.close_fd(w)
    return team, r


def _second_fails(i: int, w: int) -> None:
    os.write(w, str(i).encode())
    if i == 1:
        raise ValueError("worker 1 fails")


def test_a_team_waits_on_its_workers_and_a_pipe_together_and_names_the_lost_one():
    team, r = _team_of_two(_second_fails)
    with team:
        team.events.add(r, _reader(team, []))
        with pytest.raises(WorkerLost) as err:
            team.wait()
        assert err.value.worker == 1 and err.value.exception == "ValueError"


def test_a_team_hands_a_lost_worker_to_on_lost_and_waits_for_the_rest():
    team, r = _team_of_two(_second_fails)
    with team:
        got, lost = [], []
        team.events.add(r, _reader(team, got))
        team.wait(lambda w: lost.append((w, set(team.running))))
        assert not team.running
        assert lost[0][0] == 1 and 1 not in lost[0][1]
        # what each worker wrote before it ended was read in the same wait
        assert sorted(b"".join(got)) == sorted(b"01")


class _Recording:
    """Stands for a coop worker: says which calls the seat made, in order."""

    def __init__(self, fail_acquire: bool = False):
        self.calls: list[str] = []
        self.fail_acquire = fail_acquire

    def acquire(self):
        self.calls.append("acquire")
        if self.fail_acquire:
            raise RuntimeError("taken away")

    def boundary(self):
        self.calls.append("boundary")

    def block(self):
        self.calls.append("block")

    def leave(self):
        self.calls.append("leave")


def test_the_seat_leaves_on_every_way_out_and_hands_the_token_on_around_a_wait():
    wk = _Recording()
    with pytest.raises(ZeroDivisionError):
        with Seated(wk) as seat:
            seat.boundary()
            assert seat.wait(lambda x: wk.calls.append("wait") or x, 7) == 7
            1 / 0
    assert wk.calls == ["acquire", "boundary", "block", "wait", "acquire", "leave"]
    failing = _Recording(fail_acquire=True)
    with pytest.raises(RuntimeError):
        with Seated(failing):
            pass
    assert failing.calls == ["acquire", "leave"]  # the slot is given back all the same
    with Seated(None) as seat:
        assert seat.boundary is None and seat.wait(len, "ab") == 2


def _boom(work, first, count):
    raise ValueError("a kernel that fails")


@pytest.mark.parametrize("scheduler", ["dynamic", "prolific", "pipe-MtoM"])
def test_a_worker_whose_kernel_raises_leaves_its_seat_at_once(scheduler, seg):
    """The slot is free when the run has failed: nobody had to find the worker dead
    (with no waiter, nobody would look)."""
    with Slab(8, 2, 8, 1) as slab, Arbiter(path=seg, cpus=usable_cpus()[:1]) as arb:
        slab.fresh_copy()
        job = job_for(RunConfig(scheduler, 1, 8, 2, 8), slab.work, original=slab.original)
        job.kernel = _boom
        job.coop, job.coop_job = arb, arb.join_job()
        with pytest.raises(BrokenRun) as err:
            get_backend(job.info.backend)(job)
        assert err.value.exception == "ValueError"
        assert not arb.state.workers["used"].any()
        arb.leave_job(job.coop_job)
