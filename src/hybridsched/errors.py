"""Every exception (and the one warning) the library defines; only the CLI turns them into
exit codes."""
from __future__ import annotations


class HybridschedError(Exception):
    """Base class of every error the library raises on purpose."""


class UsageError(HybridschedError):
    """The caller asked for something impossible (bad size, unknown name, ...).

    The CLI prints the message as one line and exits with status 2.
    """


class _AsNamed(dict):
    """A slot no surface named keeps its own name ("{chunk}" reads "chunk")."""

    def __missing__(self, key: str) -> str:
        return key


class BadOption(UsageError):
    """One option of a run request is wrong (``core.request.check_request``): ``field`` is
    its name in the run configuration (``k``, ``chunk``, ``dispatch``); ``template`` says
    what is wrong with slots (``{chunk}``, ``{auto}``) for how a surface names its options
    and values, which each surface fills with its own (:meth:`named`: ``chunk`` and ``-1``
    in the API, ``--chunk`` and ``auto`` on the command line); ``values`` fill the rest."""

    def __init__(self, field: str, template: str, **values: object):
        self.field, self.template, self.values = field, template, values
        super().__init__(self._text({}))

    def _text(self, names: dict[str, str]) -> str:
        return self.template.format_map(_AsNamed({**names, **self.values}))

    def named(self, names: dict[str, str]) -> "BadOption":
        """The same error worded with a surface's ``names`` for the slots."""
        out = BadOption(self.field, self.template, **self.values)
        out.args = (self._text(names),)
        return out


class ShimUnavailable(UsageError):
    """The cooperative shim cannot manage a command here (no C compiler to build it, a
    kernel without Syscall User Dispatch, a static, setuid or non-glibc program): one
    line naming the reason and what to use instead, exit status 2, nothing started."""

    def __init__(self, reason: str, alternative: str = "") -> None:
        super().__init__(f"{reason}; {alternative}" if alternative else reason)
        self.reason = reason
        self.alternative = alternative

    def instead(self, alternative: str) -> "ShimUnavailable":
        """The same refusal naming the caller's alternative (``coop exec`` has no
        ``--policy`` to offer)."""
        return ShimUnavailable(self.reason, alternative)


class NotOurFile(UsageError):
    """A file given to us is not a hybridsched HDF5 study (or is unreadable)."""


class ArbiterInUse(UsageError):
    """The node's coop arbiter is in use by others with other CPUs, tables or another
    quantum than a run asks for: refused before a study starts; within one (it came since),
    the turn that needed it is not run and the study goes on."""


class ResourceError(HybridschedError):
    """An OS resource (memory, shared memory, processes) could not be obtained."""


class BrokenRun(HybridschedError):
    """A run that cannot complete because one of its workers ended without finishing its
    work: a forked process lost (:class:`WorkerLost`), a thread that raised
    (:class:`WorkerFailed`) or an MPI rank that failed (:class:`RankFailed`). The message
    is one line; the fields say the same for code: ``scheduler``, ``worker`` (its index, a
    rank's number), ``pid`` (None for a thread), how it ended (``signal``: the signal's
    name, ``status``: the exit status, ``exception``: the exception's type name; empty
    where it did not end that way) and ``remote_traceback``, the worker's own traceback
    where it raised. ``dispatch`` and ``technique``: which chunk loop ran ("python",
    "compiled"; "" where none of the thread backend's) and what auto had chosen, where the
    backend knows, and ``notes``, the dispenser's words for people (all stored with the
    failed run)."""

    def __init__(self, message: str, scheduler: str, worker: int, *, pid: int | None = None,
                 signal: str = "", status: int | None = None, exception: str = "",
                 remote_traceback: str = "", notes: str = "", technique: str = "",
                 dispatch: str = ""):
        super().__init__(message)
        self.scheduler, self.worker, self.pid = scheduler, worker, pid
        self.signal, self.status, self.exception = signal, status, exception
        self.remote_traceback, self.notes, self.technique = remote_traceback, notes, technique
        self.dispatch = dispatch


