"""Unmodified commands started together, each a job in a process group of its own.

:class:`CommandJobs` owns J commands for one repetition. It

* forks one child per job; the child makes its own process group (so one signal to the
  group reaches everything the command forks, and a job can be stopped and continued as a
  whole), sets its CPUs, points stdin at /dev/null and stdout/stderr at unnamed temporary
  files, and execs a small waiter (:mod:`.execgate`) that says it is ready, waits at the
  start gate (a pipe only we write to) and ``execve``\\ s the command;
* opens the gate for all of them at once, a byte for each (:meth:`open_gate`); should we
  die first, the waiters read the end of the file instead and run nothing;
* sees each job end through a pidfd, kills what the command left in its group, and reaps
  it with ``wait4``: its exit status and the CPU time and involuntary context switches of
  the command and every descendant it waited for (:class:`Exit`);
* is a child subreaper while it runs, so what a command orphans comes back to us;
* registers every group with a :class:`guardian.Guardian`, so the groups are killed (and
  continued, were they stopped) even when this process is killed outright;
* on leaving, normally or by an exception (Ctrl-C, SIGTERM), kills, continues and reaps
  every group still there, so no process, zombie or stopped job is left.

A process that leaves its job's group (``setsid``, a shell with job control) escapes the
group's signals; it is still reaped here if it ends while we run.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Callable, Iterator, Sequence

from ..errors import ResourceError
from . import execgate
from .events import EventLoop, readable
from .guardian import Guardian
from .procfs import children
from .proctree import _PR_SET_CHILD_SUBREAPER, _PR_SET_PDEATHSIG, get_subreaper, prctl
from .signals import ENDING, KEPT_IF_IGNORED

_DEFERRED = set(ENDING)
# signals whose disposition CPython changes at start-up (SIGPIPE ignored) or that a test
# harness may: a command must start with the defaults, as from a shell (`yes | head` ends
# by SIGPIPE)
_RESET = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGQUIT, *ENDING)
# but not those of KEPT_IF_IGNORED we were started ignoring: nohup's SIGHUP (a job's group
# orphaned with a member stopped, gang, gets one from the kernel, which `nohup colocate`
# means to survive), a batch script's `trap '' USR1`
_MAX_FD = 1 << 20
# How long a killed group may take to disappear before we stop waiting for it (a member in
# uninterruptible sleep): generous, since it is only ever spent on a broken machine
_GROUP_GONE_S = 5.0
# Between two looks at a killed group still there: a killed member goes within a few ms,
# and each look is two system calls
_DYING_POLL_S = 0.001
# How often the jobs' wait looks for orphans that ended (reap_orphans): a /proc read of our
# children each time; rarer lets more zombies stand meanwhile (each holds a pid)
_ORPHANS_POLL_S = 0.5
# Between the SIGTERM at a job's deadline and the SIGKILL for a job still running: long
# enough for a command's own clean-up on a TERM (temporary files, a child's exit), short
# enough that a command that ignores it holds the node only this much past --timeout.
TIMEOUT_GRACE_S = 2.0
# Reading a job's stdout for --expect: chunks of _CHUNK bytes (fewer system calls against
# more memory), and lines up to LINE_MAX bytes; a longer one is not searched at all (a
# match in it is missed, and said so; cut in pieces, it matched where the line did not),
# against holding a whole unbroken output in memory
_CHUNK = 1 << 16
LINE_MAX = 4 << 20
# Below this much room on the output's file system, a failed job is said to have met a full
# disk: a write refused for want of room leaves less than a block or two free; a larger
# bound would blame a nearly full disk for failures of the job's own, and a wrong guess
# only adds a remark to a job that failed anyway
_ROOM_LEFT = 64 << 10
# Rounds of killing what jobs left outside their groups (each round's victims may leave
# their own children to us): more catches deeper trees of setsid'd daemons, a fork bomb is
# never caught whatever the number
_ESCAPED_ROUNDS = 8


# the start gate's waiter: this interpreter (sys.executable is empty where argv[0] named no
# file), without site (its start-up is ~10 ms of every job's, before the gate)
_WAITER = (sys.executable or os.readlink("/proc/self/exe"), "-S", "-s")


def _spec_file(j: int, launch: "Launch") -> int:
    """In the child: what the waiter runs (see :mod:`.execgate`), in a memfd at offset 0."""
    data = execgate.encode(j, launch.path, launch.argv, launch.env)
    fd = os.memfd_create("hybridsched-exec", 0)
    while data:
        data = data[os.write(fd, data):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass(frozen=True)
class Launch:
    """One job: its argv, the executable already resolved, the whole environment, and the
    CPUs it may use (None: this process's)."""

    argv: tuple[str, ...]
    path: str
    env: dict
    cpus: frozenset | None = None


@dataclass
class Exit:
    """How a job ended: ``code`` as subprocess gives it (negative: killed by that signal),
    ``end`` the perf_counter time its end was seen, CPU seconds and involuntary context
    switches from wait4's rusage (the descendants it waited for included), and its output
    files (read with :meth:`CommandJobs.output`)."""

    code: int
    end: float
    cpu_s: float
    nivcsw: int


def exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)


