"""Everything read from /proc: CPU time counters with one definition of busy time, the
calling thread's usage and interference, and whether a pid is alive.

Busy time is Eq. 11's: a CPU is engaged unless idle, so iowait counts as busy (the paper
counts T_iowait as engaged time); guest time is already inside user and nice.
"""
from __future__ import annotations

import os
import platform
import resource
import time
from typing import Sequence

from .cpus import usable_cpus

# /proc/stat cpuN fields: user nice system idle iowait irq softirq steal guest guest_nice
_IDLE = 3
_FIELDS = 8  # guest and guest_nice are already counted in user and nice
TICK = 1.0 / os.sysconf("SC_CLK_TCK")  # seconds per /proc/stat jiffy


def proc_stat_counters(cpus: Sequence[int] | None = None, path: str = "/proc/stat") -> list[tuple[float, float]]:
    """Cumulative (busy, total) jiffies of each CPU in ``cpus`` (default: the usable ones),
    in that order; CPUs /proc/stat does not list are left out."""
    if cpus is None:
        cpus = usable_cpus()
    rows: dict[int, tuple[float, float]] = {}
    with open(path, "rb") as fh:
        for line in fh:
            if not line.startswith(b"cpu") or line[3:4] == b" ":
                continue
            parts = line.split()
            vals = [int(v) for v in parts[1:1 + _FIELDS]]
            total = float(sum(vals))
            rows[int(parts[0][3:])] = (total - vals[_IDLE], total)
    return [rows[c] for c in cpus if c in rows]


def busy_seconds(cpus: Sequence[int]) -> float:
    """Busy seconds of these CPUs since boot (:func:`proc_stat_counters`' busy)."""
    return sum(b for b, _ in proc_stat_counters(sorted(cpus))) * TICK


