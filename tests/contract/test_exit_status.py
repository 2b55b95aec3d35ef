"""One exit status contract over every subcommand (cli.py): 0 when everything ran and
verified, 1 when a run, job or rank failed, 2 for bad input (one line on stderr, nothing
left behind), 130/143 for SIGINT/SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import pytest

from hybridsched.cli import main
from hybridsched.commands.parsers import SUBCOMMANDS
from hybridsched.oslayer.proctree import FAULT_ENV
from waiting import (DEADLINE_S, default_sigint, signalled, wait_for_descendants, wait_for_rows,
                     wait_until)

TINY = ["-k", "2", "-L", "6", "--height", "4", "--width", "8", "--reps", "1"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("exit") / "s.h5")
    assert main(["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "6", "--height", "4",
                 "--width", "8", "--reps", "1", "-o", path]) == 0
    return path


def _ok(study, tmp):
    out = str(tmp / "o.h5")
    return {
        "run": ["run", "-s", "dynamic,prolific", *TINY, "-o", out],
        "ge": ["ge", "--arch", "A2", "--algo", "rows", "--n", "16", "--threads", "4", "-o", out],
        "colocate": ["colocate", "--jobs", "2", "--workers", "1", "--steps", "5",
                     "--step-us", "50", "--reps", "1", "--policy", "linux", "-o", out],
        "coop": ["coop", "exec", "--segment", str(tmp / "seg"), "--", "true"],
        "trace": ["trace", study, "--png", str(tmp / "t.png")],
        "check": ["check", "-L", "2", "--height", "2", "--width", "2"],
        "list": ["list"],
        "plan": ["plan", "--policy", "guided", "--tasks", "10", "--workers", "2"],
        "report": ["report", study, "--no-plots", "--out-dir", str(tmp / "r")],
        "fit": ["fit", study, "--model", "amdahl"],
        "merge": ["merge", study, "-o", out],
        "simulate": ["simulate", "-s", "serial,dynamic,prolific", *TINY, "--cores", "8", "-o", out],
        "calibrate": ["calibrate", "-o", str(tmp / "c.json")],
    }


# a run, job or rank of the command fails: (argv, environment)
def _failing(tmp):
    out = str(tmp / "f.h5")
    return {
        "run": (["run", "-s", "prolific", *TINY, "-o", out], {FAULT_ENV: "0:1"}),
        "ge": (["ge", "--arch", "A2", "--algo", "rows", "--n", "16", "--threads", "8", "-o", out],
               {"HYBRIDSCHED_GE_FAULT": "row5"}),
        # a job's run loses a worker: the job fails, the others go on
        "colocate": (["colocate", "--workload", "run", "-s", "prolific", "--jobs", "2",
                      "--workers", "2", "--steps", "6", "--height", "4", "--width", "8",
                      "--reps", "1", "--policy", "linux", "-o", out], {FAULT_ENV: "0:1"}),
    }


BAD = {
    "run": ["run", "-k", "0"],
    "ge": ["ge", "--n", "0"],
    "colocate": ["colocate", "--jobs", "0"],
    "coop": ["coop", "exec"],
    "trace": ["trace", "/nonexistent.h5"],
    "check": ["check", "--frames", "x"],
    "list": ["list", "--bogus"],
    "plan": ["plan", "--policy", "guided", "--tasks", "0", "--workers", "2"],
    "report": ["report", "/nonexistent.h5"],
    "fit": ["fit", "/nonexistent.h5"],
    "merge": ["merge", "/nonexistent.h5", "-o", "/tmp/never-written-by-hybridsched.h5"],
    "simulate": ["simulate", "--cores", "0"],
    "calibrate": ["calibrate", "--width", "0"],
}


def test_every_subcommand_is_covered(tmp_path):
    assert set(BAD) == set(SUBCOMMANDS) == set(_ok("s.h5", tmp_path))


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_0_when_everything_ran(name, study, tmp_path, capsys, request):
    if name == "coop":
        request.getfixturevalue("shim_lib")  # built once (skipped without a C compiler)
    assert main(_ok(study, tmp_path)[name]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_2_for_bad_input_in_one_line(name, tmp_path, capsys):
    before = set(os.listdir(tmp_path))
    assert main(BAD[name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hybridsched"), err
    assert set(os.listdir(tmp_path)) == before
    assert not os.path.exists("/tmp/never-written-by-hybridsched.h5")


@pytest.mark.parametrize("name", ["run", "ge", "colocate"])
def test_1_when_a_run_or_job_failed(name, tmp_path, capsys, monkeypatch):
    argv, env = _failing(tmp_path)[name]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 1
    assert capsys.readouterr().err.strip()  # said why


def test_1_when_a_rank_failed(mpi, tmp_path):
    p = mpi.call([*mpi.argv(2), sys.executable, "-m", "hybridsched", "run", "-s", "dynamic",
                  *TINY, "-o", str(tmp_path / "m.h5")],
                 env=mpi.env(HYBRIDSCHED_FAIL_RANK="1:0"), timeout=300)
    assert p.returncode == 1, p.stderr


@pytest.mark.parametrize("sig,rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                    (signal.SIGHUP, 129), (signal.SIGUSR1, 138)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1"])
@pytest.mark.parametrize("name", ["run", "colocate", "ge"])
def test_130_143_and_129_for_the_signals(name, sig, rc, tmp_path):
    """The signal arrives once the command is known to be inside its runs (a committed row,
    or the jobs' processes), and each command has work for minutes on any machine, so it
    cannot end on its own first. The child starts with SIGINT at its default whatever this
    process's disposition is (a background job's suite has it ignored)."""
    out = str(tmp_path / "x.h5")
    long = {
        "run": ["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "200", "--height", "64",
                "--width", "64", "--reps", "2000"],
        "colocate": ["colocate", "--jobs", "2", "--workers", "1", "--steps", "1000000",
                     "--step-us", "50", "--reps", "5", "--policy", "linux"],
        "ge": ["ge", "--arch", "A0,A1,A2", "--n", "256", "--threads", "64", "--reps", "100000"],
    }[name]
    inside = {  # the state that says the command is running its experiment
        "run": lambda proc: wait_for_rows(out, 1, proc),
        "colocate": lambda proc: wait_for_descendants(proc.pid, 2, proc),
        "ge": lambda proc: wait_for_rows(out, 1, proc, table="ge"),
    }[name]
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", *long, "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        inside(proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == rc, err
    assert not os.path.exists(out + ".lock")


@pytest.mark.parametrize("sig,rc", [(signal.SIGUSR1, 138), (signal.SIGUSR2, 140),
                                    (signal.SIGALRM, 142)], ids=["SIGUSR1", "SIGUSR2", "SIGALRM"])
def test_a_batch_systems_warning_to_every_process_ends_run_cleanly(sig, rc, tmp_path):
    """Slurm's `--signal=USR1@60` or `scancel --signal=USR1`: the signal reaches every
    process of the job, forked workers too. It ended the study at once, its lock left
    behind; now the command stops as for SIGTERM (its workers ignore it: they are the
    parent's to stop), and what it stored is kept for `--resume`."""
    out = str(tmp_path / "w.h5")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "run", "-s", "prolific",
                             "-k", "2", "-L", "2000", "--height", "64", "--width", "64",
                             "--reps", "2000", "-o", out], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, 1, proc)
        wait_for_descendants(proc.pid, 1, proc)  # its forked workers, in its group
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == rc, err
    assert err.strip().splitlines()[-1] == \
        f"hybridsched: ended by {signal.Signals(sig).name}; completed runs are kept in the output file"
    assert not os.path.exists(out + ".lock")
    assert main(["report", "--no-plots", out]) == 0


@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["SIGTERM", "SIGHUP"])
def test_an_ending_signal_ends_a_command_whose_stdout_is_stalled(sig, rc, tmp_path):
    """stdout a terminal whose output is stopped (Ctrl-S): the command said its line, then
    stayed blocked flushing what its line-buffered stdout still held, the signal taken
    (the review). What stdout still holds is dropped."""
    import pty
    import termios

    main_fd, sub = pty.openpty()
    termios.tcflow(sub, termios.TCOOFF)  # the terminal's output stopped: writes block
    out = str(tmp_path / "s.h5")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "run", "-s", "serial",
                             *TINY, "-o", out], stdout=sub, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    os.close(sub)
    def writing() -> bool:  # blocked in write(1, ...): system call 1, its fd 0x1
        with open(f"/proc/{proc.pid}/syscall") as fh:
            return fh.read().startswith("1 0x1 ")
    try:
        wait_until(writing, "the command blocked writing its report", proc=proc)
        status, err = signalled(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(main_fd)
    assert status == rc, err
