"""Compiled dispatch (issue 12 item 5): the GIL-free claim-run-record loop hands out exactly
the chunks of the Python dispensers, records a complete trace on any shape, fails a run
naming the worker when a numba kernel raises, stops on Ctrl-C, and leaves Python kernels,
feedback and preassigned policies and --dispatch python on the Python loop."""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched import cli, kernels
from hybridsched.core import registry
from hybridsched.core.capabilities import decide
from hybridsched.backends.base import job_for
from hybridsched.core import policies as pol
from hybridsched.backends import compiled, threads
from hybridsched.errors import BrokenRun, UsageError
from hybridsched.oslayer import native
from hybridsched.records import parse_params
from hybridsched.store import read_detail, read_runs
from hybridsched.study.runner import timed_run
from hybridsched.study.spec import StudySpec
from hybridsched.workloads.slab import Slab
from schedcheck import ODD_SHAPES, Shape, check_coverage, check_record, config, run, run_and_check

SEQUENCED = [n for n, i in registry.SCHEDULERS.items() if i.sequence is not None]


def python_hand_out(info, n: int, workers: int, chunk: int) -> list[tuple[int, int]]:
    """The chunks the scheduler's Python dispenser hands out, claimed by workers in turn."""
    disp = info.dispenser(n, workers, chunk, None)
    out, w = [], 0
    while (c := disp.claim(w)) is not None:
        out.append(c)
        w = (w + 1) % workers
    return out


def chunks_of(bounds: np.ndarray) -> list[tuple[int, int]]:
    return [(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]


@numba.njit(nogil=True, cache=True)
def mark(data, first, count):
    """A chunk kernel over a 1-D array: every task it runs is counted once."""
    for i in range(first, first + count):
        data[i] += 1


@numba.njit(nogil=True, cache=True)
def raising(t, first, count):
    for f in range(first, first + count):
        if f == 5:
            raise ValueError("frame 5 is bad")
    kernels.quicksort_frames(t, first, count)


@numba.njit(nogil=True, cache=True)
def slow_sort(t, first, count):
    """quicksort_frames plus ~1 ms of spinning per frame: long enough that stopping early
    shows, with no sleeping (the worker keeps its CPU, as a real kernel would)."""
    for f in range(first, first + count):
        t0 = native.monotonic_ns()
        while native.monotonic_ns() - t0 < 1_000_000:
            pass
    kernels.quicksort_frames(t, first, count)


# --- the hand-out --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEQUENCED), st.integers(1, 3000), st.integers(1, 70), st.integers(0, 400))
def test_sequence_is_the_python_dispensers_hand_out(name, n, workers, chunk):
    info = registry.get(name)
    c = info.resolve_chunk(chunk, n)
    bounds = info.sequence(n, workers, c)
    assert bounds.dtype == np.int64 and bounds[0] == 0 and bounds[-1] == n
    assert chunks_of(bounds) == python_hand_out(info, n, workers, c)
    # and the compiled dispenser's ticket sequence, claimed from Python, is the same
    tickets = compiled.CompiledTickets(bounds)
    assert list(iter(lambda: tickets.claim(0), None)) == chunks_of(bounds)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 400))
def test_fixed_bounds_is_fcfs_bounds_of_dynamic_size(n, c):
    assert np.array_equal(pol.fixed_bounds(n, c),
                          pol.fcfs_bounds(n, lambda rem: pol.dynamic_size(rem, 1, c)))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SEQUENCED), st.integers(1, 500), st.integers(1, 9), st.integers(0, 40))
