"""Process and pipe schedulers: correctness on odd shapes, fault handling, no leaks."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
from schedcheck import ODD_SHAPES, Shape, check_coverage, config, run_and_check

from hybridsched.core import policies as pol
from hybridsched.core import registry
from hybridsched.backends import Job, forks, get_backend
from hybridsched.backends.base import job_for
from hybridsched.errors import BrokenRun, WorkerLost
from hybridsched.cli import main
from hybridsched.oslayer.proctree import FAULT_ENV, fault_plan
from hybridsched.study.runner import timed_run
from hybridsched.workloads.slab import Slab
from hybridsched.oslayer.shm import our_shm_entries, sweep_orphans
from waiting import cpu_seconds, default_sigint

PROCESS = ["prolific", "collective"]
PIPES = ["pipe-1to1", "pipe-1toN", "pipe-MtoM"]
ALL = PROCESS + PIPES


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
@pytest.mark.parametrize("scheduler", ALL)
def test_sorts_and_verifies_odd_shapes(scheduler, shape):
    run_and_check(scheduler, shape)


@pytest.mark.parametrize("scheduler", ALL)
def test_unbounded_variant_without_affinity(scheduler):
    rec = run_and_check(scheduler, Shape("unpinned", 17, 2, 16, 3, chunk=2), affinity=False)
    assert (rec.workers["cpu"] == -1).all()


@pytest.mark.parametrize("scheduler", PIPES)
def test_pipe_chunk_is_frames_per_message(scheduler):
    rec = run_and_check(scheduler, Shape("c4", 23, 2, 8, 3, chunk=4))
    counts = sorted(rec.trace["count"].tolist())
    assert rec.chunk_used == 4 and max(counts) == 4 and sum(counts) == 23
    assert counts.count(3) == 1  # 23 = 5 x 4 + 3: the last message is short


@pytest.mark.parametrize("scheduler", PIPES)
def test_chunk_auto_searches_and_records_the_chunk(scheduler):
    cfg = config(scheduler, Shape("auto", 40, 2, 32, 3, chunk=pol.AUTO_CHUNK))
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
    assert rec.verified and not rec.error, rec.error
    assert rec.config.chunk == pol.AUTO_CHUNK
    assert f"auto chunk={rec.chunk_used}" in rec.notes
    tried = [int(c) for c in re.findall(r"(\d+):", rec.notes.split("ms per size", 1)[1])]
    assert tried[0] == 1 and rec.chunk_used in tried  # the search starts at 1
    assert 1 <= rec.chunk_used <= max(pol.chunk_candidates(40, 3))
    assert rec.trace["count"].max() == rec.chunk_used


def test_chunk_candidates():
    assert pol.chunk_candidates(1000, 24) == [1, 2, 4, 8, 16, 32, 42]
    assert pol.chunk_candidates(10, 1) == [10]
    assert pol.chunk_candidates(3, 5) == [1]
    assert pol.chunk_refinements(16, 1000, 24, [1, 2, 4, 8, 16, 32, 42]) == [12, 24]


def test_chunk_auto_rejected_for_non_pipe_schedulers(capsys, tmp_h5):
    rc = main(["run", "-s", "pipe-MtoM,prolific", "--chunk", "auto", "-L", "4", "-k", "2",
               "--height", "2", "--width", "4", "-o", tmp_h5])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "auto" in err and "prolific" in err
    assert not os.path.exists(tmp_h5)


def test_chunk_list_accepts_auto_and_sizes(capsys, tmp_h5):
    rc = main(["run", "-s", "pipe-1to1", "--chunk", "auto,3", "-L", "9", "-k", "2",
               "--height", "2", "--width", "8", "--reps", "1", "-o", tmp_h5])
    assert rc == 0, capsys.readouterr().err
    from hybridsched.store import read_runs

    runs = read_runs(tmp_h5)
    assert sorted(int(c) for c in runs["chunk"]) == [pol.AUTO_CHUNK, 3]
    assert all(bool(v) for v in runs["verified"])


# --- faults ------------------------------------------------------------------------------

def test_fault_plan_parsing():
    assert fault_plan({}) is None
    assert fault_plan({FAULT_ENV: "2:3"}) == (2, 3, "kill")
    assert fault_plan({FAULT_ENV: "0:1:raise"}) == (0, 1, "raise")
    assert fault_plan({FAULT_ENV: "*:2:exit"}) == (-1, 2, "exit")


def _faulty_run(scheduler, monkeypatch, spec, L=30, k=3):
    monkeypatch.setenv(FAULT_ENV, spec)
    # frames of ~1 ms, so even on a shared pipe every worker gets a few chunks
    cfg = config(scheduler, Shape("fault", L, 48, 640, k))
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        t0 = time.perf_counter()
        rec = timed_run(slab, cfg)
        elapsed = time.perf_counter() - t0
    return rec, elapsed


@pytest.mark.parametrize("mode,words", [("kill", "killed by signal 9 (SIGKILL)"),
                                        ("raise", "raised RuntimeError"),
                                        ("exit", "exited early")])
@pytest.mark.parametrize("scheduler", ["prolific", "collective", "pipe-1to1", "pipe-1toN"])
def test_lost_worker_fails_the_run_with_one_clear_message(scheduler, mode, words, monkeypatch):
    # every worker that reaches its 2nd chunk fails: on pipe-1to1's shared pipe the workers
    # race for chunks and a named one may get fewer than 2 (under load), but some worker
    # surely gets 2 of the 30
    rec, elapsed = _faulty_run(scheduler, monkeypatch, f"*:2:{mode}")
    assert not rec.verified and np.isnan(rec.time_s)
    msg = rec.error
    assert re.match(rf"{scheduler}: worker [0-2] \(pid \d+", msg) and words in msg, msg
    assert "\n" not in msg
    assert elapsed < 20  # noticed at once, never a hang
    assert not _descendants()


@pytest.mark.parametrize("mode,ending", [("kill", {"signal": "SIGKILL", "status": None}),
                                         ("raise", {"exception": "RuntimeError", "status": None}),
                                         ("exit", {"signal": "", "status": 0})])
def test_a_lost_worker_is_a_broken_run_saying_how_it_ended(mode, ending, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"1:2:{mode}")
    cfg = config("prolific", Shape("fault", 30, 48, 640, 3))
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        with pytest.raises(BrokenRun) as got:
            get_backend("forks")(job_for(cfg, slab.work, original=slab.original))
    err = got.value
    assert isinstance(err, WorkerLost) and err.scheduler == "prolific" and err.worker == 1
    assert err.pid > 0 and {k: getattr(err, k) for k in ending} == ending
    # the worker's own traceback reaches the parent where it raised, and only there
    assert ("injected fault at chunk 2" in err.remote_traceback
            and "check_fault" in err.remote_traceback) == (mode == "raise"), err.remote_traceback
    assert not _descendants()


@pytest.mark.parametrize("mode", ["kill", "raise", "exit"])
def test_mtom_resends_the_lost_chunk_and_completes(mode, monkeypatch):
    # at its first chunk, which every worker is sent before any reports (a second one goes
    # to whoever reports first: under load worker 1 may get none)
    rec, _ = _faulty_run("pipe-MtoM", monkeypatch, f"1:1:{mode}")
    assert rec.verified and not rec.error, rec.error
    assert rec.lost_workers == 1
    assert "worker 1 (pid" in rec.notes and "re-sent" in rec.notes, rec.notes
    t = rec.trace
    assert (t["worker"] != 1).all()  # worker 1 died before it ran a chunk
    check_coverage(t, 30)                          # every frame exactly once in the trace


def test_sweep_goes_on_after_a_failed_configuration(monkeypatch, capsys, tmp_h5):
    # worker 1 dies at its first chunk: every worker of both is sure to get one (prolific's
    # frames are dealt; pipe-MtoM sends each worker its first chunk before any is done),
    # while a second chunk of pipe-MtoM's goes to whoever reports first (under load
    # worker 1 once got none, and nothing was lost)
    monkeypatch.setenv(FAULT_ENV, "1:1")
    rc = main(["run", "-s", "prolific,pipe-MtoM", "-k", "3", "-L", "30", "--height", "48",
               "--width", "640", "--reps", "1", "-o", tmp_h5])
    err = capsys.readouterr().err
    assert rc == 1
    assert "prolific: worker 1 (pid " in err and "SIGKILL" in err
    from hybridsched.store import read_runs

    runs = {r["scheduler"].decode() if isinstance(r["scheduler"], bytes) else str(r["scheduler"]): r
            for r in read_runs(tmp_h5)}
    assert not runs["prolific"]["verified"]
    assert runs["pipe-MtoM"]["verified"] and runs["pipe-MtoM"]["lost_workers"] == 1
    assert not _descendants()


def test_mtom_fails_when_no_worker_is_left(monkeypatch):
    rec, _ = _faulty_run("pipe-MtoM", monkeypatch, "0:1", k=1)
    assert not rec.verified
    assert "pipe-MtoM: worker 0" in rec.error and "no worker left" in rec.error


def _kill_one_worker_when_running(k: int, victim_index: int, out: list):
    """From a helper thread: wait until k worker processes exist, SIGKILL one of them."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        kids = sorted(_descendants(), key=lambda p: p.pid)
        if len(kids) >= k:
            while cpu_seconds(kids[victim_index]) < 0.005 and time.monotonic() < deadline:
                time.sleep(0.001)  # until it works: a kill mid-run, not before it
            try:
                kids[victim_index].kill()
                out.append(kids[victim_index].pid)
            except psutil.Error:
                pass
            return
        time.sleep(0.001)


