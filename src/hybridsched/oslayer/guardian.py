"""A guardian process: it outlives us and cleans up the process groups we leave behind.

We register every job's process group with it as soon as the job exists and unregister it
once we have killed the group ourselves (before its last member is reaped, so the guardian
never holds a group number that could be reused). If we die without saying goodbye (SIGKILL,
a crash), the guardian sees its end of the pipe close and, for every group still
registered, sends SIGKILL and then SIGCONT, so no job is left running on its own, or
stopped (SIGSTOP) for ever; once those groups are gone it runs the owner's ``after``, if
it gave one (the coop arbiter's segment is swept so: its participants all died).

The guardian is in a process group of its own and ignores the ending signals (SIGINT,
SIGTERM, SIGHUP, a batch system's SIGUSR1...), so a Ctrl-C at the terminal or a signal to
our group or to every process of a batch job does not take it down before it has done
its work; it exits as soon as we say goodbye or its work is done. It keeps no descriptor of
ours but its end of the pipe (a study's lock file, say).
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable

from ..errors import ResourceError
from .signals import ENDING

_BYE = b"q"
_MAX_FD = 1 << 20  # close_range covers the whole table whatever `ulimit -n` says
# How long the guardian waits for the groups it killed to be gone (reaped by whoever
# inherited them) before `after` runs anyway: a process in uninterruptible sleep (a dead
# NFS mount) may take that long to die, and `after` then simply finds it alive.
_GONE_S = 10.0


class Guardian:
    """A context manager owning the guardian process (see the module's docstring)."""

    def __init__(self, after: Callable[[], None] | None = None) -> None:
        """``after``: run in the guardian once the groups of an owner that died without a
        goodbye are gone (it is the guardian's copy, forked on entry; it must not raise
        for what it finds, and its failures are dropped)."""
        self.pid = 0
        self._w = -1
        self._after = after

    def __enter__(self) -> "Guardian":
        r, w = os.pipe()  # both O_CLOEXEC: no job inherits an end across exec
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            try:
                pid = os.fork()
            except OSError as exc:
                os.close(r)
                os.close(w)
                raise ResourceError(f"cannot fork the guardian process: {exc}") from exc
            if pid == 0:
                _guard(r, w, self._after)  # never returns
            self.pid, self._w = pid, w
            os.close(r)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return self

    def _say(self, line: bytes) -> None:
        if self._w < 0:
            return
        try:
            os.write(self._w, line + b"\n")  # one short write on a pipe: atomic
        except BrokenPipeError:
            # The guardian was killed (a `kill -9` of its group): we carry on without it,
            # only our own death without a goodbye then uncovered. Raised, the error ended
            # `coop exec` with 141 as its command finished, its status and its reap lost.
            pass

    def watch(self, pgid: int) -> None:
        """Have group ``pgid`` killed and continued should we die before :meth:`release`."""
        self._say(b"+%d" % pgid)

    def child_watch(self) -> None:
        """In a child we forked, before it execs, once it made its own group (a system call
        only): have that group watched from now. Told by the child, the guardian knows the
        group before anything runs in it, where we could die before :meth:`watch`."""
        # subprocess gave the child SIGPIPE's default action back before this runs: a word
        # to a guardian already dead killed it unexec'd (coop exec then ended 141, the
        # command never run; the review); ignored, the signal is dropped, not kept pending
        # across the exec. Then the default again, not what Python's table says it was
        # (its own SIG_IGN, which subprocess reset behind it: the command ran with SIGPIPE
        # ignored, and `yes | head -1` in it wrote "Broken pipe" for ever; the review)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        try:
            self._say(b"+%d" % os.getpid())
        finally:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def release(self, pgid: int) -> None:
        """We have dealt with group ``pgid`` ourselves (it is killed; not yet reaped)."""
        self._say(b"-%d" % pgid)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._w < 0:
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._say(_BYE)  # a guardian gone already is told nothing
            os.close(self._w)
            self._w = -1
            while True:
                try:
                    os.waitpid(self.pid, 0)
                    break
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _guard(r: int, w: int, after: Callable[[], None] | None) -> None:
    """The guardian's whole life (in the forked child)."""
    code = 0
    try:
        os.setpgid(0, 0)
        for sig in ENDING:
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.close(w)
        os.closerange(3, r)
        os.closerange(r + 1, _MAX_FD)
        groups: set[int] = set()
        buf = b""
        while True:
            try:
                data = os.read(r, 4096)
            except InterruptedError:
                continue
            if not data:
                break  # the writer died without saying goodbye: clean up after it
            *lines, buf = (buf + data).split(b"\n")
            for line in lines:
                if line == _BYE:
                    os._exit(0)
                (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
        for pgid in groups:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.killpg(pgid, sig)
                except OSError:
                    pass
        if after is not None:
            _wait_gone(groups)
            after()
    except BaseException:  # noqa: BLE001 - nothing to report to; exit without Python's teardown
        code = 1
    finally:
        os._exit(code)


def _wait_gone(groups: set[int]) -> None:
    """Until no process is left in ``groups`` (or _GONE_S)."""
    end = time.monotonic() + _GONE_S
    pause = 0.001
    while groups and time.monotonic() < end:
        for pgid in list(groups):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                groups.discard(pgid)
            except OSError:
                pass
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
