"""`coop exec` with a tracer in the command: strace (and gdb) stop the traced threads at each
system call or event while they may hold tokens, and need a token themselves to let them
go on."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from shimprogs import build

CLI = [sys.executable, "-m", "hybridsched", "coop", "exec"]


def one_cpu() -> None:
    """A segment of one token: the tracer and its tracee take turns on it."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace here")
@pytest.mark.parametrize("traced", ["threads", "pipeline"])
def test_a_command_straced_in_its_own_job_runs_to_its_end_on_one_cpu(seg, shim_lib, tmp_path,
                                                                      traced):
    """`coop exec strace -f CMD` on one CPU ends as CMD does, no rotation signal reaching a
    traced thread. Before, it never ended: strace waited for the token of a tracee stopped
    holding it until the node's scan took it back (0.2 s a stop), and, once a tracee was
    stopped in that scan's own reads of /proc, for the arbiter's mutex it held; with the
    tokens taken back at each stop, a tracee granted one was stopped and robbed again at
    each try, without end."""
    if traced == "threads":  # two OpenMP threads on the one token
        cmd, env = [build("omp_bsp", tmp_path), "50", "100"], {"OMP_NUM_THREADS": "2"}
        want = "100 steps by 2 threads"
    else:
        cmd, env = ["sh", "-c", "seq 1 3000 | sort -n | tail -1"], {}
        want = "3000\n"
    log = tmp_path / "strace.log"
    p = subprocess.run([*CLI, "--segment", seg, "--counters", "strace", "-f", "-o", str(log),
                        *cmd], capture_output=True, text=True, timeout=240,
                       env={**os.environ, **env}, preexec_fn=one_cpu)
    assert p.returncode == 0, p.stderr
    assert want in p.stdout
    assert "hybridsched coop: threads " in p.stderr
    # the shim's rotation signal, SIGRTMAX - 7: strace counts real-time signals from the
    # kernel's first, 32 (glibc keeps two of them: Python's SIGRTMIN is 34)
    rotation = f"SIGRT_{signal.SIGRTMAX - 7 - 32} {{"
    assert rotation not in log.read_text()

