"""The shim where a command has many threads or processes come and go: what it costs must
stay near what the command costs alone, whatever the count."""
from __future__ import annotations

import os
import subprocess
import sys

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.shimjob import ShimJob
from shimprogs import build
from shimrun import ONE, environ

CLI = [sys.executable, "-m", "hybridsched", "coop", "exec"]
# 1000 threads started, each waiting on one Event, then all set free and joined
MANY_THREADS = """
import threading
e = threading.Event()
ts = [threading.Thread(target=e.wait) for _ in range(1000)]
[t.start() for t in ts]
e.set()
[t.join() for t in ts]
print("ok")
"""


def test_a_thousand_threads_of_one_command_run_to_their_end(seg, shim_lib):
    """1000 Python threads on one Event under coop exec end (0.23 s alone here; 4.0 s under
    coop, 7.0 s before: each grant scans every slot). Each waiter that found the scan for
    the dead due took its census of
    /proc (two reads a thread) before the arbiter's mutex: 1000 censuses of 2000 reads a
    period, both CPUs in the kernel, and the command never ended (the hostile review)."""
    p = subprocess.run([*CLI, "--segment", seg, "--", sys.executable, "-c", MANY_THREADS],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr


def test_a_child_reaped_by_its_parent_leaves_its_slot_and_token_at_once(seg, shim_lib,
                                                                       tmp_path):
    """A child killed while it computes with a token, then reaped by its parent: the wait
    that reaped it frees its slot and token there and then, not at the next scan for the
    dead (0.2 s, and only by a thread that waits for a token): twenty rounds of two busy
    children killed and reaped took 2.0-2.2 s under coop, 0.3 s plain (`timeout`,
    Pool.terminate; the hostile review)."""
    exe = build("reap_busy", tmp_path)
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = subprocess.Popen([exe], env=environ(job), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            assert line.startswith("reaped "), line
            child = int(line.split()[1])
            st = a.state
            left = (st.workers["used"] == 1) & (st.workers["pid"] == child)
            assert not left.any(), "the reaped child's slot is still taken"
            p.stdin.close()
            assert p.wait(timeout=120) == 0
        finally:
            p.kill()
            p.wait()


def test_threads_that_find_every_slot_taken_run_unmanaged_counted_and_said_once(seg, shim_lib,
                                                                                tmp_path):
    """Every worker slot of the arbiter taken (a node's jobs with 4096 threads): a job's
    threads run unmanaged, which its counters show (`unmanaged`) and its process says in
    one line; before, the job ran outside the arbiter without a word, `threads 0` (the
    review)."""
    from hybridsched.coop.ops import now_ns

    exe = build("mutex_loop", tmp_path)
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        with a.locked() as st:  # the node's other jobs: this process stands for them
            other = st.join_job(os.getpid(), 12345)
            taken = [st.join_worker(other, os.getpid()) for _ in
                     range(int((st.workers["used"] == 0).sum()))]
        try:
            p = subprocess.run([exe, "2000"], env=environ(job), capture_output=True,
                               text=True, timeout=120)
            counts = job.counters()
        finally:
            with a.locked() as st:
                for w in taken:
                    st.leave_worker(w, now_ns())
                st.leave_job(other)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("thread slots are all taken") == 1, p.stderr
    assert counts.threads == 0 and counts.unmanaged == 3, counts  # main and its two
