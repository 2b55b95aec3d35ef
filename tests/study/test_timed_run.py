"""The one execution core (issue 22) and what its hostile review found: every path through
study.runner.TimedRun keeps each run's resources and results, whichever caller it is."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numba
import numpy as np
import pytest

import hybridsched
from hybridsched import store
from hybridsched.cli import main
from hybridsched.colocate import workloads as kinds
from hybridsched.colocate.experiment import run_once
from hybridsched.colocate.spec import POLICIES, ColocateSpec
from hybridsched.coop import arbiter as arb
from hybridsched.errors import UsageError
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.oslayer.shm import our_shm_entries
from waiting import default_sigint, wait_for_rows, wait_until

N = n_cpus()


@numba.njit(nogil=True)
def square(task):
    task[:] = task * task


@numba.njit(nogil=True)
def does_not_compile(task):
    task[0] = "x"


# --- parallel_for ---------------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["fac", "fsc", "auto", "pipe-MtoM:fac"])
def test_a_profiled_technique_applies_the_kernel_once(scheduler):
    """The profiling run works on the caller's array: it is put back before the timed run."""
    a = np.arange(1.0, 13.0).reshape(6, 2)
    hybridsched.parallel_for(square, a, scheduler=scheduler, k=2)
    assert np.array_equal(a, np.arange(1.0, 13.0).reshape(6, 2) ** 2)


@pytest.mark.parametrize("scheduler", ["prolific", "pipe-MtoM"])
def test_a_kernel_that_does_not_compile_leaves_no_copy_of_the_array(scheduler):
    for _ in range(2):
        with pytest.raises(UsageError, match="does not compile"):
            hybridsched.parallel_for(does_not_compile, np.zeros((4, 3)), scheduler=scheduler, k=2)
    assert our_shm_entries(os.getpid()) == []


@pytest.mark.parametrize("call", [
    lambda: hybridsched.parallel_for("quicksort", np.zeros((2, 2, 2), np.uint8), k="two"),
    lambda: hybridsched.parallel_for("quicksort", np.zeros((2, 2, 2), np.uint8), chunk="x"),
    lambda: hybridsched.plan("dynamic", "10", 2),
    lambda: hybridsched.plan("dynamic", 10, 2, 10.5),
    lambda: hybridsched.write_study("never.h5", [1, 2]),
], ids=["k-text", "chunk-text", "plan-tasks-text", "plan-chunk-float", "write-non-results"])
def test_api_arguments_of_the_wrong_type_are_one_usage_error(call):
    with pytest.raises(UsageError) as exc:
        call()
    assert "\n" not in str(exc.value) and "--" not in str(exc.value)
    assert not os.path.exists("never.h5")


def test_a_long_non_ascii_kernel_name_is_cut_to_bytes_and_the_result_saves(tmp_path):
    def kernel(task):
        task[:] = task

    kernel.__qualname__ = "ÿ" * 100  # 200 bytes of UTF-8
    res = hybridsched.parallel_for(kernel, np.zeros((4, 2)), scheduler="serial", verify="none")
    assert len(res.record.config.kernel.encode()) <= 120
    res.save(str(tmp_path / "s.h5"))
    assert len(store.read_runs(str(tmp_path / "s.h5"))) == 1


# --- colocate ---------------------------------------------------------------------------------

def test_a_job_that_dies_before_the_start_fails_alone(seg, monkeypatch):
    real = kinds.Bsp.worker

    def dying(spec, ctx, policy, cpus, j, t, w, sh, seat):
        if j == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # job 0 dies while it is set up
        return real(spec, ctx, policy, cpus, j, t, w, sh, seat)

    monkeypatch.setattr(kinds.Bsp, "worker", staticmethod(dying))
    spec = ColocateSpec(jobs=2, workers=1, policies=["linux"], step_us=50, steps=20, reps=1)
    spec.validate(N)
    recs = run_once(spec, POLICIES["linux"], 0, arbiter_path=seg)
    assert not recs[0].verified and "before the start" in recs[0].error
    assert recs[1].verified, recs[1].error


