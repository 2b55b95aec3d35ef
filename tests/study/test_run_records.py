"""What a run records is what happened: the placement a forked worker really had, the
busy and CPU times of thread workers, the compiled entry point the thread backend calls,
the monitor AIMD was given, the foreign load the runner probed. Each of these once had
only a test that a stubbed-out feature still passed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numba
import pytest
from schedcheck import Shape, config, run, run_and_check

from hybridsched import kernels
from hybridsched.workloads.slab import Slab


class Overloaded:
    """A monitor that reads 99 % at once: AIMD must halve at its first completion."""

    value = 0.99

    def __init__(self):
        self.resets = 0

    def reset(self):
        self.resets += 1


def test_aimd_reads_the_monitor_it_is_given():
    mon = Overloaded()
    rec = run_and_check("aimd", Shape("hot", 64, 1, 4, 2), monitor=mon)
    win = rec.series["aimd_window"]
    assert mon.resets == 1                      # timed_run reset it before the run
    assert win["u"][0] == 0.99                  # the gate started from the monitor's U
    assert win["window"][1] == max(1, win["window"][0] // 2)  # overload halves at once


@pytest.mark.parametrize("scheduler", ["prolific", "collective", "pipe-1to1", "pipe-1toN", "pipe-MtoM"])
def test_process_workers_are_really_pinned(monkeypatch, tmp_path, scheduler):
    d = str(tmp_path)

    def probe(t, first, count):  # runs inside the forked worker: its real CPU mask
        with open(os.path.join(d, f"{os.getpid()}"), "w") as fh:
            fh.write(json.dumps(sorted(os.sched_getaffinity(0))))
        t[first:first + count].sort(axis=-1)

    monkeypatch.setitem(kernels.KERNELS, "probe", (probe, "test kernel"))
    rec, ok = run(config(scheduler, Shape("pin", 12, 1, 4, 3), True, kernel="probe"))
    assert ok and rec.verified, rec.error
    seen = 0
    for row in rec.workers:
        if row["chunks"]:
            with open(os.path.join(d, str(int(row["pid"])))) as fh:
                assert json.load(fh) == [int(row["cpu"])], (row["worker"], row["cpu"])
            seen += 1
    assert seen >= 1  # a shared pipe may feed one early worker everything


def test_thread_worker_busy_and_cpu_time_are_measured():
    rec = run_and_check("dynamic", Shape("busy", 40, 64, 640, 2))
    w, t = rec.workers, rec.trace
    for row in w:
        mine = t[t["worker"] == row["worker"]]
        assert row["busy"] == pytest.approx(float((mine["end"] - mine["start"]).sum()))
        if row["chunks"]:  # each chunk is ms of sorting: CPU time must show up, within the lifetime
            assert 0 < row["user"] + row["system"] <= row["end"] - row["start"] + 0.01


@pytest.mark.parametrize("name", ["quicksort", "counting"])
def test_direct_entry_is_the_compiled_entry_point(name):
    kernels.prepare(name)
    kernel = kernels.get_kernel(name)
    with Slab(5, 3, 17, seed=3) as slab:
        sig = (numba.typeof(slab.work), numba.types.int64, numba.types.int64)
        assert kernels.direct_entry(kernel, slab.work) is kernel.overloads[sig].entry_point


def test_prepare_compiles_in_a_fresh_process():
    code = ("from hybridsched import kernels as K\n"
            "K.prepare()\n"
            "fns = [K.get_kernel(n) for n in K.KERNELS] + [K.generate_frames, K.count_bad_rows]\n"
            "jit = [f for f in fns if hasattr(f, 'signatures')]\n"
            "print(len(jit) >= 3 and all(len(f.signatures) > 0 for f in jit))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True"


def test_foreign_load_is_what_the_probe_measured(monkeypatch):
    from hybridsched.study import runner

    class Probe:
        def __init__(self, cpus):
            pass

        def share(self):
            return 0.4242

    monkeypatch.setattr(runner, "ForeignLoad", Probe)
    rec, _ = run(config("dynamic", Shape("f", 6, 1, 4, 2)))
    assert rec.extra["foreign_cpu"] == 0.4242


PAPER = ["serial", "static", "dynamic", "guided", "chunk", "chunk-steal", "aimd", "adaptive",
         "prolific", "collective", "pipe-1to1", "pipe-1toN", "pipe-MtoM"]


def test_the_paper_set_is_the_papers_13():
    """Written out here, not read from the registry under test (DESIGN.md §6)."""
    from hybridsched.core import registry

    assert registry.paper_names() == PAPER
    fam = {n: registry.get(n).family for n in PAPER}
    assert [n for n in PAPER if fam[n] == "process"] == ["prolific", "collective"]
    assert [n for n in PAPER if fam[n] == "pipe"] == ["pipe-1to1", "pipe-1toN", "pipe-MtoM"]


def test_progress_advances_by_each_runs_expected_work():
    """A big run (10x the frames) moves the bar ten times as far as a small one."""
    import io

    from hybridsched.study.progress import Progress, run_cost
    from hybridsched.records import RunConfig

    class Tty(io.StringIO):
        def isatty(self):
            return True

    small = RunConfig("dynamic", 2, 10, 8, 8, rep=0)
    big = RunConfig("dynamic", 2, 100, 8, 8, rep=0)
    assert run_cost(big, 2) == 10 * run_cost(small, 2)
    stream = Tty()
    with Progress([big, small], n=2, reps=1, stream=stream) as p:
        p.start(big)
        p.done(big)
        assert p.bar.n == run_cost(big, 2)
        assert p.bar.n / p.bar.total == pytest.approx(10 / 11)
        p.start(small)
        p.done(small)
    assert "100%" in stream.getvalue()