@pytest.mark.parametrize("scheduler", ALL)
def test_external_sigkill_mid_run(scheduler):
    """A worker killed from outside while the run is in progress (no test hook)."""
    cfg = config(scheduler, Shape("ext", 300, 64, 640, 3))
    killed: list[int] = []
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        th = threading.Thread(target=_kill_one_worker_when_running, args=(3, 1, killed))
        th.start()
        try:
            rec = timed_run(slab, cfg)
        finally:
            th.join()
        assert killed, "the run ended before a worker could be killed"
        if scheduler == "pipe-MtoM":
            assert rec.verified and rec.lost_workers == 1, rec.error or rec.notes
            assert f"(pid {killed[0]}) was killed by signal 9" in rec.notes
        else:
            assert not rec.verified
            assert rec.error.startswith(f"{scheduler}: worker ")
            assert f"(pid {killed[0]}) was killed by signal 9 (SIGKILL)" in rec.error
    assert not _descendants()


def test_ctrl_c_during_a_run_leaves_nothing():
    cfg = config("collective", Shape("int", 400, 64, 640, 4))

    def interrupt():
        deadline = time.monotonic() + 20
        while len(_descendants()) < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        th = threading.Thread(target=interrupt)
        th.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                timed_run(slab, cfg)
        finally:
            th.join()
    assert not _descendants()


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_cli_signal_mid_run_leaves_no_process_or_segment(tmp_path, sig, code):
    out = tmp_path / "s.h5"
    cmd = [sys.executable, "-m", "hybridsched", "run", "-s", "pipe-MtoM", "-k", "3", "-L", "3000",
           "--height", "32", "--width", "640", "--reps", "5", "-o", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=default_sigint)
    try:
        parent = psutil.Process(proc.pid)
        workers: list[psutil.Process] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(workers) < 3 and proc.poll() is None:
            workers = parent.children(recursive=True)
            time.sleep(0.005)
        assert len(workers) >= 3, "the run never forked its workers"
        shm = our_shm_entries(proc.pid)
        assert shm
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive
    assert not our_shm_entries(proc.pid)


