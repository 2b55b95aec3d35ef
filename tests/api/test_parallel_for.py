"""The public API (issue 12 items 1-2): parallel_for with a user numba kernel and a Python
kernel on every backend, correct results and a complete trace; a non-shared array on a
fork or pipe backend is copied back or refused, never silently wrong; shared_array runs in
place; verifiers, failures and study files; the README example runs."""
from __future__ import annotations

import os
import re
import warnings

import numba
import numpy as np
import pytest

import hybridsched
from hybridsched.core import registry
from hybridsched.api import RunFailed, write_study
from hybridsched.errors import UsageError
from hybridsched.records import TRACE_DTYPE, WORKER_DTYPE
from hybridsched.oslayer.cpus import n_cpus
from hybridsched.store import read_detail, read_runs
from hybridsched.workloads.kernelref import GILWarning
from repo import ROOT



@numba.njit(nogil=True, cache=True)
def nb_task(task):
    for i in range(task.shape[0]):
        task[i] = task[i] * 2.0 + 1.0


@numba.njit(nogil=True, cache=True)
def nb_chunk(data, first, count):
    for t in range(first, first + count):
        for i in range(data.shape[1]):
            data[t, i] = data[t, i] * 2.0 + 1.0


def py_task(task):
    task *= 2.0
    task += 1.0


def expected(orig):
    return orig * 2.0 + 1.0


def check(orig, result):
    return bool(np.array_equal(result, expected(orig)))


def fresh(n=37, w=3):
    return np.arange(n * w, dtype=np.float64).reshape(n, w)


def assert_trace_complete(res, n):
    """Every task ran exactly once, each chunk by a worker of the table."""
    t = res.trace
    assert t.dtype == TRACE_DTYPE and res.workers.dtype == WORKER_DTYPE
    covered = np.zeros(n, np.int64)
    for row in t:
        covered[row["first"]:row["first"] + row["count"]] += 1
    assert (covered == 1).all(), covered
    assert set(t["worker"]) <= set(res.workers["worker"])
    assert res.workers["frames"].sum() == n
    assert (t["end"] >= t["start"]).all()


SCHEDULERS = registry.names()


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("kernel", [nb_task, nb_chunk, py_task], ids=["numba-task", "numba-chunk", "python"])
def test_every_backend_correct_and_traced(scheduler, kernel, no_leaks):
    data = fresh()
    orig = data.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GILWarning)
        res = hybridsched.parallel_for(kernel, data, scheduler=scheduler, k=2, verify=check)
    assert np.array_equal(data, expected(orig))  # written back into the caller's array
    assert res.verified is True and res.time_s > 0 and not res.error
    assert_trace_complete(res, len(data))
    assert len(res.workers) == (1 if scheduler == "serial" else
                                registry.get(scheduler).workers(2, n_cpus()))


def test_python_kernel_warns_on_threads_only():
    with pytest.warns(GILWarning, match="hold the GIL"):
        hybridsched.parallel_for(py_task, fresh(), scheduler="dynamic", k=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GILWarning)
        hybridsched.parallel_for(py_task, fresh(), scheduler="prolific", k=2)
        hybridsched.parallel_for(nb_task, fresh(), scheduler="dynamic", k=2)


def test_numba_kernel_without_nogil_warns():
    f = numba.njit(lambda task: None)
    with pytest.warns(GILWarning, match="nogil"):
        hybridsched.parallel_for(numba.njit(lambda d, a, n: None), fresh(), scheduler="guided", k=2)
    hybridsched.parallel_for(f, fresh(), scheduler="serial")


@pytest.mark.parametrize("scheduler", ["prolific", "collective", "pipe-1to1", "pipe-1toN", "pipe-MtoM"])
def test_private_array_on_forks_is_copied_back_or_refused(scheduler, no_leaks):
    data = fresh()
    orig = data.copy()
    assert not hybridsched.is_shared(data)
    with pytest.raises(UsageError, match="shared_array"):
        hybridsched.parallel_for(nb_task, data, scheduler=scheduler, k=2, copy=False)
    assert np.array_equal(data, orig)  # refused: nothing ran
    hybridsched.parallel_for(nb_task, data, scheduler=scheduler, k=2)
    assert np.array_equal(data, expected(orig))  # copied into a segment and back


