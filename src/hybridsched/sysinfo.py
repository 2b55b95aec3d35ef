"""What machine we are on: usable CPUs, memory, and the metadata stored with every study."""
from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
import time
from contextlib import contextmanager
from typing import Iterator


def usable_cpus() -> list[int]:
    """CPUs this process may run on (respects taskset, cgroups cpusets and Slurm)."""
    return sorted(os.sched_getaffinity(0))


def n_cpus() -> int:
    """N of the paper: the hardware parallelism available to us."""
    return len(usable_cpus())


def pin_current(cpu: int) -> None:
    """Pin the calling thread (pid 0 = this thread on Linux) to one CPU."""
    os.sched_setaffinity(0, {cpu})


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Pin the calling thread for the duration of the block, then restore its mask."""
    if cpu is None:
        yield
        return
    saved = os.sched_getaffinity(0)
    pin_current(cpu)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def available_memory() -> int:
    """Bytes we may place in new shared-memory segments: RAM available and /dev/shm free."""
    import psutil

    avail = psutil.virtual_memory().available
    try:
        avail = min(avail, shutil.disk_usage("/dev/shm").free)
    except OSError:
        pass
    return avail


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_metadata() -> dict[str, str | int]:
    """Description of this machine and software, stored as HDF5 attributes (pyperf style)."""
    import h5py
    import numba
    import numpy
    import psutil

    from . import __version__

    meta: dict[str, str | int] = {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count_logical": psutil.cpu_count(logical=True) or 0,
        "cpu_count_physical": psutil.cpu_count(logical=False) or 0,
        "cpus_usable": n_cpus(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "hybridsched": __version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "psutil": psutil.__version__,
    }
    try:
        import mpi4py

        meta["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    meta.update(mpi_metadata())
    from .hostcheck import facts, metadata

    # the static facts of `hybridsched check`; the load is sampled once by `run` itself
    meta.update(metadata(facts(sample_load=False)))
    return meta


def mpi_metadata() -> dict[str, str]:
    """The MPI library (once MPI is initialised: never initialised here) and the launcher
    the environment names; {} for a plain P = 1 run."""
    out: dict[str, str] = {}
    from .mpi import detect_launch

    launch = detect_launch()
    if launch is not None:
        out["mpi_launcher"] = launch.how
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized():
        lib = mpi.Get_library_version().strip().splitlines()
        out["mpi_library"] = lib[0][:200] if lib else "unknown"
        out["mpi_vendor"] = "{} {}".format(mpi.get_vendor()[0], ".".join(map(str, mpi.get_vendor()[1])))
    return out


def _busy_seconds(cpus: set[int]) -> float:
    """Busy seconds (all but idle and iowait; guest is already in user) of these CPUs since
    boot, from the per-CPU lines of /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0
    with open("/proc/stat") as fh:
        for line in fh:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *vals = line.split()
            if int(name[3:]) not in cpus:
                continue
            v = [int(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
            busy += sum(v) - v[3] - v[4]
    return busy / tick


class ForeignLoad:
    """Share of our CPUs that *other* processes used during a run.

    (machine busy time on our CPUs - this process's CPU time, reaped children included)
    / (N x wall time). A dedicated machine reads about 0; a busy neighbour shows up
    directly, unlike the load average, which also counts our own k workers. /proc/stat
    ticks are 10 ms, so one short run reads within a few percent; the report takes medians.
    """

    def __init__(self, cpus: list[int]):
        self.cpus = set(cpus)
        self._t = time.monotonic()
        self._busy = self._own = 0.0
        try:
            self._busy = _busy_seconds(self.cpus)
        except (OSError, ValueError):
            self.cpus = set()
        self._own = self._own_seconds()

    @staticmethod
    def _own_seconds() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def share(self) -> float:
        """The foreign share since construction, in [0, 1] (NaN when /proc/stat is unreadable)."""
        wall = time.monotonic() - self._t
        if not self.cpus or wall <= 0:
            return float("nan")
        try:
            busy = _busy_seconds(self.cpus) - self._busy
        except (OSError, ValueError):
            return float("nan")
        foreign = busy - (self._own_seconds() - self._own)
        return min(1.0, max(0.0, foreign / (len(self.cpus) * wall)))


def pid_namespace() -> int:
    """Inode of this process's pid namespace (0 where /proc does not say): a pid names the
    same process only within one namespace (containers, unshare)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists in this pid namespace (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
