"""The shared-memory arbiter with real threads and processes: tokens never exceed the
CPUs, a SIGKILLed holder's token is reclaimed within a second (also one killed inside the
lock), the segment goes with the last participant, and foreign or malformed segments are
refused."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hybridsched.oslayer import futex
from coopcheck import fork_token_holder
from waiting import DEADLINE_S, default_sigint, wait_until, waits_in_kernel
from hybridsched.coop.arbiter import Arbiter
from hybridsched.errors import UsageError
from hybridsched.oslayer.cpus import usable_cpus

CPUS = usable_cpus()


def test_segment_is_private_and_removed_by_the_last_participant(seg):
    with Arbiter(path=seg) as a:
        st = os.stat(seg)
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.getuid()
        j = a.join_job()
        w = a.worker(j)
        assert w.acquire() in CPUS
        w.leave()
        a.leave_job(j)


def test_threads_never_run_more_than_the_tokens(seg):
    """8 threads, one token per CPU: at most len(CPUS) hold one at any time, and every
    thread gets to run (rotation at the quantum)."""
    done = []
    lock = threading.Lock()
    holding = [0, 0]  # now, max

    with Arbiter(path=seg, quantum_s=0.002) as a:
        j = a.join_job()

        def body(i):
            w = a.worker(j)
            w.acquire()
            t_end = time.monotonic() + 0.15
            while time.monotonic() < t_end:
                with lock:
                    holding[0] += 1
                    holding[1] = max(holding[1], holding[0])
                time.sleep(0.001)
                with lock:
                    holding[0] -= 1
                w.boundary()
            w.leave()
            done.append(i)

        ts = [threading.Thread(target=body, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        assert sorted(done) == list(range(8))
        assert holding[1] <= len(CPUS)
        assert a.state.header["rotations"][0] > 0
        a.leave_job(j)


def _bounded(fn, what: str):
    """``fn()``'s value, run in a thread; fails with ``what`` if it has not returned by a
    deadline that only a hang reaches (the test waits for the state, not for a time)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(DEADLINE_S)
    assert out, what
    return out[0]


def test_killed_holder_is_reclaimed_by_the_waiter(seg):
    """The waiter's own look for dead holders (every RECLAIM_POLL_S, about a second here)
    gives it the token of a holder killed while it waits."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j = a.join_job()
        pid = fork_token_holder(a, j)  # a worker that takes the only token and never gives it back
        me = a.worker(j)
        killer = threading.Timer(0.1, os.kill, (pid, signal.SIGKILL))
        killer.start()
        _bounded(me.acquire, "the waiter never got the dead holder's token")
        os.waitpid(pid, 0)
        assert a.state.header["reclaimed"][0] == 1
        me.leave()
        a.leave_job(j)


def test_a_participant_killed_inside_the_lock_does_not_wedge_the_node(seg):
    """The segment's mutex is robust: a process SIGKILLed while holding it (and a token)
    leaves it to the next locker, which reclaims the dead worker's token at once."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        j = a.join_job()
        ready = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                w = a.worker(j)
                w.acquire()
                with a.locked():
                    os.write(ready[1], b"x")
                    while True:  # holds the lock until the test kills it
                        signal.pause()
            finally:
                os._exit(0)
        assert os.read(ready[0], 1) == b"x"
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        me = a.worker(j)       # takes the lock the dead child held
        assert _bounded(me.acquire, "the node stayed wedged by the dead lock holder") == CPUS[0]
        assert a.state.header["reclaimed"][0] == 1 and not a.state.check_invariants()
        me.leave()
        a.leave_job(j)
        os.close(ready[0]), os.close(ready[1])