def test_hundred_consecutive_runs_leave_no_zombie():
    with Slab(7, 2, 8, 3) as slab:
        for i in range(100):
            s = ALL[i % len(ALL)]
            rec = timed_run(slab, config(s, Shape("z", 7, 2, 8, 3)))
            assert rec.verified, rec.error
            kids = _descendants()
            assert not kids, f"run {i} ({s}) left {[(p.pid, p.status()) for p in kids]}"


# --- the process trees -------------------------------------------------------------------

def _tree(scheduler: str, k: int):
    with Slab(k + 3, 2, 8, 1) as slab:
        slab.fresh_copy()
        job = Job(registry.get(scheduler), slab.work, "quicksort", k, 1, affinity=False)
        ex, pids, ppids = forks.execute_detailed(job)
        assert slab.bad_rows() == 0
    return ex, pids.tolist(), ppids.tolist()


@pytest.mark.parametrize("k", [1, 2, 5, 8, 13])
def test_collective_tree_has_log2_k_levels(k):
    ex, pids, ppids = _tree("collective", k)
    me = os.getpid()
    assert len(set(pids)) == k and me not in pids
    assert ppids[0] == me
    for w in range(1, k):
        assert ppids[w] == pids[pol.mitosis_parent(w)], f"worker {w} forked by the wrong parent"
    depths = forks.tree_depths(np.array(pids), np.array(ppids), me)
    # the parent forks the root; then ceil(log2 k) rounds, each doubling the population;
    # the deepest chain is 1 + the most set bits of any worker id below k
    assert max(depths) == 1 + max(bin(w).count("1") for w in range(k))
    assert max(depths) <= 1 + pol.log2_levels(k)
    assert max(w.bit_length() for w in range(k)) == pol.log2_levels(k)
    assert f"fork rounds={pol.log2_levels(k)}" in ex.notes
    assert not _descendants()