def test_coop_run_jobs_take_their_seat_from_the_experiment(seg, tmp_path, monkeypatch):
    """A job process attaches no arbiter of its own (it would be another participant, on
    the default segment and quantum)."""
    real = arb.Arbiter.__enter__

    def noting(self):
        (tmp_path / f"enter-{os.getpid()}").write_text(self.path)
        return real(self)

    monkeypatch.setattr(arb.Arbiter, "__enter__", noting)
    spec = ColocateSpec(workload="run", jobs=2, workers=2, policies=["coop"], steps=12, reps=1,
                        scheduler="dynamic", height=4, width=16, quantum_s=0.005)
    spec.validate(N)
    assert all(r.verified for r in run_once(spec, POLICIES["coop"], 0, arbiter_path=seg))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("enter-")] == \
        [f"enter-{os.getpid()}"]


def test_a_run_job_that_lost_and_recovered_a_worker_says_so(seg, monkeypatch, capfd):
    monkeypatch.setenv("HYBRIDSCHED_FAULT", "0:1")
    spec = ColocateSpec(workload="run", jobs=1, workers=2, policies=["linux"], steps=12, reps=1,
                        scheduler="pipe-MtoM", height=4, width=16)
    spec.validate(N)
    assert run_once(spec, POLICIES["linux"], 0, arbiter_path=seg)[0].verified
    assert "lost 1 worker(s) and completed on the others" in capfd.readouterr().err