class WorkerLost(BrokenRun):
    """A forked worker (fork and pipe backends) died or raised before finishing its work;
    the run cannot be completed. One line: scheduler, worker, pid and how it ended."""

    def __init__(self, scheduler: str, worker: int, pid: int, how: str, **ending):
        self.how = how
        super().__init__(f"{scheduler}: worker {worker} (pid {pid}) {how}", scheduler, worker,
                         pid=pid, **ending)


class WorkerFailed(BrokenRun):
    """A worker thread (thread backend) raised: the run fails with one line naming the
    worker and the exception."""

    def __init__(self, scheduler: str, worker: int, exc: BaseException, remote_traceback: str = "",
                 notes: str = "", technique: str = "", dispatch: str = ""):
        super().__init__(f"{scheduler}: worker thread {worker} raised {type(exc).__name__}: {exc}",
                         scheduler, worker, exception=type(exc).__name__,
                         remote_traceback=remote_traceback, notes=notes, technique=technique,
                         dispatch=dispatch)


class RankFailed(BrokenRun):
    """An MPI rank failed (an exception, an exit status, Ctrl-C): the job is aborted with
    one line naming the rank, its host and what happened."""

    def __init__(self, rank: int, size: int, host: str, what: str, *, status: int | None = None,
                 exception: str = "", remote_traceback: str = ""):
        self.rank, self.size, self.host, self.what = rank, size, host, what
        super().__init__(f"rank {rank} of {size} on {host} failed: {what}", "", rank,
                         status=status, exception=exception, remote_traceback=remote_traceback)


class DispatchError(HybridschedError):
    """--dispatch compiled was asked for a run that cannot be compiled."""


class BadStudy(NotOurFile):
    """A study file of ours whose content is malformed (a field of the wrong type or out of
    range, text that is not UTF-8, an attribute that is not JSON): one line, exit 2."""


class StudyBusy(UsageError):
    """Another process holds the writer's lock on a study file."""


class OutputLost(HybridschedError):
    """A study's file could no longer be written for a reason other than space (its folder
    removed or made read-only mid-run): one line saying what, if anything, is stored."""


class DiskFull(HybridschedError):
    """The file system ran out of space while a study was being written; the runs of the
    last published snapshot are safe."""


class HandOutError(HybridschedError):
    """A hand-out of tasks does not cover [0, N) exactly once (a task never handed out, or
    handed out twice): the run fails before any worker uses it, whatever --verify says."""


class KernelRaised(HybridschedError):
    """A workspace's or user's kernel raised on the calling thread (the serial backend):
    the run fails with one line, the study goes on."""


class Terminated(SystemExit):
    """SIGTERM, turned into an exception that unwinds the run (the CLI's and the API's
    handler raise it): a SystemExit, but never taken for a kernel's own sys.exit()."""


# What ends the command wherever it lands, inside user code too (a kernel, a technique, a
# verifier): Ctrl-C and our SIGTERM. Anything else user code raises fails only its run.
INTERRUPTS = (KeyboardInterrupt, Terminated)


class TechniqueError(HybridschedError):
    """A technique's chunk(), start() or record() misbehaved: the run fails with one line
    naming the technique, the worker and the value."""


class RunFailed(HybridschedError):
    """A :func:`hybridsched.parallel_for` run failed (a kernel raised, a worker died);
    ``result`` holds its :class:`hybridsched.Result`."""

    def __init__(self, message: str, result: object):
        super().__init__(message)
        self.result = result


class UserThreadError(HybridschedError):
    """A user thread (``ge``'s user-mode scheduler) raised: the run fails with one line
    naming the thread and exception."""

    def __init__(self, arch: str, name: str, exc: BaseException):
        self.arch, self.thread, self.exc = arch, name, exc
        super().__init__(f"{arch}: user thread {name} raised {type(exc).__name__}: {exc}")


class Deadlock(HybridschedError):
    """Every scheduler thread is idle while user threads still wait: nobody can signal them."""


class ThreadLimit(ResourceError):
    """The OS refused to start another OS thread (A0 with thousands of user threads)."""


class ArbiterError(Exception):
    """A rule of the cooperative arbiter was broken (a slot that is not ours, the tables
    full): a fault of our own code, so not a :class:`HybridschedError` the CLI would turn
    into one line."""


class GILWarning(UserWarning):
    """A kernel that holds the GIL (plain Python, or numba without nogil=True) runs on a
    thread scheduler: its worker threads take turns."""