def own_cpu_seconds() -> float:
    """CPU seconds of this process so far, its reaped children included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class ForeignLoad:
    """Share of our CPUs that *other* processes used during a run.

    (machine busy time on our CPUs - this process's CPU time, reaped children included)
    / (N x wall time). A dedicated machine reads about 0; a busy neighbour shows up
    directly, unlike the load average, which also counts our own k workers. /proc/stat
    ticks are 10 ms, so one short run reads within a few percent; the report takes medians.
    """

    def __init__(self, cpus: Sequence[int]):
        self.cpus = sorted(set(cpus))
        self._t = time.monotonic()
        self._busy = self._own = 0.0
        try:
            self._busy = busy_seconds(self.cpus)
        except (OSError, ValueError):
            self.cpus = []
        self._own = own_cpu_seconds()

    def share(self) -> float:
        """The foreign share since construction, in [0, 1] (NaN when /proc/stat is unreadable)."""
        wall = time.monotonic() - self._t
        if not self.cpus or wall <= 0:
            return float("nan")
        try:
            busy = busy_seconds(self.cpus) - self._busy
        except (OSError, ValueError):
            return float("nan")
        foreign = busy - (own_cpu_seconds() - self._own)
        return min(1.0, max(0.0, foreign / (len(self.cpus) * wall)))


def thread_usage() -> tuple[float, float, float]:
    """(user, system, iowait) CPU seconds of the calling thread so far.

    iowait is the thread's delay-accounting block-I/O wait from /proc/thread-self/stat
    (field 42); it stays 0 for an in-memory workload but completes Eq. 11.
    """
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    iowait = 0.0
    try:
        with open("/proc/thread-self/stat", "rb") as fh:
            stat = fh.read()
        iowait = int(stat[stat.rindex(b")") + 2:].split()[39]) * TICK
    except (OSError, ValueError, IndexError):
        pass
    return ru.ru_utime, ru.ru_stime, iowait


def _invol(path: str) -> int:
    with open(path, "rb") as fh:
        for line in fh:
            if line.startswith(b"nonvoluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


def _schedstat(path: str) -> tuple[int, int]:
    """(run ns, run-queue wait ns)."""
    with open(path, "rb") as fh:
        run_ns, wait_ns = (int(v) for v in fh.read().split()[:2])
    return run_ns, wait_ns


def thread_counters() -> tuple[int, int, int]:
    """(involuntary context switches, run-queue wait ns, run ns) of the calling thread."""
    invol = _invol("/proc/thread-self/status")
    try:
        run_ns, wait_ns = _schedstat("/proc/thread-self/schedstat")
    except (OSError, ValueError):
        run_ns = wait_ns = 0
    return invol, wait_ns, run_ns


def process_counters() -> tuple[int, int]:
    """(involuntary context switches, run-queue wait ns) summed over every thread of this
    process (a third-party pool's included)."""
    inv = wait = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            inv += _invol(f"/proc/self/task/{tid}/status")
            wait += _schedstat(f"/proc/self/task/{tid}/schedstat")[1]
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
    return inv, wait


def pid_namespace() -> int:
    """Inode of this process's pid namespace (0 where /proc does not say): a pid names the
    same process only within one namespace (containers, unshare)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _stat_fields(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        raw = fh.read()
    return raw[raw.rindex(b")") + 2:].split()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs in this pid namespace. One rule for every caller: a zombie (or
    a dying task) is gone, whoever's it is; a process of another user exists; where /proc
    cannot tell (not mounted), a pid that exists counts as alive, since callers remove
    what a dead pid leaves behind."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's: /proc still says whether it is a zombie
    try:
        return _stat_fields(pid)[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False  # ended between the two looks
    except (OSError, ValueError, IndexError):
        return True


def _children(pid: int, tid: str) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
            return [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return []  # gone, or a kernel without CONFIG_PROC_CHILDREN: the tree stops here


def children(pid: int) -> set[int]:
    """The children of process ``pid``, whichever of its threads started (or, for a
    subreaper, adopted) them; empty if it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    return {c for tid in tids for c in _children(pid, tid)}


def all_threads_blocked(pid: int) -> bool | None:
    """Whether every thread of ``pid`` and of every process below it is blocked: sleeping
    (S) or in uninterruptible wait (D) in its /proc/<pid>/task/<tid>/stat; False at the
    first that is not (running, or stopped and not yet continued); None when ``pid`` has no
    thread left to read (gone). A blocked tree would not use a CPU it were given."""
    todo, seen = [pid], False
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue  # a thread that just ended
            seen = True
            at = raw.rindex(b")") + 2
            if raw[at:at + 1] not in (b"S", b"D"):
                return False
            todo += _children(p, tid)
    return True if seen else None


def group_stopped(pid: int, pgid: int) -> bool:
    """Whether every thread of ``pid`` and of the processes below it that are in process
    group ``pgid`` is stopped (T, t) or gone (Z, X): where a shell would call the job
    stopped. Processes below that left the group are not looked at (a stop sent to the
    group never reaches them)."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
            in_group = int(_stat_fields(p)[2]) == pgid
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        for tid in tids:
            if in_group and thread_state(p, int(tid)) not in ("T", "t", "Z", "X", ""):
                return False
            todo += _children(p, tid)
    return True


def program_name(pid: int) -> str:
    """The file name of the program the process runs (``/proc/<pid>/exe``: a script's
    interpreter, where ``comm`` names the script); "" for one gone or not ours to read."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""


def wait_status(pid: int) -> int | None:
    """The wait status a zombie ``pid`` left (field 52 of its stat), or None when it can no
    longer be read."""
    try:
        return int(_stat_fields(pid)[49])
    except (OSError, ValueError, IndexError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def thread_state(pid: int, tid: int) -> str:
    """The state letter of thread ``tid`` of process ``pid`` (R running, S or D asleep, Z
    a zombie, ...): "" when there is no such thread, "?" when /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
            raw = fh.read()
        return raw[raw.rindex(b")") + 2:].split()[0].decode()
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return "?"


def thread_stopped(pid: int, tid: int = 0) -> bool:
    """Whether thread ``tid`` of process ``pid`` (tid 0: the process) is stopped by a
    signal (T) or by its tracer (t)."""
    return thread_state(pid, tid or pid) in ("T", "t")


def thread_alive(pid: int, tid: int) -> bool:
    """Whether thread ``tid`` of process ``pid`` runs, by pid_alive's rule (a zombie or a
    dying thread is gone; where /proc cannot tell, it is alive). A tid names another
    thread of the same process only once the kernel's pid space has wrapped."""
    if tid <= 0:
        return pid_alive(pid)
    state = thread_state(pid, tid)
    return state not in ("", "Z", "X") and (state != "?" or pid_alive(pid))