@pytest.mark.slow
def test_after_ctrl_c_to_a_coop_colocate_the_next_run_finds_no_coop_segment(tmp_path):
    """Ctrl-C while a coop experiment runs: 130, and at the latest the next command's sweep
    removes the node's segment (the jobs' workers die a moment after their parent)."""
    if os.path.exists(arb.segment_path()):
        pytest.skip("another coop run is using the node's segment")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "colocate", "--workload", "run",
                             "-s", "prolific", "--jobs", "2", "--workers", "2", "--steps", "3000",
                             "--height", "64", "--width", "64", "--reps", "1000", "--policy",
                             "coop", "-o", str(tmp_path / "c.h5")], stderr=subprocess.PIPE,
                            preexec_fn=default_sigint)
    # a repetition is stored and the next one runs on the arbiter
    wait_for_rows(str(tmp_path / "c.h5"), 1, proc, table="colocate")
    wait_until(lambda: os.path.exists(arb.segment_path()), "the arbiter's segment", proc=proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert main(["run", "-s", "dynamic", "-k", "2", "-L", "4", "--height", "4", "--width", "8",
                 "--reps", "1", "-o", str(tmp_path / "next.h5")]) == 0
    assert not os.path.exists(arb.segment_path())
    assert not os.path.exists(arb.segment_path() + ".lock")


def test_the_sweep_removes_a_segment_whose_participants_all_died(seg, monkeypatch):
    code = ("import os, signal\nfrom hybridsched.coop.arbiter import Arbiter\n"
            f"a = Arbiter(path={seg!r}).__enter__()\na.join_job()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == -9
    assert os.path.exists(seg)
    from hybridsched.coop import sweep

    sweep.sweep(seg)
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


def test_the_sweep_never_waits_for_a_participant_inside_the_attach(seg):
    """A participant stopped while it attaches holds the flock of the segment's lock file:
    the sweep leaves such a segment alone at once, as one in use (an MPI rank's watchdog,
    sweeping after its rank died, waited as long, and its job's mpiexec with it)."""
    code = ("import os, signal\nfrom hybridsched.coop.arbiter import Arbiter\n"
            f"a = Arbiter(path={seg!r}).__enter__()\na.join_job()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == -9
    holder = subprocess.Popen(["flock", seg + ".lock", "cat"], stdin=subprocess.PIPE)
    try:
        from hybridsched.coop import sweep
        from waiting import wait_until

        wait_until(lambda: _flock_held(seg + ".lock"), "flock holding the lock")
        sweep.sweep(seg)  # returns: the test would hang here otherwise
        assert os.path.exists(seg)  # in use: left alone
    finally:
        holder.stdin.close()
        holder.wait()
    sweep.sweep(seg)
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


def _flock_held(path: str) -> bool:
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def test_the_sweep_removes_what_a_creator_killed_while_making_the_segment_left(seg):
    """A creator SIGKILLed inside Arbiter._create leaves its lock file and its unfinished
    ``.new.<pid>`` copy but no segment: coop exec's guardian, sweeping after it, once left
    both (a SIGHUP there killed coop exec, seen by a hostile review)."""
    code = ("import os, signal\nfrom hybridsched.coop import arbiter\n"
            "def killed(self):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            "arbiter.Arbiter._initialise = killed\n"
            f"arbiter.Arbiter(path={seg!r}).__enter__()\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == -9
    folder, base = os.path.split(seg)
    left = sorted(n for n in os.listdir(folder) if n.startswith(base))
    assert not os.path.exists(seg) and len(left) == 2, left  # the lock and the copy
    from hybridsched.coop import sweep

    sweep.sweep(seg)
    assert not [n for n in os.listdir(folder) if n.startswith(base)]


# --- the command line ---------------------------------------------------------------------------

def test_version_and_help_load_no_kernel_code():
    code = ("import sys\nfrom hybridsched.cli import main\n"
            "for argv in (['--version'], ['--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "assert 'numba' not in sys.modules, 'numba loaded'\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_trace_of_a_study_without_runs_says_so(tmp_path, capsys):
    out = str(tmp_path / "g.h5")
    assert main(["ge", "--arch", "A2", "--algo", "rows", "--n", "16", "--threads", "4",
                 "-o", out]) == 0
    capsys.readouterr()
    assert main(["trace", out]) == 2
    assert "holds no runs to trace" in capsys.readouterr().err


def test_colocate_refuses_run_options_for_another_workload(tmp_path, capsys):
    assert main(["colocate", "--workload", "bsp", "-s", "guided", "-o", str(tmp_path / "c.h5")]) == 2
    assert "for --workload run only" in capsys.readouterr().err


def test_resume_at_p1_refuses_an_mpi_study(tmp_path, capsys):
    out = str(tmp_path / "m.h5")
    with store.StudyWriter(out, {"N": 2}, {"P": 2, "split": "static", "seed": 0}):
        pass
    assert main(["run", "-s", "dynamic", "-k", "2", "-L", "4", "--height", "4", "--width", "8",
                 "--reps", "1", "-o", out, "--resume"]) == 2
    assert "MPI ranks cannot be continued" in capsys.readouterr().err


# --- MPI -----------------------------------------------------------------------------------------

def _mpiexec(mpi, args, tmp_path, env=None):
    return mpi.call([*mpi.argv(2), sys.executable, "-m", "hybridsched", *args], timeout=300,
                    env=mpi.env(**(env or {})), cwd=tmp_path)


def test_a_dynamic_split_chunk_recovers_a_lost_pipe_worker(mpi, tmp_path):
    p = _mpiexec(mpi, ["run", "-s", "pipe-MtoM", "-k", "2", "-L", "20", "--height", "8", "--width",
                  "16", "--reps", "1", "-o", "x.h5", "--split", "dynamic"], tmp_path,
                 {"HYBRIDSCHED_FAULT": "0:1:kill"})
    assert p.returncode == 0, p.stderr
    assert bool(store.read_runs(str(tmp_path / "x.h5"))["verified"].all())


@pytest.mark.parametrize("fault", ["1:1", "0:1:kill"])
def test_a_failed_mpi_run_leaves_no_study_lock(mpi, fault, tmp_path):
    p = _mpiexec(mpi, ["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "8", "--height", "4",
                  "--width", "8", "--reps", "1", "-o", "f.h5"], tmp_path,
                 {"HYBRIDSCHED_FAIL_RANK": fault})
    assert p.returncode != 0
    deadline = time.monotonic() + 10  # the dead rank's watchdog removes it
    while os.path.exists(tmp_path / "f.h5.lock") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(tmp_path / "f.h5.lock")
    assert len(store.read_runs(str(tmp_path / "f.h5"))) == 1  # the committed run is kept


def test_a_malformed_mpi_test_hook_is_refused_at_the_start(mpi, tmp_path):
    p = _mpiexec(mpi, ["run", "-s", "dynamic", "-k", "1", "-L", "8", "--height", "4", "--width", "8",
                  "--reps", "1", "-o", "h.h5"], tmp_path, {"HYBRIDSCHED_FAIL_RANK": "x"})
    assert p.returncode == 2 and "HYBRIDSCHED_FAIL_RANK" in p.stderr
    assert not os.path.exists(tmp_path / "h.h5") and not os.path.exists(tmp_path / "h.h5.lock")