class CommandJobs:
    """The jobs of one repetition (see the module's docstring); a context manager."""

    def __init__(self, launches: Sequence[Launch], after: Callable[[], None] | None = None):
        """``after``: what the guardian runs once the jobs are gone, should we be killed
        outright (:class:`Guardian`)."""
        self.launches = list(launches)
        self._after = after
        self.pids: list[int] = []
        self.pidfds: list[int] = []
        self.exits: dict[int, Exit] = {}
        self.timed_out: set[int] = set()   # jobs sent SIGTERM at wait's deadline
        self.killed: set[int] = set()      # of them, those still running after the grace
        self._files: list[tuple] = []   # (stdout, stderr) temporary files per job
        self._waiter_use: dict[int, tuple[float, int]] = {}  # job -> its waiter's start-up
        self._dying: dict[int, float] = {}  # killed groups not gone yet -> when to give up
        # the gate (its writing end ours alone), and where the waiters say they are ready
        self._gate_r = self._gate = self._ready_r = self._ready_w = -1
        self._stack = contextlib.ExitStack()
        self._parent = os.getpid()

    # --- lifetime ---------------------------------------------------------------------

    def __enter__(self) -> "CommandJobs":
        stack = self._stack
        self._before = children(os.getpid())  # ours already: never taken for a job's orphans
        try:
            if not get_subreaper():
                prctl(_PR_SET_CHILD_SUBREAPER, 1)
                stack.callback(prctl, _PR_SET_CHILD_SUBREAPER, 0)
            self.guardian = stack.enter_context(Guardian(after=self._after))
            stack.callback(self._close_pipes)  # after the jobs are gone
            stack.callback(self._cleanup)  # before the guardian's goodbye
            try:
                self._gate_r, self._gate = os.pipe()
                self._ready_r, self._ready_w = os.pipe()
                for j in range(len(self.launches)):
                    out = stack.enter_context(tempfile.TemporaryFile())  # unnamed: no leak
                    err = stack.enter_context(tempfile.TemporaryFile())
                    self._files.append((out, err))
                    self._spawn(j)
            except OSError as exc:  # descriptors or processes run out
                raise ResourceError(f"colocate: cannot start job {len(self.pids)}: {exc}") \
                    from exc
            os.close(self._ready_w)  # the waiters' alone now
            self._ready_w = -1
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _spawn(self, j: int) -> None:
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            # Ctrl-C/SIGTERM wait until the child is in our books and the guardian's
            old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
            try:
                try:
                    pid = os.fork()
                except OSError as exc:
                    raise ResourceError(f"colocate: fork of job {j} failed: {exc}") from exc
                if pid == 0:
                    self._child(j, devnull)  # never returns
                try:
                    os.setpgid(pid, pid)  # also done by the child: whoever runs first
                except OSError:
                    pass
                self.pids.append(pid)
                self.guardian.watch(pid)
                try:
                    self.pidfds.append(os.pidfd_open(pid))
                except OSError as exc:
                    raise ResourceError(f"colocate: cannot watch job {j} (pid {pid}): {exc}") \
                        from exc
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        finally:
            os.close(devnull)

    def _child(self, j: int, devnull: int) -> None:
        launch = self.launches[j]
        out, err = self._files[j]
        try:
            os.setpgid(0, 0)
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # kept across exec: dies with us
            if os.getppid() != self._parent:
                os._exit(1)
            for sig in _RESET:
                if sig not in KEPT_IF_IGNORED or signal.getsignal(sig) != signal.SIG_IGN:
                    signal.signal(sig, signal.SIG_DFL)
            if launch.cpus:
                os.sched_setaffinity(0, launch.cpus)
            # the waiter's descriptors to its numbers, by way of numbers above them all
            ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
                    for fd in (self._gate_r, self._ready_w, _spec_file(j, launch))]
            os.dup2(devnull, 0)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            for fd, to in zip(ends, (execgate.GATE_FD, execgate.READY_FD, execgate.SPEC_FD)):
                os.dup2(fd, to)
            os.closerange(execgate.SPEC_FD + 1, _MAX_FD)  # nothing else of ours goes on
            signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the mask survives exec
            os.execve(_WAITER[0], [*_WAITER, execgate.__file__], os.environ)
        except BaseException as exc:  # noqa: BLE001 - reported on the job's stderr
            try:
                os.write(2, f"hybridsched colocate: cannot start {launch.argv[0]} (the start "
                        f"gate's waiter, {_WAITER[0]}): {exc}\n".encode())
            except BaseException:
                pass
        os._exit(127)

    # --- the run ----------------------------------------------------------------------

    def wait_ready(self) -> None:
        """Until every job's waiter waits at the gate; ResourceError if one ended before."""
        waiting = set(range(len(self.pids)))
        events = EventLoop()
        # added first, so handled first in a round: a waiter that said it and then died
        # is seen ready before its pidfd is looked at
        events.add(self._ready_r, partial(self._said_ready, events, waiting))
        for j in waiting:
            events.add(self.pidfds[j], partial(self._ended_early, waiting, j))
        events.run(waiting)

    def _said_ready(self, events: EventLoop, waiting: set[int], fd: int) -> None:
        while readable(fd):  # each waiter's one write: never split
            said = os.read(fd, execgate.READY.size)
            if not said:  # every waiter has said it, or ended: their pidfds tell which
                events.discard(fd)
                return
            job, cpu, nivcsw = execgate.READY.unpack(said)
            self._waiter_use[job] = (cpu, nivcsw)
            waiting.discard(job)
            events.discard(self.pidfds[job])

    def _ended_early(self, waiting: set[int], j: int, fd: int) -> None:
        """Job j ended without a word: its child or its waiter failed."""
        if j not in waiting:
            return
        self._finish(j)
        text = self.output(j)[1].strip().splitlines()
        raise ResourceError(f"colocate: job {j} ({self.launches[j].argv[0]}) ended "
                            f"before the start: {text[-1] if text else 'no message'}")

    def open_gate(self) -> float:
        """Let every job exec at once; returns the common start time."""
        t0 = perf_counter()
        opening = execgate.OPEN * len(self.pids)
        while opening:
            opening = opening[os.write(self._gate, opening):]
        return t0

    def _close_pipes(self) -> None:
        if os.getpid() != self._parent:
            return
        for fd in (self._gate, self._gate_r, self._ready_r, self._ready_w):
            if fd >= 0:
                os.close(fd)
        self._gate = self._gate_r = self._ready_r = self._ready_w = -1

    def wait(self, on_end: Callable[[int], None] = lambda j: None,
             deadline: float | None = None) -> dict[int, Exit]:
        """Until every job has ended. ``on_end(j)`` runs as soon as job j's command has
        exited, before its group is killed and it is reaped (a supervisor's last look).
        At ``deadline`` (perf_counter time) the groups of the jobs still running get
        SIGTERM (and SIGCONT, for a stopped one), as from timeout(1), and the jobs are noted
        in :attr:`timed_out`; TIMEOUT_GRACE_S later those still running are killed
        (:attr:`killed`)."""
        events = EventLoop()
        for j, fd in enumerate(self.pidfds):
            if j not in self.exits:
                events.add(fd, partial(self._ended, events, on_end, j))
        grace: float | None = None
        while len(events):  # each handler removes its pidfd
            now = perf_counter()
            if deadline is not None and now >= deadline:
                deadline, grace = None, now + TIMEOUT_GRACE_S
                self.timed_out |= self._signal_running(signal.SIGTERM)
            elif grace is not None and now >= grace:
                grace = None
                self.killed |= self._signal_running(signal.SIGKILL)  # running since the deadline
            self._reap_dying()
            reap_orphans(self._before | {self.guardian.pid} | set(self.pids))
            due = [t - now for t in (deadline, grace) if t is not None] + [_ORPHANS_POLL_S]
            if self._dying:
                due.append(_DYING_POLL_S)
            events.once(max(0.0, min(due)))
        for pgid in list(self._dying):
            _reap_group(pgid, self._dying.pop(pgid))
        return self.exits

    def _reap_dying(self) -> None:
        """One look at the killed groups not gone yet, reaping what came to us; those gone,
        or past their time, are forgotten."""
        for pgid, until in list(self._dying.items()):
            if _group_gone(pgid) or time.monotonic() > until:
                del self._dying[pgid]

    def _signal_running(self, sig: int) -> set[int]:
        """``sig`` (then SIGCONT) to the group of every job still running; those jobs."""
        running = {j for j in range(len(self.pids))
                   if j not in self.exits and not readable(self.pidfds[j])}  # not just ended
        for j in running:
            _kill_group(self.pids[j], sig)
        return running

    def _ended(self, events: EventLoop, on_end: Callable[[int], None], j: int, fd: int) -> None:
        events.discard(fd)
        end = perf_counter()
        on_end(j)
        self._finish(j, end, wait_group=False)

    def _finish(self, j: int, end: float | None = None, wait_group: bool = True) -> Exit:
        """Job j's command has exited (a zombie: its group number is still ours): kill what
        is left of its group, reap it with its rusage, then the rest of the group: waited
        for here, or (``wait_group`` false: the other jobs' ends are being timed) looked at
        between :meth:`wait`'s events. Waited for here, a group slow to go (a member of
        6 GB, one whose parent left the group and does not reap it) delayed the other jobs'
        ends by its wait: their times 0.12 s, or 5 s, too long (the review)."""
        pid = self.pids[j]
        _kill_group(pid)
        self.guardian.release(pid)
        while True:
            try:
                _, status, ru = os.wait4(pid, 0)
                break
            except InterruptedError:
                continue
        cpu, nivcsw = self._waiter_use.get(j, (0.0, 0))  # not the command's
        self.exits[j] = Exit(exit_code(status), perf_counter() if end is None else end,
                             max(0.0, ru.ru_utime + ru.ru_stime - cpu),
                             max(0, int(ru.ru_nivcsw) - nivcsw))
        if wait_group:
            _reap_group(pid)
        elif not _group_gone(pid):
            self._dying[pid] = time.monotonic() + _GROUP_GONE_S
        return self.exits[j]

    def stdout_lines(self, j: int) -> Iterator[str | None]:
        """Job j's whole stdout, line by line (without the newline), as text; read in
        chunks. A line longer than LINE_MAX is not kept: None stands for it."""
        fd, pos, rest, overlong = self._files[j][0].fileno(), 0, b"", False
        while True:
            chunk = os.pread(fd, _CHUNK, pos)
            if not chunk:
                break
            pos += len(chunk)
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                yield None if overlong or len(line) > LINE_MAX else line.decode("utf-8", "replace")
                overlong = False
            if len(rest) > LINE_MAX:
                rest, overlong = b"", True
        if rest or overlong:
            yield None if overlong else rest.decode("utf-8", "replace")

    def output(self, j: int, limit: int = 1 << 20) -> tuple[str, str]:
        """The last ``limit`` bytes of job j's stdout and stderr, as text."""
        texts = []
        for fh in self._files[j]:
            size = os.fstat(fh.fileno()).st_size
            texts.append(os.pread(fh.fileno(), limit, max(0, size - limit))
                         .decode("utf-8", "replace"))
        return texts[0], texts[1]

    def capture_full(self, j: int) -> str:
        """Where the file system that keeps job j's output has (next to) no room left: why
        the job may have failed (its writes refused, its own words about it lost with
        them), in words; "" otherwise. Every failed job of the repetition gets it: which
        of them met the full disk cannot be told."""
        try:
            st = os.fstatvfs(self._files[j][0].fileno())
        except OSError:
            return ""
        free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
        if free >= _ROOM_LEFT:
            return ""
        return (f"the file system that keeps the jobs' output ({tempfile.gettempdir()}) was "
                "full when it ended, which may be why; set TMPDIR to one with room")

    def _cleanup(self) -> None:
        """Kill, continue and reap every job not reaped yet (any exit path)."""
        if os.getpid() != self._parent:
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
        try:
            for j in range(len(self.pids)):
                if j not in self.exits:
                    self._finish(j)
            for pgid in list(self._dying):  # wait() left early (an exception)
                _reap_group(pgid, self._dying.pop(pgid))
            reap_escaped(self._before | {self.guardian.pid})
            for fd in self.pidfds:
                os.close(fd)
            self.pidfds = []
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill_group(pgid: int, first: int = signal.SIGKILL) -> None:
    """``first`` (SIGKILL) to the group, then SIGCONT: a stopped member dies, or handles
    the signal, only once continued."""
    for sig in (first, signal.SIGCONT):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap_group(pgid: int, until: float | None = None) -> None:
    """Reap the killed group's members that come to us (orphans, as subreaper) until the
    group is gone (zombies of other parents included) or a member will not go (``until``,
    monotonic time: _GROUP_GONE_S from now by default)."""
    until = time.monotonic() + _GROUP_GONE_S if until is None else until
    while not _group_gone(pgid) and time.monotonic() <= until:
        time.sleep(_DYING_POLL_S)


