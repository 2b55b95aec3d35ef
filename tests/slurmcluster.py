"""A real Slurm on this one host, for the round trip of launch/slurm-PxK.sbatch: a private
munged, a controller and two slurmd (``node1``, ``node2``, both on localhost, each on its
own port), all children of the test and all stopped when it ends, whatever happened.

Everything lives in one directory made for it and removed with it (configuration, key,
sockets, state, spool, logs, the nodes' TmpFS); nothing of the system's (``/etc/slurm``,
``/etc/munge``, its munged) is read or touched. Needs root (slurmd starts jobs as their user) and Debian's
``slurm-wlm`` and ``munge`` (``.ci/run`` installs them where it may).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "scontrol")
NODES = ("node1", "node2")
# The longest the daemons may take to come up, and a job to end: a cold start on a loaded
# 2-CPU machine takes seconds; beyond these something is wrong and the logs say what.
UP_S = 90.0
JOB_S = 300.0
POLL_S = 0.1  # how often a state (a node idle, a job ended) is asked for
STOP_S = 15.0  # a process's time to end after SIGTERM (then SIGKILL), and after SIGKILL
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE", "OUT_OF_MEMORY"}


def missing() -> str:
    """Why no cluster can be started here ("" when one can)."""
    if os.geteuid() != 0:
        return "needs root to start slurmd (CI runs as root)"
    absent = [p for p in DAEMONS + CLIENTS if shutil.which(p) is None
              and not os.path.exists(f"/usr/sbin/{p}")]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing; apt-get install "
                "slurm-wlm munge, as .ci/run does)")
    return ""


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Job:
    id: str
    state: str
    log: str


class SlurmCluster:
    """A context manager: the cluster is up inside it, gone after it."""

    def __init__(self):
        self.root = ""
        self.conf = ""
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}

    def __enter__(self) -> "SlurmCluster":
        # munged wants its socket's directory, and every one above it, searchable by all:
        # not pytest's 0700 tmp_path, so a directory of its own in the temporary one
        self.root = tempfile.mkdtemp(prefix="hybridsched-slurm.")
        os.chmod(self.root, 0o711)
        self.conf = os.path.join(self.root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        try:
            self._configure()
            self._start()
            self._wait_idle()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _configure(self) -> None:
        r = self.root
        for d in ("state", *(f"spool-{n}" for n in NODES), *(f"tmp-{n}" for n in NODES)):
            os.makedirs(os.path.join(r, d), exist_ok=True)
        key = os.path.join(r, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as fh:
            fh.write(os.urandom(1024))
        ctld, *ports = _free_ports(1 + len(NODES))
        nodes = "\n".join(f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} "
                          f"CPUs={os.cpu_count() or 1}" for n, p in zip(NODES, ports))
        with open(self.conf, "w") as fh:
            fh.write(f"""ClusterName=hs{os.getpid()}
