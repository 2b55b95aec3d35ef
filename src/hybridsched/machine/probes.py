"""What makes timings on this machine untrustworthy (as ``pyperf system`` reports it):
``hybridsched check``, the same facts stored with every study (``machine.check_*``), and
the one warning ``run`` gives at its start when the machine looks shared.

Every probe reads /sys, /proc or /dev/shm and degrades to "unknown" where a file is
absent (a VM without cpufreq, a container without /sys): a missing fact is never an error.
The paths are parameters so that tests can fake a machine.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
from dataclasses import asdict, dataclass, field

from ..oslayer.cpus import usable_cpus
from ..oslayer.procfs import ForeignLoad
from .rule import SHARED_MACHINE, dedicated

SYS_CPU = "/sys/devices/system/cpu"
SHM = "/dev/shm"

# The load probe: SAMPLES windows of SAMPLE_S each, judged by the report's own rule
# (machine.rule.dedicated over per-window shares). 0.1 s windows keep `run` quick to start;
# on 2 CPUs a window is 20 ticks of /proc/stat, so one stray tick (5 %) does not count as
# a neighbour (the threshold is "more than 5 %"); longer windows would smooth out a bursty
# neighbour that still disturbs short runs.
SAMPLES = 4
SAMPLE_S = 0.1

# Test hook: set (non-empty, not "0") to skip `run`'s load probe, so that a test's stderr
# does not depend on what else the machine is running (tests/conftest.py sets it).
NO_PROBE_ENV = "HYBRIDSCHED_NO_LOAD_PROBE"


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def governor(cpus: list[int], root: str = SYS_CPU) -> str:
    """The cpufreq governor(s) of our CPUs ('performance', 'powersave,performance'), or
    'unknown' where /sys has no cpufreq (VMs, some drivers)."""
    found = [_read(f"{root}/cpu{c}/cpufreq/scaling_governor") for c in cpus]
    names = sorted({g for g in found if g})
    return ",".join(names) if names else "unknown"


def boost(root: str = SYS_CPU) -> str:
    """Turbo/boost: 'on', 'off' or 'unknown' (acpi-cpufreq's boost, intel_pstate's no_turbo)."""
    b = _read(f"{root}/cpufreq/boost")
    if b in ("0", "1"):
        return "on" if b == "1" else "off"
    nt = _read(f"{root}/intel_pstate/no_turbo")
    if nt in ("0", "1"):
        return "off" if nt == "1" else "on"
    return "unknown"


def smt_pairs(cpus: list[int], root: str = SYS_CPU) -> list[list[int]] | None:
    """Groups of our CPUs that are hyperthreads of one core (only groups of 2+); None when
    /sys does not say."""
    groups, known = set(), False
    for c in cpus:
        text = _read(f"{root}/cpu{c}/topology/thread_siblings_list")
        if text is None:
            continue
        known = True
        try:
            sib = tuple(x for x in _cpu_list(text) if x in cpus)
        except ValueError:
            continue
        if len(sib) > 1:
            groups.add(sib)
    return [list(g) for g in sorted(groups)] if known else None


def load_now(cpus: list[int], samples: int = SAMPLES, period: float = SAMPLE_S,
             stop: threading.Event | None = None) -> list[float]:
    """Per-window shares of our CPUs that other processes used just now (monitor's /proc/stat
    reader minus our own CPU time: oslayer.procfs.ForeignLoad); [] where /proc/stat is unreadable.
    ``stop`` set ends the sampling at once (the windows so far are returned)."""
    out = []
    stop = threading.Event() if stop is None else stop
    for _ in range(samples):
        probe = ForeignLoad(cpus)
        if stop.wait(period):
            break
        v = probe.share()
        if v == v:
            out.append(round(v, 4))
    return out


@dataclass
class Facts:
    """What the check found; every field has a value, 'unknown' or None where not known."""

    cpus: list[int]
    governor: str = "unknown"
    boost: str = "unknown"
    smt: list[list[int]] | None = None
    cores_usable: int = 0                # usable CPUs minus hyperthread siblings
    load: list[float] = field(default_factory=list)  # per-window foreign shares (empty: not sampled)
    mem_available: int = 0
    shm_free: int | None = None
    planned_bytes: int = 0               # original + work copy of the planned tensor

    @property
    def shared(self) -> bool | None:
        """The report's rule on the load windows (None when not sampled)."""

        return None if not self.load else not dedicated(self.load)