def test_compiled_loop_on_threads_runs_every_chunk_of_the_hand_out_once(name, n, workers, chunk):
    info = registry.get(name)
    c = info.resolve_chunk(chunk, n)
    tickets = compiled.CompiledTickets(info.sequence(n, workers, c), workers)
    data = np.zeros(n, np.int64)
    run_w = tickets.runner(mark, data)
    ts = [threading.Thread(target=run_w, args=(w,)) for w in range(workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert (data == 1).all()
    trace = tickets.trace()
    assert sorted(zip(trace["first"].tolist(), trace["count"].tolist())) == \
        python_hand_out(info, n, workers, c)
    assert set(trace["worker"].tolist()) <= set(range(workers))
    assert (trace["start"] <= trace["end"]).all() and (np.diff(trace["start"]) >= 0).all()


def test_the_clock_is_perf_counters():
    @numba.njit(nogil=True)
    def now():
        return native.monotonic_ns()

    now()
    a = time.perf_counter()
    t = now() / 1e9
    b = time.perf_counter()
    assert a <= t <= b


# --- through the backend ---------------------------------------------------------------------


def _compiled_cfg(scheduler: str, shape: Shape, kernel: str = "quicksort"):
    return replace(config(scheduler, shape, kernel=kernel), dispatch="compiled")


@pytest.mark.parametrize("shape", ODD_SHAPES + [Shape("k>L", 2, 1, 4, 7)], ids=str)
@pytest.mark.parametrize("scheduler", SEQUENCED)
def test_compiled_runs_on_odd_shapes(scheduler, shape):
    cfg = _compiled_cfg(scheduler, shape)
    rec, ok = run(cfg)
    check_record(rec, cfg, ok)  # sorted, every frame once, worker table matches the trace
    assert rec.notes == compiled.NOTE


@pytest.mark.parametrize("scheduler", SEQUENCED)
def test_compiled_and_python_hand_out_the_same_chunks(scheduler):
    shape = Shape("same", 157, 1, 8, 3, chunk=0)
    got = {}
    for mode in ("compiled", "python"):
        rec, ok = run(replace(config(scheduler, shape), dispatch=mode))
        assert ok and rec.verified and not rec.error
        got[mode] = sorted(zip(rec.trace["first"].tolist(), rec.trace["count"].tolist()))
        assert rec.notes == (compiled.NOTE if mode == "compiled" else "")
    assert got["compiled"] == got["python"]


@pytest.mark.parametrize("scheduler,params", [("fiss", "fiss_stages=3"), ("pls", "pls_swr=0.8"),
                                              ("viss", "viss_param=5")])
def test_a_technique_with_parameters_hands_out_the_same_chunks_compiled(scheduler, params):
    """The compiled bounds are built with the run's technique parameters, not the defaults."""
    shape = Shape("params", 211, 1, 8, 3, chunk=0)
    got = {}
    for mode in ("compiled", "python"):
        rec, ok = run(replace(config(scheduler, shape), dispatch=mode, params=parse_params(params)))
        assert ok and rec.verified and not rec.error
        got[mode] = sorted(zip(rec.trace["first"].tolist(), rec.trace["count"].tolist()))
    default, _ = run(replace(config(scheduler, shape), dispatch="python"))
    assert got["compiled"] == got["python"]
    assert got["python"] != sorted(zip(default.trace["first"].tolist(),
                                       default.trace["count"].tolist()))  # the parameter acts


def test_auto_is_compiled_for_sequenced_policies_with_a_numba_kernel():
    for name in SEQUENCED:
        rec = run_and_check(name, Shape("auto", 20, 1, 4, 2))
        assert rec.notes == compiled.NOTE


@pytest.mark.parametrize("scheduler,kernel", [
    ("dynamic", "numpy"),          # a Python kernel
    ("adaptive", "quicksort"),     # a feedback policy
    ("aimd", "quicksort"),
    ("static", "quicksort"),       # preassigned
    ("chunk-steal", "quicksort"),
])
def test_fallback_to_the_python_loop(scheduler, kernel):
    rec = run_and_check(scheduler, Shape("fb", 30, 1, 8, 3), kernel=kernel)
    assert compiled.NOTE not in rec.notes


def test_dispatch_python_keeps_the_python_loop():
    rec, ok = run(replace(config("dynamic", Shape("py", 30, 1, 8, 3)), dispatch="python"))
    assert ok and rec.verified and rec.notes == ""


def test_dispatch_compiled_refuses_what_cannot_be_compiled():
    # at the study's validation: one line before anything runs
    with pytest.raises(UsageError, match="static.*cannot run compiled"):
        StudySpec(["dynamic", "static"], [2], [10], 2, 4, dispatch="compiled").validate()
    with pytest.raises(UsageError, match="not a numba function"):
        StudySpec(["dynamic"], [2], [10], 2, 4, kernel="numpy", dispatch="compiled").validate()
    with pytest.raises(UsageError, match="--dispatch must be one of"):
        StudySpec(["dynamic"], [2], [10], 2, 4, dispatch="fast").validate()
    StudySpec(["dynamic", "prolific"], [2], [10], 2, 4, dispatch="compiled").validate()
    # at run time (a kernel not known to the spec): a failed run, not a wrong one
    rec, _ = run(replace(config("dynamic", Shape("rt", 10, 1, 4, 2), kernel="numpy"), dispatch="compiled"))
    assert not rec.verified and "--dispatch compiled" in rec.error


def test_one_rule_decides_how_every_configuration_dispatches():
    """capabilities.decide, which the backend, the simulator, the API and the spec call:
    compiled exactly for a fixed hand-out on threads with a numba kernel and no --coop
    (whether the dispenser also takes chunk reports does not matter), refused only where
    compiled was asked of a thread scheduler that cannot, delegated only by a chooser."""
    seen = set()
    for info in registry.SCHEDULERS.values():
        for mode in ("auto", "python", "compiled"):
            for numba_kernel in (True, False):
                for coop in (True, False):
                    d = decide(info, mode, numba=numba_kernel, coop=coop)
                    able = info.threaded and info.sequence is not None and numba_kernel and not coop
                    assert d.compiled == (able and mode != "python"), (info.name, mode)
                    assert d.refused == (mode == "compiled" and info.threaded and not able)
                    assert d.refused <= bool(d.why) and (d.why == "") == (d.reason is None)
                    assert d.delegates == (info.chooses and mode == "auto" and numba_kernel
                                           and not coop and not able)
                    seen.add((d.compiled, d.refused, d.delegates))
    assert {(True, False, False), (False, True, False), (False, False, True)} <= seen
    with pytest.raises(UsageError, match="dispatch must be one of auto, python, compiled"):
        decide(registry.get("dynamic"), "fast")


# --- faults ------------------------------------------------------------------------------------


def test_a_raising_kernel_fails_the_run_naming_the_worker(monkeypatch):
    monkeypatch.setitem(kernels.KERNELS, "raising", (raising, "test kernel"))
    cfg = _compiled_cfg("dynamic", Shape("raise", 40, 1, 8, 3), kernel="raising")
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        job = job_for(cfg, slab.work, original=slab.original)
        with pytest.raises(threads.WorkerFailed,
                           match=r"dynamic: worker thread [0-2] raised ValueError: frame 5 is bad") as got:
            threads.execute(job)
        rec = timed_run(slab, cfg)
    assert not rec.verified and "frame 5 is bad" in rec.error
    # a broken run as a lost forked worker is, naming the worker, the exception, its
    # traceback and the loop that ran
    err = got.value
    assert isinstance(err, BrokenRun) and err.scheduler == "dynamic" and err.worker in (0, 1, 2)
    assert err.pid is None and err.exception == "ValueError" and err.signal == ""
    assert "frame 5 is bad" in err.remote_traceback and "Traceback" in err.remote_traceback
    assert err.notes == compiled.NOTE
    assert not [t for t in threading.enumerate() if t.name.startswith("hybridsched-w")]


def test_a_raising_kernel_stops_the_other_workers(monkeypatch):
    @numba.njit(nogil=True)
    def first_fails(t, first, count):
        if first == 0:
            raise ValueError("first chunk")
        slow_sort(t, first, count)

    monkeypatch.setitem(kernels.KERNELS, "ff", (first_fails, "test kernel"))
    cfg = _compiled_cfg("dynamic", Shape("stop", 2000, 1, 32, 2), kernel="ff")
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
        done = int((np.diff(slab.work.astype(np.int16), axis=-1) >= 0).all(axis=(1, 2)).sum())
    assert "first chunk" in rec.error
    assert done < 1000  # ~2 s of work left: the survivor stopped at its next claim


def test_ctrl_c_stops_and_joins_compiled_workers(monkeypatch):
    monkeypatch.setitem(kernels.KERNELS, "slow", (slow_sort, "test kernel"))
    cfg = _compiled_cfg("dynamic", Shape("int", 2000, 1, 32, 3), kernel="slow")
    interrupted = threading.Event()

    def on_sigint(signum, frame):
        interrupted.set()
        raise KeyboardInterrupt

    def sorted_frames(work) -> int:
        return int((np.diff(work.astype(np.int16), axis=-1) >= 0).all(axis=(1, 2)).sum())

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
            def interrupt_once_running():
                # Ctrl-C once the compiled workers have run some chunks (32-byte random rows
                # are never sorted by chance), so the stop has work left to save
                while sorted_frames(slab.work) < 6:
                    time.sleep(0.005)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

            slab.fresh_copy()  # the unsorted input before the watcher looks (timed_run redoes it)
            watcher = threading.Thread(target=interrupt_once_running, daemon=True)
            with pytest.raises(KeyboardInterrupt):
                watcher.start()
                timed_run(slab, cfg)
            watcher.join(10)
            done = sorted_frames(slab.work)
    finally:
        signal.signal(signal.SIGINT, old)
    assert interrupted.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("hybridsched-w")]
    assert 6 <= done < 2000  # stopped early, did not finish the work


def test_stop_ends_every_later_claim():
    tickets = compiled.CompiledTickets(pol.fixed_bounds(100, 1))
    assert tickets.claim(0) == (0, 1)
    tickets.stop()
    assert tickets.claim(0) is None
    data = np.zeros(100, np.int64)
    tickets.runner(mark, data)(0)
    assert data.sum() == 0 and len(tickets.trace()) == 0
    check_coverage(compiled.CompiledTickets(pol.fixed_bounds(0, 1)).trace(), 0)


def test_a_worker_that_draws_every_chunk_grows_its_records():
    # sized for 8 workers' even shares, one worker runs all 1000 chunks
    tickets = compiled.CompiledTickets(pol.fixed_bounds(1000, 1), 8)
    data = np.zeros(1000, np.int64)
    tickets.runner(mark, data)(3)
    trace = tickets.trace()
    assert (data == 1).all() and len(trace) == 1000
    assert (trace["worker"] == 3).all() and trace["first"].tolist() == list(range(1000))


def test_bounds_of_refuses_a_hand_out_with_gaps_or_empty_chunks():
    assert pol.bounds_of([(0, 2), (2, 3)]).tolist() == [0, 2, 5]
    with pytest.raises(ValueError):
        pol.bounds_of([(0, 2), (3, 1)])
    with pytest.raises(ValueError):
        pol.bounds_of([(0, 0)])


# --- the CLI -----------------------------------------------------------------------------------

TINY_RUN = ["-k", "2", "--frames", "12", "--height", "2", "--width", "8", "--reps", "1"]


@pytest.mark.parametrize("override", [
    ["--dispatch", "fast"],
    ["--dispatch", "compiled", "-s", "dynamic,static"],
    ["--dispatch", "compiled", "-s", "guided", "--kernel", "numpy"],
    ["--dispatch", "compiled", "-s", "chunk", "--coop"],
], ids=["unknown", "static", "python-kernel", "coop"])
def test_cli_dispatch_bad_input(tmp_path, monkeypatch, capsys, override):
    monkeypatch.chdir(tmp_path)
    argv = ["run", *TINY_RUN, "--out", str(tmp_path / "x.h5"), *override]
    if "-s" not in override:
        argv += ["-s", "dynamic"]
    rc = cli.main(argv)
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and "Traceback" not in cap.err
    assert len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("hybridsched")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode", ["auto", "python", "compiled"])
def test_cli_dispatch_is_in_the_notes(tmp_path, capsys, mode):
    out = str(tmp_path / "d.h5")
    schedulers = "dynamic,guided,chunk" + (",static,adaptive" if mode != "compiled" else "")
    rc = cli.main(["run", *TINY_RUN, "-s", schedulers, "--dispatch", mode, "--out", out])
    capsys.readouterr()
    assert rc == 0
    runs = read_runs(out)
    assert runs["verified"].all()
    for r in runs:
        compiled_ran = registry.get(str(r["scheduler"])).sequence is not None and mode != "python"
        assert (str(r["notes"]) == compiled.NOTE) == compiled_ran, (r["scheduler"], r["notes"])
        assert read_detail(out, int(r["run_id"]))[1]["count"].sum() == 12


def test_a_kernel_numba_cannot_compile_for_the_data_fails_the_run(monkeypatch):
    @numba.njit("void(float64[::1], int64, int64)", nogil=True)
    def floats_only(a, first, count):
        a[first] = 0.0

    monkeypatch.setitem(kernels.KERNELS, "floats", (floats_only, "test kernel"))
    rec, _ = run(config("dynamic", Shape("sig", 10, 1, 4, 2), kernel="floats"))
    assert not rec.verified and "cannot run on array(uint8, 3d, C)" in rec.error
    assert "\n" not in rec.error
