"""The cooperative shim in unmodified programs, through ShimJob on a private arbiter (one
token, so every wait is contended): a thread that exits holding its token, a command that
forks and execs, a holder asleep where the shim cannot see, a job SIGKILLed mid-run, the
affinity its programs see."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.ops import CompiledOps, ShimOps
from hybridsched.coop.shimjob import NUDGE_SIGNAL, ShimJob
from hybridsched.errors import UsageError
from hybridsched.oslayer.procfs import thread_state
from shimprogs import build
from shimrun import CPUS, ONE, environ, holds_token, job_slots, run_under, spinning
from waiting import wait_until


def test_a_thread_that_exits_holding_its_token_gives_it_back(seg, shim_lib, tmp_path):
    """The thread ends by the raw exit call while its process lives on (no destructor of
    the shim's runs): the waiting main thread gets the token from the reclaim of its dead
    thread's slot, where liveness per process would have kept it for ever."""
    exe = build("thread_exit", tmp_path)
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, [exe])
        reclaimed = int(a.state.header["reclaimed"][0])
        counts = job.counters()
    assert p.returncode == 0 and p.stdout == "joined\n", p.stderr
    assert counts.threads == 2 and reclaimed >= 1


@pytest.mark.skipif(len(CPUS) < 2, reason="two tokens needed")
def test_a_gone_threads_token_comes_back_while_the_others_rotate(seg, shim_lib, tmp_path):
    """Two tokens, one kept by a thread gone by the raw exit call, while two spinning threads
    pass the other back and forth, every wait shorter than the reclaim's period. The period
    is the node's, not each wait's, so the gone thread's slot is reclaimed while they run
    (with e81dccb's shim: never, the two sharing one token for the process's life)."""
    exe = build("thread_exit_busy", tmp_path)
    with Arbiter(cpus=CPUS[:2], path=seg) as a, ShimJob(a) as job:
        p = subprocess.Popen([exe], env=environ(job), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while int(a.state.header["reclaimed"][0]) < 1 and time.monotonic() < deadline \
                    and p.poll() is None:
                time.sleep(0.01)
            reclaimed = int(a.state.header["reclaimed"][0])
        finally:
            out, err = p.communicate(timeout=60)  # closes stdin: the program ends
    assert p.returncode == 0 and out == "done\n", (out, err)
    assert reclaimed >= 1


def test_a_yield_hands_the_token_to_a_thread_of_the_job_that_waits(seg, shim_lib, tmp_path):
    """Two threads taking turns by sched_yield on one token: the yielder's partner waits for
    the token, and gets it at the first yield (it was the 64th: 14x plain Linux with two
    such jobs). Counted, not timed: the yields a turn took."""
    exe = build("yield_turns", tmp_path)
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, [exe])
    assert p.returncode == 0, p.stderr
    assert float(p.stdout) < 4, p.stdout


def test_a_command_that_forks_and_execs_is_one_job(seg, shim_lib):
    """sh forks seq and wc, which exec: each process joins the command's job (the exec'd
    image keeps its slot), the pipe's ends pass the one token between them, and every
    slot is given back when they end. (Whether a pass is a hand-off to a waiter or a grant
    of a token freed meanwhile depends on who reaches the arbiter first.)"""
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, ["sh", "-c", "seq 1 50000 | wc -l"])
        counts, left = job.counters(), job_slots(a, job)
        held = (a.state.cpus["holder"] >= 0).sum()
    assert p.returncode == 0 and p.stdout.strip() == "50000", p.stderr
    assert counts.threads >= 3 and counts.calls >= 1 and counts.grants + counts.handoffs >= 1
    assert left == 0 and held == 0


EXEC_PROBE = """
import os, sys
how = sys.argv[1]
show = ["sh", "-c", "grep -E '^Sig(Blk|Ign|Cgt)' /proc/self/status"]
if how == "bare":  # the image exec'd without the shim: what the kernel left it
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("HYBRIDSCHED_")}
    os.execve("/bin/sh", show, env)
if how == "failed":  # an exec that fails returns with the shim's handler back
    try:
        os.execv("/nonexistent/program", ["x"])
    except OSError:
        pass
os.execv("/bin/sh", show)
"""


def _masks(text: str) -> dict:
    return {line.split(":")[0]: int(line.split()[1], 16) for line in text.splitlines()}


