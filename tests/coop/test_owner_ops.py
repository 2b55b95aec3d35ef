"""The owner's operations on the segment through the shim's C (coop/ops.py's ShimOps,
shim/owner.c), which `coop exec` uses so that it never loads numba: one mutex with the
compiled side's, the death of its owner told to the next locker, and no Python worker on
an arbiter that uses them. (The rules themselves: test_shim_rules_match_workers.py; the
watchdog's acts: test_shim_rotation.py; the reclaim through them: test_shim_in_programs.py.)"""
from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.ops import CompiledOps, ShimOps
from hybridsched.errors import ResourceError
from hybridsched.oslayer import native
from hybridsched.oslayer.cpus import usable_cpus
from hybridsched.oslayer.shmlock import DIED_AT, LOCK_BYTES, init_mutex


def test_coop_exec_loads_no_numba(seg, shim_lib):
    """Its start went from ~0.8 s to ~0.2 s here: numba's import and the loading of the
    compiled rules were most of it."""
    code = ("import sys\nfrom hybridsched.cli import main\n"
            f"rc = main(['coop', 'exec', '--segment', {seg!r}, '--', 'true'])\n"
            "print(rc, sorted(m for m in ('numba', 'scipy', 'llvmlite') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.stdout.split("\n")[0] == "0 []", p.stdout + p.stderr


@pytest.fixture
def region():
    """A mutex in shared memory (a forked child locks the same one), unmapped when the
    last view goes."""
    r = np.frombuffer(mmap.mmap(-1, LOCK_BYTES), np.uint8, LOCK_BYTES)
    init_mutex(r)
    return r


def _from_another_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_the_shims_lock_and_the_compiled_one_are_one_mutex(region, shim_lib):
    shim, held, other = ShimOps(), np.zeros(1, np.int8), np.zeros(1, np.int8)
    assert shim.lock(region, held) is False and held[0] == 1
    assert _from_another_thread(lambda: int(native._try_into(region, other))) == errno.EBUSY
    assert other[0] == 0
    shim.unlock(region, held)
    assert held[0] == 0
    assert native.lock_into(region, other) is False and other[0] == 1
    assert _from_another_thread(lambda: shim._try(region, held)) == errno.EBUSY
    assert held[0] == 0
    shim.unlock(region, held)  # not taken (held[0] == 0): gives back nothing
    native.unlock_from(region, np.zeros(1, np.int8))  # likewise
    assert _from_another_thread(lambda: shim._try(region, held)) == errno.EBUSY
    native.unlock_from(region, other)
    assert other[0] == 0
    def take_and_give_back():
        got = int(native._try_into(region, other))
        native.unlock_from(region, other)
        return got, int(other[0])
    assert _from_another_thread(take_and_give_back) == (0, 0)


def test_a_lock_owner_that_died_is_told_to_the_next_locker(region, shim_lib):
    """Robust: the next locker gets the mutex, made consistent, and the death notice that
    asks for a reclaim scan."""
    shim = ShimOps()
    pid = os.fork()
    if pid == 0:  # the child takes the mutex and dies holding it
        try:
            shim.lock(region, np.zeros(1, np.int8))
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    held = np.zeros(1, np.int8)
    assert shim.lock(region, held) is True and held[0] == 1 and region[DIED_AT] == 1
    shim.unlock(region, held)
    region[DIED_AT] = 0
    assert shim.lock(region, held) is False  # consistent again: an ordinary lock
    shim.unlock(region, held)


def test_an_arbiter_on_the_shims_rules_takes_no_python_worker(seg, shim_lib):
    with Arbiter(cpus=usable_cpus()[:1], path=seg, ops=ShimOps()) as a:
        job = a.join_job()
        with pytest.raises(ResourceError, match="compiled"):
            a.worker(job)
        a.leave_job(job)
    with Arbiter(cpus=usable_cpus()[:1], path=seg, ops=CompiledOps()) as a:
        job = a.join_job()
        w = a.worker(job)
        w.leave()
        a.leave_job(job)


def test_coop_execs_sweep_of_a_dead_runs_segment_loads_no_numba(seg, shim_lib):
    """coop exec, and its guardian once it is killed, sweep the segment of runs that died
    outright: with the shim's rules, with no numba loaded (the guardian imported it and
    spent ~3 s of a CPU on it after a kill -9: the review)."""
    left = subprocess.run(
        [sys.executable, "-c", "import os, signal\nfrom hybridsched.coop.arbiter import Arbiter\n"
         f"a = Arbiter(path={seg!r}).__enter__()\na.join_job()\n"
         "os.kill(os.getpid(), signal.SIGKILL)"], timeout=300)
    assert left.returncode == -9 and os.path.exists(seg)
    code = ("import sys\nfrom hybridsched.coop.ops import ShimOps\n"
            "from hybridsched.coop.sweep import sweep\n"
            f"sweep({seg!r}, ShimOps())\nprint('numba' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.stdout == "False\n", p.stdout + p.stderr
    assert not os.path.exists(seg) and not os.path.exists(seg + ".lock")
