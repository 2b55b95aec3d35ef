"""`hybridsched colocate --cmd` under faults: a job killed (stopped under gang, or under
coop), colocate itself killed outright, Ctrl-C, SIGTERM and SIGHUP, a process a job moved
out of its group: the other jobs finish, and no job, stopped group or segment is left."""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from hybridsched.colocate.cmdrun import run_commands_once
from hybridsched.colocate.output import read_colocate
from hybridsched.oslayer.cpus import usable_cpus
from unmodrun import EX, PY, cmd_spec
from waiting import wait_until


def _state(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def _wait_for(what, timeout: float = 300.0):
    """Until ``what()`` is true (a state, never a fixed time); its last value. A process
    that ends while ``what`` reads it is a state not reached yet, not an error. The
    deadline only bounds a failure: a first run on a loaded machine compiles the arbiter's
    rules (numba's empty cache) before any job starts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = what()
        except psutil.NoSuchProcess:
            got = None
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.005)


def _killer(find) -> tuple[threading.Thread, list[int]]:
    """A started thread that SIGKILLs the first process ``find()`` returns, once it returns
    one; the list it puts the killed pid in (empty if none was ever found)."""
    victim: list[int] = []

    def kill():
        got = _wait_for(find)
        if got:
            os.kill(got[0].pid, signal.SIGKILL)
            victim.append(got[0].pid)
    th = threading.Thread(target=kill)
    th.start()
    return th, victim


def _jobs_of(parent: int, marker: str) -> list[psutil.Process]:
    try:
        kids = psutil.Process(parent).children()
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            words = k.cmdline()
            # not colocate's guardian: a copy of colocate, whose command line names the jobs'
            if marker in " ".join(words) and words[1:3] != ["-m", "hybridsched"]:
                out.append(k)
        except psutil.Error:
            pass
    return out


LONG = f"{PY} {EX / 'py_threads.py'} 200000 64"  # minutes: only ever ended by a signal


def test_a_job_killed_while_stopped_under_gang_leaves_the_others_running():
    short = f"{PY} {EX / 'py_threads.py'} 400 64"
    spec = cmd_spec([short, short], ["gang"], reps=1, quantum_s=0.02)

    def stopped_job1():
        jobs = [p for p in _jobs_of(os.getpid(), "py_threads.py")]
        return [p for p in jobs if p.pid == max(q.pid for q in jobs) and _state(p.pid) == "stopped"] \
            if len(jobs) == 2 else []
    th, victim = _killer(stopped_job1)
    recs = run_commands_once(spec, "gang", 0)
    th.join()
    assert victim, "job 1 was never seen stopped"
    assert recs[0].verified, recs[0].error
    assert not recs[1].verified and recs[1].exit_status == -9 and "SIGKILL" in recs[1].error
    assert _state(victim[0]) == "gone"


def _colocate(tmp_path, *argv) -> subprocess.Popen:
    env = dict(os.environ, HYBRIDSCHED_NO_LOAD_PROBE="1")
    return subprocess.Popen([sys.executable, "-m", "hybridsched", "colocate", *argv, "--reps",
                             "1", "-o", str(tmp_path / "x.h5")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _tree(pid: int) -> str:
    """What colocate has started so far, for a state never reached."""
    try:
        procs = psutil.Process(pid).children(recursive=True)
        return "jobs never started; colocate's processes:\n" + "\n".join(
            f"{p.pid} {p.ppid()} {p.status()} {' '.join(p.cmdline())[:160]}" for p in procs)
    except psutil.Error as exc:
        return f"jobs never started ({exc})"


def _all_gone(pids) -> bool:
    return all(_state(p) in ("gone", "zombie") for p in pids)


def test_colocate_killed_outright_under_gang_leaves_no_job_stopped(tmp_path):
    proc = _colocate(tmp_path, "--cmd", LONG, "--jobs", "2", "--policy", "gang",
                     "--quantum-ms", "50")
    try:
        jobs = _wait_for(lambda: [p for p in _jobs_of(proc.pid, "py_threads.py")
                                  if _state(p.pid) == "stopped"])
        assert jobs, proc.stderr.read() if proc.poll() is not None else "no job seen stopped"
        pids = [p.pid for p in _jobs_of(proc.pid, "py_threads.py")]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the guardian kills and continues every job's group
        assert _wait_for(lambda: _all_gone(pids), 30), [(p, _state(p)) for p in pids]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (tmp_path / "x.h5").exists()  # nothing was published: no job ended


def test_colocate_killed_outright_under_coop_leaves_no_job_and_no_segment(tmp_path, shim_lib):
    """The guardian kills every job's group, then sweeps the arbiter's segment, whose
    participants are all dead (it stayed for the next coop run to sweep)."""
    segment = f"/dev/shm/hybridsched-coop.test-{os.getpid()}"
    env = dict(os.environ, HYBRIDSCHED_NO_LOAD_PROBE="1", HYBRIDSCHED_COOP_SEGMENT=segment)
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "colocate", "--cmd", LONG,
                             "--jobs", "2", "--policy", "coop", "--reps", "1", "-o",
                             str(tmp_path / "x.h5")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        jobs = _wait_for(lambda: len(_jobs_of(proc.pid, "py_threads.py")) == 2)
        assert jobs, proc.stderr.read() if proc.poll() is not None else _tree(proc.pid)
        assert os.path.exists(segment)
        pids = [p.pid for p in _jobs_of(proc.pid, "py_threads.py")]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _wait_for(lambda: _all_gone(pids), 30), [(p, _state(p)) for p in pids]
        assert _wait_for(lambda: not os.path.exists(segment)
                         and not os.path.exists(segment + ".lock"), 60), "segment left"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        for path in (segment, segment + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


@pytest.mark.parametrize("policy", ["linux", "gang", "coop"])
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                       (signal.SIGHUP, 129), (signal.SIGUSR1, 138)])
def test_ctrl_c_sigterm_and_sighup_end_every_jobs_group(sig, code, policy, tmp_path, request):
    """SIGHUP: the terminal or ssh session of a run started without nohup gone; SIGUSR1: a
    batch system's warning before the time limit. Before, colocate died of either at once
    and left its study's lock behind."""
    if policy == "coop":
        request.getfixturevalue("shim_lib")
    pipeline = f"sh -c {shlex.quote(LONG + ' | cat')}"  # a group of three processes
    proc = _colocate(tmp_path, "--cmd", pipeline, "--jobs", "2", "--policy", policy)
    try:
        jobs = _wait_for(lambda: len(_jobs_of(proc.pid, "py_threads.py")) == 2
                         and all(len(p.children()) == 2 for p in _jobs_of(proc.pid, "py_threads.py")))
        assert jobs, proc.stderr.read() if proc.poll() is not None else _tree(proc.pid)
        leaders = _jobs_of(proc.pid, "py_threads.py")
        pids = [p.pid for p in leaders] + [c.pid for p in leaders for c in p.children()]
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("hybridsched: ")
    assert _all_gone(pids), [(p, _state(p)) for p in pids]
    assert not list(tmp_path.glob("*.lock"))


def test_a_job_killed_under_coop_leaves_the_others_finishing_and_its_tokens_free(shim_lib):
    """SIGKILL one job's leader while both run on the arbiter: the other verifies, the
    dead job's tokens go back (its threads' liveness is checked per thread), and the
    arbiter's segment goes with the last participant."""
    from hybridsched.coop.paths import segment_path

    short = f"{PY} {EX / 'py_threads.py'} 400 64"
    spec = cmd_spec([LONG, short], ["coop"], reps=1, quantum_s=0.005)  # job 0 ends by a signal

    def working_job0():
        try:  # a process found may end before it is read (the other job, say)
            jobs = [p for p in _jobs_of(os.getpid(), "py_threads.py")
                    if "200000" in " ".join(p.cmdline())]
            # past its start-up: its threads work on the tokens
            return jobs if jobs and sum(jobs[0].cpu_times()[:2]) > 0.3 else []
        except psutil.Error:
            return []
    th, victim = _killer(working_job0)
    recs = run_commands_once(spec, "coop", 0)
    th.join()
    assert victim, "job 0 was never seen working"
    assert not recs[0].verified and recs[0].exit_status == -9 and "SIGKILL" in recs[0].error
    assert recs[1].verified, (recs[1].error, recs[1].err_tail)
    assert _state(victim[0]) == "gone"
    assert not os.path.exists(segment_path())


def test_a_process_a_job_moved_out_of_its_group_is_killed_too(tmp_path):
    """`setsid` takes a job's child out of its group, which the cleanup kills: adopted by
    colocate (the subreaper) once its parent ends, it is killed and reaped with the rest
    (it ran on under init). The job ends once the child is in its own session."""
    marker = f"{300 + os.getpid() % 1000}.25"
    flag = tmp_path / "moved"
    inner = shlex.quote(f"echo $$ > {flag}.tmp && mv {flag}.tmp {flag} && exec sleep {marker}")
    job = f"setsid sh -c {inner} & while [ ! -e {flag} ]; do :; done"
    spec = cmd_spec([f"sh -c {shlex.quote(job)}"], ["linux"], reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.verified, rec.error
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]
    for p in left:
        p.kill()
    assert not left, "the setsid'd child outlived colocate"


# another study's arbiter, held until its stdin closes: a quantum of 5 ms, or one CPU
_HOLDER = """
import sys
from hybridsched.coop.arbiter import Arbiter
from hybridsched.oslayer.cpus import usable_cpus
cpus = usable_cpus()[:1] if sys.argv[1] == "cpus" else None
with Arbiter(cpus, 0.020 if sys.argv[1] == "cpus" else 0.005):
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("other", ["quantum", "cpus"])
def test_an_arbiter_taken_since_the_study_began_fails_coops_turn_alone(other, shim_lib, tmp_path):
    """The node's arbiter taken by another run with another quantum (or other CPUs) after
    the study's start-up check: coop's turn is not run, its jobs recorded failed with the
    reason, and the study goes on, exit 1. Before, the turn joined the other quantum's
    segment without a word and recorded its own; other CPUs ended the study with exit 2
    ("bad input"), rows written (the review)."""
    if other == "cpus" and len(usable_cpus()) < 2:
        pytest.skip("needs two CPUs: an arbiter for one is another's")
    flag = tmp_path / "go"
    p = _colocate(tmp_path, "--cmd", f"sh -c 'while [ ! -e {flag} ]; do sleep 0.01; done'",
                  "--policy", "linux,coop", "--quantum-ms", "20")
    holder = None
    try:
        wait_until(lambda: any(_cmdline(q)[:2] == ["sh", "-c"] and str(flag) in _cmdline(q)[2]
                               for q in _descendants(p.pid)), "the linux turn's job")
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, other], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "ready\n"
        flag.touch()
        out, err = p.communicate(timeout=300)
    finally:
        p.kill()
        p.wait()
        if holder is not None:
            holder.stdin.close()
            holder.wait(timeout=60)
    assert p.returncode == 1, err
    rows = read_colocate(str(tmp_path / "x.h5"))
    by = {str(r["policy"]): r for r in rows}
    assert by["linux"]["verified"] and not by["coop"]["verified"]
    why = str(by["coop"]["error"])
    assert why.startswith("not run: ") and ("5 ms quantum" if other == "quantum" else "1 CPU") \
        in why, why
    assert "coop rep 0 job 0: " in err and "FAILED not run" in err, err
    assert "| coop | 0 (+1 failed) |" in out and "| linux | 1 |" in out, out


def _cmdline(q: psutil.Process) -> list[str]:
    """``q``'s command line, [] once it is gone (or a zombie)."""
    with contextlib.suppress(psutil.Error):
        return q.cmdline()
    return []


def _descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


@contextlib.contextmanager
def _small_tmpfs(where, size: str):
    """A tmpfs of ``size`` mounted on ``where`` (the test skipped where mounting is not
    allowed), unmounted on the way out."""
    where.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()[:200]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_job_failing_on_a_full_output_disk_is_said_to_have_met_it(tmp_path):
    """Each job's output is kept whole in TMPDIR: once that is full, the job's writes fail
    and it does, its own words about it lost with them. Its record now names the full disk
    and TMPDIR; before, 'exited with status 1' and an empty stderr (the review)."""
    with _small_tmpfs(tmp_path / "small", "400k") as small:
        env = dict(os.environ, TMPDIR=str(small), HYBRIDSCHED_NO_LOAD_PROBE="1")
        p = subprocess.run([sys.executable, "-m", "hybridsched", "colocate", "--cmd",
                            "sh -c 'head -c 1000000 /dev/zero'", "--policy", "linux", "--reps",
                            "1", "-o", str(tmp_path / "x.h5")], capture_output=True, text=True,
                           env=env, timeout=300)
    assert p.returncode == 1, p.stderr
    rows = read_colocate(str(tmp_path / "x.h5"))
    assert not rows["verified"][0]
    assert (f"keeps the jobs' output ({small}) was full when it ended, which may be why; "
            "set TMPDIR") in str(rows["error"][0])


def test_a_coop_job_whose_threads_ran_unmanaged_fails(shim_lib, tmp_path):
    """Every worker slot of the arbiter taken (the node's other jobs): the job's threads ran
    outside it, so its row is no measurement of coop and fails, saying why. Before, it was
    stored verified, exit 0, `unmanaged 2` in its counters the only sign (the second
    review)."""
    from hybridsched.coop.arbiter import Arbiter
    from hybridsched.coop.ops import now_ns

    with Arbiter() as a:  # the node's arbiter, as colocate will find it
        with a.locked() as st:
            other = st.join_job(os.getpid(), 12345)
            taken = [st.join_worker(other, os.getpid())
                     for _ in range(int((st.workers["used"] == 0).sum()))]
        try:
            p = _colocate(tmp_path, "--cmd", "sh -c 'sleep 0.05'", "--policy", "coop")
            out, err = p.communicate(timeout=300)
        finally:
            with a.locked() as st:
                for w in taken:
                    st.leave_worker(w, now_ns())
                st.leave_job(other)
    assert p.returncode == 1, err
    rows = read_colocate(str(tmp_path / "x.h5"))
    assert not rows["verified"][0]
    assert "of its threads ran unmanaged: the coop arbiter's worker slots were all taken" \
        in str(rows["error"][0])


def test_a_stop_of_colocate_is_said_and_not_taken(tmp_path):
    """SIGTSTP (Ctrl-Z, `kill -TSTP`) mid-measurement: one line, and colocate goes on to
    the end. It stopped colocate alone: its jobs ran on, a gang job stayed stopped for
    good and --timeout was not kept (the review)."""
    proc = _colocate(tmp_path, "--cmd", f"{PY} {EX / 'py_threads.py'} 150 64", "--jobs", "2",
                     "--policy", "gang", "--quantum-ms", "20")
    try:
        jobs = _wait_for(lambda: len(_jobs_of(proc.pid, "py_threads.py")) == 2)
        assert jobs, proc.stderr.read() if proc.poll() is not None else _tree(proc.pid)
        for _ in range(2):
            os.kill(proc.pid, signal.SIGTSTP)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err.count("colocate: not stopped: a stop in the middle of a repetition") == 1, err
    rows = read_colocate(str(tmp_path / "x.h5"))
    assert len(rows) == 2 and rows["verified"].all()


def test_orphans_a_job_leaves_are_reaped_as_they_end(tmp_path):
    """colocate, the subreaper, adopts what a job's processes leave behind: those that
    ended stood as zombies until the job did (the review), now reaped within half a
    second, while the job runs on (until the test lets it end)."""
    stop, spawned = tmp_path / "stop", tmp_path / "spawned"
    job = (f"sh -c 'for i in $(seq 50); do (sleep 0.01 &); done; touch {spawned}; "
           f"while [ ! -e {stop} ]; do sleep 0.05; done; echo ok'")
    proc = _colocate(tmp_path, "--cmd", job, "--jobs", "1", "--policy", "linux", "--expect", "ok")

    def orphans_left() -> list:
        return [c for c in psutil.Process(proc.pid).children()
                if c.status() == psutil.STATUS_ZOMBIE or c.cmdline()[-1:] == ["0.01"]]

    try:
        assert _wait_for(spawned.exists, 120), _tree(proc.pid)
        assert _wait_for(lambda: not orphans_left(), 60), orphans_left()
        assert proc.poll() is None and not stop.exists()
        stop.write_text("")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