@pytest.mark.parametrize("how", ["bare", "shimmed", "failed"])
def test_an_exec_is_never_ended_by_a_rotation_request(seg, shim_lib, how):
    """An exec'ing thread keeps its token through the exec, so the watchdog may nudge it
    while the kernel and the loader replace the program; the signal's action is then its
    default, which ends the process (seen under load: a job's python gone after 0.15 s, its
    pipeline still exiting 0). The nudge is ignored across the exec: a program exec'd
    without the shim finds it ignored, one with the shim finds the shim's handler again,
    and a failed exec has it back."""
    bit = 1 << (NUDGE_SIGNAL - 1)
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, [sys.executable, "-c", EXEC_PROBE, how])
    assert p.returncode == 0, p.stderr
    masks = _masks(p.stdout)
    if how == "bare":
        assert masks["SigIgn"] & bit, p.stdout
    else:
        assert masks["SigCgt"] & bit and not masks["SigIgn"] & bit, p.stdout
        assert not masks["SigBlk"] & bit, p.stdout  # the hold's block undone


KILLED_BY_IT = """
import os, signal, sys, time
how, sig = sys.argv[1], int(sys.argv[2])
if how == "ignored":
    signal.signal(sig, signal.SIG_IGN)  # an exec keeps it ignored, as POSIX says
if how != "plain":  # the new image, exec'd under the shim, sends it
    os.execv(sys.executable, [sys.executable, "-c", __doc__ or "", "plain", str(sig)])
os.kill(os.getpid(), sig)
time.sleep(0.2)
print("ran on")
"""


@pytest.mark.parametrize("how, ends", [("plain", True), ("exec", True), ("ignored", False)])
def test_the_shims_signal_sent_by_someone_else_takes_the_programs_action(seg, shim_lib, how, ends):
    """A `kill -57` from outside (not the shim's: no launcher's tkill, no job's key) is
    the program's signal: left at its default it ends the process, as without the shim.
    It went unseen: the shim's handler dropped it, and every image exec'd under the shim
    found it ignored (the exec's hold), the default taken for the program's own ignore."""
    body = KILLED_BY_IT.replace('__doc__ or ""', repr(KILLED_BY_IT))
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, [sys.executable, "-c", body, how, str(NUDGE_SIGNAL)])
    if ends:
        assert p.returncode == -NUDGE_SIGNAL and "ran on" not in p.stdout, (p.returncode, p.stderr)
    else:
        assert p.returncode == 0 and p.stdout == "ran on\n", (p.returncode, p.stderr)


@pytest.mark.parametrize("mode", ["wait", "deaf"])
def test_a_holder_that_never_blocks_is_asked_to_rotate(seg, shim_lib, tmp_path, mode):
    """One job spins (calling nothing) holding the only token until the other job has run:
    it would wait for ever but for the watchdog, whose signal makes it rotate — or, when
    it has every signal blocked (deaf), which takes the token away a bound later."""
    exe = build("spin_flag", tmp_path)
    flag = tmp_path / "flag"
    flag.write_bytes(b"\0" * 4)
    with Arbiter(cpus=ONE, path=seg, quantum_s=0.005) as a, ShimJob(a) as spinner, \
            ShimJob(a) as setter:
        with spinning(exe, flag, mode, spinner) as pw:
            ps = run_under(setter, [exe, str(flag), "set"])
            out = pw.communicate(timeout=120)[0]
        counts = spinner.counters()
    assert ps.returncode == 0 and pw.returncode == 0 and out == "released\n"
    assert counts.signals >= 1
    if mode == "wait":  # answered (on a loaded machine perhaps after the revocation too)
        assert counts.nudges >= 1
    else:
        assert counts.nudges == 0 and counts.revoked >= 1


@pytest.mark.parametrize("owner", ["compiled", "shim"])
def test_a_holder_asleep_where_the_shim_cannot_see_loses_its_token(seg, shim_lib, tmp_path,
                                                                    owner):
    """One job sleeps in open() of a FIFO (no wrapper sees it) holding the only token, until
    the other job opens the FIFO, which needs the token: the watchdog revokes it. The owner
    of the jobs applies the rules compiled, or the shim's (coop exec's: no numba)."""
    exe = build("fifo", tmp_path)
    fifo = str(tmp_path / "the.fifo")
    os.mkfifo(fifo)
    ops = ShimOps() if owner == "shim" else CompiledOps()
    with Arbiter(cpus=ONE, path=seg, quantum_s=0.005, ops=ops) as a, ShimJob(a) as reader, \
            ShimJob(a) as writer:
        pr = subprocess.Popen([exe, fifo, "read"], env=environ(reader), stdout=subprocess.PIPE,
                              text=True)
        try:
            assert pr.stdout.readline() == "opening\n"
            wait_until(lambda: holds_token(reader), "the reader holding its token")
            pw = run_under(writer, [exe, fifo, "write"])
            out = pr.communicate(timeout=120)[0]
        finally:
            pr.kill()
            pr.wait()
        counts = reader.counters()
    assert pw.returncode == 0 and pr.returncode == 0 and out == "got x\n"
    assert counts.revoked >= 1


