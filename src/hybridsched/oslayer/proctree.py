"""Forked worker processes: what the fork and pipe backends share.

:class:`ProcessTeam` owns every process a run forks and the shared anonymous memory they
report into. It

* forks workers (from the parent, or from a worker for the collective mitosis tree) into
  one process group, so a single ``killpg`` reaches the whole fork-generated population;
* watches every worker through a pidfd, so a death is seen at once without SIGCHLD
  handlers: the team's one event loop (:attr:`ProcessTeam.events`, :mod:`events`) waits
  on the pidfds together with the pipes a backend gives it handlers for, as loky waits on
  result pipe and process sentinels together (:meth:`ProcessTeam.wait`);
* makes the parent a child subreaper while a tree is alive, so grandchildren orphaned by
  an exiting worker are re-parented to us and reaped here, never by init;
* on leaving (normal end, error, Ctrl-C, SIGTERM) SIGKILLs the group, reaps every member
  and unmaps the shared memory, so no child, zombie or segment survives.

Children never return into the caller: they run their body, write their row of the
shared tables and leave with ``os._exit``. Anonymous ``MAP_SHARED`` memory leaves nothing
in /dev/shm.

Test hook (documented fault injection): ``HYBRIDSCHED_FAULT=W:N[:MODE]`` makes worker W
fail when it starts its N-th chunk (1-based), MODE ``kill`` (SIGKILL itself, default),
``raise`` (an exception) or ``exit`` (``os._exit(0)`` without finishing). It is read once
in the parent when a team is made.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import traceback
from functools import partial
from time import perf_counter
from typing import Any, Callable

import numpy as np

from ..errors import ResourceError, WorkerLost
from ..records import WORKER_DTYPE, trace_table
from .cpus import pin_current
from .events import EventLoop
from .procfs import thread_usage
from .shm import SharedArrays, shared_zeros
from .signals import ENDING
from .waitstatus import describe_status, ending

FAULT_ENV = "HYBRIDSCHED_FAULT"

# Worker states in the shared ``state`` table.
STARTING, RUNNING, DONE, FAILED = 0, 1, 2, 3

_DEFERRED = set(ENDING)
_ERRLEN = 200  # bytes of the exception text a failing worker leaves for the parent
# bytes of its traceback's tail (WorkerLost.remote_traceback): shared memory per worker
# against how many of the innermost frames reach the parent
_TBLEN = 2048
# Every pipe end and pidfd that a team of this process owns. A child closes all of them but
# the ones it keeps, not only its own team's: with teams in several threads at once (the
# API from threads), a child that kept another team's pipe end open would hold back that
# team's end of file forever. The lock makes "created and registered" one step as seen by
# a fork from another thread.
_TEAM_FDS: set[int] = set()
_FD_LOCK = threading.Lock()
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37

_prctl: Callable[..., int] | None  # libc's prctl, None where it cannot be had
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
except (OSError, AttributeError):  # not Linux/glibc: no subreaper, no parent-death signal
    _prctl = None


def prctl(option: int, arg: int = 0) -> int:
    return -1 if _prctl is None else _prctl(option, arg, 0, 0, 0)


def get_subreaper() -> bool:
    if _prctl is None:
        return False
    val = ctypes.c_int(0)
    _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(val), 0, 0, 0)
    return bool(val.value)


def fault_plan(env: dict | None = None) -> tuple[int, int, str] | None:
    """Parse ``HYBRIDSCHED_FAULT=W:N[:MODE]`` (test-only fault injection). ``W`` is a
    worker, or ``*`` for whichever workers reach their chunk N (-1 here): where workers
    race for chunks, some worker surely does, while one named worker may get none."""
    text = (env if env is not None else os.environ).get(FAULT_ENV, "").strip()
    if not text:
        return None
    parts = text.split(":")
    try:
        w, n = (-1 if parts[0] == "*" else int(parts[0])), int(parts[1])
        mode = parts[2] if len(parts) > 2 else "kill"
    except (ValueError, IndexError):
        raise ResourceError(f"{FAULT_ENV}={text!r}: expected W:N[:kill|raise|exit]") from None
    if mode not in ("kill", "raise", "exit"):
        raise ResourceError(f"{FAULT_ENV}={text!r}: mode must be kill, raise or exit")
    if not (-1 <= w < 2**31 and 1 <= n < 2**63) or len(parts) > 3 or parts[0] == "-1":
        raise ResourceError(f"{FAULT_ENV}={text!r}: W must be a worker (0 or more) and N a "
                            "chunk number (1 or more)")
    return w, n, mode


class ProcessTeam:
    """Owns the forked workers of one run and their shared report tables.

    ``trace_cap`` is the most chunks one worker may run (sizes its trace rows).
    """

    def __init__(self, scheduler: str, k: int, trace_cap: int, subreaper: bool = False):
        self.scheduler = scheduler
        self.k = k
        self.cap = max(1, trace_cap)
        self.fault = fault_plan()
        self.parent_pid = os.getpid()
        self.pgid = 0
        self.pidfds: dict[int, int] = {}        # worker -> pidfd (parent only)
        self.parent_fds: list[int] = []         # fds every child closes first
        self.statuses: dict[int, int] = {}      # pid -> wait status, once reaped
        self.events = EventLoop()               # pidfds and pipes, one wait (parent only)
        self.running: set[int] = set()          # workers whose end wait() has not seen
        self._subreaper = subreaper
        self._old_subreaper = False
        self._shared: list[SharedArrays] = []
        try:
            self.stats = self._alloc(k, WORKER_DTYPE)
            self.stats["worker"] = np.arange(k)
            self.stats["cpu"] = -1
            self.state = self._alloc(k, np.int32)
            self.pids = self._alloc(k, np.int64)
            self.ppids = self._alloc(k, np.int64)
            self.errors = self._alloc((k, _ERRLEN), np.uint8)
            self.tracebacks = self._alloc((k, _TBLEN), np.uint8)
            self.ntrace = self._alloc(k, np.int64)
            self.traces = self._alloc((k, self.cap, 4), np.float64)
        except BaseException:
            self._unmap()
            raise

    def _alloc(self, shape, dtype) -> np.ndarray:
        owner, array = shared_zeros(shape, dtype)
        self._shared.append(owner)
        return array

    # --- lifetime -------------------------------------------------------------------

    def __enter__(self) -> "ProcessTeam":
        if self._subreaper and _prctl is not None:
            self._old_subreaper = get_subreaper()
            prctl(_PR_SET_CHILD_SUBREAPER, 1)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if os.getpid() != self.parent_pid:  # never clean up from inside a child
            return
        # a second Ctrl-C or a SIGTERM during the cleanup waits until it is complete
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
        try:
            self.kill_all()
            self.reap_all()
            with _FD_LOCK:
                for fd in list(self.pidfds.values()) + self.parent_fds:
                    _TEAM_FDS.discard(fd)
                    _close(fd)
            self.pidfds.clear()
            self.parent_fds.clear()
            if self._subreaper and _prctl is not None and not self._old_subreaper:
                prctl(_PR_SET_CHILD_SUBREAPER, 0)
            self._unmap()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _unmap(self) -> None:
        while self._shared:
            self._shared.pop().close()

    def kill_all(self) -> None:
        """SIGKILL the whole process group (harmless once everyone has exited)."""
        if self.pgid:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def reap_all(self) -> None:
        """Wait for every member of the group; orphaned grandchildren come to us as
        subreaper, so the loop ends only when none is left (ECHILD)."""
        if not self.pgid:
            return
        while True:
            try:
                pid, status = os.waitpid(-self.pgid, 0)
            except ChildProcessError:
                self.pgid = 0  # the group is gone; its number may be reused: never signal it
                return
            except InterruptedError:
                continue
            self.statuses[pid] = status

    # --- forking --------------------------------------------------------------------

    def spawn(self, w: int, body: Callable[[int], None], keep_fds: tuple[int, ...] = ()) -> int:
        """Fork worker ``w`` running ``body(w)``; works from the parent or from a worker.

        The child closes every parent-only fd except ``keep_fds``, then leaves with
        ``os._exit``; it never returns here."""
        forker = os.getpid()
        from_parent = forker == self.parent_pid
        # Ctrl-C / SIGTERM wait until the new child is in our group and books, so the
        # cleanup that the resulting exception triggers cannot miss it
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED) if from_parent else None
        try:
            try:
                with _FD_LOCK:  # no other team's pipe half-registered at the fork
                    pid = os.fork()
                    if pid and from_parent:
                        self.watch(w, pid)
            except OSError as exc:
                raise ResourceError(f"{self.scheduler}: fork of worker {w} failed: {exc}") from exc
            if pid == 0:
                self._child(w, body, forker, keep_fds, old_mask)  # never returns
            if from_parent:
                if not self.pgid:
                    self.pgid = pid
                try:
                    os.setpgid(pid, self.pgid)  # also done by the child: whoever runs first
                except OSError:
                    pass  # the child already joined, or has exited
        finally:
            if old_mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        self.pids[w] = pid
        # the forking side records the parent: the child's getppid() would already say
        # "subreaper" if its parent finished first
        self.ppids[w] = os.getpid()
        return pid

    def _child(self, w: int, body, forker: int, keep_fds, old_mask) -> None:
        code = 1
        try:
            global _FD_LOCK
            _FD_LOCK = threading.Lock()  # the copy may be held by a thread the child lacks
            if forker == self.parent_pid:
                try:
                    os.setpgid(0, self.pgid or 0)
                except OSError:
                    pass
            # die with whoever forked us: the parent, or the tree worker that did (which
            # waits for its children before it exits, below), so a SIGKILL of the parent
            # takes the whole tree; tree-forked workers left alive had held the study's lock
            # and the coop tokens (hostile review)
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != forker:
                os._exit(1)
            # the parent handles Ctrl-C, the terminal's hang-up and a batch system's
            # warning (sent to every process of the job: a worker had died of it first)
            for sig in ENDING:
                if sig != signal.SIGTERM:
                    signal.signal(sig, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # no inherited SystemExit handler
            if old_mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            for fd in set(self.pidfds.values()) | set(self.parent_fds) | _TEAM_FDS:
                if fd not in keep_fds:
                    _close(fd)
            self.pids[w] = os.getpid()
            self.state[w] = RUNNING
            body(w)
            self.state[w] = DONE
            code = 0
            _wait_children()  # the workers we forked die with us: not before they are done
        except BaseException as exc:  # noqa: BLE001 - reported through shared memory
            text = f"raised {type(exc).__name__}: {exc}".encode("utf-8", "replace")[:_ERRLEN]
            try:
                self.errors[w, :len(text)] = np.frombuffer(text, np.uint8)
                tb = traceback.format_exc().encode("utf-8", "replace")[-_TBLEN:]
                self.tracebacks[w, :len(tb)] = np.frombuffer(tb, np.uint8)
                self.state[w] = FAILED
            except BaseException:
                pass
        finally:
            os._exit(code)

    def watch(self, w: int, pid: int) -> None:
        """Open a pidfd on worker w (parent only); readable once it has exited."""
        if w in self.pidfds:
            return
        try:
            self.pidfds[w] = os.pidfd_open(pid)
            _TEAM_FDS.add(self.pidfds[w])
        except ProcessLookupError:
            self.pidfds[w] = -1  # already reaped: by the tree worker that forked it
        except OSError as exc:
            raise ResourceError(f"{self.scheduler}: cannot watch worker {w} (pid {pid}): {exc}"
                                " (raise `ulimit -n`?)") from exc

    # --- inside a worker ------------------------------------------------------------

    def begin(self, w: int, cpu: int) -> tuple:
        """Pin the calling worker and note its start; returns a token for :meth:`end`."""
        if cpu >= 0:
            pin_current(cpu)
        row = self.stats[w]
        row["pid"], row["cpu"] = os.getpid(), cpu
        start = perf_counter()
        row["start"] = start
        return start, thread_usage()

    def check_fault(self, w: int, nth: int) -> None:
        """Test hook: fail as ``HYBRIDSCHED_FAULT`` asks when worker w starts chunk nth."""
        f = self.fault
        if f is None or f[0] not in (w, -1) or f[1] != nth:
            return
        if f[2] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if f[2] == "exit":
            os._exit(0)
        raise RuntimeError(f"injected fault at chunk {nth}")

    def recorder(self, w: int) -> Callable[[tuple[int, int, float, float]], None]:
        """``record((first, count, t0, t1))`` for worker w: appends one chunk to its shared
        trace as soon as it is done, so the trace keeps the chunks of a worker that dies
        later. Writes go through memoryviews: a numpy item write per field would cost
        microseconds per chunk on the fine-grained workloads."""
        flat: memoryview[Any] = memoryview(self.traces[w].reshape(-1))  # ints and floats
        count_view = self.ntrace[w:w + 1].data  # memoryview(...) of it
        cap = self.cap
        n = [int(self.ntrace[w])]

        def record(row: tuple[int, int, float, float]) -> None:
            i = n[0]
            if i < cap:
                j = 4 * i
                flat[j], flat[j + 1], flat[j + 2], flat[j + 3] = row
                n[0] = count_view[0] = i + 1
        return record

    def _settle(self, w: int) -> None:
        n = int(self.ntrace[w])
        arr = self.traces[w, :n]
        row = self.stats[w]
        row["busy"] = float((arr[:, 3] - arr[:, 2]).sum()) if n else 0.0
        row["frames"] = int(arr[:, 1].sum()) if n else 0
        row["chunks"] = n

    def end(self, w: int, token: tuple) -> None:
        """Write worker w's stats row from its trace and its CPU usage."""
        start, u0 = token
        u1 = thread_usage()
        self._settle(w)
        row = self.stats[w]
        row["user"], row["system"], row["iowait"] = (b - a for a, b in zip(u0, u1))
        row["end"] = perf_counter()

    def settle_lost(self, w: int) -> None:
        """Stats of a worker that died: what its trace shows it finished (parent side)."""
        self._settle(w)
        n = int(self.ntrace[w])
        row = self.stats[w]
        row["end"] = float(self.traces[w, n - 1, 3]) if n else float(row["start"])

    # --- in the parent --------------------------------------------------------------

    def exited(self, w: int) -> bool:
        """Whether worker w finished its body (as opposed to dying)."""
        return int(self.state[w]) == DONE

    def lost(self, w: int) -> WorkerLost:
        """The WorkerLost for worker w, after the group has been killed and reaped."""
        pid = int(self.pids[w])
        if int(self.state[w]) == FAILED:
            raw = bytes(self.errors[w]).rstrip(b"\0").decode("utf-8", "replace")
            tb = bytes(self.tracebacks[w]).rstrip(b"\0").decode("utf-8", "replace")
            name = raw.removeprefix("raised ").partition(":")[0]
            return WorkerLost(self.scheduler, w, pid, raw, exception=name, remote_traceback=tb)
        status = self.statuses.get(pid)
        return WorkerLost(self.scheduler, w, pid, describe_status(status), **ending(status))

    def fail(self, w: int, extra: str = "") -> WorkerLost:
        """Kill and reap everyone, then describe worker w's death (raise the result)."""
        self.kill_all()
        self.reap_all()
        err = self.lost(w)
        if extra:
            err.args = (f"{err.args[0]}{extra}",)
        return err

    def reap(self, w: int) -> int | None:
        """Reap worker w if it is our child by now; its wait status or None."""
        pid = int(self.pids[w])
        if pid in self.statuses:
            return self.statuses[pid]
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got == 0:
            return None
        self.statuses[pid] = status
        return status

    def pipe(self) -> tuple[int, int]:
        """A pipe (read end, write end) owned by the team: closed by :meth:`close` unless
        released earlier with :meth:`close_fd`; children close it unless they keep it."""
        with _FD_LOCK:
            try:
                r, w = os.pipe2(os.O_CLOEXEC)
            except OSError as exc:
                raise ResourceError(f"{self.scheduler}: cannot create a pipe for {self.k} "
                                    f"workers: {exc} (raise `ulimit -n`?)") from exc
            self.parent_fds += [r, w]
            _TEAM_FDS.update((r, w))
        return r, w

    def close_fd(self, fd: int) -> None:
        """Close one of the team's fds in the parent (a child-side pipe end, say)."""
        self.events.discard(fd)
        if fd in self.parent_fds:
            with _FD_LOCK:
                self.parent_fds.remove(fd)
                _TEAM_FDS.discard(fd)
                _close(fd)

    def wait(self, on_lost: Callable[[int], None] | None = None) -> None:
        """Run the team's event loop until every worker has ended: the handlers a backend
        gave :attr:`events` for its pipes run as those are ready, each worker's pidfd as it
        exits, tree-forked workers watched as they appear. A worker that ends without
        finishing raises its WorkerLost, unless ``on_lost(w)`` takes it over (it has left
        :attr:`running` by then)."""
        self.running = running = set(range(self.k))
        on_exit = partial(self._on_exit, on_lost)
        watched: set[int] = set()
        while running and len(watched) < self.k:
            for w in range(self.k):
                if w not in self.pidfds and self.pids[w]:
                    self.watch(w, int(self.pids[w]))
            for w, fd in list(self.pidfds.items()):
                if w not in watched:
                    watched.add(w)
                    if fd < 0:  # reaped before we looked, by the tree worker that forked it
                        self._ended(on_lost, w)
                    else:
                        self.events.add(fd, partial(on_exit, w))
            # until every pid is known (a tree still forking) wake up now and then to look
            # for new ones; 2 ms keeps discovery far below a frame's cost. Not once all have
            # ended: with no descriptor left, that wait would never end
            if running:
                self.events.once(None if len(watched) == self.k else 0.002)
        self.events.run(running)  # every worker watched: nothing else between two waits

    def _on_exit(self, on_lost: Callable[[int], None] | None, w: int, fd: int) -> None:
        self.events.discard(fd)
        self._ended(on_lost, w)

    def _ended(self, on_lost: Callable[[int], None] | None, w: int) -> None:
        self.running.discard(w)
        if not self.exited(w):
            if on_lost is None:
                raise self.fail(w)
            on_lost(w)

    def trace(self) -> np.ndarray:
        """The chunk trace of every worker, ordered by start time."""
        return trace_table([self.traces[w, :int(self.ntrace[w])] for w in range(self.k)])


def _wait_children() -> None:
    """Reap every child of this worker (tree-forked workers), however they end."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _close(fd: int) -> None:
    if fd is not None and fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
