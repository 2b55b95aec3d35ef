"""`hybridsched coop exec`: one unmodified command as a job of the arbiter; its exit status
is the command's, Ctrl-C and SIGTERM reach it, two started independently share the
arbiter, and nothing is left when it ends: no segment, lock file or process."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from coopexecrun import CLI, command_group, coop_exec, name_of, spawn, spawned, state_of
from shimprogs import build
from waiting import wait_until


def test_a_quantum_the_segment_in_use_does_not_have_is_said(seg, shim_lib):
    """`coop exec --quantum-ms 50` beside a job that made the segment with 5 ms: the jobs
    keep 5 ms (the documented rule), and now that is said in one line on stderr rather
    than kept without a word (the review); the same quantum, or none asked for, says
    nothing."""
    first = spawn(seg, "--quantum-ms", "5", "--", "sh", "-c",
                  "echo ready; exec sleep 300", stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "ready\n"
        other = coop_exec(seg, "--quantum-ms", "50", "--", "true")
        assert other.returncode == 0
        assert other.stderr == (f"hybridsched coop: --quantum-ms 50 not applied: the coop arbiter "
                                f"{os.path.abspath(seg)} is in use with a 5 ms quantum, which "
                                "its jobs keep\n")
        for argv in (["--quantum-ms", "5"], []):
            same = coop_exec(seg, *argv, "--", "true")
            assert same.returncode == 0 and same.stderr == "", same.stderr
    finally:
        first.terminate()  # ends as its command does, the segment removed
        first.wait(timeout=60)
        first.stdout.close()


def test_the_exit_status_is_the_commands(seg, shim_lib):
    p = coop_exec(seg, "--", "sh", "-c", "echo out; exit 7")
    assert p.returncode == 7 and p.stdout == "out\n" and p.stderr == ""


def test_a_command_killed_by_a_signal_gives_128_plus_it(seg, shim_lib):
    p = coop_exec(seg, "sh", "-c", "kill -USR1 $$")
    assert p.returncode == 128 + signal.SIGUSR1


def test_nothing_of_ours_reaches_a_terminal(seg, shim_lib):
    """On a terminal, `coop exec -- true` wrote a colour reset (ESC [0m) at exit: numba's
    error highlighting starts colorama when the arbiter's rules compile."""
    import pty

    main, sub = pty.openpty()
    try:
        p = subprocess.run([*CLI, "--segment", seg, "--", "true"], stdout=sub,
                           stderr=subprocess.PIPE, timeout=300)
        os.close(sub)
        sub = -1
        out = b""
        with contextlib.suppress(OSError):  # EIO: the terminal's other end is closed
            while chunk := os.read(main, 4096):
                out += chunk
    finally:
        os.close(main)
        if sub >= 0:
            os.close(sub)
    assert p.returncode == 0 and out == b"" and p.stderr == b""


@pytest.mark.parametrize("closed", [1, 2])
def test_a_closed_stdout_or_stderr_leaves_the_status_the_commands(seg, shim_lib, closed):
    """`coop exec ... >&-` (or `2>&-`): Python's stream for it is None; the status was
    lost to an AttributeError, and with stderr closed the counters went to stdout. The
    command sees the descriptor closed, as it would without coop exec."""
    def run(*argv):
        return subprocess.run([*CLI, "--segment", seg, "--counters", "--", *argv], text=True,
                              timeout=300, preexec_fn=lambda: os.close(closed),
                              **{"stderr" if closed == 1 else "stdout": subprocess.PIPE})
    probe = run(sys.executable, "-c", f"import os, sys; os.fstat({closed}); sys.exit(5)")
    assert probe.returncode == 1, "the command found the descriptor open"
    p = run("sh", "-c", "exit 5")
    assert p.returncode == 5
    if closed == 1:
        assert p.stderr.startswith("hybridsched coop: threads") and "Traceback" not in p.stderr
    else:
        assert p.stdout == ""


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_reach_the_command_and_its_group_goes(seg, shim_lib, sig, status):
    with spawned(seg, "--", "sh", "-c",
                 "sleep 300 & echo ready; wait", stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        group = command_group(p.pid)
        assert len(group) == 2  # sh and its sleep, in a group of their own
        p.send_signal(sig)
        assert p.wait(timeout=120) == status
    gone, alive = psutil.wait_procs(group, timeout=10)
    assert not alive, f"left running: {alive}"


def test_coop_exec_killed_outright_leaves_no_command_behind(seg, shim_lib):
    """SIGKILL to coop exec itself: its guardian kills the command's group (it ran on
    before), then sweeps the segment, its last participant gone (it was left for the next
    run to sweep)."""
    with spawned(seg, "--", "sh", "-c",
                 "sleep 300 & echo ready; wait", stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        group = command_group(p.pid)
        assert len(group) == 2  # sh and its sleep
        p.kill()
        assert p.wait(timeout=120) == -signal.SIGKILL
    gone, alive = psutil.wait_procs(group, timeout=60)  # a bound that only a failure reaches
    assert not alive, f"left running: {alive}"
    wait_until(lambda: not os.path.exists(seg) and not os.path.exists(seg + ".lock"),
               "the guardian's sweep of the segment")


def test_coop_exec_killed_before_it_told_its_guardian_leaves_no_command_behind(seg, shim_lib):
    """Killed as soon as the command has started (Popen returned): the guardian knows its
    group, the child having told it before it execed. (The test above once failed so, from
    a background job: the command had printed `ready`, coop exec had not yet told the
    guardian, and sh and sleep ran on after the SIGKILL.)"""
    mark = "304.25"  # a sleep of this length is the command's
    code = ("import os, signal\nfrom hybridsched.coop import launch\n"
            "launch.Forwarded.to = lambda self, target: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from hybridsched.coop.launch import exec_command\n"
            f"exec_command(['sh', '-c', 'sleep {mark}; echo done'], segment={seg!r})\n")

    def ours() -> list[psutil.Process]:
        found = []
        for q in psutil.process_iter(["cmdline"]):
            if mark in " ".join(q.info["cmdline"] or []) and q.pid != os.getpid():
                found.append(q)
        return found

    try:
        p = subprocess.run([sys.executable, "-c", code], timeout=120)
        assert p.returncode == -signal.SIGKILL
        wait_until(lambda: not os.path.exists(seg), "the guardian's sweep of the segment",
                   timeout=60)
        # the guardian (forked from that process: the same command line) exits a few
        # milliseconds after its sweep; a command left running would never go
        wait_until(lambda: not [q for q in ours() if state_of(q) not in ("", psutil.STATUS_ZOMBIE)],
                   "the command's processes and the guardian gone", timeout=60)
    finally:
        for q in ours():
            q.kill()


def test_a_guardian_killed_outright_leaves_the_status_the_commands(seg, shim_lib, tmp_path):
    """`kill -9` of the guardian's group: coop exec carries on without it, and its status
    is still the command's (its next word to the guardian raised BrokenPipeError: 141)."""
    stop = tmp_path / "stop"
    p = spawn(seg, "--", "sh", "-c",
              f"while [ ! -e {stop} ]; do sleep 0.02; done; exit 5",
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def guardian() -> psutil.Process | None:  # coop exec's fork, in a group of its own
        with contextlib.suppress(psutil.Error, OSError):
            me = psutil.Process(p.pid)
            for c in me.children():
                with contextlib.suppress(psutil.Error, OSError):
                    if c.exe() == me.exe():
                        return c
        return None

    try:
        wait_until(lambda: guardian() and command_group(p.pid), "the guardian and the command")
        g = guardian()
        os.killpg(g.pid, signal.SIGKILL)
        wait_until(lambda: not g.is_running() or g.status() == psutil.STATUS_ZOMBIE,
                   "the guardian dead")
        stop.touch()
        out, err = p.communicate(timeout=120)
    finally:
        stop.touch()  # the command ends, whatever became of coop exec
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 5 and err == ""
    assert not os.path.exists(seg)


GUARDIAN_GONE_FIRST = """
import os, signal, sys
from hybridsched.cli import main
from hybridsched.coop import launch
enter = launch.Command.__enter__
def first_kill_the_guardian(self):
    os.kill(self.guardian.pid, signal.SIGKILL)
    stat = f"/proc/{self.guardian.pid}/stat"
    while open(stat).read().rsplit(") ", 1)[1][0] != "Z":  # dead (not yet reaped by us)
        pass
    return enter(self)
launch.Command.__enter__ = first_kill_the_guardian
sys.exit(main(sys.argv[1:]))
"""


def test_a_guardian_gone_before_the_command_starts_leaves_it_run(seg, shim_lib):
    """The command's child tells the guardian its group before it execs, SIGPIPE's default
    action given back to it by then: a guardian already dead killed it unexec'd, and coop
    exec ended 141, the command never run (the second review)."""
    p = subprocess.run([sys.executable, "-c", GUARDIAN_GONE_FIRST, "coop", "exec", "--segment",
                        seg, "--", "sh", "-c", "echo ran; exit 7"],
                       capture_output=True, text=True, timeout=300)
    assert (p.returncode, p.stdout, p.stderr) == (7, "ran\n", "")


def test_a_relative_segment_is_found_by_a_command_that_changed_folder(seg, shim_lib, tmp_path):
    """`--segment NAME` relative to coop exec's folder: the command was handed the name as
    given, and a process it started after a `cd` ran unmanaged ("cannot open the coop
    segment"; the review)."""
    show = "import os; print(os.environ['HYBRIDSCHED_COOP_SEGMENT'])"
    p = subprocess.run([*CLI, "--segment", os.path.basename(seg), "--counters", "--", "sh",
                        "-c", f"cd / && exec {sys.executable} -c \"{show}\""],
                       cwd=os.path.dirname(seg), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == seg + "\n", (p.stdout, p.stderr)
    assert p.stderr.startswith("hybridsched coop: threads ") and "cannot" not in p.stderr


def test_two_commands_started_apart_share_the_arbiter(seg, shim_lib, tmp_path):
    exe = build("omp_bsp", tmp_path)
    ps = [spawn(seg, "--counters", exe, "400", "200",
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in ps]
    for p, (out, err) in zip(ps, outs):
        assert p.returncode == 0 and " steps by " in out, err
        assert "hybridsched coop: threads " in err and ", traps " in err


def test_a_static_program_is_refused_in_one_line_and_nothing_starts(seg, shim_lib, tmp_path):
    static = build("thread_exit", tmp_path, "-static")
    p = coop_exec(seg, static)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "statically linked" in p.stderr and "coop exec" in p.stderr
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


def test_a_shim_that_cannot_be_had_is_refused_with_coop_execs_alternative(seg, tmp_path):
    """The shim's own refusals (a bad HYBRIDSCHED_COOP_SHIM, no compiler, a failed build)
    ended with colocate's advice, "use --policy env or gang", which coop exec has not."""
    env = dict(os.environ, HYBRIDSCHED_COOP_SHIM="/etc/passwd")
    p = coop_exec(seg, "true", env=env)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "not a build of the coop shim" in p.stderr and "without `coop exec`" in p.stderr
    assert "--policy" not in p.stderr
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


def test_coop_exec_inside_a_coop_job_is_refused_in_one_line(seg, shim_lib):
    """A command of a coop job that runs coop exec itself (`coop exec -- make`, a recipe
    of which does): the inner one died of the shim's rotation signal, unsaid (185)."""
    p = coop_exec(seg, "--", sys.executable, "-m", "hybridsched", "coop", "exec", "--segment",
                  seg, "--", "echo", "inner")
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "already a command of a coop job" in p.stderr and "run echo inner" in p.stderr
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


def test_a_shim_built_without_the_owners_functions_is_refused_in_one_line(
        seg, shim_lib, tmp_path, monkeypatch):
    """A HYBRIDSCHED_COOP_SHIM from a hybridsched before coop exec ran on the shim's own
    rules (no owner.c): refused before anything starts, naming the cause."""
    from hybridsched.coop import shimbuild

    monkeypatch.setattr(shimbuild, "SOURCES", tuple(n for n in shimbuild.SOURCES
                                                     if n != "owner.c"))
    old = str(tmp_path / "old-shim.so")
    shimbuild._compile(shimbuild.compiler(), shimbuild.sources(), old)
    p = coop_exec(seg, "true", env=dict(os.environ, HYBRIDSCHED_COOP_SHIM=old))
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "cannot serve an owner of jobs" in p.stderr and "without `coop exec`" in p.stderr
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")


@pytest.mark.parametrize("argv, words", [([], "a command is required"), (["--"], "a command is required"),
                                         (["no-such-command-x"], "no such command"),
                                         (["--quantum-ms", "0", "true"], "--quantum-ms"),
                                         (["--quantum-ms", "inf", "true"], "at most 10000"),
                                         (["--quantum-ms", "1e300", "true"], "at most 10000"),
                                         (["--quantum-ms", "nan", "true"], "--quantum-ms"),
                                         (["--segment", "", "true"], "an empty path")])
def test_bad_command_lines_get_one_line_and_status_2(seg, argv, words):
    p = coop_exec(seg, *argv)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert not os.path.exists(seg)


def test_a_ctrl_c_while_the_command_starts_leaves_no_command_behind():
    """A Ctrl-C after the command started but before coop exec's start returned raised
    past a `with` that then never ran its exit: the command ran on (seen once in a full
    run, as `sh` and `sleep` left after exit 130)."""
    import types

    from hybridsched.coop.launch import Command

    class Interrupted:  # the Ctrl-C lands as the start hands the signals to the command
        def to(self, target):
            if target is not None:
                raise KeyboardInterrupt

    guardian = types.SimpleNamespace(pid=-1, release=lambda pgid: None, child_watch=lambda: None)
    cmd = Command(["sleep", "301.5"], dict(os.environ), guardian, Interrupted())
    with pytest.raises(KeyboardInterrupt):
        cmd.__enter__()
    assert cmd.proc.returncode is not None, "the command was not reaped"
    assert not [p for p in psutil.Process().children() if p.pid == cmd.proc.pid]


_SIGNALLED_AT_THE_START = """
import os, signal, sys, types
import hybridsched.coop.launch as launch
start = launch._in_own_group
def signalled_first(*args, **kw):  # our handler runs before the command exists
    os.kill(os.getpid(), signal.SIGTERM)
    return start(*args, **kw)
launch._in_own_group = signalled_first
guardian = types.SimpleNamespace(pid=-1, release=lambda pgid: None, child_watch=lambda: None)
with launch.Forwarded() as fwd, launch.Command(["sleep", "302.5"], dict(os.environ), guardian,
                                              fwd) as cmd:
    print("status", cmd.wait(), flush=True)
"""


def test_a_sigterm_before_the_command_started_reaches_it():
    """A SIGTERM to coop exec while it starts the command (before its group exists) is
    passed on once the group exists: it once ended coop exec itself ("terminated"), the
    command killed without the chance to catch it."""
    p = subprocess.run([sys.executable, "-c", _SIGNALLED_AT_THE_START], capture_output=True,
                       text=True, timeout=120)
    assert (p.returncode, p.stdout) == (0, "status 143\n"), p.stderr


@pytest.mark.parametrize("sig", ["HUP", "TERM", "INT", "QUIT"])
def test_a_signal_coop_exec_ignores_stays_ignored_by_the_command(seg, shim_lib, sig):
    """`nohup hybridsched coop exec ...` (SIGHUP), a background job (SIGINT): a signal we
    are started ignoring is not caught for the command, which inherits the ignoring as it
    would without coop exec. (SIGTERM was not: the CLI caught it whatever it found.)"""
    signum = getattr(signal, f"SIG{sig}")
    p = coop_exec(seg, "--", "sh", "-c", f"kill -{sig} $$; echo alive",
                  preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN))
    assert (p.returncode, p.stdout) == (0, "alive\n"), p.stderr


def test_signals_while_coop_exec_ends_leave_it_the_commands_status(seg, shim_lib):
    """SIGTERM after SIGTERM, as from an impatient user or a supervisor: the command ends as
    it chooses (exit 3), those that come while coop exec tears down are dropped, and
    nothing is left. Before, one that came after the command ended raised in the teardown:
    "terminated" and 143 in 35 runs of 40, the segment left in 8 (a hostile review)."""
    p = spawn(seg, "--", "sh", "-c",
              "trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done",
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        # until the segment is gone, the command's end and the teardown included (later,
        # as for any process on its way out, a SIGTERM ends it: 143)
        while p.poll() is None and os.path.exists(seg):
            p.send_signal(signal.SIGTERM)
            time.sleep(0.001)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 3, err
    finally:
        p.kill()
        p.wait()


def test_a_signal_is_kept_until_the_command_runs_and_dropped_once_it_ended():
    """Forwarded: kept while nothing takes them, passed on in order once a command does,
    dropped once it is done; kept ones of a command that never started go to the
    caller's handler at the exit."""
    from hybridsched.coop.launch import Forwarded

    got, passed = [], []
    old = signal.signal(signal.SIGHUP, lambda signum, frame: got.append(signum))
    try:
        with Forwarded() as fwd:
            signal.raise_signal(signal.SIGHUP)
            signal.raise_signal(signal.SIGTERM)
            assert got == [] and passed == []
            fwd.to(passed.append)
            assert passed == [signal.SIGHUP, signal.SIGTERM]
            fwd.to(None)
            signal.raise_signal(signal.SIGTERM)
        assert passed == [signal.SIGHUP, signal.SIGTERM] and got == []
        with Forwarded():  # nothing started: the caller gets it, once ours is gone
            signal.raise_signal(signal.SIGHUP)
            assert got == []
        assert got == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, old)


def test_the_command_starts_with_sigpipes_default_action(seg, shim_lib):
    """It ran with SIGPIPE ignored (the guardian's word from the child put back the SIG_IGN
    of Python's table): `yes | head -1` wrote "Broken pipe" and ended 1, and a shell loop
    feeding `head` wrote errors for ever (the review)."""
    p = coop_exec(seg, "--", "sh", "-c", "grep SigIgn /proc/self/status; yes | head -n 1")
    ignored = int(p.stdout.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)), p.stdout
    assert p.returncode == 0 and p.stdout.endswith("\ny\n") and p.stderr == "", p.stderr


def test_the_callers_descriptors_reach_the_command_and_no_others(seg, shim_lib, tmp_path):
    """A descriptor handed down (`3>file`, a process substitution's /dev/fd/63, make's
    jobserver) was closed: `diff <(a) <(b)` found no file (the review). None of ours is
    handed on."""
    out = tmp_path / "three"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        show = (f"import os; os.write({fd}, b'to{fd}\\n'); "
                "print(sorted(int(f) for f in os.listdir('/proc/self/fd')))")
        p = coop_exec(seg, "--", sys.executable, "-c", show, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == f"to{fd}\n"
    assert eval(p.stdout) == sorted({0, 1, 2, 3, fd}), p.stdout  # 3: listdir's own


def test_usr1_usr2_and_alrm_reach_the_command(seg, shim_lib):
    """A batch system's checkpoint warning (`--signal=USR1@60`) killed coop exec with 138,
    and its guardian the command (the review): they are passed on like SIGTERM."""
    script = ('trap "echo usr1" USR1; trap "echo alrm" ALRM; trap "echo usr2; exit 5" USR2; '
              'echo ready; while :; do sleep 0.05; done')
    with spawned(seg, "--", "sh", "-c", script,
                 stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        for sig, line in ((signal.SIGUSR1, "usr1\n"), (signal.SIGALRM, "alrm\n")):
            p.send_signal(sig)
            assert p.stdout.readline() == line
        p.send_signal(signal.SIGUSR2)
        assert p.stdout.readline() == "usr2\n"
        assert p.wait(timeout=120) == 5


@pytest.mark.parametrize("allowed", ["", "gettid"])
def test_threads_a_seccomp_filter_leaves_unmanageable_run_unmanaged(seg, shim_lib, tmp_path,
                                                                     allowed):
    """A sandbox's allowlist, installed after the shim's start, refused gettid (or the open
    of /proc): the threads joined with id -1, held tokens nobody could reclaim, and the
    program hung for ever (the review). They run unmanaged, said once."""
    exe = build("seccomp_threads", tmp_path)
    plain = subprocess.run([exe, allowed], capture_output=True, text=True, timeout=60)
    if plain.returncode != 0:
        pytest.skip(f"this libc needs calls the test's allowlist lacks: {plain.stderr[:200]}")
    p = coop_exec(seg, "--", exe, allowed)
    assert (p.returncode, p.stdout) == (0, "c=900\n"), p.stderr
    assert p.stderr.count("\n") == 1 and "run unmanaged" in p.stderr, p.stderr


def test_a_process_in_another_pid_namespace_runs_unmanaged(seg, shim_lib):
    """Its thread ids name other threads to the arbiter: two such jobs at once crashed on
    each other's ids (status 139, the review). Its shim stays dormant, said once."""
    import shutil

    ns = ["unshare", "--fork", "--pid", "--mount-proc"]
    if shutil.which("unshare") is None or subprocess.run(
            [*ns, "true"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip("no PID namespace to be had here (unshare --pid refused)")
    p = coop_exec(seg, "--", *ns, "sh", "-c", "true; /bin/true; echo inside")
    assert (p.returncode, p.stdout) == (0, "inside\n"), p.stderr
    # once, not once per program it runs (the third review counted one per program)
    assert p.stderr.count("\n") == 1 and "another PID namespace" in p.stderr, p.stderr


def test_sigtstp_and_sigcont_without_a_terminal_reach_the_command(seg, shim_lib):
    """`kill -TSTP` of coop exec with no terminal (a script's job control, a batch
    system's suspend): passed on, its command's group stops, coop exec waits on; `kill
    -CONT` of coop exec continues the command. Before, coop exec alone stopped and its
    command ran on. A SIGCONT right after the SIGTSTP (`timeout -s TSTP`'s pair) leaves
    nothing stopped: coop exec copied the stop once, after the continue (the review)."""
    with spawned(seg, "--", "sh", "-c", "echo ready; while :; do :; done",
                 stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        group = command_group(p.pid)
        me = psutil.Process(p.pid)
        p.send_signal(signal.SIGTSTP)
        wait_until(lambda: all(state_of(g) == psutil.STATUS_STOPPED for g in group),
                   what="the command stopped")
        assert state_of(me) != psutil.STATUS_STOPPED
        p.send_signal(signal.SIGCONT)
        wait_until(lambda: all(state_of(g) not in (psutil.STATUS_STOPPED, "") for g in group),
                   what="the command continued")
        for _ in range(20):  # the pair at once, again and again
            p.send_signal(signal.SIGTSTP)
            p.send_signal(signal.SIGCONT)
        wait_until(lambda: all(state_of(g) not in (psutil.STATUS_STOPPED, "") for g in group)
                   and state_of(me) != psutil.STATUS_STOPPED, what="nothing left stopped")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 143
    gone, alive = psutil.wait_procs(group, timeout=10)
    assert not alive


def _short_sleeps(pid: int) -> list[psutil.Process]:
    """``pid``'s children still running `sleep 0.01` (one that ends meanwhile, its command
    line empty or gone, is not)."""
    out = []
    for c in psutil.Process(pid).children():
        with contextlib.suppress(psutil.Error):
            if c.cmdline()[-1:] == ["0.01"]:
                out.append(c)
    return out


def _zombies_of(pid: int) -> int:
    return sum(1 for c in psutil.Process(pid).children() if state_of(c) == psutil.STATUS_ZOMBIE)


def test_orphans_the_command_leaves_are_reaped_as_they_end(seg, shim_lib):
    """coop exec, the subreaper, adopts what the command's processes leave; those that
    ended stood as zombies until the command did (200 for a shell loop's `(sleep 0.01
    &)`, the review), now reaped as they end."""
    p = spawn(seg, "--", "sh", "-c",
              "for i in $(seq 50); do (sleep 0.01 &); done; echo spawned; exec sleep 300",
              stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "spawned\n"
        wait_until(lambda: _zombies_of(p.pid) == 0 and not _short_sleeps(p.pid),
                   what="the orphans reaped")
        assert p.poll() is None  # while the command runs on
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        p.stdout.close()


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="no valgrind here")
def test_a_program_under_valgrind_runs_without_syscall_user_dispatch(seg, shim_lib):
    """valgrind runs the program in the same threads: the dispatch armed there trapped
    valgrind's own system calls, and it died of SIGSYS (status 159, the review). Now it
    runs, and says once what goes unseen."""
    p = coop_exec(seg, "--", "valgrind", "-q", "--error-exitcode=9", "true")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("under valgrind, without Syscall User Dispatch") == 1, p.stderr


def test_a_segment_at_the_root_is_refused_as_shm_opens_spelling(tmp_path):
    """`--segment /name` is shm_open's spelling of /dev/shm/name; as a path it made a file
    at the root of the file system (the review)."""
    p = subprocess.run([*CLI, "--segment", "/hybridsched-test-root", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "name one in /dev/shm (/dev/shm/hybridsched-test-root)" in p.stderr
    assert p.stderr.count("\n") == 1 and not os.path.exists("/hybridsched-test-root")


def test_a_stop_another_sent_the_command_is_not_copied_without_a_terminal(seg, shim_lib):
    """With no terminal, a SIGTSTP someone else sent the command (not passed on by coop
    exec) is theirs: coop exec runs on, and ends with the command once they continue it.
    Copied, it left coop exec stopped for ever (the review)."""
    with spawned(seg, "--", "sh", "-c", "echo ready; sleep 0.5; echo done",
                 stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        leader = command_group(p.pid)[0]
        os.killpg(leader.pid, signal.SIGTSTP)
        wait_until(lambda: state_of(leader) == psutil.STATUS_STOPPED, what="the command stopped")
        os.killpg(leader.pid, signal.SIGCONT)
        assert p.wait(timeout=60) == 0 and p.stdout.read() == "done\n"


_IGNORES_TSTP = """
import signal, subprocess, sys
signal.signal(signal.SIGTSTP, signal.SIG_IGN)
print("ready", flush=True)
sys.exit(subprocess.run(["sh", "-c", "sleep 1; echo child-done"],
                        preexec_fn=lambda: signal.signal(signal.SIGTSTP, signal.SIG_DFL)).returncode)
"""


def test_sigcont_continues_what_a_passed_on_sigtstp_stopped(seg, shim_lib):
    """A command whose leader ignores SIGTSTP: coop exec's SIGTSTP stops its children
    alone, so coop exec never stops; its SIGCONT continues them. Before, they stayed
    stopped for ever (the review)."""
    with spawned(seg, "--", sys.executable, "-c", _IGNORES_TSTP, stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        wait_until(lambda: any(name_of(c) == "sleep" for c in command_group(p.pid)),
                   what="the child's sleep")
        p.send_signal(signal.SIGTSTP)
        wait_until(lambda: any(name_of(c) == "sleep" and state_of(c) == psutil.STATUS_STOPPED
                               for c in command_group(p.pid)), what="the child stopped")
        p.send_signal(signal.SIGCONT)
        assert p.wait(timeout=60) == 0 and p.stdout.read() == "child-done\n"