@pytest.mark.parametrize("owner", ["compiled", "shim"])
def test_a_stopped_holders_token_goes_to_the_other_job_and_it_queues_once_continued(
        seg, shim_lib, tmp_path, owner):
    """One job spins (calling nothing) on the only token and is stopped (Ctrl-Z, SIGSTOP,
    a debugger): it would keep the token until continued, the other job waiting as long
    (the watchdog acts on a running or sleeping holder only; its quantum here is too long
    to act at all). The other job's waiting thread takes the token by the reclaim, and
    queues the rotation request, which the stopped thread takes once continued: it queues
    for the token instead of running without one until its next call."""
    exe = build("spin_flag", tmp_path)
    flag = tmp_path / "flag"
    flag.write_bytes(b"\0" * 4)
    ops = ShimOps() if owner == "shim" else CompiledOps()
    with Arbiter(cpus=ONE, path=seg, quantum_s=10, ops=ops) as a, ShimJob(a) as spinner, \
            ShimJob(a) as setter:
        with spinning(exe, flag, "wait", spinner) as pw:
            os.kill(pw.pid, signal.SIGSTOP)
            wait_until(lambda: thread_state(pw.pid, pw.pid) == "T", "the spinner stopped")
            ps = run_under(setter, [exe, str(flag), "set"])
            revoked = spinner.counters().revoked
            os.kill(pw.pid, signal.SIGCONT)
            out = pw.communicate(timeout=120)[0]
        counts = spinner.counters()
    assert ps.returncode == 0 and pw.returncode == 0 and out == "released\n"
    assert revoked == 1 and counts.signals == 0 and counts.nudges == 1, counts


