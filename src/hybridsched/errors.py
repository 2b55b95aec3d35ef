"""Exceptions raised by the library; only the CLI turns them into exit codes."""


class HybridschedError(Exception):
    """Base class of every error the library raises on purpose."""


class UsageError(HybridschedError):
    """The caller asked for something impossible (bad size, unknown name, ...).

    The CLI prints the message as one line and exits with status 2.
    """


class ShimUnavailable(UsageError):
    """The cooperative shim cannot manage a command here (no C compiler to build it, a
    kernel without Syscall User Dispatch, a static, setuid or non-glibc program): one
    line naming the reason and what to use instead, exit status 2, nothing started."""


class NotOurFile(UsageError):
    """A file given to us is not a hybridsched HDF5 study (or is unreadable)."""


class ResourceError(HybridschedError):
    """An OS resource (memory, shared memory, processes) could not be obtained."""


class WorkerLost(HybridschedError):
    """A worker died before finishing its work; the run cannot be completed.

    Carries enough detail for one clear line: scheduler, worker, pid and signal.
    """

    def __init__(self, scheduler: str, worker: int, pid: int, how: str):
        self.scheduler = scheduler
        self.worker = worker
        self.pid = pid
        self.how = how
        super().__init__(f"{scheduler}: worker {worker} (pid {pid}) {how}")



class BadStudy(NotOurFile):
    """A study file of ours whose content is malformed (a field of the wrong type or out of
    range, text that is not UTF-8, an attribute that is not JSON): one line, exit 2."""


class StudyBusy(UsageError):
    """Another process holds the writer's lock on a study file."""


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