@pytest.mark.parametrize("scheduler", ["prolific", "pipe-MtoM", "dynamic"])
def test_shared_array_runs_in_place(scheduler, no_leaks):
    with hybridsched.shared_array((25, 4), np.float32) as a:
        assert a.dtype == np.float32 and a.shape == (25, 4) and not a.any()
        assert hybridsched.is_shared(a) and hybridsched.is_shared(a[5:])
        a[:] = np.arange(100, dtype=np.float32).reshape(25, 4)
        orig = a.copy()
        res = hybridsched.parallel_for(nb_task, a, scheduler=scheduler, k=2, copy=False,
                                       verify=lambda o, r: bool(np.array_equal(r, o * 2 + 1)))
        assert res.verified and np.array_equal(a, orig * 2 + 1)
    assert not hybridsched.is_shared(orig)


def test_one_dimensional_tasks_are_written_in_place():
    data = np.arange(11.0)
    hybridsched.parallel_for(nb_task, data, scheduler="prolific", k=2)
    assert np.array_equal(data, np.arange(11.0) * 2 + 1)


def test_builtin_sort_kernel_default_check(no_leaks):
    from hybridsched import kernels

    t = np.zeros((9, 3, 40), np.uint8)
    kernels.generate_frames(t, 5, 0)
    res = hybridsched.parallel_for("quicksort", t, scheduler="pipe-1to1", k=2)
    assert res.verified is True and res.record.bad_rows == 0
    assert (np.diff(t.astype(int), axis=-1) >= 0).all()
    with pytest.raises(UsageError, match="uint8"):
        hybridsched.parallel_for("counting", fresh(), scheduler="dynamic", k=2)


def test_no_verifier_means_unverified_not_failed():
    res = hybridsched.parallel_for(nb_task, fresh(), scheduler="dynamic", k=2)
    assert res.verified is None and res.record.config.verify == "none"
    assert res.record.bad_rows == -1


def test_rejecting_verifier_and_raising_kernel_fail_the_run(no_leaks):
    with pytest.raises(RunFailed, match="did not verify") as e:
        hybridsched.parallel_for(nb_task, fresh(), scheduler="guided", k=2, verify=lambda o, r: False)
    assert e.value.result.verified is False
    res = hybridsched.parallel_for(nb_task, fresh(), scheduler="guided", k=2,
                                   verify=lambda o, r: False, check=False)
    assert res.verified is False

    def boom(data, first, count):
        raise ValueError("boom in kernel")
    for s in ("serial", "dynamic", "prolific", "pipe-1toN"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GILWarning)
            with pytest.raises(RunFailed, match="boom in kernel"):
                hybridsched.parallel_for(boom, fresh(), scheduler=s, k=2)


@pytest.mark.parametrize("bad, match", [
    (lambda: hybridsched.parallel_for(nb_task, np.zeros((0, 2))), "at least one task"),
    (lambda: hybridsched.parallel_for(nb_task, [1, 2, 3]), "numpy array"),
    (lambda: hybridsched.parallel_for(lambda a, b: None, fresh()), "takes 2 arguments"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), scheduler="nosuch"), "unknown scheduler"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), k=0), "from 1 to"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), k=10**6), "from 1 to"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), chunk=-1), "chunk must be"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), scheduler="pipe-1to1", chunk=-3), "auto"),
    (lambda: hybridsched.parallel_for("nosuchmod:f", fresh()), "cannot import"),
    (lambda: hybridsched.parallel_for(nb_task, fresh(), verify=3), "verify"),
])
def test_bad_calls_are_one_usage_error(bad, match):
    with pytest.raises(UsageError, match=match):
        bad()


def test_pipe_chunk_auto_searches_and_stays_correct(no_leaks):
    data = fresh(60)
    orig = data.copy()
    res = hybridsched.parallel_for(nb_task, data, scheduler="pipe-1to1", k=2, chunk=-1, verify=check)
    assert res.verified and res.record.chunk_used >= 1 and np.array_equal(data, expected(orig))


def test_read_only_array_refused():
    data = fresh()
    data.flags.writeable = False
    with pytest.raises(UsageError, match="read-only"):
        hybridsched.parallel_for(nb_task, data)


def test_kernel_that_does_not_compile_is_one_usage_error():
    @numba.njit(nogil=True)
    def wrong(data, first, count):
        data.no_such_attribute()
    with pytest.raises(UsageError, match="does not compile"):
        hybridsched.parallel_for(wrong, fresh(), scheduler="dynamic", k=2)


