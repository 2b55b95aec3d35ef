"""``hybridsched coop exec``: one unmodified command run as a job of the node's arbiter
under the cooperative shim, so that jobs started independently — two terminals, two Slurm
jobs sharing a node — cooperate on the same tokens.

The command runs in a process group of its own (given the terminal while it runs, when
we had it); SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM sent to us are
passed to that group; its exit status is ours (128 + N when signal N ended it). When it
ends, whatever it left in its group is killed and reaped, then its job and tokens are
freed, and the segment goes with its last participant. Should we be killed outright
(SIGKILL), a guardian process (:class:`oslayer.guardian.Guardian`, forked before anything
else) kills the command's group; its tokens come back by the arbiter's liveness per
thread, and the next run sweeps the segment.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Union

from ..errors import ShimUnavailable, UsageError
from ..oslayer.cmdjobs import reap_escaped, reap_orphans
from ..oslayer.guardian import Guardian
from ..oslayer.procfs import children, group_stopped, thread_stopped
from ..oslayer.proctree import get_subreaper, prctl
from ..oslayer.signals import HANDLED_IN_MAIN, signals_held
from .arbiter import DEFAULT_QUANTUM_S, Arbiter
from .ops import ShimOps
from .refusal import shim_refusal
from .shimjob import JOB_ENV, WAIT_POLICY_ENV, ShimCounters, ShimJob
from .sweep import sweep

EXEC_ALTERNATIVE = "run it without `coop exec`"
_FORWARDED = HANDLED_IN_MAIN  # passed on to the command's group
# how a terminal stops its foreground group (Ctrl-Z; a background read or write)
_TERMINAL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
_PR_SET_CHILD_SUBREAPER = 36
# How long a copied terminal stop waits for the rest of the command's group to stop before
# it stops us (and the shell says "Stopped"): bash calls a job stopped only once each of
# its processes is, and waitpid tells us of our child's stop alone, its descendants' in
# flight still (a test saw a `sleep` not yet stopped, under load). Bounded, since a member
# that ignores SIGTSTP never stops (bash would wait for ever): the prompt comes back 3 s
# late then, short for a person and far past a scheduling delay (a 1 s bound was reached
# by a member whose handler naps 0.2 s, on a loaded machine in tests); looked at every
# millisecond meanwhile.
_GROUP_STOP_S = 3.0
_GROUP_STOP_POLL_S = 0.001
# what signal.signal takes and gives back
_Handler = Union[Callable[[int, "FrameType | None"], Any], int, signal.Handlers, None]


@dataclass(frozen=True)
class ExecResult:
    status: int               # the command's exit status; 128 + N if signal N ended it
    counters: ShimCounters    # its job's counts from the shim


def exec_command(argv: list[str], *, segment: str | None = None,
                 quantum_s: float | None = None, keep_env: bool = False) -> ExecResult:
    """Run ``argv`` as one job of the arbiter at ``segment`` (default: the node's) under
    the shim, the runtimes' wait policies set to block (:data:`WAIT_POLICY_ENV`) unless
    ``keep_env``. Refused (ShimUnavailable, nothing started) where the shim cannot
    manage it; a new segment gets ``quantum_s`` (None: the default). One asked for that a
    segment in use does not have is said on stderr: its jobs keep theirs."""
    if os.environ.get(JOB_ENV):  # its rotation signal then killed the inner one, unsaid
        raise UsageError(f"coop exec: this is already a command of a coop job ({JOB_ENV} is "
                         f"set): run {shlex.join(argv)} without `coop exec`, and it runs in "
                         "that job")
    why = shim_refusal(argv, EXEC_ALTERNATIVE)
    if why:
        raise ShimUnavailable(why)
    try:
        # the shim's own rules (no Python worker here): numba never loads, in the guardian
        # either
        ops = ShimOps()
    except ShimUnavailable as exc:  # the build's refusal names colocate's --policy
        raise exc.instead(EXEC_ALTERNATIVE) from None
    sweep(segment, ops)  # a segment whose participants all died outright
    with contextlib.ExitStack() as stack:
        # forked while we have no other thread; should we be killed, it sweeps the segment
        # once the command is gone (every participant may be dead then)
        guardian = stack.enter_context(Guardian(after=functools.partial(sweep, segment, ops)))
        # from here to the last file removed, a signal for the command never interrupts us:
        # kept until the command runs, dropped once it has ended (a burst of SIGTERMs in
        # the teardown left the segment behind, and our exit status was no longer its)
        forwarded = stack.enter_context(Forwarded())
        arbiter = stack.enter_context(Arbiter(quantum_s=quantum_s or DEFAULT_QUANTUM_S,
                                              path=segment, ops=ops))
        if quantum_s is not None:
            _say_quantum(arbiter, quantum_s)
        try:
            shim = stack.enter_context(ShimJob(arbiter))
        except ShimUnavailable as exc:  # the build's refusal names colocate's --policy
            raise exc.instead(EXEC_ALTERNATIVE) from None
        env = dict(os.environ)
        if not keep_env:
            env.update(WAIT_POLICY_ENV)
        env.update(shim.env(env))
        status = stack.enter_context(Command(argv, env, guardian, forwarded)).wait()
    return ExecResult(status, shim.final or ShimCounters())


def _say_quantum(arbiter: Arbiter, quantum_s: float) -> None:
    """One line on stderr where the segment in use runs another quantum than the one asked
    for (it was kept without a word: the review; `colocate` refuses this instead, since
    its study would record a quantum it did not run with)."""
    why = arbiter.other_quantum()
    if why:
        print(f"hybridsched coop: --quantum-ms {quantum_s * 1e3:g} not applied: {why}",
              file=sys.stderr)


def _in_own_group(argv: list[str], env: dict[str, str], tty: bool,
                  watched: Callable[[], None]) -> subprocess.Popen:
    """``argv`` started in a process group of its own, which the child makes and has
    ``watched`` (our guardian told) before it execs: we may die before Popen returns, the
    command already running (it once printed its first line, we were SIGKILLed, and it ran
    on). ``tty``: the child also makes that group the terminal's foreground before it
    execs, so the command never runs in the background of our terminal (its first read of
    it would stop it with SIGTTIN, and what it printed first came before it had it)."""
    # close_fds=False: the caller's descriptors pass through, as under `env` or `nice` (a
    # process substitution's /dev/fd/63, make's jobserver, a launcher's PMI_FD: all were
    # closed; the review); ours are close-on-exec, as Python opens every descriptor
    return subprocess.Popen(argv, env=env, close_fds=False,
                            preexec_fn=functools.partial(_child_start, tty, watched))


def _child_start(tty: bool, watched: Callable[[], None]) -> None:
    """In the child, before exec (system calls only, as a child forked from a threaded
    process may make): a group of its own, watched, and with ``tty`` the terminal's
    foreground."""
    os.setpgid(0, 0)
    watched()
    if not tty:
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})  # a background group may not
    try:
        os.tcsetpgrp(0, os.getpgrp())
    except OSError:
        pass  # the terminal went away meanwhile: the command runs without it, as under a pipe
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTTOU})


def _terminal_in_front(owner: int | None) -> bool:
    """Whether our stdin is a terminal (we being the main thread, which alone may hand it
    on) whose foreground group is ``owner`` (None: whoever)."""
    try:
        return threading.current_thread() is threading.main_thread() and os.isatty(0) \
            and (owner is None or os.tcgetpgrp(0) == owner)
    except OSError:
        return False


class Forwarded:
    """Our handler for the signals passed on to a command (:data:`_FORWARDED`), a context
    manager: until a command takes them (:meth:`to`) they are kept, then passed to it, and
    once it is done (``to(None)``) dropped; the caller's handlers come back at the exit,
    where the kept signals of a command that never started go to them, as if we had never
    caught them. One we ignore (`nohup`, a background job's SIGINT) stays ignored, for the
    command to inherit. Only the main thread may set handlers: elsewhere it does nothing."""

    def __init__(self) -> None:
        self._handlers: dict[int, object] = {}  # the caller's, where ours replaced them
        self._kept: list[int] = []
        self._target = None   # the command's pass-on, while it runs
        self._taken = False   # a command took them: nothing kept goes back to the caller

    def __enter__(self) -> "Forwarded":
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED:
                if signal.getsignal(sig) != signal.SIG_IGN:
                    self._handlers[sig] = signal.signal(sig, self._caught)
        return self

    def _caught(self, signum, frame) -> None:
        if self._target is not None:
            self._target(signum)
        elif not self._taken:
            self._kept.append(signum)

    def to(self, target) -> None:
        """Pass the signals on with ``target(signum)`` from now, those kept first; None:
        drop them from now."""
        if target is not None:
            self._taken = True
            kept, self._kept = self._kept, []
            for sig in kept:
                target(sig)
        self._target = target

    def __exit__(self, *exc) -> None:
        handlers, self._handlers = self._handlers, {}
        for sig, handler in handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        kept, self._kept = self._kept, []
        if not self._taken:
            for sig in kept:
                signal.raise_signal(sig)


class Command:
    """The command's processes, a context manager: started in a group of their own, with
    us as the subreaper of whatever they leave orphaned and ``guardian`` watching the
    group should we die (the child tells it, before it execs); on exit every process left
    in the group is killed and reaped. Signals sent to us meanwhile reach the group through
    ``forwarded``, entered by the caller before the start."""

    def __init__(self, argv: list[str], env: dict[str, str], guardian: Guardian,
                 forwarded: Forwarded):
        self.argv, self.env, self.guardian, self.forwarded = argv, env, guardian, forwarded
        self.proc: subprocess.Popen  # started by __enter__
        self._tty = False
        self._subreaper = False
        self._ending = False   # a signal was passed on since we last stopped ourselves
        self._resumed = False  # we continued the command after our own copied stop
        self._holding = False  # we took the terminal back from the stopped command
        self._handed_back = False  # and gave it back at its continue, no stop seen since
        self._for_terminal = False  # left stopped by its terminal until we are in front
        self._theirs: dict[int, _Handler] = {}  # the caller's SIGCONT and SIGTSTP handlers
        self._pid = 0  # the command's, once known (our handlers are set before it starts)
        self._stop_kept = False  # a Ctrl-Z that came before: passed on once it is known
        # without a terminal: the order signals came in (signal.set_wakeup_fd's bytes), and
        # the wake-up fd it replaced
        self._order: tuple[int, int] | None = None
        self._wakeup = -1

    def __enter__(self) -> "Command":
        self._before = children(os.getpid())  # ours already: never taken for its orphans
        self._subreaper = get_subreaper()
        prctl(_PR_SET_CHILD_SUBREAPER, 1)
        front = _terminal_in_front(os.getpgrp())
        # in front of it or not (`coop exec CMD &`): a shell's `fg` may bring us there. Our
        # Ctrl-Z and continue handlers are set before the command starts: set after, a
        # Ctrl-Z that came once it ran (it had printed its first line) but before them
        # stopped us alone, the command running on, and the `fg` that continued us found no
        # handler to give it the terminal (a test under load)
        self._tty = _terminal_in_front(None)
        if self._tty:
            for sig, ours in ((signal.SIGCONT, self._on_continue),
                              (signal.SIGTSTP, self._on_stop_key)):
                self._theirs[sig] = signal.signal(sig, ours)
        try:
            self.proc = _in_own_group(self.argv, self.env, front, self.guardian.child_watch)
        except (OSError, subprocess.SubprocessError) as exc:
            for signum, theirs in self._theirs.items():
                signal.signal(signum, theirs)
            prctl(_PR_SET_CHILD_SUBREAPER, int(self._subreaper))
            if front:  # the child may have taken the terminal before its exec failed
                _hand_terminal(os.getpgrp(), None)
            why = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(f"{self.argv[0]}: cannot run it ({why})") from None
        self._pid = self.proc.pid
        if not self._tty:  # SIGTSTP (`kill -TSTP`, a batch system's suspend) and SIGCONT
            # passed on: it stopped us alone, and the command ran on, its tokens never
            # rotated by our stopped watchdog (the review)
            self._order = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._wakeup = signal.set_wakeup_fd(self._order[1], warn_on_full_buffer=False)
            for sig in (signal.SIGCONT, signal.SIGTSTP):
                self._theirs[sig] = signal.signal(sig, self._pass_stop_or_continue)
        # orphans of the command we adopted, reaped as they end (they stood as zombies
        # until the command ended: the review)
        self._theirs[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_child)
        try:
            with contextlib.suppress(OSError):  # also from here: whoever runs first
                os.setpgid(self.proc.pid, self.proc.pid)
            if self._stop_kept:
                self._stop_kept = False
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGTSTP)
            self.forwarded.to(self._pass_on)  # its group exists: those kept, then the rest
        except BaseException:  # a Ctrl-C before we return: no __exit__ would kill the command
            self.__exit__(None, None, None)
            raise
        return self

    def wait(self) -> int:
        """The command's exit status, signals sent to us passed on to its group meanwhile."""
        rc = self._wait_through_stops()
        return rc if rc >= 0 else 128 - rc

    def _wait_through_stops(self) -> int:
        """The command's return code (Popen's), its stops dealt with by :meth:`_stopped`."""
        pid = self.proc.pid
        while True:
            _, status = os.waitpid(pid, os.WUNTRACED | os.WCONTINUED)
            if os.WIFCONTINUED(status):
                self._continued(pid)
            elif os.WIFSTOPPED(status):
                self._stopped(pid, os.WSTOPSIG(status))
            else:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return self.proc.returncode

    def _stopped(self, pid: int, sig: int) -> None:
        """The command stopped with ``sig``. Stopped by its terminal (Ctrl-Z), it stops us
        the same way, so that the shell sees its job stopped and gets its prompt back;
        continued (`fg`, `bg`), we continue it, in front of the terminal again if we are.
        Any other stop (a SIGSTOP: the command's own `raise(SIGSTOP)`, a `kill -STOP` from
        elsewhere, a debugger) is its sender's to end: we wait on, and take the terminal
        back from the stopped group meanwhile, so that Ctrl-C and Ctrl-Z reach us (they
        went to the stopped group, which held the terminal, and nothing could end it
        there: the review); its SIGCONT gives it back (:meth:`_continued`). Stopping us
        too, as bash does, left us stopped once its sender continued it (the second
        review).

        One stop is not copied: the first after we continued the command from a copied
        stop, where a signal was passed on since we stopped. `kill %1` of the stopped job
        sends us SIGTERM, then SIGCONT; when another of our threads took the SIGTERM, our
        handler could run only after we had continued the command, whose read of the
        terminal from the background stopped it again, and us with it, for ever. That
        stop is continued instead, for the command to take the signal. (Entering this
        function runs the handlers of signals that came meanwhile.)"""
        raced = self._resumed and self._ending
        handed_back, self._handed_back = self._handed_back, False
        self._resumed = False
        if raced:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)
        elif sig in (signal.SIGTTIN, signal.SIGTTOU) and (
                self._holding or handed_back or _terminal_in_front(os.getpgrp())):
            # it used the terminal while we had it (taken back at its SIGSTOP, its SIGCONT
            # not yet seen, or seen and the terminal handed back since; or given to our
            # group by `fg` of a job that ran in the background, which bash continues with
            # no signal): the terminal is its own, and it goes on
            self._holding = False
            _hand_terminal(pid, os.getpgrp())
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)
        elif self._tty and sig not in _TERMINAL_STOPS:
            self._holding = _hand_terminal(os.getpgrp(), pid)
        elif self._tty:
            self._ending = False
            _await_group_stop(pid)
            # a signal passed on meanwhile, or before this stop was seen, continued the
            # command (with SIGCONT): no stop to copy; we stopped anyway, and the command
            # ran on or lay dead until `fg` (the review)
            if self._ending or not thread_stopped(pid):
                return
            _hand_terminal(os.getpgrp(), pid)  # the shell takes it from our group
            with _default_action(sig):
                os.kill(os.getpid(), sig)  # returns once we are continued
            self._resumed = True
            _hand_terminal(pid, os.getpgrp())  # `fg` gave it to our group (or our SIGCONT
            if sig == signal.SIGTSTP or _terminal_in_front(pid):  # handler handed it on)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGCONT)  # `fg`, or `bg` after a Ctrl-Z
            else:  # `bg` after a read or write of the terminal, which would stop it again
                self._for_terminal = True  # (or a stop the kernel dropped: an orphaned
                # group's, whose SIGCONT would have it stop again at once, for ever)

    def _on_continue(self, signum, frame) -> None:
        """We were continued (`fg`, `bg`): in front of the terminal now, the command's
        group is given it, and continued where its terminal alone stopped it. So `coop exec
        CMD &`, then `fg`, gives the command the terminal, and Ctrl-C and Ctrl-Z reach it
        as they would any foreground job's (they came to our group, never stopped)."""
        if not self._pid or self._holding or not _hand_terminal(self._pid, os.getpgrp()):
            return
        if self._for_terminal:
            self._for_terminal = False
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pid, signal.SIGCONT)

    def _on_stop_key(self, signum, frame) -> None:
        """A Ctrl-Z that came to our group, in front of the terminal while the command's is
        not (`fg` of a job that ran in the background, which bash continues with no
        signal, so :meth:`_on_continue` never ran): passed on to the command's group, whose
        stop :meth:`_stopped` then copies. Before, it stopped us alone, the command running
        on while the shell said the job stopped."""
        if not self._pid:  # the command not started yet: once it is
            self._stop_kept = True
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, signal.SIGTSTP)

    def _pass_stop_or_continue(self, signum=None, frame=None) -> None:
        """With no terminal: the later of the SIGTSTP and SIGCONT that came since the last
        look, passed on to the command's group. There is no job for a shell to show
        stopped, so we never stop ourselves: copying the command's stop left us stopped for
        ever where someone else stopped and continued the command, or where its SIGCONT
        came first (the reviews); our watchdog runs on meanwhile. Which came last is read
        from the wake-up fd's bytes, in the kernel's order: the handlers run in signal
        order (SIGCONT's first), so a SIGCONT sent right after a SIGTSTP (`timeout -s
        TSTP`) was passed on first, and the command stayed stopped. A handler that finds
        neither there ran after another took both."""
        assert self._order is not None
        seen = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := os.read(self._order[0], 4096):
                seen += chunk
        last = next((s for s in reversed(seen) if s in (signal.SIGTSTP, signal.SIGCONT)), None)
        if last is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, last)

    def _on_child(self, signum, frame) -> None:
        if self._order is not None:  # its byte too: drained here, or the pipe fills up
            self._pass_stop_or_continue()
        reap_orphans(self._before | {self.guardian.pid, self.proc.pid})

    def _continued(self, pid: int) -> None:
        """The command was continued: the terminal we took back at its stop is its again
        (a continue of ours, after a stop we copied, hands it over itself)."""
        if self._holding:
            self._holding = False
            self._handed_back = _hand_terminal(pid, os.getpgrp())

    def _pass_on(self, signum: int) -> None:
        self._ending = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)
            os.killpg(self.proc.pid, signal.SIGCONT)  # a stopped group gets it only so

    def __exit__(self, *exc) -> None:
        if self._order is not None:
            signal.set_wakeup_fd(self._wakeup)
            for fd in self._order:
                os.close(fd)
            self._order = None
        for sig, theirs in self._theirs.items():
            signal.signal(sig, theirs)
        self.forwarded.to(None)  # before the reap: a group number never reused under us
        pgid = self.proc.pid
        if self._tty:  # back from the command's group only: a shell that has it keeps it
            _hand_terminal(os.getpgrp(), pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        self.guardian.release(pgid)  # before its leader is reaped: the number stays ours
        with signals_held():
            self.proc.wait()
            while True:  # the group's orphans are ours to reap (subreaper)
                try:
                    os.waitpid(-pgid, 0)
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
            reap_escaped(self._before | {self.guardian.pid})  # and those it setsid'd
        prctl(_PR_SET_CHILD_SUBREAPER, int(self._subreaper))


def _await_group_stop(pgid: int) -> None:
    """Until every process of group ``pgid`` (led by our child) has stopped, or
    _GROUP_STOP_S. Looked for below us, not below the leader: we are the command's
    subreaper, and a member whose parent ended is ours now (one was not waited for)."""
    end = time.monotonic() + _GROUP_STOP_S
    while not group_stopped(os.getpid(), pgid) and time.monotonic() < end:
        time.sleep(_GROUP_STOP_POLL_S)


@contextlib.contextmanager
def _default_action(sig: int):
    """``sig``'s default action meanwhile (a stop we send ourselves, whatever our handler)."""
    theirs = signal.signal(sig, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(sig, theirs)


def _hand_terminal(pgid: int, owner: int | None) -> bool:
    """Make ``pgid`` the foreground group of the terminal on our stdin, if there is one and
    its foreground is ``owner`` (None: whoever); whether it did."""
    if not _terminal_in_front(owner):
        return False
    try:
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not
        try:
            os.tcsetpgrp(0, pgid)
        finally:
            signal.signal(signal.SIGTTOU, old)
        return True
    except OSError:
        return False
