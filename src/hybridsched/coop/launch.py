"""``hybridsched coop exec``: one unmodified command run as a job of the node's arbiter
under the cooperative shim, so that jobs started independently — two terminals, two Slurm
jobs sharing a node — cooperate on the same tokens.

The command runs in a process group of its own (given the terminal while it runs, when
we had it); SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to us are passed to that group; its
exit status is ours (128 + N when signal N ended it). When it ends, whatever it left in
its group is killed and reaped, then its job and tokens are freed, and the segment goes
with its last participant. Should we be killed outright (SIGKILL), a guardian process
(:class:`oslayer.guardian.Guardian`, forked before anything else) kills the command's
group; its tokens come back by the arbiter's liveness per thread, and the next run sweeps
the segment.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from ..errors import ShimUnavailable, UsageError
from ..oslayer.cmdjobs import reap_escaped
from ..oslayer.guardian import Guardian
from ..oslayer.procfs import children
from ..oslayer.proctree import get_subreaper, prctl
from ..oslayer.signals import HANDLED_IN_MAIN, signals_held
from .arbiter import DEFAULT_QUANTUM_S, Arbiter
from .refusal import shim_refusal
from .shimjob import WAIT_POLICY_ENV, ShimCounters, ShimJob
from .sweep import sweep

EXEC_ALTERNATIVE = "run it without `coop exec`"
_FORWARDED = HANDLED_IN_MAIN  # passed on to the command's group
# how a terminal stops its foreground group (Ctrl-Z; a background read or write)
_TERMINAL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ExecResult:
    status: int               # the command's exit status; 128 + N if signal N ended it
    counters: ShimCounters    # its job's counts from the shim


def exec_command(argv: list[str], *, segment: str | None = None,
                 quantum_s: float = DEFAULT_QUANTUM_S, keep_env: bool = False) -> ExecResult:
    """Run ``argv`` as one job of the arbiter at ``segment`` (default: the node's) under
    the shim, the runtimes' wait policies set to block (:data:`WAIT_POLICY_ENV`) unless
    ``keep_env``. Refused (ShimUnavailable, nothing started) where the shim cannot
    manage it; a new segment gets ``quantum_s``."""
    why = shim_refusal(argv, EXEC_ALTERNATIVE)
    if why:
        raise ShimUnavailable(why)
    sweep(segment)  # a segment whose participants all died outright
    with contextlib.ExitStack() as stack:
        # forked while we have no other thread; should we be killed, it sweeps the segment
        # once the command is gone (every participant may be dead then)
        guardian = stack.enter_context(Guardian(after=functools.partial(sweep, segment)))
        with signals_held():
            arbiter = stack.enter_context(Arbiter(quantum_s=quantum_s, path=segment))
        shim = stack.enter_context(ShimJob(arbiter))
        env = dict(os.environ)
        if not keep_env:
            env.update(WAIT_POLICY_ENV)
        env.update(shim.env(env))
        status = stack.enter_context(Command(argv, env, guardian)).wait()
    return ExecResult(status, shim.final or ShimCounters())


def _in_own_group(argv: list[str], env: dict[str, str], tty: bool) -> subprocess.Popen:
    """``argv`` started in a process group of its own (the child joins it before exec);
    ``tty``: the child also makes that group the terminal's foreground before it execs,
    so the command never runs in the background of our terminal (its first read of it
    would stop it with SIGTTIN, and what it printed first came before it had it)."""
    if tty:
        return subprocess.Popen(argv, env=env, preexec_fn=_own_group_in_front)
    if sys.version_info >= (3, 11):
        return subprocess.Popen(argv, env=env, process_group=0)
    # Python 3.10 has no process_group (a TypeError there); the same setpgid(0, 0) in the child
    return subprocess.Popen(argv, env=env, preexec_fn=os.setpgrp)


def _own_group_in_front() -> None:
    """In the child, before exec: a group of its own, the terminal's foreground (system
    calls only, as a child forked from a threaded process may make)."""
    os.setpgid(0, 0)
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


class Command:
    """The command's processes, a context manager: started in a group of their own, with
    us as the subreaper of whatever they leave orphaned and ``guardian`` watching the
    group should we die; on exit every process left in the group is killed and reaped."""

    def __init__(self, argv: list[str], env: dict[str, str], guardian: Guardian):
        self.argv, self.env, self.guardian = argv, env, guardian
        self.proc: subprocess.Popen  # started by __enter__
        self._tty = False
        self._subreaper = False
        self._ending = False   # a signal was passed on since we last stopped ourselves
        self._resumed = False  # we continued the command after our own copied stop
        self._early: list[int] = []  # signals that came before the command's group existed
        self._grouped = False  # its group exists (setpgid done, by it or by us)
        self._handlers: dict[int, object] = {}  # those we replaced with _forward

    def __enter__(self) -> "Command":
        self._before = children(os.getpid())  # ours already: never taken for its orphans
        self._subreaper = get_subreaper()
        prctl(_PR_SET_CHILD_SUBREAPER, 1)
        tty = _terminal_in_front(os.getpgrp())
        self._catch_forwarded()  # from before the start: the command may catch them at once
        try:
            self.proc = _in_own_group(self.argv, self.env, tty)
        except (OSError, subprocess.SubprocessError) as exc:
            prctl(_PR_SET_CHILD_SUBREAPER, int(self._subreaper))
            if tty:  # the child may have taken the terminal before its exec failed
                _hand_terminal(os.getpgrp(), None)
            self._release_forwarded()
            why = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(f"{self.argv[0]}: cannot run it ({why})") from None
        except BaseException:
            self._release_forwarded()
            raise
        self._tty = tty
        try:
            with contextlib.suppress(OSError):  # also from here: whoever runs first
                os.setpgid(self.proc.pid, self.proc.pid)
            self._grouped = True
            for sig in self._early:
                self._pass_on(sig)
            self.guardian.watch(self.proc.pid)
        except BaseException:  # a Ctrl-C before we return: no __exit__ would kill the command
            self.__exit__(None, None, None)
            raise
        return self

    def _catch_forwarded(self) -> None:
        """Our handler for the signals passed on to the command (the main thread alone may
        set handlers; elsewhere the caller's stay). One we ignore (`nohup`, a background
        job's SIGINT) stays ignored, for the command to inherit."""
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED:
                if signal.getsignal(sig) != signal.SIG_IGN:
                    self._handlers[sig] = signal.signal(sig, self._forward)

    def _release_forwarded(self) -> None:
        """The caller's handlers back; a signal that came before the command started and
        was never passed on goes to them, as if we had never caught it."""
        handlers, self._handlers = self._handlers, {}
        for sig, handler in handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        early, self._early = self._early, []
        if not hasattr(self, "proc"):
            for sig in early:
                signal.raise_signal(sig)

    def wait(self) -> int:
        """The command's exit status, signals sent to us passed on to its group meanwhile."""
        rc = self._wait_through_stops()
        return rc if rc >= 0 else 128 - rc

    def _wait_through_stops(self) -> int:
        """The command's return code (Popen's), its stops dealt with by :meth:`_stopped`."""
        pid = self.proc.pid
        while True:
            _, status = os.waitpid(pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return self.proc.returncode
            self._stopped(pid, os.WSTOPSIG(status))

    def _stopped(self, pid: int, sig: int) -> None:
        """The command stopped with ``sig``. Stopped by its terminal (Ctrl-Z), it stops us
        the same way, so that the shell sees its job stopped and gets its prompt back;
        continued (`fg`, `bg`), we continue it, in front of the terminal again if we are.
        Any other stop (a SIGSTOP someone sent) is theirs to end: we wait on.

        One stop is not copied: the first after we continued the command from a copied
        stop, where a signal was passed on since we stopped. `kill %1` of the stopped job
        sends us SIGTERM, then SIGCONT; when another of our threads took the SIGTERM, our
        handler could run only after we had continued the command, whose read of the
        terminal from the background stopped it again, and us with it, for ever. That
        stop is continued instead, for the command to take the signal. (Entering this
        function runs the handlers of signals that came meanwhile.)"""
        raced = self._resumed and self._ending
        self._resumed = False
        if raced:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)
        elif self._tty and sig in _TERMINAL_STOPS:
            _hand_terminal(os.getpgrp(), pid)  # the shell takes it from our group
            self._ending = False
            os.kill(os.getpid(), sig)  # returns once we are continued
            self._resumed = True
            _hand_terminal(pid, os.getpgrp())  # `fg` gave it to our group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)

    def _forward(self, signum, frame) -> None:
        if not self._grouped:  # passed on once its group exists
            self._early.append(signum)
        else:
            self._pass_on(signum)

    def _pass_on(self, signum: int) -> None:
        self._ending = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)
            os.killpg(self.proc.pid, signal.SIGCONT)  # a stopped group gets it only so

    def __exit__(self, *exc) -> None:
        self._release_forwarded()  # before the reap: a group number never reused under us
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