SlurmctldHost=localhost
SlurmctldPort={ctld}
AuthType=auth/munge
AuthInfo=socket={r}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool-%n
TmpFS={r}/tmp-%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=ci Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")

    def _spawn(self, *argv: str) -> None:
        log = open(os.path.join(self.root, f"{os.path.basename(argv[0])}-{len(self.procs)}.out"), "w")
        with log:
            self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))

    def _start(self) -> None:
        r = self.root
        self._spawn(_program("munged"), "-F", f"--socket={r}/munge.sock",
                    f"--key-file={r}/munge.key", f"--pid-file={r}/munged.pid",
                    f"--log-file={r}/munged.log", f"--seed-file={r}/munged.seed")
        self._until(lambda: os.path.exists(f"{r}/munge.sock"), "munged's socket")
        self._spawn(_program("slurmctld"), "-D")
        for n in NODES:
            self._spawn(_program("slurmd"), "-D", "-N", n)

    def _until(self, ready, what: str, limit: float = UP_S) -> None:
        deadline = time.monotonic() + limit
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise AssertionError(f"Slurm: no {what} ({'ended: ' + ', '.join(dead) if dead else 'timed out'}):\n"
                                     + self.logs())
            time.sleep(POLL_S)

    def _wait_idle(self) -> None:
        def idle() -> bool:
            p = self.client("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
            return all(states.get(n) == "idle" for n in NODES)
        self._until(idle, "idle nodes")

    def client(self, *argv: str, check: bool = True, env: dict | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run([_program(argv[0]), *argv[1:]], capture_output=True, text=True,
                           env=dict(env or self.env, SLURM_CONF=self.conf), timeout=timeout)
        if check and p.returncode:
            raise AssertionError(f"{' '.join(argv)}: {p.stderr or p.stdout}")
        return p

    def cannot(self, pmi: str) -> str:
        """Why this Slurm cannot start ranks with ``srun --mpi=PMI`` ("" when it can): not
        among its plugins (srun --mpi=list), or a step with it fails (Debian's PMIx plugin
        opens an unversioned libpmix.so, which only libpmix-dev installs)."""
        p = self.client("srun", "--mpi=list")
        offered = {ln.strip() for ln in (p.stdout + p.stderr).splitlines()
                   if ln[:1] in ("\t", " ") and ln.strip()}
        if pmi not in offered:
            return f"this Slurm offers no srun --mpi={pmi} (only {', '.join(sorted(offered))})"
        p = self.client("srun", f"--mpi={pmi}", "-N", "1", "-n", "1", "true", check=False)
        if p.returncode:
            return f"srun --mpi={pmi} fails here: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
        return ""

    def submit(self, script: str, *options: str, env: dict, cwd: str) -> str:
        p = subprocess.run([_program("sbatch"), "--parsable", *options, script],
                           capture_output=True, text=True, cwd=cwd, timeout=60,
                           env=dict(env, SLURM_CONF=self.conf))
        if p.returncode:
            raise AssertionError(f"sbatch {script}: {p.stderr}")
        return p.stdout.strip().split(";")[0]

    def wait(self, job: str, log: str) -> Job:
        """The job once it has ended (its state polled; no fixed wait)."""
        state = ""

        def ended() -> bool:
            nonlocal state
            p = self.client("scontrol", "show", "job", "-o", job, check=False)
            fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f)
            state = fields.get("JobState", "")
            return state in DONE
        self._until(ended, f"end of job {job}", JOB_S)
        with open(log) as fh:
            return Job(job, state, fh.read())

    def logs(self) -> str:
        out = []
        for name in sorted(os.listdir(self.root)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.root, name), errors="replace") as fh:
                    out.append(f"--- {name}\n" + "".join(fh.readlines()[-15:]))
        return "\n".join(out)

    def __exit__(self, *exc) -> None:
        """Stop every process of this cluster's (jobs, steps, daemons): whatever carries
        its SLURM_CONF in its environment is ours, then the daemons themselves."""
        daemons = {p.pid for p in self.procs}
        # a daemon's own helpers (slurmctld's slurmscriptd) end with it; a job's steps and
        # processes are nobody's children (slurmstepd detaches) and are stopped first
        _stop([p for p in _carrying(f"SLURM_CONF={self.conf}")
               if not daemons & {p.pid, *(q.pid for q in _parents(p))}])
        # the nodes, then the controller, then munged (the others authenticate through it)
        for group in (self.procs[2:], self.procs[1:2], self.procs[:1]):
            _stop([psutil.Process(p.pid) for p in group if p.poll() is None])
        for p in self.procs:
            p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _carrying(entry: str) -> list[psutil.Process]:
    me = os.getpid()
    found = []
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if entry.encode() in fh.read().split(b"\0"):
                    found.append(psutil.Process(pid))
        except (OSError, psutil.Error):
            pass
    return found


def _parents(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.parents()
    except psutil.Error:
        return []


def _stop(procs: list[psutil.Process]) -> None:
    """SIGTERM, then SIGKILL what is still running after STOP_S (a zombie has ended: its
    parent, not we, reaps it)."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    for sig in (signal.SIGKILL, None):
        deadline = time.monotonic() + STOP_S
        while (alive := [p for p in procs if _running(p)]) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if sig is None or not alive:
            return
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