@pytest.mark.parametrize("content,mode", [(b"garbage" * 100, 0o600), (None, 0o644)])
def test_foreign_or_open_segments_are_refused(tmp_path, content, mode):
    path = str(tmp_path / "seg")
    if content is None:
        with Arbiter(path=path):
            pass
        with open(path, "wb") as fh:
            fh.write(b"\0" * 64)
    else:
        with open(path, "wb") as fh:
            fh.write(content)
    os.chmod(path, mode)
    with pytest.raises(UsageError) as err:
        with Arbiter(path=path):
            pass
    assert path in str(err.value)
    os.unlink(path)
    if os.path.exists(path + ".lock"):
        os.unlink(path + ".lock")


def test_a_segment_of_another_version_is_refused_not_reset(tmp_path):
    """An older hybridsched's segment (another layout, so another size) may be in use: its
    tables cannot be read, so it is refused with one clear error and left as it was."""
    import numpy as np

    from hybridsched.coop.state import HEADER_DTYPE, MAGIC, VERSION

    path = str(tmp_path / "seg")
    h = np.zeros(1, HEADER_DTYPE)
    h["magic"], h["version"] = MAGIC, VERSION - 1
    body = h.tobytes() + b"\0" * 5000
    with open(path, "wb") as fh:
        fh.write(body)
    os.chmod(path, 0o600)
    with pytest.raises(UsageError) as err:
        with Arbiter(path=path):
            pass
    assert f"version {VERSION - 1}" in str(err.value)
    with open(path, "rb") as fh:
        assert fh.read() == body
    os.unlink(path)
    assert not os.path.exists(path + ".lock")


def test_stale_segment_from_a_killed_run_is_recovered(seg):
    """A participant SIGKILLed while registered leaves a segment behind; the next
    attacher finds every participant dead and starts afresh."""
    r, w_ = os.pipe()
    pid = os.fork()
    if pid == 0:
        a = Arbiter(path=seg).__enter__()
        j = a.join_job()
        a.worker(j).acquire()
        os.write(w_, b"x")
        while True:  # holds the token until the test kills it
            signal.pause()
        os._exit(0)
    assert os.read(r, 1) == b"x"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert os.path.exists(seg)
    with Arbiter(path=seg) as a:
        assert a.state.participants() == 1 and not a.state.check_invariants()  # its own attachment
        j = a.join_job()
        wk = a.worker(j)
        assert wk.acquire() in CPUS
        wk.leave()
        a.leave_job(j)
    os.close(r), os.close(w_)


def test_a_creator_killed_while_making_the_segment_leaves_nothing_in_the_way(seg):
    """The segment is made whole under a name of its own and only then put in place: a
    creator SIGKILLed half way (holding the lock) leaves no half-made segment at the path,
    which the next run would have to refuse, and its unfinished file is swept."""
    folder = os.path.dirname(seg)
    pid = os.fork()
    if pid == 0:
        try:
            Arbiter._initialise = lambda self: os.kill(os.getpid(), signal.SIGKILL)
            Arbiter(path=seg).__enter__()
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert not os.path.exists(seg)
    assert [n for n in os.listdir(folder) if ".new." in n] == [f"coop-seg.new.{pid}"]
    with Arbiter(path=seg) as a:
        assert a.state.participants() == 1 and not a.state.check_invariants()
        assert [n for n in os.listdir(folder) if ".new." in n] == []


def test_the_flock_is_taken_on_the_lock_file_at_the_path_not_an_unlinked_one(seg):
    """The last participant and a refused creator unlink the lock file under the flock. A
    process that had opened it before must not hold the flock of the unlinked file while a
    newcomer holds the new file's: it takes the file that is at the path."""
    b = Arbiter(cpus=CPUS[:1], path=seg)
    b._lockfd()
    os.unlink(seg + ".lock")  # what a refused creator does while b waits
    with b._attaching():
        fd, _ = b._local[os.getpid()]
        assert os.path.exists(seg + ".lock")  # (the inode number itself may be reused)
        here, held = os.stat(seg + ".lock"), os.fstat(fd)
        assert (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino) and held.st_nlink == 1
    with b:  # attach and leave: the segment and the new lock file go with it
        pass


