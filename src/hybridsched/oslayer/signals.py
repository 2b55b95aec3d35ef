"""The signals that end a command, held over a few steps that must not be cut in half (a
snapshot being published, an attachment and its release being registered), and handlers
whose signal is never lost on its way up."""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

# The signals that end a command by unwinding it (jobs and workers killed and reaped,
# segments and the study's lock removed, committed rows kept): Ctrl-C, SIGTERM (a batch
# system's, `kill`'s), SIGHUP (the terminal or the ssh session of a run started without
# nohup gone), and SIGUSR1, SIGUSR2 and SIGALRM, whose default action ends a process too:
# a batch system's warning before the time limit (Slurm's `--signal=USR1@60`, `scancel
# --signal`) ended a study at once, its lock left for the next writer to take over, where
# now it stops and `run --resume` goes on from what it stored. SIGQUIT keeps its default
# action: whoever sends it asks for a core, now; what it leaves (a lock file) the next
# writer takes over, and a guardian kills the jobs.
ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
          signal.SIGALRM)
# Of them, those that what we start (commands, MPI ranks) keep ignored when we were started
# ignoring them: nohup's SIGHUP, a batch script's `trap '' USR1` (its jobs were killed by
# the warning it meant to ignore: the review). SIGINT and SIGTERM get their default action
# back whatever we had, as from a shell.
KEPT_IF_IGNORED = tuple(s for s in ENDING if s not in (signal.SIGINT, signal.SIGTERM))


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold the :data:`ENDING` signals for the duration of the block, then replay the first
    one to the handler that was installed. Python handlers always run in the main thread,
    so swapping them (unlike masking, which other threads would bypass) holds the signal
    everywhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old: dict[int, Any] = {}  # signal -> the handler it had
    try:
        for sig in ENDING:
            # an ignored one stays ignored: held, it would come first and hide the other
            # (a background job's SIGINT, then a SIGTERM that was then never replayed)
            if signal.getsignal(sig) != signal.SIG_IGN:
                old[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if got:
            handler = old.get(got[0])
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), got[0])


# The signals our commands handle in Python (stop, pass on to a command's group). The
# kernel hands a process-directed signal to any thread that does not block it; taken by a
# helper thread, it interrupts nothing in the main thread, whose handler then runs only
# once its blocking call (a waitpid) returns for some other reason -- too late to act first.
# USR1, USR2 and ALRM too: `coop exec` passes them on (a batch system's checkpoint warning,
# `--signal=USR1@60`, killed the command: the review).
HANDLED_IN_MAIN = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                   signal.SIGUSR2, signal.SIGALRM)


def leave_signals_to_main_thread() -> None:
    """Called first in a helper thread: it blocks :data:`HANDLED_IN_MAIN`, so that they
    reach the main thread and interrupt what it waits in."""
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_IN_MAIN)


def loading(fn):
    """Decorate a function that loads or compiles numba code: Ctrl-C and SIGTERM wait for
    its end. numba reads its on-disk cache through ctypes callbacks of llvmlite, where an
    exception raised by a signal handler is printed and dropped, so a Ctrl-C landing there
    was lost and the command ran to its end."""
    @functools.wraps(fn)
    def held(*args, **kwargs):
        with signals_held():
            return fn(*args, **kwargs)
    return held


# The first Ctrl-C/SIGTERM whose exception may not have reached the command. Python drops an
# exception raised where nobody can receive it -- a weakref callback or a __del__ (h5py's
# object registry runs them by the thousand while a study is copied), a C routine that
# clears errors -- so one signal could be lost and the command run to its end. Long loops
# call honour_pending() and the CLI checks it before it reports success.
_pending: list[int] = []


def raising(make):
    """A handler that records the first signal and raises ``make(signum)``."""
    def handler(signum, frame):
        if not _pending:
            _pending.append(signum)
        raise make(signum)
    return handler


def honour_pending() -> None:
    """Raise the first signal's exception again if it was lost on its way up (a no-op when
    none came, outside the main thread, or once the command has taken it)."""
    if _pending and threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(_pending[0])
        if callable(handler):
            handler(_pending[0], None)


def pending() -> int | None:
    """The signal whose exception has not been taken yet, None when there is none."""
    return _pending[0] if _pending else None


def taken() -> None:
    """The command received the signal's exception: nothing is pending any more."""
    _pending.clear()


_libc = ctypes.CDLL(None, use_errno=True)
# x86_64's numbers (where the cooperative shim runs): glibc before 2.30 has no tgkill, and
# none has a wrapper for rt_tgsigqueueinfo
_SYS_TGKILL, _SYS_RT_TGSIGQUEUEINFO = 234, 297
_SI_QUEUE = -1


class _SigInfo(ctypes.Structure):
    """siginfo_t's head as sigqueue(3) fills it (x86_64): the rest of its 128 bytes zero."""
    _fields_ = [("signo", ctypes.c_int), ("errno", ctypes.c_int), ("code", ctypes.c_int),
                ("_pad0", ctypes.c_int), ("pid", ctypes.c_int), ("uid", ctypes.c_uint),
                ("value", ctypes.c_int64), ("_rest", ctypes.c_char * 96)]


def tgkill(pid: int, tid: int, sig: int) -> bool:
    """Send ``sig`` to thread ``tid`` of process ``pid`` (SI_TKILL); whether it was sent."""
    fn = getattr(_libc, "tgkill", None)
    r = fn(pid, tid, sig) if fn is not None else _libc.syscall(_SYS_TGKILL, pid, tid, sig)
    return r == 0


def queue_to_thread(pid: int, tid: int, sig: int, value: int) -> bool:
    """Queue ``sig`` to thread ``tid`` of process ``pid`` with ``value`` as its cookie
    (SI_QUEUE, as sigqueue(3) to one thread); whether it was queued."""
    info = _SigInfo(signo=sig, code=_SI_QUEUE, pid=os.getpid(), uid=os.getuid(), value=value)
    return _libc.syscall(_SYS_RT_TGSIGQUEUEINFO, pid, tid, sig, ctypes.byref(info)) == 0
