"""The cooperative arbiter under the limits a shared cluster sets (ulimit): one line and
nothing left behind, never a traceback."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from hybridsched.coop import shimjob
from hybridsched.coop.arbiter import Arbiter
from hybridsched.coop.shimjob import ShimJob
from hybridsched.errors import ResourceError
from hybridsched.oslayer.cpus import usable_cpus

CLI = [sys.executable, "-m", "hybridsched", "coop", "exec"]


def small_files() -> None:
    """ulimit -f 100: no file over 100 KiB (the segment is ~400 KiB)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, 100 * 1024))


def test_a_file_size_limit_below_the_segments_is_one_line(seg, shim_lib, tmp_path):
    """Before: a traceback ending in ftruncate's `File too large`, status 1."""
    p = subprocess.run([*CLI, "--segment", seg, "--", "echo", "ran"], capture_output=True,
                       text=True, timeout=120, preexec_fn=small_files)
    assert p.returncode == 1 and p.stdout == "", p.stderr
    assert p.stderr.startswith(f"hybridsched: error: {os.path.abspath(seg)}: cannot make the "
                               "coop segment ") and p.stderr.count("\n") == 1, p.stderr
    assert "File too large" in p.stderr


def test_a_watchdog_the_os_refuses_is_one_error_and_the_job_is_left(seg, shim_lib,
                                                                    monkeypatch):
    """A limit on processes (ulimit -u, a cgroup's pids.max) refuses the watchdog's thread:
    a ResourceError naming it, the job's row freed. Before: RuntimeError's traceback."""
    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(shimjob._Watchdog, "start", refused)
    with Arbiter(cpus=usable_cpus()[:1], path=seg) as a:
        before = int((a.state.jobs["used"] == 1).sum())  # the arbiter's own row
        with pytest.raises(ResourceError, match="watchdog thread"):
            with ShimJob(a):
                pass
        assert int((a.state.jobs["used"] == 1).sum()) == before


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    """The XDG spec: a relative path in XDG_CACHE_HOME is invalid, to be ignored. Taken as
    given, the shim's build linked in another folder and failed with the linker's message,
    leaving ./rel/hybridsched behind (the hostile review)."""
    from hybridsched.coop import shimbuild

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    assert shimbuild.cache_dir() == str(tmp_path / ".cache" / "hybridsched")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert shimbuild.cache_dir() == str(tmp_path / "abs" / "hybridsched")


def test_a_wake_up_the_arbiters_mutex_never_got_does_not_hang_its_waiter(seg, shim_lib):
    """The mutex's word freed and its waiter never woken, as when the unlocker is stopped
    by its tracer between the two (strace -f stops that FUTEX_WAKE): a command starting
    meanwhile, asleep on the word, takes the mutex at its next look (LOCK_LOOK_NS), where
    it slept for ever (a tracer waiting there for the tracee it alone could continue: 4
    runs in 6 of strace -f of a 16-thread mutex loop inside the job hung; the second
    hostile review). The unlocker that never wakes is a process of its own: a robust mutex
    taken and never given back stays on its taker's list of them, which glibc writes
    through at the next one it takes, into a segment unmapped by then (this test's first
    version crashed the next test of its pytest worker)."""
    import ctypes

    from waiting import wait_until

    with Arbiter(cpus=usable_cpus()[:1], path=seg) as a, ShimJob(a) as job:
        base = ctypes.addressof(ctypes.c_char.from_buffer(a._map))
        offset = a.state.lock.ctypes.data - base  # glibc's mutex begins with its word
        holder = subprocess.Popen([sys.executable, "-c", _NEVER_WAKES, seg, str(offset)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p = None
        try:
            assert holder.stdout.readline() == "locked\n"
            p = subprocess.Popen(["sh", "-c", "echo started"], env=dict(os.environ, **job.env()),
                                 stdout=subprocess.PIPE, text=True)
            word = ctypes.c_int32.from_address(base + offset)
            wait_until(lambda: word.value & 0x80000000 or p.poll() is not None,
                       what="the command to wait for the arbiter's mutex")
            assert p.poll() is None, "the command did not wait for the mutex"
            holder.stdin.write("free\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "freed\n"
            out = p.communicate(timeout=120)[0]
        finally:
            for q in (p, holder):
                if q is not None:
                    q.kill()
                    q.wait()
    assert p.returncode == 0 and out == "started\n"


# takes the arbiter's mutex (argv: the segment, the mutex's offset), then, told to, frees
# its word without waking anyone
_NEVER_WAKES = """
import ctypes, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 0)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m)) + int(sys.argv[2])
assert ctypes.CDLL(None).pthread_mutex_lock(ctypes.c_void_p(addr)) == 0
print("locked", flush=True)
sys.stdin.readline()
ctypes.c_int32.from_address(addr).value = 0
print("freed", flush=True)
sys.stdin.readline()
"""