def test_results_write_a_study_the_report_reads(tmp_path, no_leaks):
    from hybridsched.results.data import load_study
    from hybridsched.results.report import build_report

    results = [hybridsched.parallel_for(nb_task, fresh(), scheduler=s, k=2, verify=check, rep=0)
               for s in ("serial", "dynamic", "prolific")]
    out = str(tmp_path / "api.h5")
    write_study(out, results)
    runs = read_runs(out)
    assert list(runs["scheduler"]) == ["serial", "dynamic", "prolific"]
    assert (runs["workload"] == "user").all() and runs["verified"].all()
    assert runs["kernel"][0].endswith("nb_task") and runs["input_hash"][0].startswith("sha256:")
    d = read_detail(out, int(runs["run_id"][1]))
    assert np.array_equal(d.trace["count"], results[1].trace["count"])
    with pytest.raises(UsageError, match="exists"):
        results[0].save(out)
    import pickle

    for again in (results[1], pickle.loads(pickle.dumps(results[1]))):  # would count twice
        with pytest.raises(UsageError, match="more than once"):
            write_study(str(tmp_path / "twice.h5"), [results[1], again])
    assert not os.path.exists(tmp_path / "twice.h5")
    text, _ = build_report(load_study(out), None, plots=False)
    assert "## Tasks" in text and "workload `user`" in text


def test_readme_example_runs(tmp_path, monkeypatch, no_leaks):
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README has no API example marked <!-- api-example -->"
    monkeypatch.chdir(tmp_path)
    exec(compile(m.group(1), "README.md", "exec"), {"__name__": "readme_example"})


@pytest.mark.parametrize("shape, dtype, want", [(7, "i4", (7,)), ([3, 2], np.uint8, (3, 2)),
                                                ((0, 4), "f8", (0, 4))])
def test_shared_array_shapes(shape, dtype, want, no_leaks):
    with hybridsched.shared_array(shape, dtype) as a:
        assert a.shape == want and a.dtype == np.dtype(dtype)


@pytest.mark.parametrize("shape, dtype", [((-1, 2), "f8"), ((2,), object), ("x", "f8")])
def test_shared_array_refuses(shape, dtype):
    with pytest.raises(UsageError, match="shared_array"):
        with hybridsched.shared_array(shape, dtype):
            pass


def test_an_object_array_is_refused_with_one_error():
    import hybridsched
    from hybridsched.errors import UsageError

    with pytest.raises(UsageError, match="object arrays"):
        hybridsched.parallel_for(lambda task: None, np.array([[1], [2]], dtype=object),
                                 scheduler="prolific", k=2)


@pytest.mark.parametrize("chunk", [2**62, 2**63 - 1], ids=["2^62", "2^63-1"])
@pytest.mark.parametrize("scheduler,dispatch", [
    ("dynamic", "auto"), ("dynamic", "python"), ("chunk", "compiled"), ("static", "auto"),
    ("guided", "auto"), ("chunk-steal", "auto"), ("fac2", "auto"), ("prolific", "auto"),
    ("pipe-1toN", "auto"), ("pipe-MtoM", "auto")])
def test_a_chunk_near_2_63_runs_every_task_once(scheduler, dispatch, chunk, no_leaks):
    """Issue 33 item 3: a chunk above N is cut to N (numpy's floating-point arange length
    made the compiled hand-out empty, and the untouched data went back as a normal run)."""
    data = fresh()
    orig = data.copy()
    res = hybridsched.parallel_for(nb_chunk, data, scheduler, k=2, chunk=chunk, verify=check,
                                   dispatch=dispatch)
    assert res.verified is True and np.array_equal(data, expected(orig))
    assert_trace_complete(res, len(data))
    assert res.record.chunk_used <= len(data)


def test_a_hand_out_that_misses_a_task_fails_the_run_before_it_is_used(monkeypatch, no_leaks):
    """The compiled loop's boundaries are checked to cover [0, N) once before any claim."""
    from hybridsched.core import policies as pol

    monkeypatch.setattr(pol, "fixed_bounds", lambda n, c: np.array([0, 1, 3, n - 1], np.int64))
    data = fresh()
    with pytest.raises(RunFailed, match="does not cover the 37 tasks exactly once"):
        hybridsched.parallel_for(nb_chunk, data, "dynamic", k=2, chunk=1, verify="none",
                                 dispatch="compiled")
    assert np.array_equal(data, fresh())  # nothing ran


def test_chunks_that_ran_are_checked_even_without_verification(monkeypatch, no_leaks):
    """A dispenser that skips a chunk fails the run although --verify none checks nothing."""
    from hybridsched.core import dispatch as disp

    real = disp.TicketCounter.claim

    def skipping(self, w):
        got = real(self, w)
        return real(self, w) if got is not None and got[0] == 2 * self.c else got
    monkeypatch.setattr(disp.TicketCounter, "claim", skipping)
    res = hybridsched.parallel_for(nb_chunk, fresh(), "dynamic", k=2, chunk=2, verify="none",
                                   dispatch="python", check=False)
    assert not res.record.verified and "2 never ran" in res.error, res.error


