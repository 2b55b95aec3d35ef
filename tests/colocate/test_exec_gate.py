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

from hybridsched.oslayer import execgate
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


def test_the_command_gets_exactly_its_environment_and_the_waiter_colocates_own(monkeypatch):
    monkeypatch.setenv("HS_OURS", "colocate's")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HS_A": "x=y=z",
           "HS_B": "é ü", "LD_PRELOAD": "/nonexistent/hybridsched-test.so"}
    script = 'printf "%s|%s|%s|%s" "$HS_A" "$HS_B" "$LD_PRELOAD" "${HS_OURS-unset}"'
    with CommandJobs([_launch("sh", "-c", script, env=env)]) as jobs:
        jobs.wait_ready()
        with open(f"/proc/{jobs.pids[0]}/environ", "rb") as fh:
            waiters = dict(e.split(b"=", 1) for e in fh.read().split(b"\0") if e)
        jobs.open_gate()
        ex = jobs.wait()[0]
        out, err = jobs.output(0)
    assert waiters.get(b"HS_OURS") == "colocate's".encode() and b"HS_A" not in waiters
    assert ex.code == 0, err
    assert out == "x=y=z|é ü|/nonexistent/hybridsched-test.so|unset"
    # ld.so complains once for each process that had the preload: the command alone
    assert err.count("cannot be preloaded") == 1, err


def test_what_the_command_is_given_is_not_in_the_waiters_argv():
    """Every user may read a process's argv (/proc/PID/cmdline), not its environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HS_SECRET": "s3cr3t-value"}
    with CommandJobs([_launch("true", "s3cr3t-argument", env=env)]) as jobs:
        jobs.wait_ready()
        cmdline = _cmdline(jobs.pids[0])
        jobs.open_gate()
        assert jobs.wait()[0].code == 0
    assert "execgate" in cmdline
    assert "s3cr3t" not in cmdline, cmdline


def test_a_waiter_whose_gate_never_opens_runs_nothing(tmp_path):
    """colocate killed before the start: its end of the gate closes, and the waiters must
    read that as "no start", not as the gate opening."""
    marker = tmp_path / "ran"
    spec = execgate.encode(0, shutil.which("touch"), ["touch", str(marker)], {})
    gate_r, gate_w = os.pipe()
    ready_r, ready_w = os.pipe()
    spec_fd = os.memfd_create("test-spec", 0)
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    fds = {execgate.GATE_FD: gate_r, execgate.READY_FD: ready_w, execgate.SPEC_FD: spec_fd}

    def place():
        moved = {to: os.dup(fd) for to, fd in fds.items()}
        for to, fd in moved.items():
            os.dup2(fd, to)

    waiter = subprocess.Popen([sys.executable, "-S", "-s", execgate.__file__],
                              preexec_fn=place, pass_fds=(), close_fds=False)
    for fd in (gate_r, ready_w, spec_fd):
        os.close(fd)
    said = os.read(ready_r, execgate.READY.size)  # it waits at the gate now
    assert execgate.READY.unpack(said)[0] == 0
    os.close(gate_w)  # as when colocate dies: end of file, no byte
    assert waiter.wait() == 127
    os.close(ready_r)
    assert not marker.exists()


def test_an_environment_name_libc_refuses_is_a_start_failure_said_in_one_line():
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "": "nameless"}
    done, _ = _run(_launch("true", env=env))
    ex, (_, err) = done[0]
    assert ex.code == 127
    assert "cannot start true" in err and "Traceback" not in err, err


def test_an_interpreter_path_python_could_not_work_out_still_starts_the_waiter(tmp_path):
    """sys.executable is empty where argv[0] named no file (exec -a): the waiter is then
    this very interpreter, found by /proc/self/exe."""
    code = ("import sys; sys.executable = ''\n"
            "from hybridsched.oslayer.cmdjobs import CommandJobs, Launch\n"
            "import os, shutil\n"
            "with CommandJobs([Launch(('true',), shutil.which('true'), dict(os.environ))]) as j:\n"
            "    j.wait_ready(); j.open_gate(); print(j.wait()[0].code)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "0"


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