def facts(cpus: list[int] | None = None, planned_bytes: int = 0, sample_load: bool = True,
          root: str = SYS_CPU, shm: str = SHM, mem_available: int | None = None) -> Facts:
    """Probe this machine (``root``/``shm`` may point at a fake tree)."""
    cpus = usable_cpus() if cpus is None else list(cpus)
    f = Facts(cpus, governor(cpus, root), boost(root), smt_pairs(cpus, root))
    f.cores_usable = len(cpus) - sum(len(g) - 1 for g in (f.smt or []))
    if mem_available is None:
        import psutil

        mem_available = int(psutil.virtual_memory().available)
    f.mem_available = mem_available
    try:
        f.shm_free = int(shutil.disk_usage(shm).free)
    except OSError:
        f.shm_free = None
    f.planned_bytes = planned_bytes
    if sample_load:
        f.load = load_now(cpus)
    return f


def findings(f: Facts) -> list[tuple[str, str, str]]:
    """(what, value, verdict) lines; verdict 'ok', 'WARN' or 'unknown'."""
    gib = 2 ** 30
    out = [("usable CPU set", ",".join(map(str, f.cpus)) + f" ({len(f.cpus)} CPUs)", "ok")]
    g = f.governor
    out.append(("CPU frequency governor", g if g != "unknown" else "unknown (no cpufreq in /sys)",
                "unknown" if g == "unknown" else "ok" if g == "performance" else "WARN"))
    out.append(("turbo / boost", f.boost + (" (clock varies with load and heat)" if f.boost == "on" else ""),
                "unknown" if f.boost == "unknown" else "WARN" if f.boost == "on" else "ok"))
    if f.smt is None:
        out.append(("SMT siblings", "unknown (no topology in /sys)", "unknown"))
    elif f.smt:
        out.append(("SMT siblings", " ".join("+".join(map(str, s)) for s in f.smt)
                    + f": {f.cores_usable} physical cores under {len(f.cpus)} CPUs; k beyond "
                    "the cores shares execution units", "WARN"))
    else:
        out.append(("SMT siblings", "none among the usable CPUs", "ok"))
    if not f.load:
        out.append(("other load now", "not sampled", "unknown"))
    else:
        top = max(f.load)
        out.append(("other load now", f"max {top * 100:.1f} % of the CPUs over {len(f.load)} "
                    f"windows of {SAMPLE_S:g} s" + (f" (above {SHARED_MACHINE * 100:.0f} %: shared)"
                                                    if f.shared else ""),
                    "WARN" if f.shared else "ok"))
    out.append(("memory available", f"{f.mem_available / gib:.2f} GiB",
                "WARN" if f.planned_bytes and f.planned_bytes > f.mem_available else "ok"))
    if f.shm_free is None:
        out.append(("/dev/shm", "absent or unreadable", "WARN"))
    else:
        need = f" for a planned {f.planned_bytes / gib:.3f} GiB" if f.planned_bytes else ""
        out.append(("/dev/shm free", f"{f.shm_free / gib:.2f} GiB{need}",
                    "WARN" if f.planned_bytes > f.shm_free else "ok"))
    return out


def metadata(f: Facts) -> dict:
    """The facts as the study's metadata keys (``check_*``, typed: store.metadata keeps the
    lists as JSON)."""
    return {f"check_{k}": v for k, v in asdict(f).items()}


class LoadCheck:
    """`run`'s load probe in a thread of its own, so its windows (0.4 s of waiting) pass
    while the command imports what the study needs and loads its kernels instead of before:
    what this process does meanwhile is its own CPU time, which the probe subtracts
    (oslayer.procfs.ForeignLoad). ``result()`` waits for it and warns once when the machine
    looks shared. As a context manager it owns the thread: leaving the block before
    ``result()`` (bad input, Ctrl-C) stops and joins it."""

    def __init__(self, cpus: list[int]):
        self.cpus = list(cpus)
        self._load: list[float] = []
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> "LoadCheck":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def start(self) -> "LoadCheck":
        if os.environ.get(NO_PROBE_ENV, "") in ("", "0"):
            self._thread = threading.Thread(target=self._sample, name="hybridsched-loadcheck",
                                            daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        try:
            self._load = load_now(self.cpus, stop=self._stop)
        except BaseException as exc:  # re-raised by result(), in the caller's thread
            self._error = exc

    def result(self, stream=None) -> list[float]:
        """The windows (stored with the study), after one warning line if shared."""
        if self._thread is None:
            return []
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise self._error
        f = Facts(self.cpus, load=self._load)
        if f.shared:
            print(f"hybridsched: warning: other processes are using up to {max(f.load) * 100:.0f} % "
                  "of the CPUs right now; timings will include their work (see `hybridsched check`)",
                  file=sys.stderr if stream is None else stream)
        return f.load


def shared_warning(cpus: list[int], stream=None) -> list[float]:
    """Sample the load once; print one line when the machine looks shared. Returns the
    windows (stored with the study)."""
    return LoadCheck(cpus).start().result(stream)
