"""`hybridsched colocate --cmd`: unmodified commands as jobs under every policy, and what
each policy does to them (the CPUs a partition leaves them, the environment env sets, a
gang's switches), --expect, and a job past its timeout.

The workloads are the ones in examples/unmodified/ (the docs and the benchmark use the
same); the C ones are compiled into a temporary folder, and skipped without a compiler.
"""
from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import time

import pytest

from hybridsched.colocate.cmdrun import run_commands_once
from hybridsched.colocate.placement import partition
from hybridsched.oslayer.cmdjobs import TIMEOUT_GRACE_S
from hybridsched.oslayer import cmdjobs
from hybridsched.oslayer.cpus import usable_cpus
from unmodrun import EX, PY, cmd_spec


BURN = ("import sys, time\nt = time.process_time()\n"
        "while time.process_time() - t < float(sys.argv[1]): pass")


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
    spec = cmd_spec([_workload(workload, omp, cache)], [policy], jobs=2, expect=expect, reps=1,
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
    spec = cmd_spec([f"sh -c {shlex.quote(busy)}"], ["linux"], reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.verified and rec.cpu_s >= 0.3


def test_a_group_slow_to_go_does_not_lengthen_the_other_jobs_times():
    """Job 0 leaves a killed member in its group that its parent (which left the group)
    never reaps, so the group stays until colocate gives up on it (_GROUP_GONE_S): waited
    for as job 0 ended, that wait timed job 1's `sleep 0.5` at 5.2 s, verified (the
    review)."""
    linger = ("import os, signal\nif os.fork() == 0:\n    signal.pause(); os._exit(0)\n"
              "os.setsid(); signal.pause()")  # both until killed
    spec = cmd_spec([f"sh -c {shlex.quote(f'{PY} -c {shlex.quote(linger)} & sleep 0.2')}",
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
    spec = cmd_spec([_writes_affinity(tmp_path)], ["partition"], jobs=jobs, reps=1)
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
    spec = cmd_spec([_writes_affinity(tmp_path)], [policy], jobs=2, reps=1)
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
    spec = cmd_spec([ENV_PROBE], [policy], expect=expect, reps=1)
    (rec,) = run_commands_once(spec, policy, 0)
    assert rec.verified, rec.out_tail


def test_a_failed_job_keeps_its_status_and_the_end_of_its_output():
    spec = cmd_spec(["sh -c 'echo said-this; echo complained >&2; exit 3'",
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
    spec = cmd_spec([f"sh -c 'echo MARKER; {big}'", f"sh -c '{big}; echo; echo ok'",
                  "sh -c 'head -c 3000000 /dev/zero | tr \\\\0 x; echo; echo tail'"],
                 ["linux"], expect=r"^(MARKER|ok|tail)$", reps=1)
    recs = run_commands_once(spec, "linux", 0)
    assert [r.verified for r in recs] == [True, True, True], [r.error for r in recs]


def test_an_expect_per_command_is_searched_in_its_own_jobs_output():
    """Two --expect with two --cmd: each job is held to its own (the second pattern would
    not match the first job's output, nor the first the second's)."""
    spec = cmd_spec(["sh -c 'echo alpha'", "sh -c 'echo beta'", "sh -c 'echo alpha'"], ["linux"],
                 expect=["^alpha$", "^beta$", "^beta$"], reps=1)
    recs = run_commands_once(spec, "linux", 0)
    assert [r.verified for r in recs] == [True, True, False], [r.error for r in recs]
    assert "'^beta$'" in recs[2].error


def test_expect_decides_whether_a_clean_exit_verifies():
    spec = cmd_spec(["sh -c 'echo hello'"], ["linux"], expect="bye", reps=1)
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
    spec = cmd_spec([hung, "sh -c 'echo fine'"], [policy], reps=1, timeout_s=0.5)
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
    spec = cmd_spec([tidy, stubborn], ["linux"], reps=1, timeout_s=0.5)
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
    spec = cmd_spec(["sleep 0.5"], ["gang"], jobs=2, reps=1, quantum_s=10.0)
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
    spec = cmd_spec([f"sh -c {shlex.quote(f'({burn} >/dev/null &); sleep 3')}", burn], ["gang"],
                 reps=1, quantum_s=0.1)
    _, other = run_commands_once(spec, "gang", 0)
    assert other.verified and other.time_s > 1.5 * other.cpu_s, other


def test_serial_runs_the_jobs_one_after_the_other():
    """Two sleeping jobs, whose threads all block: gang would switch away at once (the test
    above), serial keeps the second stopped until the first has ended — one stop, one
    slice each, and a makespan of both sleeps at least."""
    spec = cmd_spec(["sleep 0.3"], ["serial"], jobs=2, reps=1, quantum_s=0.001)
    recs = run_commands_once(spec, "serial", 0)
    assert all(r.verified for r in recs)
    first, second = (json.loads(r.counters) for r in recs)
    assert first["early_switches"] == second["early_switches"] == 0
    assert (first["slices"], first["sigstops"]) == (1, 0)
    assert (second["slices"], second["sigstops"]) == (1, 1)
    assert second["stopped_s"] >= 0.3 and recs[0].makespan_s >= 0.6


def test_gang_with_one_job_never_stops_it():
    spec = cmd_spec(["sleep 0.05"], ["gang"], reps=1, quantum_s=0.001)
    (rec,) = run_commands_once(spec, "gang", 0)
    assert rec.verified and json.loads(rec.counters) == {
        "early_switches": 0, "sigstops": 0, "slices": 1, "stopped_s": 0.0}
