"""Who am I among the ranks: launcher detection, the lazily imported MPI world, and the
guard that aborts the whole job when one rank fails.

mpi4py is imported only when a launcher (mpirun/mpiexec, srun) started more than one rank:
``import mpi4py.MPI`` initialises MPI, which we must not do in a plain single-node run.
Without a launcher, or without mpi4py, the program runs as P = 1 through :class:`Solo`,
which offers the same methods as :class:`World` and never touches MPI.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ..errors import RankFailed, ResourceError, UsageError
from ..machine.launch import NO_MPI_ENV, Launch, detect_launch  # noqa: F401  (re-exported by mpi)
from ..machine.metadata import clean_text
from ..study.world import Solo

if TYPE_CHECKING:  # only a type here: importing it costs every `run` at P = 1 its start-up
    from .watchdog import RankWatchdog

ABORT_GRACE_S = 0.3


class World:
    """MPI.COMM_WORLD plus the node-local communicator (ranks that share this host)."""

    is_mpi = True
    watchdog: RankWatchdog  # set by `run` (commands/run_mpi) around a study's ranks

    def __init__(self, MPI) -> None:
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.host = clean_text(MPI.Get_processor_name(), 64)  # in every line naming a rank
        # Ranks on one host split its CPUs between them (see local_cpus).
        self.node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank = self.node.Get_rank()
        self.local_size = self.node.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def wtime(self) -> float:
        return self.MPI.Wtime()

    def bcast(self, obj: Any) -> Any:
        return self.comm.bcast(obj, root=0)

    def gather(self, obj: Any) -> list[Any] | None:
        return self.comm.gather(obj, root=0)

    def allreduce_sum(self, value: int | float) -> int | float:
        return self.comm.allreduce(value, op=self.MPI.SUM)

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


_world: Solo | World | None = None


def world() -> Solo | World:
    """The process's rank in the job; MPI is initialised on the first call under a launcher."""
    global _world
    if _world is None:
        _world = _make_world()
    return _world


def _make_world() -> Solo | World:
    launch = detect_launch()
    if launch is None:
        return Solo()
    try:
        from mpi4py import MPI
    except ImportError:
        # Several copies were started but cannot talk to each other: let the first one
        # run the study as P = 1 and the others leave, rather than run it P times over.
        if (launch.rank or 0) > 0:
            raise SystemExit(0)
        print(f"hybridsched: started by {launch.how} but mpi4py is not installed; "
              "running as P = 1 on rank 0 only (pip install 'hybridsched[mpi]')", file=sys.stderr)
        return Solo()
    w = World(MPI)
    if launch.size is not None and w.size != launch.size:
        # Another MPI than the launcher's (both wheels in one environment, a module
        # loaded after mpi4py was built): every copy would run the whole study alone.
        name, version = MPI.get_vendor()
        raise UsageError(
            f"{launch.how} started {launch.size} ranks but the MPI library mpi4py loaded "
            f"({name} {'.'.join(map(str, version))}) sees {w.size}: it is not the "
            "launcher's MPI; start the job with the launcher of that MPI, or point "
            "MPI4PY_LIBMPI at the launcher's libmpi (docs/mpi.md); started without a "
            f"launcher, set {NO_MPI_ENV}=1 (its variables are left in the environment)")
    return w if w.size > 1 else Solo()


def local_cpus(cpus: list[int], local_rank: int, local_size: int) -> list[int]:
    """This rank's share of the host's CPUs: contiguous blocks, so that ranks on one node
    never pin their workers to the same cores; all of them when there are fewer CPUs than
    ranks (oversubscription is then the user's choice)."""
    if local_size <= 1 or len(cpus) < local_size:
        return list(cpus)
    q, r = divmod(len(cpus), local_size)
    first = local_rank * q + min(local_rank, r)
    return list(cpus[first:first + q + (local_rank < r)])


def agree(w: Solo | World, check: Callable[[], None]) -> None:
    """Run a check of the input on rank 0 and raise its UsageError on every rank, so that
    all ranks stop together (rank 0 prints the line, the others leave silently)."""
    msg = None
    if w.rank == 0:
        try:
            check()
        except UsageError as exc:
            msg = str(exc)
    msg = w.bcast(msg)
    if msg is not None:
        # The launcher kills the other ranks as soon as the first one leaves: each tells its
        # watchdog first, and none leaves before all have, or the watchdog of a rank killed
        # still in the broadcast (a loaded node) added a line naming it to the refusal's.
        watchdog = getattr(w, "watchdog", None)
        if watchdog is not None:
            watchdog.refusing()
        w.barrier()
        if w.rank == 0:
            raise UsageError(msg)
        raise SystemExit(2)


