"""The start gate of unmodified commands (oslayer/cmdjobs.py, oslayer/execgate.py): each
job's child execs a small waiter before the gate, which execs the command only once the
gate opens, with exactly the command's environment and nothing of ours open."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys

import pytest

from hybridsched.oslayer.cmdjobs import CommandJobs, Launch


def _launch(*argv: str, env: dict | None = None) -> Launch:
    return Launch(tuple(argv), shutil.which(argv[0]) or argv[0],
                  dict(os.environ) if env is None else env)


def _run(*launches: Launch) -> tuple[dict, CommandJobs]:
    with CommandJobs(list(launches)) as jobs:
        jobs.wait_ready()
        jobs.open_gate()
        exits = jobs.wait()
        outputs = {j: jobs.output(j) for j in exits}
    return {j: (ex, outputs[j]) for j, ex in exits.items()}, jobs


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().decode(errors="replace")


def test_no_command_runs_before_the_gate_opens_nor_when_it_never_does(tmp_path):
    marker = tmp_path / "ran"
    with CommandJobs([_launch("touch", str(marker))]) as jobs:
        jobs.wait_ready()
        pid = jobs.pids[0]
        assert "execgate" in _cmdline(pid)  # still the waiter: the command not exec'd
        assert not marker.exists()
    # left without opening the gate: the job was killed first, its gate then closed
    assert not marker.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_command_gets_exactly_its_environment_and_the_waiter_none_of_it():
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HS_A": "x=y=z",
           "HS_B": "é ü", "LD_PRELOAD": "/nonexistent/hybridsched-test.so"}
    script = 'printf "%s|%s|%s" "$HS_A" "$HS_B" "$LD_PRELOAD"; env | sort > /dev/stderr'
    done, _ = _run(_launch("sh", "-c", script, env=env))
    ex, (out, err) = done[0]
    assert ex.code == 0, err
    assert out == "x=y=z|é ü|/nonexistent/hybridsched-test.so"
    # ld.so complains once for each process that had the preload: the command alone
    assert err.count("cannot be preloaded") == 1, err
    names = {line.split("=", 1)[0] for line in err.splitlines() if "=" in line
             and "preload" not in line}
    assert names <= set(env) | {"PWD", "SHLVL", "_", "OLDPWD"}, names


def test_the_command_starts_with_nothing_of_ours_open_and_default_signals():
    # cat is the command itself (no shell in between): its own view of its start
    done, _ = _run(_launch("cat", "/proc/self/status"),
                   _launch("ls", "/proc/self/fd"))
    (status_exit, (status, _)), (ls_exit, (fds, _)) = done[0], done[1]
    assert status_exit.code == 0 and ls_exit.code == 0
    masks = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Sig"))
    assert int(masks["SigIgn"], 16) == 0 and int(masks["SigBlk"], 16) == 0, masks
    # 0, 1, 2, and the descriptor ls reads the directory with
    assert sorted(int(fd) for fd in fds.split()) == [0, 1, 2, 3], fds


def test_a_jobs_cpu_time_leaves_out_the_waiters_start_up():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True, env={})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    a_start_up = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    done, _ = _run(_launch("true"))
    ex, _ = done[0]
    assert ex.code == 0
    assert ex.cpu_s < a_start_up, (ex.cpu_s, a_start_up)


def test_a_command_that_cannot_be_executed_after_all_says_why_with_status_127(tmp_path):
    gone = tmp_path / "gone"
    gone.write_text("#!/bin/sh\n")
    gone.chmod(0o755)
    launch = _launch(str(gone))
    with CommandJobs([launch]) as jobs:
        jobs.wait_ready()
        gone.unlink()  # between the checks and the start
        jobs.open_gate()
        ex = jobs.wait()[0]
        err = jobs.output(0)[1]
    assert ex.code == 127
    assert f"cannot start {gone}" in err and "No such file" in err