def test_prolific_workers_are_all_children_of_the_parent():
    _, pids, ppids = _tree("prolific", 6)
    assert set(ppids) == {os.getpid()} and len(set(pids)) == 6


def test_prolific_pinned_oversubscription_doubles_the_first_cpu():
    """Why prolific collapses at k > N with affinity: frame i to worker i mod k and worker w
    on CPU w mod N put two workers' frames on CPU 0 (the makespan), whatever the timing."""
    from hybridsched.oslayer.cpus import usable_cpus

    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    k = len(cpus) + 1
    rec = run_and_check("prolific", Shape("over", 4 * k, 2, 8, k))
    per_cpu = {c: int(rec.workers["frames"][rec.workers["cpu"] == c].sum()) for c in cpus}
    assert per_cpu[cpus[0]] == 8 and all(per_cpu[c] == 4 for c in cpus[1:])


# --- the paper's pipe protocol by default; the faster ones only when asked ----------------


def _pipe_run(scheduler: str, L: int = 40, k: int = 3, **opts):
    from dataclasses import replace

    cfg = replace(config(scheduler, Shape("proto", L, 2, 8, k)), **opts)
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
    assert rec.verified, rec.error
    return rec


@pytest.mark.parametrize("scheduler", ["pipe-1to1", "pipe-1toN"])
def test_stream_pipes_write_one_message_per_write_by_default(scheduler):
    rec = _pipe_run(scheduler)
    assert rec.config.pipe_batch == 1
    assert "at most 1 records each" in rec.notes
    assert "producer writes=40 " in rec.notes  # one write per chunk of 1 frame


@pytest.mark.parametrize("scheduler", ["pipe-1to1", "pipe-1toN"])
def test_stream_pipes_batch_only_as_a_named_variant(scheduler):
    rec = _pipe_run(scheduler, pipe_batch=256)
    writes = int(re.search(r"producer writes=(\d+)", rec.notes).group(1))
    assert writes < 40 and re.search(r"at most (\d+) records", rec.notes).group(1) != "1"


def test_mtom_keeps_one_chunk_in_flight_by_default():
    rec = _pipe_run("pipe-MtoM")
    assert rec.config.inflight == 1 and "peak in flight=1 per worker" in rec.notes