@contextlib.contextmanager
def abort_on_error(w: Solo | World) -> Iterator[None]:
    """Turn any failure on one rank into MPI_Abort of the whole job, with one line naming
    the rank and host, so no other rank is left waiting in a collective forever.

    At P = 1 exceptions pass through unchanged (the CLI maps them to exit codes).
    A clean SystemExit(0) passes too; runs already written by rank 0 stay in the file
    (it flushes after every run).
    """
    if isinstance(w, Solo):  # not is_mpi
        yield
        return
    try:
        yield
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        code = _exit_code(exc.code)
        _die(w, RankFailed(w.rank, w.size, w.host, f"exited with status {exc.code}", status=code))
    except KeyboardInterrupt:
        _die(w, RankFailed(w.rank, w.size, w.host, "interrupted", status=130))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the other ranks
        _die(w, RankFailed(w.rank, w.size, w.host, f"{type(exc).__name__}: {exc}",
                           status=2 if isinstance(exc, UsageError) else 1,
                           exception=type(exc).__name__, remote_traceback=traceback.format_exc()))


def _exit_code(code: object) -> int:
    return code if isinstance(code, int) else 1


def _die(w: World, failed: RankFailed) -> None:
    """Name the failed rank in one line, then abort the job with its exit status."""
    code = failed.status if failed.status is not None else 1
    watchdog = getattr(w, "watchdog", None)
    if watchdog is not None:
        watchdog.aborting()  # this line names the failure; the ranks killed next stay quiet
    sys.stdout.flush()
    # an error about the output file says itself what is stored (OutputLost, DiskFull)
    kept = "" if failed.exception in ("OutputLost", "DiskFull") else \
        " (completed runs stay in the output file)"
    print(f"hybridsched: {failed}; aborting the MPI job{kept}", file=sys.stderr)
    sys.stderr.flush()
    # The launcher forwards our stderr through its proxies and drops what is still in
    # flight when it tears the job down: give the line a moment to get out. Longer only
    # delays the abort; shorter loses the message now and then (seen with MPICH hydra).
    time.sleep(ABORT_GRACE_S)
    try:
        w.abort(code)
    finally:
        # MPI_Abort may return before the launcher kills us; never carry on past a failure
        # (and never run atexit's MPI_Finalize, which would wait for the dead ranks).
        os._exit(code)


def maybe_fail(rank: int, run_index: int) -> None:
    """TEST-ONLY fault hook: ``HYBRIDSCHED_FAIL_RANK=R[:N[:kill]]`` makes rank R raise (or
    SIGKILL itself) just before its run number N (default 0), so tests can check that a
    failing rank takes the job down instead of leaving the others waiting."""
    spec = os.environ.get("HYBRIDSCHED_FAIL_RANK")
    if not spec:
        return
    r, n, how = (spec.split(":") + ["", ""])[:3]
    if int(r) == rank and int(n or 0) == run_index:
        if how == "kill":
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"test fault injected by HYBRIDSCHED_FAIL_RANK={spec}")


def maybe_corrupt(rank: int, work) -> None:
    """TEST-ONLY: ``HYBRIDSCHED_CORRUPT_RANK=R`` makes rank R spoil one row of its sorted
    frames after the timed run, so tests can check that verification is summed over ranks."""
    spec = os.environ.get("HYBRIDSCHED_CORRUPT_RANK")
    if spec and int(spec) == rank and work.shape[0] and work.shape[2] > 1:
        row = work[0, 0]
        row[0], row[-1] = row[-1], row[0] if row[-1] != row[0] else row[0] + 1


def slowdown(rank: int) -> float:
    """BENCHMARK/TEST-ONLY: ``HYBRIDSCHED_SLOW_RANK=R:F`` makes rank R behave like a node F
    times slower: after each local execution it idles (F - 1) times as long as the
    execution took. Idling, unlike a competing busy loop, does not depend on how the OS
    shares a loaded machine, so static and dynamic splits meet the same, reproducible
    imbalance. 1.0 (no effect) when unset or for other ranks."""
    spec = os.environ.get("HYBRIDSCHED_SLOW_RANK")
    if not spec:
        return 1.0
    r, _, f = spec.partition(":")
    return max(1.0, float(f or 2)) if int(r) == rank else 1.0


def rank_hooks(env: Mapping[str, str] | None = None) -> None:
    """Check the MPI test hooks' values (HYBRIDSCHED_FAIL_RANK=R[:N[:kill]],
    HYBRIDSCHED_CORRUPT_RANK=R, HYBRIDSCHED_SLOW_RANK=R[:F]): a malformed one is refused
    before the first run (ResourceError), not at it on one rank."""
    env = os.environ if env is None else env
    forms = {"HYBRIDSCHED_FAIL_RANK": r"\d+(:\d+(:kill)?)?", "HYBRIDSCHED_CORRUPT_RANK": r"\d+",
             "HYBRIDSCHED_SLOW_RANK": r"\d+(:\d+(\.\d*)?)?"}
    for name, form in forms.items():
        value = env.get(name, "")
        if value and not re.fullmatch(form, value):
            raise ResourceError(f"{name}={value!r}: expected {form.replace(chr(92) + 'd+', 'N')}")
