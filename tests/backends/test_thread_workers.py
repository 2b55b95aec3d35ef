"""Thread-backend behaviour that the shared odd-shape suite cannot see: worker threads are
really pinned (or not), run the kernel in parallel (nogil), and are all gone after a run,
also when the main thread is interrupted."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from hybridsched import kernels
from hybridsched.backends import threads
from hybridsched.study.runner import timed_run
from hybridsched.oslayer.cpus import usable_cpus
from hybridsched.workloads.slab import Slab
from schedcheck import Shape, config, run

THREAD_SCHEDULERS = ["static", "dynamic", "guided", "chunk", "chunk-steal", "aimd", "adaptive"]


def our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("hybridsched-w")]


def recording_kernel(log: list):
    def kernel(t, first, count):
        log.append((first, threading.get_native_id(), frozenset(os.sched_getaffinity(0))))
        t[first:first + count].sort(axis=-1)
    return kernel


@pytest.mark.parametrize("scheduler", ["serial"] + THREAD_SCHEDULERS)
@pytest.mark.parametrize("affinity", [True, False], ids=["aff", "noaff"])
def test_workers_are_pinned_to_cpu_w_mod_n(monkeypatch, scheduler, affinity):
    log: list = []
    monkeypatch.setitem(kernels.KERNELS, "rec", (recording_kernel(log), "test kernel"))
    cpus = usable_cpus()
    k = 2 * len(cpus) + 1  # oversubscribed, so w mod N wraps
    rec, ok = run(config(scheduler, Shape("pin", 40, 1, 8, k), affinity, kernel="rec"))
    assert ok and rec.verified
    by_first = {first: mask for first, _, mask in log}
    for w, first in zip(rec.trace["worker"].tolist(), rec.trace["first"].tolist()):
        if affinity:
            assert by_first[first] == {cpus[w % len(cpus)]}, (w, first)
        else:
            assert by_first[first] == set(os.sched_getaffinity(0))
    # each worker is one thread: its chunks all ran on the same thread, others on others
    owner = {first: ident for first, ident, _ in log}
    idents = {}
    for w, first in zip(rec.trace["worker"].tolist(), rec.trace["first"].tolist()):
        idents.setdefault(w, set()).add(owner[first])
    assert all(len(s) == 1 for s in idents.values())
    assert len({next(iter(s)) for s in idents.values()}) == len(idents)
    assert our_threads() == []


def _spin_rate(seconds: float = 0.05) -> float:
    """Iterations per second of the spin loop below on this machine, now."""
    flag = threading.Event()
    spins, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if not flag.is_set():
            spins += 1
    return spins / (time.perf_counter() - t0)


@pytest.mark.parametrize("name", ["quicksort", "counting", "numpy"])
def test_kernels_release_the_gil(name):
    """nogil: while a thread sorts, the main thread keeps running Python. A kernel holding
    the GIL freezes this loop for its whole call; only the ~5 ms switch interval before the
    call gets spins in (measured: 0.02-0.1 of the call, against 0.6-1.0 with nogil)."""
    frames = 256 if name != "counting" else 1600  # counting is ~10x faster per row
    work = np.random.default_rng(1).integers(0, 256, (frames, 64, 640), dtype=np.uint8)
    kernel = kernels.get_kernel(name)
    inside, finished, took = threading.Event(), threading.Event(), []

    def sort():
        inside.set()
        t0 = time.perf_counter()
        kernel(work, 0, frames)
        took.append(time.perf_counter() - t0)
        finished.set()

    rate = _spin_rate()
    t = threading.Thread(target=sort)
    t.start()
    spins = 0
    while not finished.is_set():
        if inside.is_set():
            spins += 1
    t.join()
    assert (np.diff(work.astype(np.int16), axis=-1) >= 0).all()
    share = spins / (rate * took[0])
    assert share > 0.3, f"the main thread ran {share:.2f} of the kernel's {took[0]:.3f} s"


@pytest.mark.parametrize("late", [False, True], ids=["while-starting", "while-joining"])
@pytest.mark.parametrize("scheduler", THREAD_SCHEDULERS)
def test_ctrl_c_stops_and_joins_every_worker(monkeypatch, scheduler, late):
    # the chunk at which Ctrl-C comes: the first, or the one at which the last of the 3
    # workers has started (guided and the adaptive ones hand out only a few big chunks; the
    # paper's per-chunk adaptive may hand out nearly everything in its first six)
    at = 1 if not late else 3 if scheduler in ("guided", "adaptive", "adaptive-frame") else 60
    calls = []
    interrupted, sent, stopped = threading.Event(), threading.Event(), threading.Event()

    def on_sigint(signum, frame):
        interrupted.set()
        raise KeyboardInterrupt

    def slow(t, first, count):
        calls.append(count)
        if len(calls) == at:  # Ctrl-C arrives in the main thread mid-run
            sent.set()
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        elif len(calls) < at <= 3:
            # each of the 3 workers in its first chunk when it comes: a worker done with
            # one of the few big chunks first took all that was left (adaptive, loaded)
            sent.wait(10)
        if len(calls) >= at:
            # hold the work until the team has stopped the dispenser, however loaded the
            # machine is, so that there is work left for the stop to save
            stopped.wait(10)
        t[first:first + count].sort(axis=-1)

    real_exit = threads.ThreadTeam.__exit__

    def exit_seen(team, exc_type, *rest):
        if exc_type is not None:
            team.dispenser.stop()  # what the real exit does first (it may be done twice)
            stopped.set()
        return real_exit(team, exc_type, *rest)

    monkeypatch.setattr(threads.ThreadTeam, "__exit__", exit_seen)
    monkeypatch.setitem(kernels.KERNELS, "slow", (slow, "test kernel"))
    cfg = config(scheduler, Shape("int", 2000, 1, 4, 3, chunk=1), kernel="slow")
    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
            with pytest.raises(KeyboardInterrupt):
                timed_run(slab, cfg)
    finally:
        signal.signal(signal.SIGINT, old)
    assert interrupted.is_set()
    assert our_threads() == []
    assert len(calls) >= at
    assert sum(calls) < 2000  # stopped early, did not finish the study's work


def test_no_thread_left_after_runs():
    for s in THREAD_SCHEDULERS:
        rec, ok = run(config(s, Shape("t", 8, 1, 4, 3)))
        assert ok
    assert our_threads() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("hybridsched-")]


def test_serial_is_one_chunk_on_the_calling_thread(monkeypatch):
    log: list = []
    monkeypatch.setitem(kernels.KERNELS, "rec", (recording_kernel(log), "test kernel"))
    rec, ok = run(config("serial", Shape("s", 6, 2, 8, 1), kernel="rec"))
    assert ok and rec.workers_used == 1 and len(rec.trace) == 1
    assert [(f, ident) for f, ident, _ in log] == [(0, threading.get_native_id())]
    assert np.array_equal(rec.trace[["first", "count"]].tolist(), [(0, 6)])


STUCK = '''
import os, threading
from hybridsched import Technique


def _stall():
    open(os.environ["STUCK_MARK"], "w").close()
    threading.Event().wait()  # stuck in user code until the process ends


class Stuck(Technique):
    def chunk(self, remaining, request, worker):
        if request >= 1:  # from its second claim on, chunk() never returns
            _stall()
        return 1


def stuck(data, first, count):
    if first >= 2:  # a plain Python kernel that blocks from its third task on
        _stall()
    data[first:first + count].sort(axis=-1)
'''


@pytest.mark.parametrize("sig,rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("where", ["technique", "kernel"])
def test_one_signal_ends_a_run_whose_worker_is_stuck_in_user_code(tmp_path, where, sig, rc):
    """Issue 33 item 2: the team waits a bounded time for its workers after the signal,
    then abandons the stuck one (saying so); the command ends 130/143 with the completed
    run kept and no lock file or segment left."""
    import subprocess
    import sys

    from hybridsched.oslayer.shm import our_shm_entries
    from hybridsched.store import read_runs

    (tmp_path / "stuckmod.py").write_text(STUCK)
    mark, out = tmp_path / "stalled", tmp_path / "s.h5"
    argv = (["-s", "serial,stuckmod:Stuck"] if where == "technique" else
            ["-s", "serial,dynamic", "--kernel", "stuckmod:stuck", "--verify", "none"])
    env = dict(os.environ, STUCK_MARK=str(mark), PYTHONPATH=os.pathsep.join(
        filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "run", *argv, "-k", "2",
                             "-L", "24", "--height", "8", "--width", "16", "--reps", "1",
                             "-o", str(out)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting for a state: the worker is in the stalling call
        assert mark.exists(), proc.stderr.read() if proc.poll() is not None else "no stall"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == rc, err
    assert "abandoned worker thread" in err and "Traceback" not in err, err
    assert len(read_runs(str(out))) == 1  # the serial run, completed before, is kept
    assert not os.path.exists(str(out) + ".lock")
    assert our_shm_entries(proc.pid) == []


def test_a_signal_while_the_team_starts_abandons_a_worker_already_stuck(monkeypatch):
    """A worker can reach (and stick in) its first chunk before the last thread starts; a
    Ctrl-C held until the starts are done then ended the team with an unbounded join, and
    the command never exited (seen on a loaded machine). It is the bounded join of any
    other signal: the stuck worker is abandoned."""
    from hybridsched.backends import threads as th
    from hybridsched.core.dispatch import Dispenser
    from waiting import wait_until

    monkeypatch.setattr(th, "_ABANDON_AFTER_S", 0.2)
    release, stuck = threading.Event(), threading.Event()

    def target(w):
        if w == 0:
            stuck.set()
            release.wait()  # in user code until the test lets it go

    team = th.ThreadTeam(target, 2, Dispenser())
    real_start = team.threads[1].start

    def start_after_the_first_is_stuck():  # the signal lands while the team starts
        stuck.wait()
        real_start()
        raise KeyboardInterrupt
    monkeypatch.setattr(team.threads[1], "start", start_after_the_first_is_stuck)
    got = []

    def enter():
        try:
            team.__enter__()
        except BaseException as exc:  # noqa: BLE001 - what the team raised
            got.append(exc)
    caller = threading.Thread(target=enter)
    caller.start()
    try:
        wait_until(lambda: got, "the team's start to end after the signal", timeout=30)
    finally:
        release.set()
        caller.join()
    assert isinstance(got[0], KeyboardInterrupt) and team.abandoned == [0]