def test_parallel_for_calls_share_no_learned_state_unless_given_one_memory(monkeypatch, no_leaks):
    """Issue 36 item 3: what a loop learns (auto's race, AWF's weights) belongs to the call,
    or to the `hybridsched.Memory` a caller passes on to the next call."""
    from hybridsched.core.memory import Memory
    from hybridsched.core.techniques.auto import PORTFOLIO
    from hybridsched.study import resources

    made: list[Memory] = []
    monkeypatch.setattr(resources, "Memory", lambda: made.append(Memory()) or made[-1])
    alone = [hybridsched.parallel_for(nb_task, fresh(40), scheduler=s, k=2)
             for s in ("auto", "auto", "awf", "awf")]
    # each call races from the start and starts AWF's weights afresh
    assert [r.record.technique for r in alone[:2]] == [PORTFOLIO[0]] * 2
    assert len(made) == 4 and len({id(m) for m in made}) == 4
    assert [len(m.racers) for m in made] == [1, 1, 0, 0]
    assert [[h.step for h in m.histories.values()] for m in made[2:]] == [[1], [1]]

    mem = hybridsched.Memory()
    shared = [hybridsched.parallel_for(nb_task, fresh(40), scheduler=s, k=2, memory=mem)
              for s in ("auto", "auto", "auto", "awf", "awf")]
    assert len(made) == 4  # a memory given is used, none is made
    assert [r.record.technique for r in shared[:3]] == list(PORTFOLIO[:3])  # the race goes on
    assert len(mem.racers) == 1 and [h.step for h in mem.histories.values()] == [2]
    assert all(r.verified is None for r in alone + shared)
    with pytest.raises(UsageError, match="memory: expected a hybridsched.Memory or None, got dict"):
        hybridsched.parallel_for(nb_task, fresh(), scheduler="auto", memory={})


def _zeroes_the_original(o, r):
    o[...] = 0
    return True


def _exits(o, r):
    raise SystemExit(4)


@pytest.mark.parametrize("verify, says", [
    (_zeroes_the_original, "read-only"),     # it had made every later run's input zeros
    (lambda o, r: "no", "not True or False"),  # truthy text counted as verified
    (_exits, "SystemExit"),                  # it ended the command with its status
])
def test_a_verifier_that_misbehaves_leaves_the_run_unverified(verify, says, capsys, no_leaks):
    res = hybridsched.parallel_for(nb_task, fresh(), scheduler="dynamic", k=2, verify=verify,
                                   check=False)
    assert res.verified is False and says in capsys.readouterr().err


class _NotAnException(BaseException):
    pass


def _raises_base(data, first, count):
    raise _NotAnException("mine")


def test_a_base_exception_of_user_code_fails_the_run_not_the_caller(no_leaks):
    """A serial kernel raising a BaseException that is not an Exception (one of its own)
    went through as a traceback (hostile review; a technique's: test_user_techniques)."""
    res = hybridsched.parallel_for(_raises_base, fresh(), scheduler="serial", verify="none",
                                   check=False)
    assert res.verified is False and "_NotAnException" in res.record.error


def _terminated(o, r):
    from hybridsched.errors import Terminated
    raise Terminated(143)


def test_sigterm_inside_a_verifier_ends_the_call(no_leaks):
    """A verifier's own exceptions leave its run unverified, but not our SIGTERM (Terminated)
    arriving while it runs: that ends the study, as it does anywhere else."""
    from hybridsched.errors import Terminated

    with pytest.raises(Terminated):
        hybridsched.parallel_for(nb_task, fresh(), scheduler="dynamic", k=2, verify=_terminated,
                                 check=False)


def test_a_strided_input_is_hashed_without_a_whole_copy():
    """The input's digest (stored with the run) of a strided view equals its contiguous
    copy's, and is taken piece by piece: a whole contiguous copy doubled the memory of a
    huge strided view."""
    import tracemalloc

    from hybridsched import api

    base = np.arange(2 * 4096 * 1024, dtype=np.float64).reshape(2 * 4096, 1024)  # 64 MiB
    view = base[::2]  # 32 MiB, every other frame
    tracemalloc.start()
    try:
        digest = api._digest(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < view.nbytes * 3 // 4, peak  # one piece (16 MiB), not the whole (32 MiB)
    assert digest == api._digest(np.ascontiguousarray(view))
    assert api._digest(base[:, ::3]) == api._digest(np.ascontiguousarray(base[:, ::3]))
    assert api._digest(np.arange(10)[::2]) == api._digest(np.arange(0, 10, 2))
