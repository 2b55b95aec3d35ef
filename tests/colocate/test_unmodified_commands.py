"""`hybridsched colocate --cmd`: unmodified commands as jobs under every policy, their
records, the report, faults (a job killed, colocate killed, Ctrl-C, SIGTERM) and bad input.

The workloads are the ones in examples/unmodified/ (the docs and the benchmark use the
same); the C ones are compiled into a temporary folder, and skipped without a compiler.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import h5py
import psutil
import pytest

from hybridsched.cli import main
from hybridsched.colocate.cmdrun import run_commands_once
from hybridsched.colocate.output import read_colocate
from hybridsched.colocate.placement import partition
from hybridsched.colocate.spec import ColocateSpec
from hybridsched.oslayer.cmdjobs import TIMEOUT_GRACE_S
from hybridsched.oslayer import cmdjobs
from hybridsched.oslayer.cpus import n_cpus, usable_cpus
from repo import FIXTURES, ROOT

N = n_cpus()
BURN = ("import sys, time\nt = time.process_time()\n"
        "while time.process_time() - t < float(sys.argv[1]): pass")
EX = ROOT / "examples" / "unmodified"
PY = shlex.quote(sys.executable)
CC = shutil.which("gcc") or shutil.which("cc")
POLICIES = ["linux", "env", "partition", "gang", "serial", "coop"]
PIPE_BYTES = 2_000_000
PIPE_SUM = hashlib.sha256((b"hybridsched\n" * PIPE_BYTES)[:PIPE_BYTES]).hexdigest()


@pytest.fixture(scope="session")
def omp(tmp_path_factory) -> dict[str, str]:
    """The OpenMP examples, built with `gcc -fopenmp` into a temporary folder."""
    if CC is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("omp")
    bins = {}
    for name in ("omp_barrier", "omp_lock"):
        exe = str(out / name)
        p = subprocess.run([CC, "-O2", "-fopenmp", str(EX / f"{name}.c"), "-o", exe],
                           capture_output=True, text=True)
        if p.returncode:
            pytest.skip(f"cannot build {name} with OpenMP: {p.stderr.strip()[-200:]}")
        bins[name] = exe
    return bins


@pytest.fixture(scope="module")
def example_cache(tmp_path_factory) -> str:
    """numba's cache for the numba example, out of the source tree. Given to that job alone:
    colocate itself keeps the package's cache, or it would compile the arbiter's rules
    afresh before starting any job (over a minute on a loaded machine)."""
    return str(tmp_path_factory.mktemp("numba-cache"))


def _workload(name: str, omp: dict | None, cache: str = "") -> str:
    return {
        "omp_barrier": lambda: f"{omp['omp_barrier']} 60 20000",
        "omp_lock": lambda: f"{omp['omp_lock']} 3000 200 50",
        "omp_spinlock": lambda: f"{omp['omp_lock']} 3000 200 50 spin",
        "numpy_matmul": lambda: f"{PY} {EX / 'numpy_matmul.py'} 6 128",
        "numpy_forks": lambda: f"{PY} {EX / 'numpy_matmul.py'} 6 128 3",
        "numba_parallel": lambda: f"env NUMBA_CACHE_DIR={cache} {PY} {EX / 'numba_parallel.py'} 20 2000",
        "py_threads": lambda: f"{PY} {EX / 'py_threads.py'} 20 64",
        "pipeline": lambda: f"sh -c 'yes hybridsched | head -c {PIPE_BYTES} | sha256sum'",
    }[name]()


def _spec(commands, policies, **kw) -> ColocateSpec:
    spec = ColocateSpec("cmd", kw.pop("jobs", 0), 0, list(policies), commands=list(commands), **kw)
    spec.validate(N)
    return spec


WORKLOADS = ["omp_barrier", "omp_lock", "omp_spinlock", "numpy_matmul", "numpy_forks", "numba_parallel",
             "py_threads", "pipeline"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_verifies_under_every_policy(workload, policy, request):
    omp = request.getfixturevalue("omp") if workload.startswith("omp") else None
    if policy == "coop":
        request.getfixturevalue("shim_lib")
    expect = PIPE_SUM if workload == "pipeline" else r"\bok$"
    cache = request.getfixturevalue("example_cache") if workload == "numba_parallel" else ""
    spec = _spec([_workload(workload, omp, cache)], [policy], jobs=2, expect=expect, reps=1,
                 quantum_s=0.005)
    recs = run_commands_once(spec, policy, 0)
    assert [r.job for r in recs] == [0, 1]
    for r in recs:
        assert r.verified, (r.error, r.err_tail, r.out_tail)
        assert r.exit_status == 0 and r.command == spec.commands[0] and r.workload == "cmd"
        assert 0 < r.time_s <= r.makespan_s and r.cpu_s > 0 and r.nivcsw >= 0
        counters = json.loads(r.counters)
        if policy in ("gang", "serial"):
            assert counters["slices"] >= 1 and counters["sigstops"] >= (r.job > 0)
        elif policy == "coop":  # every job's threads ran on the arbiter's tokens
            assert counters["threads"] >= 1 and counters["calls"] >= 1
        else:
            assert counters == {}


def test_the_cpu_time_of_what_a_command_waits_for_is_the_jobs():
    """rusage of the job's leader includes its children (sh waits for python here)."""
    busy = f"{PY} -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass'"
    spec = _spec([f"sh -c {shlex.quote(busy)}"], ["linux"], reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.verified and rec.cpu_s >= 0.3


def test_a_group_slow_to_go_does_not_lengthen_the_other_jobs_times():
    """Job 0 leaves a killed member in its group that its parent (which left the group)
    never reaps, so the group stays until colocate gives up on it (_GROUP_GONE_S): waited
    for as job 0 ended, that wait timed job 1's `sleep 0.5` at 5.2 s, verified (the
    review)."""
    linger = ("import os, signal\nif os.fork() == 0:\n    signal.pause(); os._exit(0)\n"
              "os.setsid(); signal.pause()")  # both until killed
    spec = _spec([f"sh -c {shlex.quote(f'{PY} -c {shlex.quote(linger)} & sleep 0.2')}",
                  "sleep 0.5"], ["linux"], reps=1)
    first, second = run_commands_once(spec, "linux", 0)
    assert first.verified and second.verified
    assert second.time_s < 0.5 + cmdjobs._GROUP_GONE_S / 2, second


def _writes_affinity(tmp_path) -> str:
    code = ("import os, sys; open(os.path.join(sys.argv[1], str(os.getpid())), 'w')"
            ".write(' '.join(map(str, sorted(os.sched_getaffinity(0)))))")
    return f"{PY} -c {shlex.quote(code)} {shlex.quote(str(tmp_path))}"


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_partition_confines_each_job_to_its_own_cpus(jobs, tmp_path):
    spec = _spec([_writes_affinity(tmp_path)], ["partition"], jobs=jobs, reps=1)
    recs = run_commands_once(spec, "partition", 0)
    assert all(r.verified for r in recs)
    seen = sorted(tuple(map(int, f.read_text().split())) for f in tmp_path.iterdir())
    cpus = usable_cpus()
    want = sorted(tuple(sorted({partition(j, t, jobs, cpus) for t in range(len(cpus))}))
                  for j in range(jobs))
    assert seen == want


@pytest.mark.parametrize("policy", ["linux", "env", "gang", "coop"])
def test_other_policies_leave_the_jobs_on_all_the_cpus(policy, tmp_path, request):
    """(coop pins a thread to its token's CPU, and answers the program's affinity query
    with the mask it would have had.)"""
    if policy == "coop":
        request.getfixturevalue("shim_lib")
    spec = _spec([_writes_affinity(tmp_path)], [policy], jobs=2, reps=1)
    assert all(r.verified for r in run_commands_once(spec, policy, 0))
    assert {f.read_text() for f in tmp_path.iterdir()} == {" ".join(map(str, usable_cpus()))}


ENV_PROBE = ("sh -c 'echo \"$OMP_WAIT_POLICY $GOMP_SPINCOUNT $KMP_BLOCKTIME "
             "$OPENBLAS_THREAD_TIMEOUT ${OMP_NUM_THREADS-unset}\"'")


@pytest.mark.parametrize("policy, expect", [("env", r"^passive 0 0 4 unset$"),
                                            ("coop", r"^passive 0 0 4 unset$"),
                                            ("linux", r"^    unset$")])
def test_env_sets_the_wait_policies_and_never_a_thread_count(policy, expect, monkeypatch,
                                                             request):
    if policy == "coop":
        request.getfixturevalue("shim_lib")
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OPENBLAS_THREAD_TIMEOUT",
                "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    spec = _spec([ENV_PROBE], [policy], expect=expect, reps=1)
    (rec,) = run_commands_once(spec, policy, 0)
    assert rec.verified, rec.out_tail


def test_a_failed_job_keeps_its_status_and_the_end_of_its_output():
    spec = _spec(["sh -c 'echo said-this; echo complained >&2; exit 3'",
                  "sh -c 'echo fine'"], ["linux"], reps=1)
    bad, good = run_commands_once(spec, "linux", 0)
    assert not bad.verified and bad.exit_status == 3 and "status 3" in bad.error
    assert "said-this" in bad.out_tail and "complained" in bad.err_tail
    assert bad.time_s != bad.time_s  # no time for an unverified job
    assert good.verified and good.out_tail == "" and good.time_s > 0
    # nor a makespan for its repetition (it would leave the failed job out)
    assert bad.makespan_s != bad.makespan_s and good.makespan_s != good.makespan_s


def test_expect_is_searched_through_all_the_job_printed():
    """A match printed before 5 MB more output still counts (only the last MiB was
    searched), anchors hold per line, and a 3 MB line without a newline does not end the
    search."""
    big = "yes junk | head -c 5000000"
    spec = _spec([f"sh -c 'echo MARKER; {big}'", f"sh -c '{big}; echo; echo ok'",
                  "sh -c 'head -c 3000000 /dev/zero | tr \\\\0 x; echo; echo tail'"],
                 ["linux"], expect=r"^(MARKER|ok|tail)$", reps=1)
    recs = run_commands_once(spec, "linux", 0)
    assert [r.verified for r in recs] == [True, True, True], [r.error for r in recs]


def test_an_expect_per_command_is_searched_in_its_own_jobs_output():
    """Two --expect with two --cmd: each job is held to its own (the second pattern would
    not match the first job's output, nor the first the second's)."""
    spec = _spec(["sh -c 'echo alpha'", "sh -c 'echo beta'", "sh -c 'echo alpha'"], ["linux"],
                 expect=["^alpha$", "^beta$", "^beta$"], reps=1)
    recs = run_commands_once(spec, "linux", 0)
    assert [r.verified for r in recs] == [True, True, False], [r.error for r in recs]
    assert "'^beta$'" in recs[2].error


def test_expect_decides_whether_a_clean_exit_verifies():
    spec = _spec(["sh -c 'echo hello'"], ["linux"], expect="bye", reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.exit_status == 0 and not rec.verified and "--expect" in rec.error
    assert "hello" in rec.out_tail


@pytest.mark.parametrize("policy, hung", [("linux", "sleep 60"), ("gang", "sleep 60"),
                                          ("coop", "sleep 60"),
                                          ("linux", "sh -c 'kill -STOP $$'")])
def test_a_job_past_its_timeout_is_terminated_and_the_others_finish(policy, hung, request):
    """A job that does not end (asleep, or stopped by itself, which nothing would ever
    continue: gang would, at its next slice) gets SIGTERM, its whole group (continued if
    stopped), at --timeout after the start and is recorded as failed, saying so; the other
    job verifies as usual."""
    if policy == "coop":
        request.getfixturevalue("shim_lib")
    spec = _spec([hung, "sh -c 'echo fine'"], [policy], reps=1, timeout_s=0.5)
    start = time.monotonic()
    stuck, good = run_commands_once(spec, policy, 0)
    assert time.monotonic() - start < 30  # the hung job alone would take 60 s, or for ever
    assert not stuck.verified and stuck.exit_status == -15, (stuck.exit_status, stuck.error)
    assert stuck.error == "ran past --timeout 0.5 s and was ended by SIGTERM"
    assert good.verified and good.makespan_s != good.makespan_s


def test_a_job_past_its_timeout_may_clean_up_and_one_that_will_not_end_is_killed(tmp_path):
    """The SIGTERM at --timeout reaches the command's own handler (as from timeout(1)),
    which may clean up and exit; a command that ignores it is killed TIMEOUT_GRACE_S
    later, its group with it, and its row says so. (Until 2026-12-06 a job past its
    timeout got SIGKILL at once: no clean-up.)"""
    note = tmp_path / "cleaned"
    tidy = f"sh -c 'trap \"echo cleaned > {note}; exit 3\" TERM; sleep 60 & wait'"
    stubborn = "sh -c 'trap \"\" TERM; sleep 60'"
    spec = _spec([tidy, stubborn], ["linux"], reps=1, timeout_s=0.5)
    start = time.monotonic()
    clean, stuck = run_commands_once(spec, "linux", 0)
    assert time.monotonic() - start < 30
    assert note.read_text() == "cleaned\n"
    assert clean.exit_status == 3 and clean.error == (
        "ran past --timeout 0.5 s and was ended by SIGTERM"), (clean.exit_status, clean.error)
    assert stuck.exit_status == -9 and stuck.error == (
        f"ran past --timeout 0.5 s and was killed, still running {TIMEOUT_GRACE_S:g} s "
        "after SIGTERM"), (stuck.exit_status, stuck.error)


def test_gang_switches_early_away_from_a_blocked_job():
    """Two sleeping jobs under a 10 s quantum: a job whose threads all sleep gives up the
    node at once, so both sleep at the same time."""
    spec = _spec(["sleep 0.5"], ["gang"], jobs=2, reps=1, quantum_s=10.0)
    recs = run_commands_once(spec, "gang", 0)
    assert all(r.verified for r in recs)
    first = json.loads(recs[0].counters)
    assert first["early_switches"] >= 1 and first["sigstops"] >= 1
    assert recs[0].makespan_s < 1.0  # one after the other would be 1 s at least


def test_gang_sees_a_process_its_job_left_running_in_its_group():
    """Orphaned to colocate (`(cmd &)`), a process of the job's group was missed by the
    early switch's look at the job's tree: the job was switched out at every look while
    that process computed, and the other job ran nearly alone (0.69 s for 0.6 s of CPU,
    the review). Given its slices, the other job shares the node."""
    burn = f"{PY} -c {shlex.quote(BURN)} 0.6"
    spec = _spec([f"sh -c {shlex.quote(f'({burn} >/dev/null &); sleep 3')}", burn], ["gang"],
                 reps=1, quantum_s=0.1)
    _, other = run_commands_once(spec, "gang", 0)
    assert other.verified and other.time_s > 1.5 * other.cpu_s, other


def test_serial_runs_the_jobs_one_after_the_other():
    """Two sleeping jobs, whose threads all block: gang would switch away at once (the test
    above), serial keeps the second stopped until the first has ended — one stop, one
    slice each, and a makespan of both sleeps at least."""
    spec = _spec(["sleep 0.3"], ["serial"], jobs=2, reps=1, quantum_s=0.001)
    recs = run_commands_once(spec, "serial", 0)
    assert all(r.verified for r in recs)
    first, second = (json.loads(r.counters) for r in recs)
    assert first["early_switches"] == second["early_switches"] == 0
    assert (first["slices"], first["sigstops"]) == (1, 0)
    assert (second["slices"], second["sigstops"]) == (1, 1)
    assert second["stopped_s"] >= 0.3 and recs[0].makespan_s >= 0.6


def test_gang_with_one_job_never_stops_it():
    spec = _spec(["sleep 0.05"], ["gang"], reps=1, quantum_s=0.001)
    (rec,) = run_commands_once(spec, "gang", 0)
    assert rec.verified and json.loads(rec.counters) == {
        "early_switches": 0, "sigstops": 0, "slices": 1, "stopped_s": 0.0}


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
    spec = _spec([short, short], ["gang"], reps=1, quantum_s=0.02)

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


def test_what_a_job_printed_reaches_the_terminal_escaped(tmp_path, capsys):
    """A failed job's stderr (a terminal title, a colour, a bell) is shown escaped on the
    FAILED line and in the report, never written raw to the reader's terminal."""
    out = str(tmp_path / "e.h5")
    cmd = "sh -c 'printf \"\\033]0;pwned\\007\\033[31mred\" >&2; exit 1'"
    assert main(["colocate", "--cmd", cmd, "--policy", "linux", "--reps", "1", "-o", out]) == 1
    assert main(["report", "--no-plots", out]) == 0
    captured = capsys.readouterr()
    for text in (captured.err, captured.out):
        assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07\\x1b[31mred" in captured.err
    assert "- failed: linux rep 0 job 0 exited with status 1; its stderr ends: " \
        "`\\x1b]0;pwned\\x07\\x1b[31mred`" in captured.out


def test_cli_stores_the_commands_and_reports_them(tmp_path, capsys):
    out = str(tmp_path / "c.h5")
    a, b = "sh -c 'echo ok'", f"{PY} -c 'print(\"ok\")'"
    rc = main(["colocate", "--cmd", a, "--cmd", b, "--policy", "linux,env,partition,gang",
               "--reps", "2", "--expect", "^ok$", "-o", out])
    assert rc == 0
    rows = read_colocate(out)
    assert len(rows) == 2 * 4 * 2 and rows["verified"].all()
    assert [str(c) for c in rows["command"][:2]] == [a, b]
    assert set(rows["workload"]) == {"cmd"} and len(set(rows["experiment"])) == 1
    with h5py.File(out) as h5:
        assert h5.attrs["format_version"] >= 3  # /colocate with its commands (format 3 on)
        spec = json.loads(h5.attrs["colocate_spec"])
    assert spec["commands"] == [a, b] and spec["expect"] == "^ok$"
    assert spec["environment"]["env"]["OMP_WAIT_POLICY"] == "passive"
    assert spec["environment"]["linux"] == {} and "OMP_WAIT_POLICY" in spec["inherited_environment"]
    text = capsys.readouterr().out
    assert "### cmd: 2 co-located jobs: `sh -c 'echo ok'`" in text
    assert "| gang | 2 |" in text and "slices" in text
    assert main(["report", out]) == 0
    assert list((tmp_path / "c_report").glob("colocate_cmd_J2_*.png"))


def test_a_policy_with_no_verified_repetition_gets_no_bar_and_none_at_all_no_plot(tmp_path,
                                                                                  capsys):
    """Every repetition failed: the report drew an empty plot on a -0.04..0.04 axis (the
    review); a policy whose repetitions all failed has no bar beside those that ran."""
    import matplotlib.image

    out, both = str(tmp_path / "f.h5"), str(tmp_path / "b.h5")
    assert main(["colocate", "--cmd", "false", "--policy", "linux,env", "--reps", "1",
                 "-o", out]) == 1
    assert main(["report", out]) == 0
    assert not list((tmp_path / "f_report").glob("colocate_cmd_*.png"))
    assert "- failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out
    # env's runs fail (its variable is checked), linux's verify: one bar
    cmd = "sh -c 'test -z \"$OMP_WAIT_POLICY\"'"
    assert main(["colocate", "--cmd", cmd, "--policy", "linux,env", "--reps", "1",
                 "-o", both]) == 1
    assert main(["report", both]) == 0
    png, = (tmp_path / "b_report").glob("colocate_cmd_*.png")
    assert matplotlib.image.imread(png).size  # drawn


def test_a_command_gone_during_the_study_ends_it_1_keeping_its_rows(tmp_path, capsys):
    """Looked up again for every repetition: one that deleted itself (or a binary being
    rebuilt) ended the study as bad input, status 2, a study left behind (the review)."""
    script = tmp_path / "once.sh"
    script.write_text('#!/bin/sh\nrm -f "$0"\necho ok\n')
    script.chmod(0o755)
    out = tmp_path / "s.h5"
    assert main(["colocate", "--cmd", str(script), "--policy", "linux,env", "--reps", "2",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no such file, since the study began" in err and "Traceback" not in err, err
    assert len(read_colocate(str(out))) == 1


def test_a_failing_job_makes_the_exit_status_1_and_is_reported(tmp_path, capsys):
    out = str(tmp_path / "f.h5")
    assert main(["colocate", "--cmd", "sh -c 'echo broken >&2; exit 4'", "--policy", "linux",
                 "--reps", "1", "-o", out]) == 1
    captured = capsys.readouterr()
    assert "FAILED exited with status 4; its stderr ends: broken" in captured.err
    assert "failed: linux rep 0 job 0 exited with status 4; its stderr ends: `broken`" in captured.out
    # named though no repetition verified: the title said "1 co-located commands:" and no
    # more (the review)
    from hybridsched.results.colocate_report import summary
    (rec,) = summary(read_colocate(out), 2)
    assert rec["commands"] == "sh -c 'echo broken >&2; exit 4'" and rec["reps"] == 0


def test_a_job_failing_beside_one_that_verified_leaves_a_study_report_reads(tmp_path, capsys):
    """The verified job's row has no makespan (NaN: its repetition has none worth a
    number); colocate's own report, and report later, read the study all the same."""
    out = str(tmp_path / "f.h5")
    assert main(["colocate", "--cmd", "false", "--cmd", "true", "--policy", "linux",
                 "--reps", "1", "-o", out]) == 1
    assert "failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out
    rows = read_colocate(out)
    assert [bool(v) for v in rows["verified"]] == [False, True]
    assert main(["report", out]) == 0
    assert "failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out


def test_studies_of_both_format_versions_merge(tmp_path, capsys):
    new = str(tmp_path / "n.h5")
    assert main(["colocate", "--cmd", "true", "--policy", "linux", "--reps", "1", "-o", new]) == 0
    v2 = str(FIXTURES / "colocate-v2.h5")
    merged = str(tmp_path / "m.h5")
    assert main(["merge", v2, new, "-o", merged]) == 0
    rows = read_colocate(merged)
    assert len(rows) == 13 and sorted(set(rows["workload"])) == ["bsp", "cmd"]
    capsys.readouterr()
    assert main(["report", merged, "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "### bsp: 2 jobs × 2 workers" in text and "### cmd: 1 job, `true`" in text


@pytest.mark.parametrize("how", [["--cmd", "true", "--jobs", "2"],
                                 ["--jobs", "2", "--workers", "1", "--steps", "5",
                                  "--step-us", "50"]], ids=["cmd", "bsp"])
def test_merged_studies_keep_each_repetition_apart(how, tmp_path, capsys):
    """Each study's rep 0 ran its own two jobs together: merged, they are two repetitions
    of two jobs, not one of four (the makespan and fairness are per repetition)."""
    a, b, merged = (str(tmp_path / n) for n in ("a.h5", "b.h5", "m.h5"))
    for out in (a, b):
        assert main(["colocate", *how, "--policy", "linux", "--reps", "1", "-o", out]) == 0
    assert main(["merge", a, b, "-o", merged]) == 0
    rows = read_colocate(merged)
    assert sorted(rows["rep"].tolist()) == [0, 0, 1, 1]
    capsys.readouterr()
    assert main(["report", merged, "--no-plots"]) == 0
    assert "| linux | 2 |" in capsys.readouterr().out


def _not_started(monkeypatch):
    def refuse(self):
        raise AssertionError("a job was started")
    monkeypatch.setattr(cmdjobs.CommandJobs, "__enter__", refuse)


@pytest.mark.parametrize("argv, words", [
    (["--cmd", "no-such-command-hs32"], "command not found"),
    (["--cmd", "./no/such/file"], "no such file"),
    (["--cmd", ""], "empty command"),
    (["--cmd", "   "], "empty command"),
    (["--cmd", "'unbalanced"], "quotation"),
    (["--cmd", "true", "--workload", "bsp"], "--workload"),
    (["--cmd", "true", "--steps", "5", "--barrier", "spin"], "--barrier, --steps"),
    (["--cmd", "true", "--jobs", "0"], "--jobs"),
    (["--cmd", "true", "--cmd", "false", "--jobs", "3"], "number of --cmd"),
    (["--cmd", "true", "--policy", "linux,fifo"], "unknown policy"),
    (["--cmd", "true", "--expect", "("], "not a regular expression"),
    (["--cmd", "true", "--cmd", "true", "--expect", "a", "--expect", "("], "not a regular"),
    (["--cmd", "true", "--cmd", "true", "--cmd", "true", "--expect", "a", "--expect", "b"],
     "once per --cmd"),
    (["--cmd", "true", "--jobs", "2", "--expect", "a", "--expect", "b"], "once per --cmd"),
    (["--cmd", "true", "--quantum-ms", "0"], "--quantum-ms"),
    (["--cmd", "true", "--timeout", "0"], "--timeout"),
    (["--cmd", "true", "--timeout", "soon"], "--timeout"),
    (["--cmd", "true", "--timeout", "1e9"], "--timeout"),
    (["--expect", "ok"], "for --cmd only"),
    (["--timeout", "5"], "for --cmd only"),
    (["--policy", "gang"], "for unmodified commands"),
    # hostile review: tracebacks before
    (["--cmd", "echo ok\udcff"], "not UTF-8"),
    (["--cmd", "true", "--expect", "\udcff"], "not UTF-8"),
    (["--cmd", "true", "--expect", "a{99999999999}"], "not a regular expression"),
    (["--cmd", "true", "--expect", "(" * 2000 + ")" * 2000], "not a regular expression"),
    # grep's class, a set of '[', ':', 'a'... to re (a FutureWarning and its source line
    # printed, then every job failed: the review)
    (["--cmd", "true", "--expect", "[[:alpha:]]+"], "is grep's, not Python's re"),
    (["--cmd", "/dev/null"], "not a regular file"),  # it said "chmod +x it"
])
def test_bad_input_is_one_line_exit_2_and_starts_nothing(argv, words, tmp_path, capsys,
                                                         monkeypatch):
    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    assert main(["colocate", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err
    assert not out.exists()


WHAT_CANNOT_RUN = {  # kind: (the file's bytes or None for a directory, its mode, the words)
    "directory": (None, 0o755, "is a directory"),
    "not executable": (b"#!/bin/sh\necho hi\n", 0o644, "not executable"),
    "no #! line": (b"echo hi\n", 0o755, "#!"),
    "a missing interpreter": (b"#!/no/such/interpreter -x\necho hi\n", 0o755,
                              "#! interpreter /no/such/interpreter is not an executable"),
    "an empty #! line": (b"#!\necho hi\n", 0o755, "names no interpreter"),
    # the kernel looks for `/bin/sh\r`: it ran, and failed 127 every repetition (the review)
    "Windows line endings": (b"#!/bin/sh\r\necho hi\r\n", 0o755, "ends in a carriage return"),
    "an ELF header cut short": (b"\x7fELF\x02\x01\x01", 0o755, "cut short"),
}


@pytest.mark.parametrize("policy", ["linux", "coop"])
@pytest.mark.parametrize("kind", list(WHAT_CANNOT_RUN))
def test_what_cannot_be_executed_is_refused(kind, policy, tmp_path, capsys, monkeypatch):
    """Whatever the policy (coop's own checks come after these): one line, exit 2,
    nothing started, where execve would fail and the job would only show status 127."""
    _not_started(monkeypatch)
    body, mode, words = WHAT_CANNOT_RUN[kind]
    target = tmp_path / "thing"
    if body is None:
        target.mkdir()
    else:
        target.write_bytes(body)
        target.chmod(mode)
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", str(target), "--policy", policy, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_a_static_program_under_coop_is_refused_in_one_line_and_starts_nothing(
        shim_lib, tmp_path, capsys, monkeypatch):
    from shimprogs import build

    static = build("thread_exit", tmp_path, "-static")
    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", "true", "--cmd", static, "--policy", "linux,coop",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "statically linked" in err and "--policy env or gang" in err
    assert not out.exists()


def test_a_job_killed_under_coop_leaves_the_others_finishing_and_its_tokens_free(shim_lib):
    """SIGKILL one job's leader while both run on the arbiter: the other verifies, the
    dead job's tokens go back (its threads' liveness is checked per thread), and the
    arbiter's segment goes with the last participant."""
    from hybridsched.coop.paths import segment_path

    short = f"{PY} {EX / 'py_threads.py'} 400 64"
    spec = _spec([LONG, short], ["coop"], reps=1, quantum_s=0.005)  # job 0 ends by a signal

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


def test_report_compares_policies_over_the_repetitions_both_verified(tmp_path):
    """An interrupted study has fewer repetitions of the policies after the Ctrl-C: "vs
    linux" compares the repetitions both have (it compared means over different sets), and
    one repetition shows no spread (it showed ± 0.000)."""
    from hybridsched.results.colocate_cmd import _vs, cmd_table

    out = str(tmp_path / "r.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "1", "--policy", "linux,env",
                 "--reps", "3", "-o", out]) == 0
    rows = read_colocate(out)
    rows = rows[~((rows["policy"] == "env") & (rows["rep"] == 2))]  # as if interrupted
    rows["makespan_s"][(rows["policy"] == "linux") & (rows["rep"] == 2)] = 1e6
    mk = {(str(r["policy"]), int(r["rep"])): float(r["makespan_s"]) for r in rows}
    want = (mk["linux", 0] + mk["linux", 1]) / (mk["env", 0] + mk["env", 1])
    assert _vs(rows, "linux", "env") == pytest.approx(want)
    one = rows[rows["rep"] == 0]
    recs = [dict(policy=p, reps=1, failed=0, makespan_s=0.1, makespan_sd=0.0, job_time_s=0.1,
                 jain=1.0, cpu_s=0.0, nivcsw=0.0, counters="") for p in ("linux", "env")]
    assert "± —" in cmd_table(recs, one)[2] and "± 0.000" not in "".join(cmd_table(recs, one))


def test_a_process_a_job_moved_out_of_its_group_is_killed_too(tmp_path):
    """`setsid` takes a job's child out of its group, which the cleanup kills: adopted by
    colocate (the subreaper) once its parent ends, it is killed and reaped with the rest
    (it ran on under init). The job ends once the child is in its own session."""
    marker = f"{300 + os.getpid() % 1000}.25"
    flag = tmp_path / "moved"
    inner = shlex.quote(f"echo $$ > {flag}.tmp && mv {flag}.tmp {flag} && exec sleep {marker}")
    job = f"setsid sh -c {inner} & while [ ! -e {flag} ]; do :; done"
    spec = _spec([f"sh -c {shlex.quote(job)}"], ["linux"], reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.verified, rec.error
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]
    for p in left:
        p.kill()
    assert not left, "the setsid'd child outlived colocate"


def test_a_line_too_long_to_search_never_verifies_a_job():
    """A line over LINE_MAX (4 MiB) is not searched, and the failure says so: cut in
    pieces, `y` + 5 MB of `x` + `END` matched '^x+END$' (a piece began with x)."""
    line = "printf y; head -c 5000000 /dev/zero | tr '\\\\0' x; echo END"
    spec = _spec([f"sh -c {shlex.quote(line)}"], ["linux"], expect=r"^x+END$", reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.exit_status == 0 and not rec.verified
    assert "1 line over 4 MiB was not searched" in rec.error, rec.error


def test_every_snapshot_holds_whole_repetitions(tmp_path, monkeypatch, capsys):
    """Each job's row was published on its own: a run interrupted between two jobs of one
    repetition left part of it on disk, and `report` counted it as a whole repetition (41
    of 64 jobs, hostile review). Every snapshot published now holds J rows per repetition."""
    from hybridsched.store import writer

    monkeypatch.setattr(writer, "PUBLISH_ALWAYS_S", float("inf"))  # publish at every append
    seen = []
    publish = writer.StudyWriter.publish

    def counting(self):
        ds = self.h5.get("colocate")
        seen.append(0 if ds is None else int(ds.shape[0]))
        publish(self)

    monkeypatch.setattr(writer.StudyWriter, "publish", counting)
    out = str(tmp_path / "whole.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "3", "--policy", "linux,env",
                 "--reps", "2", "-o", out]) == 0
    capsys.readouterr()
    assert seen and all(n % 3 == 0 for n in seen), seen
    assert len(read_colocate(out)) == 12


def test_a_repetition_stored_in_part_by_an_older_run_is_not_counted(tmp_path):
    """Files written before the rows of a repetition were stored together may hold some of
    an interrupted repetition's jobs: `report` counted them as a whole repetition."""
    from dataclasses import replace

    from hybridsched.colocate.output import ColocateWriter
    from hybridsched.colocate.spec import JobRecord
    from hybridsched.results.colocate_report import summary

    one = JobRecord("cmd", "linux", "", 3, 0, 1, 0, 0.0, 0, 0.1, 0.1, 0, 0, 0, 0, True,
                    command="true", experiment="e")
    whole = [replace(one, job=j) for j in range(3)]
    part = [replace(one, job=j, rep=1, time_s=9.0, makespan_s=9.0) for j in range(2)]
    out = str(tmp_path / "old.h5")
    with ColocateWriter(out, {"N": 2}, {}) as w:
        w.append(whole)
        w.append(part)
    (rec,) = summary(read_colocate(out), 2)
    assert rec["reps"] == 1 and rec["failed"] == 0 and rec["makespan_s"] == pytest.approx(0.1)


@pytest.mark.parametrize("field, value, words", [
    ("counters", "not json", "not a JSON object of numbers"),
    ("counters", '{"slices": {"a": 1}}', "not a JSON object of numbers"),
    ("counters", "[1, 2]", "not a JSON object of numbers"),
    ("time_s", float("inf"), "time_s = inf"),
    ("time_s", -1.0, "time_s = -1"),
    ("cpu_s", float("inf"), "cpu_s = inf"),
    ("job", 7, "job 7 of 2"),
])
def test_damaged_rows_are_refused_in_one_line_by_report_and_merge(tmp_path, capsys, field,
                                                                  value, words):
    """report gave JSONDecodeError, AttributeError or TypeError tracebacks on damaged
    counters and printed a job time of inf; merge copied such rows on (hostile review)."""
    good = str(tmp_path / "good.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "2", "--policy", "linux", "--reps",
                 "1", "-o", good]) == 0
    bad = str(tmp_path / "bad.h5")
    shutil.copy(good, bad)
    with h5py.File(bad, "r+") as h5:
        rows = h5["colocate"][()]
        rows[field][1] = value
        h5["colocate"][...] = rows
    capsys.readouterr()
    for argv in (["report", "--no-plots", bad], ["merge", bad, good, "-o", str(tmp_path / "m.h5")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "m.h5")


def test_policy_given_twice_runs_both(tmp_path, capsys):
    """`--policy linux --policy gang` ran gang alone (hostile review)."""
    out = str(tmp_path / "two.h5")
    assert main(["colocate", "--cmd", "true", "--policy", "linux", "--policy", "gang,linux",
                 "--reps", "1", "-o", out]) == 0
    assert read_colocate(out)["policy"].tolist() == ["linux", "gang"]


def _segment() -> str:
    from hybridsched.coop.paths import segment_path

    return segment_path()


@pytest.mark.parametrize("cause", ["no such shim", "not a shim", "a cache path with a space"])
def test_a_coop_refusal_comes_before_any_policy_runs(cause, tmp_path, capsys, monkeypatch):
    """Found only as coop's turn came (the review): the linux rows were written, the exit
    status 2, and the segment made for the session was left behind."""
    from hybridsched.coop import shimbuild

    _not_started(monkeypatch)
    cache = tmp_path / "a cache"
    if cause == "a cache path with a space":
        monkeypatch.delenv(shimbuild.SHIM_ENV, raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    else:
        monkeypatch.setenv(shimbuild.SHIM_ENV, "/no/such/shim.so" if cause == "no such shim"
                           else "/bin/true")
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", "true", "--policy", "linux,coop", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--policy env or gang" in err, err
    assert not out.exists() and not os.path.exists(out.with_suffix(".h5.lock"))
    assert not os.path.exists(_segment()) and not os.path.exists(_segment() + ".lock")
    assert not cache.exists()  # nothing built where LD_PRELOAD could not have carried it


def test_a_segment_in_use_with_another_quantum_is_refused(shim_lib, tmp_path, capsys,
                                                          monkeypatch):
    """The jobs keep the quantum of the segment they joined: the study recorded 7 ms where
    the run had 20 (the review)."""
    from hybridsched.coop.arbiter import Arbiter

    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    with Arbiter(quantum_s=0.020):  # another coop run's, still going
        assert main(["colocate", "--cmd", "true", "--policy", "linux,coop",
                     "--quantum-ms", "7", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "in use with a 20 ms quantum" in err, err
    assert not out.exists()


def test_colocate_in_a_coop_job_is_refused(tmp_path, capsys, monkeypatch):
    """Its jobs inherited the job's shim, so "linux" was not plain Linux, and under coop
    they died of the outer shim's rotation signal (the review)."""
    from hybridsched.coop.shimjob import JOB_ENV

    _not_started(monkeypatch)
    monkeypatch.setenv(JOB_ENV, "12345")
    out = tmp_path / "x.h5"
    for argv in (["--cmd", "true", "--policy", "linux"], ["--workload", "bsp"]):
        assert main(["colocate", *argv, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "outside `coop exec`" in err, err
        assert not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM],
                         ids=["SIGHUP", "SIGUSR1", "SIGALRM"])
def test_under_nohup_the_jobs_keep_sighup_ignored(sig, tmp_path):
    """`nohup hybridsched colocate ...`: the jobs started with SIGHUP's default action (the
    third review), so a job's group orphaned with a member stopped, which the kernel sends
    SIGHUP, died of it. So with a batch script's `trap '' USR1`: the jobs died of the
    warning it meant to ignore (the review of the change that made USR1 an ending signal)."""
    out = str(tmp_path / "n.h5")
    bit = f"$(( 0x$(awk '/^SigIgn/ {{print $2}}' /proc/self/status) >> {sig - 1} & 1 ))"
    p = subprocess.run([sys.executable, "-m", "hybridsched", "colocate", "--cmd",
                        f"sh -c {shlex.quote(f'echo ignored-{bit}')}", "--policy", "linux,gang",
                        "--reps", "1", "--expect", "^ignored-1$", "-o", out],
                       capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN))
    assert p.returncode == 0, p.stderr
