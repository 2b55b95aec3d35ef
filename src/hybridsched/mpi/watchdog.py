"""Naming a rank that dies without a word (SIGKILL, the OOM killer).

A rank that is killed cannot print, and the launcher then tears the job down with only its
own banner ("BAD TERMINATION ... EXIT CODE: 9"). So each rank forks a tiny watchdog that
does nothing but wait on a pidfd for its rank to end. If the rank ends without having said
it finished (a clean exit, a handled error or a deliberate MPI_Abort all say so first), the
watchdog prints one line naming the rank, host, pid and — when the zombie is still there to
read — the signal. The first watchdog on a node to see a death claims a marker file, so the
ranks the launcher kills afterwards do not each print a line of their own.
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np

from ..oslayer.procfs import program_name, wait_status
from ..store.files import remove_left_by
from ..oslayer.events import readable
from ..oslayer.waitstatus import killed_by
from ..oslayer.shm import SharedArrays
from ..oslayer.signals import ENDING
from ..coop.sweep import sweep

# The longest the marker of a death stays, so that the watchdogs of the ranks the launcher
# kills right after find it. It goes as soon as the launcher's process on this node ends
# (the job is torn down: nobody is left to look), so it does not outlive the job.
MARKER_HOLD_S = 2.0

CLEAN, ABORTING, REFUSING = 1, 2, 3  # the flag: 0 while the rank works
# Shells, which run a wrapper script's last command as a child unless the script `exec`s
# it: the launcher then sees the script's exit, not a rank killed (behind_a_shell)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "yash", "fish", "csh", "tcsh"})
_PATH_MAX = 4096  # bytes of the lock's path kept for the watchdog (Linux's PATH_MAX)


def _marker(proxy: int) -> str:
    return f"/dev/shm/hybridsched-mpi.{os.getuid()}.{proxy}"


def _claim(path: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    os.close(fd)
    return True


def _how(pid: int) -> str:
    """'was killed by signal 9 (SIGKILL)' when the zombie's wait status can still be read."""
    status = wait_status(pid)
    if status is None:
        return "died without finishing (killed by a signal, e.g. SIGKILL or the OOM killer)"
    if status & 0x7F:
        return killed_by(status & 0x7F)
    return f"exited with status {status >> 8} without finishing"


def _let_go_of_output() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class RankWatchdog:
    """A context manager around a rank's work: on a normal way out it tells the watchdog;
    :meth:`aborting` before a deliberate MPI_Abort keeps every watchdog of the node quiet."""

    def __init__(self, rank: int, size: int, host: str):
        self.rank, self.size, self.host = rank, size, host
        # the flag, and the study lock the rank holds (a path, NUL-terminated): both live as
        # long as the rank
        self._shared = SharedArrays([("flag", np.int32, 1), ("lock", np.uint8, _PATH_MAX)])
        self._flag = self._shared.flag
        self._proxy = os.getppid()  # the launcher's process on this node: one per job here
        self.pid = 0

    def __enter__(self) -> "RankWatchdog":
        rank_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                self._watch(rank_pid)
            finally:
                os._exit(0)
        self.pid = pid
        return self

    def _watch(self, rank_pid: int) -> None:
        os.setsid()  # out of the rank's process group: a kill of the group does not take us
        for sig in (*ENDING, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        try:
            fd = os.pidfd_open(rank_pid)
        except OSError:
            return
        readable(fd, None)
        flag = int(self._flag[0])
        if flag != CLEAN:  # the rank cannot release its study's lock: remove it for it
            lock = bytes(self._shared.lock).split(b"\0", 1)[0]
            if lock:
                remove_left_by(os.fsdecode(lock), rank_pid)
        try:
            self._name_the_death(flag, rank_pid)
        finally:
            if flag != CLEAN:
                # a rank killed under --coop (the launcher's SIGTERM, Ctrl-C, SIGKILL) never
                # leaves the node's arbiter; once every rank of it is dead, the watchdog of
                # the last one removes the segment (one still in use is left alone). Our
                # copies of the rank's stdout and stderr go first: the launcher waits for
                # them to close, and has nothing to wait for here.
                _let_go_of_output()
                sweep()

    def _name_the_death(self, flag: int, rank_pid: int) -> None:
        marker = _marker(self._proxy)
        if flag == ABORTING:  # the rank named itself; keep the marker up for the others
            self._hold(marker)
            return
        if flag in (CLEAN, REFUSING) or not _claim(marker):
            return
        how = _how(rank_pid)
        try:
            os.write(2, (f"hybridsched: MPI rank {self.rank} of {self.size} on {self.host} "
                         f"(pid {rank_pid}) {how}; the launcher stops the job (completed runs "
                         "stay in the output file)\n").encode())
        except OSError:
            pass
        self._hold(marker)

    def _hold(self, marker: str) -> None:
        """Keep the marker until the launcher's process on this node ends (at most
        MARKER_HOLD_S), then remove it."""
        try:
            fd = os.pidfd_open(self._proxy)
        except OSError:
            fd = -1
        try:
            if fd >= 0:
                readable(fd, MARKER_HOLD_S)
            else:
                time.sleep(MARKER_HOLD_S)
        finally:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(marker)
            except FileNotFoundError:
                pass

    def behind_a_shell(self) -> str:
        """The shell this rank runs under, where a wrapper script started it without
        `exec`; "" otherwise. Killed outright, such a rank is seen by MPICH's mpiexec as
        its script exiting with status 137, which does not end the job: the other ranks
        then wait for it forever (Open MPI's mpirun ends it)."""
        name = program_name(self._proxy)
        return name if name in _SHELLS else ""

    def holds(self, lock_path: str) -> None:
        """The rank now holds this study lock: removed by the watchdog if the rank dies."""
        raw = os.fsencode(os.path.abspath(lock_path))[:_PATH_MAX - 1]
        self._shared.lock[:] = 0
        self._shared.lock[:len(raw)] = np.frombuffer(raw, np.uint8)

    def aborting(self) -> None:
        """This rank is about to abort the job itself (and has said why)."""
        _claim(_marker(self._proxy))
        self._flag[0] = ABORTING

    def refusing(self) -> None:
        """This rank leaves on a refusal of the input every rank agreed on: the launcher may
        kill it on its way out, which is no death to name (the study lock, if the kill
        leaves it, is still removed)."""
        if self._flag[0] == 0:
            self._flag[0] = REFUSING

    def __exit__(self, *exc) -> None:
        if self._flag[0] == 0:
            self._flag[0] = CLEAN
        try:
            os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pass