def test_mtom_inflight_variant():
    rec = _pipe_run("pipe-MtoM", L=60, inflight=3)
    assert "peak in flight=3 per worker" in rec.notes


def test_pipe_variants_are_stored_and_kept_apart(tmp_path):
    from hybridsched.results.data import summarise
    from hybridsched.store import read_runs

    out = str(tmp_path / "v.h5")
    base = ["run", "-s", "pipe-1to1,pipe-MtoM,dynamic", "-k", "2", "-L", "12", "--height", "4",
            "--width", "16", "--reps", "1", "--out", out]
    assert main(base) == 0
    assert main(base[:-2] + ["--pipe-batch", "8", "--inflight", "2", "--out", out, "--resume"]) == 0
    runs = read_runs(out)
    got = sorted((str(r["scheduler"]), int(r["pipe_batch"]), int(r["inflight"])) for r in runs)
    # dynamic reads neither option, so its run is not repeated by the resume
    assert got == [("dynamic", 1, 1), ("pipe-1to1", 1, 1), ("pipe-1to1", 8, 1),
                   ("pipe-MtoM", 1, 1), ("pipe-MtoM", 1, 2)]
    rows = summarise(runs)
    assert len([r for r in rows if r.scheduler == "pipe-MtoM"]) == 2


@pytest.mark.parametrize("bad", [["--pipe-batch", "257"], ["--inflight", "0"], ["--pipe-batch", "x"]])
def test_pipe_variant_bounds(bad, capsys):
    assert main(["run", "-s", "pipe-1to1", "-L", "4", "-k", "1"] + bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_teams_in_several_threads_never_hold_each_others_pipes():
    """parallel_for from four threads at once on forks and pipes: a child forked by one team
    closes every other team's pipe ends, or that team never sees end of file (a hang found
    by the hostile list, about one call in ten)."""
    import threading

    import hybridsched

    scheds = ["prolific", "collective", "pipe-1to1", "pipe-MtoM"]
    for _ in range(6):
        results: dict[int, object] = {}
        barrier = threading.Barrier(len(scheds))

        def one(i: int, sched: str) -> None:
            d = np.random.default_rng(100 + i).integers(0, 256, (24, 8, 16 + i), dtype=np.uint8)
            barrier.wait(timeout=30)
            results[i] = bool(hybridsched.parallel_for("quicksort", d, scheduler=sched, k=2).verified)

        ts = [threading.Thread(target=one, args=(i, s), daemon=True) for i, s in enumerate(scheds)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in ts), "a parallel_for call hung"
        assert results == {0: True, 1: True, 2: True, 3: True}


def test_sigkill_of_the_run_takes_the_whole_collective_tree(tmp_path):
    """Only the parent's direct child died with it: the workers the mitosis tree forked ran
    on, holding the study's lock (a --resume refused) and any coop tokens (hostile
    review). Every tree worker now dies with the one that forked it, which waits for it."""
    from waiting import wait_for_descendants, wait_until

    (tmp_path / "slowkern.py").write_text(
        "import signal\n"
        "def slow(data, first, count):\n"
        "    signal.pause()  # never returns: only the run's end (a signal) ends it\n"
        "def check(original, result):\n"
        "    return True\n")
    out = str(tmp_path / "c.h5")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-m", "hybridsched", "run", "-s", "collective", "-k", "4",
                          "-L", "8", "--height", "4", "--width", "4", "--reps", "1",
                          "--kernel", "slowkern:slow", "--verify", "slowkern:check", "-o", out],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = wait_for_descendants(p.pid, 4, p)
        p.kill()
        p.wait(timeout=60)
        wait_until(lambda: not [w for w in workers if w.is_running()
                                and w.status() != psutil.STATUS_ZOMBIE],
                   "every worker of the killed run gone", timeout=60)
    finally:
        p.kill()
        p.wait(timeout=60)
        for w in locals().get("workers", []):  # what an old tree left running
            try:
                w.kill()
                w.wait(timeout=60)
            except psutil.Error:
                pass
        sweep_orphans()  # the segments of the run killed outright, as its next one would