def test_a_close_that_cannot_take_the_lock_still_gives_up_its_seat(seg):
    import fcntl

    a, b = Arbiter(cpus=CPUS[:1], path=seg).__enter__(), Arbiter(cpus=CPUS[:1], path=seg).__enter__()
    os.unlink(seg + ".lock")
    os.symlink(seg + ".elsewhere", seg + ".lock")  # planted: the lock cannot be used
    a._close_lock()  # a opens the lock path afresh
    with pytest.raises(UsageError):
        a.close()
    assert a._map is None and b.state.participants() == 1  # a left all the same
    os.unlink(seg + ".lock")
    b.close()
    # and a check of the lock that raises lets go of the flock it took
    c = Arbiter(cpus=CPUS[:1], path=seg)
    fd, _ = c._lockfd()
    c._lock_is_current = lambda fd: (_ for _ in ()).throw(UsageError("cannot check"))
    with pytest.raises(UsageError):
        with c._attaching():
            pass
    other = os.open(seg + ".lock", os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises BlockingIOError if held
    os.close(other)
    c._close_lock()
    os.unlink(seg + ".lock")


def test_a_reused_handle_refused_later_leaves_the_lock_file_of_another(seg, monkeypatch):
    a = Arbiter(cpus=CPUS[:1], path=seg)
    with a:  # a made the lock file (and removed it when it left)
        pass
    with Arbiter(cpus=CPUS[:1], path=seg):  # another attachment, with a lock file of its own
        def refuse(self):
            raise UsageError("refused")
        monkeypatch.setattr(Arbiter, "_attach", refuse)
        with pytest.raises(UsageError):
            a.__enter__()
        monkeypatch.undo()
        assert os.path.exists(seg + ".lock")  # a did not make this one: not a's to remove


@pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 usable CPUs")
def test_a_segment_of_the_same_size_for_other_cpus_is_not_read_as_ours(seg):
    from hybridsched.coop.arbiter import MAX_JOBS, MAX_WORKERS
    from hybridsched.coop.state import nbytes

    assert nbytes(1, MAX_JOBS, MAX_WORKERS) == nbytes(2, MAX_JOBS, MAX_WORKERS)  # padded
    with Arbiter(cpus=CPUS[:1], path=seg) as one:
        with pytest.raises(UsageError) as err:
            with Arbiter(cpus=CPUS[:2], path=seg):
                pass
        # one process on it (its attachment's row and no job: it said "by 1 jobs", and
        # by 2 for a coop exec, the review)
        assert "for 1 CPU is in use by 1 hybridsched process;" in str(err.value)
        assert "wants 2 CPUs" in str(err.value) and "an arbiter of their own" in str(err.value)
        assert not one.state.check_invariants()
    with Arbiter(cpus=CPUS[:2], path=seg) as two:  # nobody on it any more: made afresh
        assert list(two.state.cpus["cpu"]) == CPUS[:2] and not two.state.check_invariants()


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_a_segment_in_use_for_other_cpus_names_them_as_numbers(seg):
    with Arbiter(cpus=CPUS[:1], path=seg):
        with pytest.raises(UsageError) as err:
            with Arbiter(cpus=CPUS[1:2], path=seg):
                pass
    assert f"use CPUs {CPUS[:1]}, not {CPUS[1:2]}" in str(err.value), str(err.value)  # np.int32(0)
    assert "an arbiter of their own" in str(err.value)  # the way out (the review)


def test_a_segment_in_use_with_other_tables_is_refused_naming_them(seg, monkeypatch):
    """Two builds of one layout version with other table sizes (MAX_JOBS): the refusal said
    "for 1 CPUs ... wants 1 CPUs" (the review); it names the tables."""
    from hybridsched.coop import arbiter

    cpus = CPUS[:1]
    monkeypatch.setattr(arbiter, "MAX_JOBS", 8)
    with Arbiter(cpus=cpus, path=seg):
        monkeypatch.undo()
        with pytest.raises(UsageError) as err:
            with Arbiter(cpus=cpus, path=seg):
                pass
    words = str(err.value)
    assert "tables of 8 jobs" in words and f"this one's are {arbiter.MAX_JOBS}" in words, words


def test_the_sweep_skips_names_no_process_can_have(seg):
    junk = seg + ".new.99999999999999999999"
    open(junk, "w").close()
    with Arbiter(cpus=CPUS[:1], path=seg):
        assert not os.path.exists(junk)  # ours, and no such pid can be alive: removed


def test_futex_wake_across_processes():
    import mmap

    import numpy as np

    m = mmap.mmap(-1, 64)
    words = np.frombuffer(m, np.int32, 2)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # wakes the parent once it sleeps in its futex wait (a wait, then a wake)
        deadline = time.monotonic() + 60
        while not waits_in_kernel(parent, "futex") and time.monotonic() < deadline:
            time.sleep(0.001)
        words[0] = 1
        futex.wake(futex.address(words, 0))
        os._exit(0)
    assert futex.wait(futex.address(words, 0), 0, DEADLINE_S)  # True: woken, not timed out
    assert words[0] == 1
    os.waitpid(pid, 0)
    assert futex.wait(futex.address(words, 1), 0, 0.01) is False  # times out


def test_a_token_holder_runs_sched_batch_and_leave_restores_its_policy(seg):
    """Hand-offs without wake-up preemption: SCHED_BATCH while the thread holds tokens,
    its own policy back once it leaves."""
    got = {}

    def body(a, j):
        before = os.sched_getscheduler(0)
        w = a.worker(j)
        w.acquire()
        got["holding"] = os.sched_getscheduler(0)
        w.leave()
        got["before"], got["after"] = before, os.sched_getscheduler(0)

    with Arbiter(path=seg) as a:
        j = a.join_job()
        t = threading.Thread(target=body, args=(a, j))
        t.start()
        t.join()
        a.leave_job(j)
    assert got["holding"] == os.SCHED_BATCH
    assert got["after"] == got["before"] == os.SCHED_OTHER


def test_the_coop_barrier_queues_parked_waiters_without_waking_them(seg):
    """One CPU, two workers of one job, block barrier: the last arrival queues the parked
    partner for the token (it wakes once, when the token comes), every step completes in
    order, and nobody is left parked."""
    from hybridsched.coop.barrier import TeamBarrier
    from hybridsched.coop.state import WAITING

    steps = 30
    bar = TeamBarrier(2)
    order = []
    seen_waiting = []
    try:
        with Arbiter(cpus=CPUS[:1], path=seg) as a:
            j = a.join_job()
            ws = [a.worker(j) for _ in range(2)]
            for t in range(2):
                bar.slot[t] = ws[t].slot

            def body(t):
                w = ws[t]
                w.acquire()
                for s in range(steps):
                    order.append((s, t))
                    other = ws[1 - t].slot
                    before = w.switches
                    bar.wait(t, s + 1, "block", w)
                    if w.switches == before:  # we arrived last and opened: the partner
                        # is parked; it must be queued for the token at once, not woken
                        seen_waiting.append(int(a.state.workers["state"][other]))
                w.leave()

            ts = [threading.Thread(target=body, args=(t,)) for t in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(10)
            assert not any(t.is_alive() for t in ts)
            assert not bar.parked.any()
            a.leave_job(j)
    finally:
        bar.close()
    assert [s for s, _ in order] == sorted(s for s, _ in order)  # no one ran ahead a step
    assert len(order) == 2 * steps
    # queued by the opener itself (a wake-then-acquire barrier leaves it BLOCKED until it
    # runs); a parker still publishing its park when the opener passes queues itself, so
    # a few readings may catch it between the two
    assert len(seen_waiting) >= steps // 2
    assert seen_waiting.count(WAITING) >= 0.8 * len(seen_waiting), seen_waiting


def test_the_opener_never_grants_a_reclaimed_slot():
    """A parked worker that died and was reclaimed (FREE) is skipped when the last partner
    opens the barrier: no token is left held by a slot nobody owns."""
    import numpy as np

    from hybridsched.coop import handoff
    from hybridsched.coop.state import State

    st = State.private([0, 1], 10**9)
    j = st.join_job(1)
    a, b = st.join_worker(j, 1), st.join_worker(j, 1)
    st.acquire(b, 0)
    st.leave_worker(a, 1)                        # a: parked, then reclaimed
    handoff._resume(handoff.regions(st), np.array([a], np.int64), 1)
    assert int(st.workers["state"][a]) == 0 and a not in list(st.cpus["holder"])
    assert not st.check_invariants()


def test_ctrl_c_while_waiting_for_the_lock_leaks_nothing(seg):
    """A process waiting for the arbiter's mutex that gets SIGINT raises at once (the
    wait is sliced) and never leaves the mutex held: the holder takes it again, and a
    new participant attaches."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom hybridsched.coop.arbiter import Arbiter\n"
        "with Arbiter(path=sys.argv[1]) as a:\n"
        "    with a.locked():\n        print('in', flush=True); sys.stdin.readline()\n"
        "    t0 = time.monotonic()\n    with a.locked():\n        pass\n"
        "    print(round(time.monotonic() - t0, 3), flush=True)\n"), seg],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "in"
        victim = subprocess.Popen([sys.executable, "-c", (
            "import sys\nfrom hybridsched.coop.arbiter import Arbiter\n"
            "a = Arbiter(path=sys.argv[1])\nprint('ready', flush=True)\n"
            "try:\n    a.__enter__()\nexcept KeyboardInterrupt:\n    sys.exit(3)\na.close()\n"),
            seg], stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
        assert victim.stdout.readline().strip() == "ready"
        wait_until(lambda: waits_in_kernel(victim.pid, "futex"),
                   "the new participant waiting for the holder's mutex")
        victim.send_signal(signal.SIGINT)
        # it ends while the holder still holds the mutex (and would for ever): the wait was
        # interrupted, not served; the deadline only bounds that failure
        assert victim.wait(120) == 3 and holder.poll() is None
        holder.stdin.write("\n")
        holder.stdin.flush()
        float(holder.stdout.readline())  # the mutex is free again: taken, let go
        assert holder.wait(120) == 0
    finally:
        holder.kill()
        holder.wait()
    with Arbiter(path=seg):
        pass


def test_a_kernel_that_raises_under_coop_gives_its_token_back(tmp_path):
    """Thread workers leave the arbiter even when the kernel raises: the next repetition
    gets the tokens (before, the failed worker's token stayed held and rep 2 hung)."""
    import subprocess
    import sys

    (tmp_path / "failkern.py").write_text(
        "def fail_on_5(data, first, count):\n"
        "    if first <= 5 < first + count:\n"
        "        raise RuntimeError('kernel failed on frame 5')\n"
        "    data[first:first + count].sort(axis=-1)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "hybridsched", "run", "--coop", "-s", "dynamic",
                        "-k", "2", "--frames", "40", "--height", "8", "--width", "16", "--reps", "2",
                        "--kernel", "failkern:fail_on_5", "--verify", "none", "--dispatch", "python",
                        "--out", str(tmp_path / "f.h5")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0 and "kernel failed on frame 5" in p.stderr, p.stderr[-2000:]


def test_the_job_table_holds_a_large_nodes_commands(seg):
    """Each `coop exec` holds two rows (its command's job and its own attachment): 256 of
    them at once fit, a row each for the commands and the attachments of a large node's
    MPI ranks (64 rows let 32 run: hostile review)."""
    with Arbiter(path=seg, cpus=CPUS[:1]) as a:
        with a.locked() as st:
            rows = [st.join_job(os.getpid(), key) for key in range(1, 2 * 256)]  # + a's seat
            for j in rows:
                st.leave_job(j)
    assert len(set(rows)) == 2 * 256 - 1