def _group_gone(pgid: int) -> bool:
    """One look at a killed group: its members that came to us reaped; whether it is gone."""
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return True
    return False


def reap_orphans(keep: set[int]) -> None:
    """Reap the children of ours that have ended, but those in ``keep`` (the jobs, whose
    status and rusage their own wait takes; what was ours before). As the subreaper we
    adopt the processes a job's processes leave behind, and those that ended stayed
    zombies until their job did: 200 of a shell loop's `(sleep 0.01 &)` at once (the
    review), without bound for a long job that keeps leaving children (init reaps them at
    once)."""
    for pid in children(os.getpid()) - keep:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # (0, 0) for one still running: left alone


def reap_escaped(mine: set[int]) -> None:
    """Kill and reap what jobs left outside their groups (a `setsid` child: killing the
    group missed it, and as the subreaper we adopted it when its parent ended): every child
    of ours not in ``mine`` (ours before the jobs started, a guardian); again for what those
    leave us, a few rounds (a tree that keeps forking is a fork bomb)."""
    for _ in range(_ESCAPED_ROUNDS):
        escaped = children(os.getpid()) - mine
        if not escaped:
            return
        for pid in escaped:  # our children: their numbers stay ours until reaped
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
        for pid in escaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # a signal's EINTR is retried by Python itself (PEP 475)