def test_a_job_killed_mid_run_leaves_the_others_running_and_nothing_behind(seg, shim_lib, tmp_path):
    exe = build("omp_bsp", tmp_path)
    with Arbiter(cpus=ONE, path=seg) as a:
        with ShimJob(a) as victim, ShimJob(a) as other:
            pv = subprocess.Popen([exe, "1000000", "200"], env=environ(victim),
                                  stdout=subprocess.PIPE, text=True)
            po = subprocess.Popen([exe, "300", "200"], env=environ(other),
                                  stdout=subprocess.PIPE, text=True)
            try:
                assert pv.stdout.readline() == "start\n" and po.stdout.readline() == "start\n"
            finally:
                pv.kill()  # mid-run: it has a million steps to go
                pv.wait()
            out = po.communicate(timeout=120)[0]
            assert po.returncode == 0 and " steps by " in out
        st = a.state
        assert not st.workers["used"].any() and (st.cpus["holder"] == -1).all()
        assert st.check_invariants() == []


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: the natural mask and the pinned one agree")
def test_programs_see_the_cpus_they_would_have_had(seg, shim_lib):
    """Pinned to the one token's CPU, a program still sees every CPU it was given (runtimes
    size their thread pools from it)."""
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, ["nproc"])
        q = run_under(job, [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
    assert p.returncode == 0 and int(p.stdout) == len(CPUS)
    assert q.returncode == 0 and q.stdout.strip() == str(CPUS)


_SET_MASKS = """
import os
for mask in ({99999}, set()):
    try:
        os.sched_setaffinity(0, mask)
        print("taken", sorted(mask))
    except OSError as exc:
        print("refused", exc.errno)
os.sched_setaffinity(0, {0})
print(sorted(os.sched_getaffinity(0)))
"""


def test_a_mask_of_no_cpu_here_is_refused_as_without_the_shim(seg, shim_lib):
    """A program's own mask is recorded and answered back, not applied; one the kernel
    would refuse (no CPU of it exists) is refused alike, EINVAL: it was taken, and the
    program then saw an empty set (the review)."""
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, [sys.executable, "-c", _SET_MASKS])
    assert p.returncode == 0 and p.stdout == "refused 22\nrefused 22\n[0]\n", (p.stdout, p.stderr)


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: the natural mask and the pinned one agree")
@pytest.mark.parametrize("how", ["sh", "sh-exec", "python", "posix_spawn"])
def test_a_program_started_from_within_the_job_sizes_its_team_as_without_the_shim(
        seg, shim_lib, tmp_path, how):
    """libgomp sizes its team from the affinity mask in its constructor, before the new
    image's shim answers for it: the exec'ing (or posix_spawn'ing) thread, pinned to its
    token's CPU, hands the new image the mask the program would have had (it ran 1 thread
    through `sh -c`)."""
    exe = build("omp_bsp", tmp_path)
    argv = {"sh": ["sh", "-c", f"{exe} 2 10"], "sh-exec": ["sh", "-c", f"exec {exe} 2 10"],
            "python": [sys.executable, "-c",
                       f"import subprocess; subprocess.run([{exe!r}, '2', '10'], check=True)"],
            "posix_spawn": [sys.executable, "-c",  # glibc's exec, inside it (GNU make's way)
                            f"import os; os.waitpid(os.posix_spawn({exe!r}, [{exe!r}, '2', '10'], "
                            "os.environ), 0)"]}
    with Arbiter(cpus=ONE, path=seg) as a, ShimJob(a) as job:
        p = run_under(job, argv[how])
    assert p.returncode == 0, p.stderr
    assert f"by {len(CPUS)} threads" in p.stdout, p.stdout


def test_the_job_is_found_by_its_key_and_given_back(seg, shim_lib):
    with Arbiter(path=seg) as a:
        with ShimJob(a, watchdog=False) as job:
            env = job.env({"LD_PRELOAD": "/x.so"})
            assert env["LD_PRELOAD"] == f"{shim_lib}:/x.so" and env["HYBRIDSCHED_COOP_SEGMENT"] == seg
            assert a.state.find_job(int(env["HYBRIDSCHED_COOP_JOB"])) == job.job
            with pytest.raises(UsageError, match="in use"):
                ShimJob(a, key=job.key).__enter__()
        assert job.job == -1 and a.state.find_job(job.key) == -1
        assert job.final is not None and job.counters() == job.final


@pytest.mark.parametrize("unset", ["HYBRIDSCHED_COOP_JOB", "HYBRIDSCHED_COOP_SEGMENT"])
def test_a_dormant_shim_passes_a_programs_futex_calls_on(shim_lib, tmp_path, unset):
    """Loaded with no job (a variable unset, as `env -u` in a command of a job leaves it):
    the shim's syscall() wrapper jumped to address 0 (SIGSEGV), the real functions never
    looked up."""
    exe = build("futexcall", tmp_path)
    env = {**os.environ, "LD_PRELOAD": shim_lib, "HYBRIDSCHED_COOP_SEGMENT": "/dev/shm/none",
           "HYBRIDSCHED_COOP_JOB": "1"}
    del env[unset]
    p = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (0, "wake 0 wait -1\n", "")


EARLY_LIB = r"""
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static int word;
__attribute__((constructor)) static void early(void)
{ printf("early %ld\n", syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0)); }
"""


@pytest.mark.parametrize("launched", [False, True])
def test_a_futex_call_from_a_library_constructor_before_the_shims_is_passed_on(
        seg, shim_lib, tmp_path, launched):
    """The program's own libraries' constructors run before the preloaded shim's: a futex
    call through syscall() there jumped to address 0, libc not looked up yet (SIGSEGV,
    dormant or launched; the second review)."""
    (tmp_path / "early.c").write_text(EARLY_LIB)
    (tmp_path / "main.c").write_text("int main(void) { return 0; }\n")
    for argv in (["-shared", "-fPIC", "early.c", "-o", "libearly.so"],
                 ["main.c", "-o", "main", "-L.", "-Wl,--no-as-needed", "-learly",
                  f"-Wl,-rpath,{tmp_path}"]):
        if subprocess.run(["cc", *argv], cwd=tmp_path, capture_output=True).returncode != 0:
            pytest.skip("cc could not build the library and its program")
    exe = str(tmp_path / "main")
    if launched:
        p = subprocess.run([sys.executable, "-m", "hybridsched", "coop", "exec", "--segment", seg,
                            "--", exe], capture_output=True, text=True, timeout=300)
    else:
        p = subprocess.run([exe], env={**os.environ, "LD_PRELOAD": shim_lib}, capture_output=True,
                           text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "early 0\n"), p.stderr


def test_the_signal_numbers_agree(shim_lib):
    import ctypes

    assert ctypes.CDLL(shim_lib).hs_x_nudge_signal() == NUDGE_SIGNAL
