"""Issue 25 (first increment): the simulator -- hand-computed makespans, every scheduler and
technique, hand-outs equal to `plan`, placement (pinned, shared, coop), the --from round
trip, the CLI's bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hybridsched.core import policies, registry
from hybridsched.records import RunConfig
from hybridsched.sim import costs as cost_src
from hybridsched.sim.models import Overheads, execute
from hybridsched.sim.run import covered_once, simulate

HS = [sys.executable, "-m", "hybridsched"]
# no overheads at all: the makespans below are pure arithmetic
ZERO = Overheads(claim_compiled_s=0, claim_python_s=0, pipe_msg_s=0, pipe_rtt_s=0, fork_s=0,
                 reap_s=0, thread_start_s=0, wake_s=0, switch_s=0, slice_s=1e-12,
                 thread_fixed_s=0, process_fixed_s=0, pipe_fixed_s=0, exit_s=0, pipe_serve_s=0)


def run_sim(name, costs, k, cores, ov=ZERO, affinity=True, coop=False, chunk=0):
    costs = np.asarray(costs, float)
    out, disp = execute(name, costs, cost_src.prefix(costs), k, chunk, cores, ov, affinity, coop)
    return out


def hs(*argv, cwd):
    return subprocess.run(HS + list(argv), cwd=cwd, capture_output=True, text=True, timeout=300)


def one_line_error(p):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hybridsched"), p.stderr
    return lines[0]


def test_static_with_known_costs_is_the_largest_block():
    costs = np.arange(1, 11)  # blocks of 5: 1..5 = 15 and 6..10 = 40
    assert run_sim("static", costs, 2, 2).makespan == pytest.approx(40.0)


def test_dynamic_with_equal_costs_and_a_serialised_claim():
    assert run_sim("dynamic", np.ones(100), 4, 4).makespan == pytest.approx(25.0)
    ov = Overheads.from_dict({**ZERO.to_dict(), "claim_compiled_s": 0.5})
    # one worker: 100 chunks after their claims, and the 101st claim that finds nothing
    assert run_sim("dynamic", np.ones(100), 1, 1, ov).makespan == pytest.approx(101 * 0.5 + 100)
    # two workers, claims of 0.5 serialised: w0 runs 0.5-1.5, w1 waits for the lock and
    # runs 1.0-2.0; w0's empty claim holds it 1.5-2.0 (granted 2.0), w1's then 2.0-2.5
    assert run_sim("dynamic", np.ones(2), 2, 2, ov).makespan == pytest.approx(2.5)


def test_pinned_oversubscription_k_n_plus_one_doubles_the_shared_core():
    """k = N + 1 pinned round-robin: worker N shares core 0 with worker 0; under static
    blocks both finish at twice the time (the paper's collapse comes from the model)."""
    assert run_sim("static", np.ones(100), 5, 4).makespan == pytest.approx(40.0)
    assert run_sim("static", np.ones(100), 5, 4, affinity=False).makespan == pytest.approx(25.0)
    # self-scheduling rebalances around the slow core
    assert run_sim("dynamic", np.ones(100), 5, 4).makespan == pytest.approx(25.0, rel=0.05)


def test_prolific_collapses_at_32_on_24_pinned_not_unpinned():
    t_serial = 2400.0
    pinned = run_sim("prolific", np.ones(2400), 32, 24).makespan
    shared = run_sim("prolific", np.ones(2400), 32, 24, affinity=False).makespan
    assert t_serial / pinned == pytest.approx(16.0) and t_serial / shared == pytest.approx(24.0)


def test_time_slices_cost_half_a_slice_at_the_end_when_a_core_is_shared():
    ov = Overheads.from_dict({**ZERO.to_dict(), "slice_s": 3.0})
    assert run_sim("static", np.ones(100), 5, 4, ov).makespan == pytest.approx(40.0 + 1.5)
    assert run_sim("static", np.ones(100), 4, 4, ov).makespan == pytest.approx(25.0)


def test_coop_runs_one_worker_per_token_and_switches_at_chunk_ends():
    out = run_sim("dynamic", np.ones(40), 4, 2, coop=True)
    assert out.makespan == pytest.approx(20.0, rel=0.01)
    assert covered_once(np.array([tuple(r) for r in out.trace], dtype=[
        ("worker", "i4"), ("first", "i8"), ("count", "i8"), ("start", "f8"), ("end", "f8")]), 40)


@pytest.mark.parametrize("name", registry.names())
def test_every_scheduler_and_technique_runs_in_simulation(name):
    costs = np.random.default_rng(3).exponential(1e-4, 57)
    cfg = RunConfig(name, 3, 57, 4, 4)
    rec = simulate(cfg, costs, None, 2, Overheads())
    assert rec.verified and rec.simulated and rec.time_s > 0
    assert rec.time_s >= costs.sum() / 3 * 0.99 or registry.get(name).baseline


@pytest.mark.parametrize("policy", ["dynamic", "guided", "chunk", *[
    t for t in policies.TECHNIQUE_PLANS if t != "static_steal"]])
def test_the_simulated_hand_out_of_a_fixed_technique_equals_plan(policy):
    costs = np.random.default_rng(1).uniform(1, 2, 311)
    out = run_sim(policy, costs, 4, 4)
    got = sorted((f, c) for _, f, c, _, _ in out.trace)
    want = sorted((r.first, r.count) for r in policies.plan(policy, 311, 4,
                                                           registry.get(policy).resolve_chunk(0, 311)))
    assert got == want


def test_cli_simulates_a_study_file_marked_simulated(tmp_path):
    out = tmp_path / "s.h5"
    p = hs("simulate", "-s", "serial,dynamic,prolific", "-k", "1,4", "-L", "60", "--height", "8",
           "--width", "8", "--reps", "1", "--cores", "24", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
        study = json.loads(h5.attrs["study"])
    assert runs["simulated"].all() and runs["verified"].all() and len(runs) == 5
    assert study["simulate"]["cores"] == 24
    rep = hs("report", str(out), cwd=tmp_path)
    assert rep.returncode == 0 and "Simulated study" in rep.stdout
    assert "Simulated machine: N = 24 virtual cores per node" in rep.stdout
    assert "were disturbed" not in rep.stdout and "T_serial disturbed" not in rep.stdout
    # a simulated study is not a measured one: --validate says so, naming itself
    line = one_line_error(hs("simulate", "--validate", str(out), cwd=tmp_path))
    assert line.startswith("hybridsched: error: --validate") and "no verified measured" in line
    assert "usable CPUs" not in rep.stdout  # not this machine's N
    assert "Every verdict below rests on simulated times" in rep.stdout
    fit = hs("fit", str(out), "--model", "amdahl", cwd=tmp_path)
    assert fit.returncode == 0 and "every point is simulated" in fit.stdout, fit.stderr
    tr = hs("trace", str(out), "-s", "dynamic", "-k", "4", "--perfetto", str(tmp_path / "t.json"),
            cwd=tmp_path)
    assert tr.returncode == 0 and "[simulated]: dynamic" in tr.stdout, tr.stderr
    # without serial: simulate has no --resume, so the report does not suggest it
    bare = tmp_path / "b.h5"
    assert hs("simulate", "-s", "dynamic", "-k", "2", "-L", "20", "--height", "8", "--width",
              "8", "--reps", "1", "-o", str(bare), cwd=tmp_path).returncode == 0
    rep = hs("report", str(bare), "--no-plots", cwd=tmp_path)
    assert "simulate again with `-s serial`" in rep.stdout and "--resume" not in rep.stdout


def test_a_mixed_study_keeps_simulated_runs_out_of_the_claims(tmp_path):
    """Measured and simulated runs merged: the report names the simulated apart and the
    claims' verdicts rest on the measured runs alone."""
    meas, sim, both = tmp_path / "m.h5", tmp_path / "s.h5", tmp_path / "b.h5"
    shape = ["-s", "serial,dynamic", "-k", "1,2", "-L", "40", "--height", "8", "--width", "16",
             "--reps", "1"]
    assert hs("run", *shape, "-o", str(meas), cwd=tmp_path).returncode == 0
    assert hs("simulate", *shape, "-o", str(sim), cwd=tmp_path).returncode == 0
    assert hs("merge", str(meas), str(sim), "-o", str(both), cwd=tmp_path).returncode == 0
    rep = hs("report", str(both), "--no-plots", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "dynamic [sim]" in rep.stdout and "rest on the measured runs alone" in rep.stdout
    claims = rep.stdout.split("## The paper's claims", 1)[1]
    assert "[sim]" not in claims.split("left out of them", 1)[1]


def test_from_round_trip_on_a_small_measured_study(tmp_path):
    meas, sim = tmp_path / "m.h5", tmp_path / "s.h5"
    assert hs("run", "-s", "serial,static,dynamic", "-k", "1,2", "-L", "40", "--height", "16",
              "--width", "32", "--reps", "2", "-o", str(meas), cwd=tmp_path).returncode == 0
    p = hs("simulate", "--from", str(meas), "-o", str(sim), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(meas) as a, h5py.File(sim) as b:
        m, s = a["runs"][()], b["runs"][()]
    for f in ("scheduler", "k", "L", "H", "W", "chunk", "affinity", "rep", "P"):
        assert list(m[f]) == list(s[f]), f
    assert s["simulated"].all() and s["verified"].all() and (s["time_s"] > 0).all()
    v = hs("simulate", "--validate", str(meas), cwd=tmp_path)
    assert v.returncode == 0 and "|error| over" in v.stdout and "simulated best" in v.stdout


@pytest.mark.parametrize("content, says", [
    (np.zeros(0), "non-empty"),
    (np.array([1.0, -1.0]), "finite number"),
    (np.array([1.0, np.nan]), "finite number"),
    (np.zeros((2, 2)), "1-D"),
    (b"not an array", "cannot read"),
])
def test_bad_costs_files_are_one_line(tmp_path, content, says):
    path = tmp_path / "c.npy"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, content)
    line = one_line_error(hs("simulate", "-s", "dynamic", "--costs", str(path), cwd=tmp_path))
    assert says in line
    assert os.listdir(tmp_path) == ["c.npy"]


def _trace(chunks, times):
    """A chunk trace: chunks [(first, count)] timed back to back with these durations."""
    from hybridsched.records import TRACE_DTYPE

    tr = np.zeros(len(chunks), TRACE_DTYPE)
    t = np.cumsum([0.0, *times])
    for i, (f, c) in enumerate(chunks):
        tr[i] = (0, f, c, t[i], t[i + 1])
    return tr


def test_from_takes_the_tasks_shape_from_the_finest_runs_and_the_median_total():
    """Six tasks, the last one heavy: the chunk-1 runs see it, the two-chunk runs spread
    it over the second half; the shape comes from the fine runs, the total from all."""
    from hybridsched.sim.fromstudy import pooled_costs

    fine = [_trace([(i, 1) for i in range(6)], [1, 1, 1, 1, 1, 5 + d]) for d in (0.0, 0.5)]
    coarse = [_trace([(0, 3), (3, 3)], [3, 7 + d]) for d in (1.0, 2.0, 3.0)]
    got = pooled_costs(fine + coarse)
    totals = [10.0, 10.5, 11.0, 12.0, 13.0]
    assert got.sum() == pytest.approx(np.median(totals))
    shape = np.array([1, 1, 1, 1, 1, 5.25])
    assert got == pytest.approx(shape * np.median(totals) / shape.sum())
    # a median per task would have said the second half is even (the coarse runs outvote)
    assert got[5] > 3 * got[4]


def test_bad_cores_and_a_study_without_traces_are_one_line(tmp_path):
    assert "--cores" in one_line_error(hs("simulate", "--cores", "0", cwd=tmp_path))
    meas = tmp_path / "m.h5"
    assert hs("run", "-s", "dynamic", "-k", "1", "-L", "8", "--height", "8", "--width", "8",
              "--reps", "1", "-o", str(meas), cwd=tmp_path).returncode == 0
    with h5py.File(meas, "r+") as h5:
        del h5["detail"]
        h5.create_group("detail")
    line = one_line_error(hs("simulate", "--from", str(meas), cwd=tmp_path))
    assert "no chunk traces" in line
    # the study's own configurations are re-simulated: options that would choose others
    # are refused, not silently ignored (and nothing is written)
    for opt in (["-s", "guided"], ["-k", "4"], ["-P", "2"], ["--no-affinity"]):
        for how in ("--from", "--validate"):
            line = one_line_error(hs("simulate", how, str(meas), *opt, cwd=tmp_path))
            assert opt[0].replace("no-", "") in line and "own configurations" in line
    assert sorted(os.listdir(tmp_path)) == ["m.h5"]


def test_auto_sim_predicts_on_the_loop_costs_and_resimulates_on_drift():
    from hybridsched.core.techniques import autosim

    costs = np.r_[np.full(90, 1e-4), np.full(10, 5e-3)]  # the costly tasks at the end
    pred = autosim.Predictor(("static", "dynamic", "guided"), registry.get)
    pred.ready(costs, 2, 0, 1e-6, None)
    assert pred.choose() == "dynamic" and pred.predicted["static"] > pred.predicted["dynamic"]
    pred.record("dynamic", pred.predicted["dynamic"] * 1.05)
    assert not pred.stale  # within 10 %: keep the prediction
    pred.record("dynamic", pred.predicted["dynamic"] * 2.0)
    assert pred.stale
    pred.ready(costs, 2, 0, 1e-6, None)
    assert pred.simulations == 2 and pred.costs.sum() == pytest.approx(costs.sum() * 2.0)


def test_auto_sim_runs_and_stores_its_choice_and_prediction(tmp_path):
    out = tmp_path / "a.h5"
    p = hs("run", "-s", "auto-sim,pipe-MtoM:auto-sim", "-k", "2", "-L", "60", "--height", "16",
           "--width", "16", "--workload", "skewed", "--reps", "2", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
        extra = json.loads(h5["detail/000000"].attrs["extra"])
    assert runs["verified"].all() and all(t for t in runs["technique"])
    assert extra["auto_sim"]["technique"] == runs["technique"][0].decode()
    assert extra["auto_sim"]["predicted_s"] > 0


def test_from_takes_the_overheads_its_family_measured_at_its_own_k(tmp_path):
    """A configuration re-simulated --from a study starts its workers when its runs started
    them at that k and pays what they paid beyond the workers' span; pipe-MtoM pays its
    own round trip at that k; the task costs come from the other schedulers."""
    from hybridsched.sim.fromstudy import MeasuredStudy
    meas = tmp_path / "m.h5"
    assert hs("run", "-s", "prolific,collective,pipe-MtoM", "-k", "1,3", "-L", "30",
              "--height", "8", "--width", "16", "--reps", "1", "-o", str(meas),
              cwd=tmp_path).returncode == 0
    study = MeasuredStudy(str(meas))
    base = study.overheads(Overheads())
    by = {(str(r["scheduler"]), int(r["k"])): r for r in study.runs}
    other = by[("prolific", 3)]
    w = np.sort(study.workers[int(other["run_id"])], order="worker")
    ov = study.overheads_for(by[("prolific", 3)], base)
    assert ov.worker_starts_s == pytest.approx(tuple(w["start"] - w["start"].min()))
    beyond = float(other["time_s"]) - float(w["end"].max() - w["start"].min())
    # the last worker's exit is simulated on its core, so it leaves the fixed part
    assert ov.process_fixed_s == pytest.approx(max(0.0, beyond - base.exit_s))
    assert ov.process_worker_s == 0 and ov.reap_s == 0
    mtom = by[("pipe-MtoM", 3)]
    # one run: its own mean wait, less what its CPU's neighbours ran meanwhile (k = 3 on
    # 2 CPUs: whether a neighbour's chunk fell in a wait is up to the machine)
    rtt = study.overheads_for(mtom, base).pipe_rtt_s
    assert rtt == pytest.approx(study._own_gap(mtom))
    assert 0 < rtt <= study._gap([mtom], np.mean) * (1 + 1e-9)
    assert "producer cpu_s=" in str(mtom["notes"])  # the producer's own CPU, recorded
    assert study.overheads_for(mtom, base).pipe_serve_s == pytest.approx(
        study._producer_cpu(mtom)) and study._producer_cpu(mtom) > 0
    cfg = RunConfig("prolific", 3, 30, 8, 16)
    rec = simulate(cfg, study.costs_for(by[("prolific", 3)]), None, 2, ov)
    starts = np.sort(rec.workers["start"])
    assert starts - starts[0] == pytest.approx(np.sort(ov.worker_starts_s))


def test_a_forked_workers_exit_and_the_owners_work_share_the_cores():
    """Hand-computed: a worker's exit is CPU on its own core (its neighbour waits), and the
    team's owner works on the core with the fewest workers (an idle one if there is)."""
    from hybridsched.core import dispatch
    from hybridsched.core.virtual import Engine, Placement

    def makespan(costs, hand, cores, **kw):
        cum = cost_src.prefix(np.asarray(costs, float))
        eng = Engine(cum, len(hand), Placement(cores, slice_s=1e-12, switch_s=0), **kw)
        return eng.run(dispatch.Preassigned(hand)).makespan
    # one core, w0 works 1 and w1 3, each exits with 1 of CPU: 1 + 3 + 1 + 1
    assert makespan([1, 3], [[(0, 1)], [(1, 1)]], 1, exit_s=1.0) == pytest.approx(6.0)
    # the owner's 5 on the idle second core slows nobody
    assert makespan([3], [[(0, 1)]], 2, parent_s=5.0) == pytest.approx(3.0)
    # both cores busy: the owner's 2 shares core 0 with w0 (3 + 2), w1 ends at 3
    assert makespan([3, 3], [[(0, 1)], [(1, 1)]], 2, parent_s=2.0) == pytest.approx(5.0)


def test_the_owner_works_only_the_forks_made_once_a_worker_runs():
    """Hand-computed: frames of 4 on two cores, a fork costs 1. prolific's parent forks w1
    at 1 while w0 runs, and that fork shares w0's core (w0: 4 + 1 = 5); its first fork
    precedes every worker (the fixed cost, 0 here). collective's root forks only w0, which
    forks w1 before working: nobody's core is shared, and w1 still ends at 1 + 4."""
    ov = Overheads(fork_s=1.0, exit_s=0.0, reap_s=0.0, process_fixed_s=0.0,
                   process_worker_s=0.0, slice_s=1e-12, switch_s=0.0)
    costs = np.array([4.0, 4.0])
    for name in ("prolific", "collective"):
        out, _ = execute(name, costs, cost_src.prefix(costs), 2, 0, 2, ov)
        assert out.makespan == pytest.approx(5.0), name
        assert out.end[1] == pytest.approx(5.0), name
    out, _ = execute("collective", costs, cost_src.prefix(costs), 2, 0, 2, ov)
    assert out.end[0] == pytest.approx(4.0)


def test_a_calibrated_claim_under_contention_is_used_at_its_k():
    """With claims per k calibrated, k workers hold the hand-out for the k-th figure each
    claim (the last beyond the figures measured); without, the single-worker figure."""
    import dataclasses
    ov = dataclasses.replace(ZERO, claim_python_s=1e-6, claim_python_by_k=(1e-6, 4e-6))
    for k, per in ((1, 1e-6), (2, 4e-6), (3, 4e-6)):
        out, _ = execute("dynamic", np.zeros(100), np.zeros(101), k, 1, 4, ov,
                         dispatch_mode="python")
        assert out.makespan == pytest.approx((100 + k) * per)  # + each worker's last claim
    out, _ = execute("dynamic", np.zeros(100), np.zeros(101), 2, 1, 4,
                     dataclasses.replace(ov, claim_python_by_k=()), dispatch_mode="python")
    assert out.makespan == pytest.approx(102 * 1e-6)


@pytest.mark.parametrize("extra, says", [
    (["--chunk", "auto", "-s", "pipe-1to1"], "--chunk auto"),
    (["--pipe-batch", "16", "-s", "pipe-1to1"], "--pipe-batch is not simulated"),
    (["--inflight", "4", "-s", "pipe-MtoM"], "--inflight is not simulated"),
    (["--width", str(1 << 40), "-s", "dynamic"], "at most"),
])
def test_what_the_model_does_not_simulate_is_refused(tmp_path, extra, says):
    p = hs("simulate", *extra, "-k", "2", "-L", "20", "--reps", "1", "-o", "x.h5", cwd=tmp_path)
    assert says in one_line_error(p) and not (tmp_path / "x.h5").exists()


def test_bad_outputs_and_sources_are_refused_before_any_work(tmp_path):
    meas = tmp_path / "m.h5"
    assert hs("run", "-s", "serial,dynamic", "-k", "1,2", "-L", "20", "--height", "8",
              "--width", "8", "--reps", "1", "-o", str(meas), cwd=tmp_path).returncode == 0
    before = meas.read_bytes()
    assert "also the --from study" in one_line_error(
        hs("simulate", "--from", str(meas), "-o", str(meas), "--overwrite", cwd=tmp_path))
    assert meas.read_bytes() == before
    (tmp_path / "link.h5").symlink_to(tmp_path / "nowhere.h5")
    line = one_line_error(hs("simulate", "-s", "dynamic", "-k", "2", "-L", "20", "-o", "link.h5",
                             cwd=tmp_path))
    assert "link" in line and not (tmp_path / "nowhere.h5").exists()
    os.mkfifo(tmp_path / "costs.npy")
    assert "not a regular file" in one_line_error(
        hs("simulate", "-s", "dynamic", "-k", "2", "--costs", "costs.npy", "-o", "y.h5",
           cwd=tmp_path))
    np.savez(tmp_path / "a.npz", x=np.ones(3))
    assert ".npz" in one_line_error(hs("simulate", "-s", "dynamic", "-k", "2", "--costs",
                                       "a.npz", "-o", "y.h5", cwd=tmp_path))


def test_a_calibration_file_round_trips_and_a_broken_one_is_one_line(tmp_path):
    cal = tmp_path / "cal.json"
    assert hs("calibrate", "-o", str(cal), cwd=tmp_path).returncode == 0
    shape = ["-s", "dynamic,prolific", "-k", "1,2", "-L", "30", "--height", "8", "--width", "8",
             "--reps", "2"]
    p = hs("simulate", *shape, "--calibration", str(cal), "-o", "s.h5", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = json.loads(cal.read_text())
    assert len(data["overheads"]["claim_python_by_k"]) >= 1
    for key, value, says in (("slice_s", 0, "above 0"), ("fork_s", True, "fork_s"),
                             ("fork_s", 1e308, "fork_s"), ("version", 99, "newer")):
        bad = json.loads(cal.read_text())
        (bad if key == "version" else bad["overheads"])[key] = value
        path = tmp_path / f"bad-{key}-{value}.json"
        path.write_text(json.dumps(bad))
        out = tmp_path / "b.h5"
        line = one_line_error(hs("simulate", *shape, "--calibration", str(path), "-o", str(out),
                                 cwd=tmp_path))
        assert says in line and not out.exists()


def test_a_pipe_producer_without_a_core_of_its_own_pays_two_switches_per_message(monkeypatch):
    """pipe-MtoM's producer works among the workers: its CPU per message, and with more
    workers than cores two context switches per message (it preempts a worker)."""
    import dataclasses
    from hybridsched.sim import models
    seen = []

    class Spy(models.Engine):
        def __init__(self, *a, parent_s=0.0, **kw):
            seen.append(parent_s)
            super().__init__(*a, parent_s=parent_s, **kw)
    monkeypatch.setattr(models, "Engine", Spy)
    ov = dataclasses.replace(ZERO, pipe_serve_s=1e-5, switch_s=2e-6, slice_s=1e-3)
    for k, per in ((2, 1e-5), (3, 1e-5 + 4e-6)):
        seen.clear()
        execute("pipe-MtoM", np.ones(60) * 1e-3, cost_src.prefix(np.ones(60) * 1e-3), k, 1, 2, ov)
        assert seen[-1] == pytest.approx(60 * per)  # 60 chunks of one task


def test_the_switch_probe_interrupted_leaves_no_child():
    """Ctrl-C sent to this process alone while the switch probe ping-pongs with its child:
    the child sees EOF and ends, and is reaped (it used to hold its own write end open)."""
    code = ("import os, signal, threading, psutil\n"
            "from hybridsched.sim.costs import switch_seconds\n"
            "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "try:\n    switch_seconds(10**8)\nexcept KeyboardInterrupt:\n    print('stopped')\n"
            "print(len(psutil.Process().children(recursive=True)))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["stopped", "0"], p.stderr


# --- issue 33 ---------------------------------------------------------------------------


def _measured(tmp_path, *extra) -> str:
    meas = tmp_path / "m.h5"
    assert hs("run", "-s", "serial,dynamic", "-k", "1,2", "-L", "20", "--height", "8",
              "--width", "8", "--reps", "1", "-o", str(meas), *extra, cwd=tmp_path).returncode == 0
    return str(meas)


def test_validate_compares_on_the_measured_studys_cores(tmp_path):
    """Issue 33 item 9: --cores 1 on a 2-core study compared 2-core measurements with a
    1-core model (worst error 59.7 % instead of 24.1 %)."""
    from hybridsched.store import machine_n, read_attrs

    meas = _measured(tmp_path)
    n = machine_n(meas, read_attrs(meas))
    for other in {1, n + 1} - {n}:
        line = one_line_error(hs("simulate", "--validate", meas, "--cores", str(other),
                                 cwd=tmp_path))
        assert f"measured on {n} cores" in line and f"--cores {other}" in line
    assert hs("simulate", "--validate", meas, "--cores", str(n), cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("extra, says", [
    (["--input", "tasks.npy", "--kernel", "mine:f"], "--input is not simulated"),
    (["--kernel", "mine:f", "--verify", "none"], "--verify is not simulated"),
    (["--kernel", "mine:f"], "--kernel mine:f is not simulated"),
    (["--kernel", "numpy"], "--kernel numpy is not simulated"),
    (["--costs", "c.npy", "--workload", "skewed"], "give one or the other"),
])
def test_tasks_the_model_does_not_know_are_refused_not_ignored(tmp_path, extra, says):
    """Issue 33 items 10, 11: --input/--kernel were accepted and the model's own rows
    simulated; --costs with --workload stored the workload's name and parameters."""
    np.save(tmp_path / "c.npy", np.full(24, 1e-3))
    np.save(tmp_path / "tasks.npy", np.zeros((24, 4)))
    (tmp_path / "mine.py").write_text("def f(data, first, count):\n    pass\n")
    p = hs("simulate", "-s", "dynamic", "-k", "2", *extra, "-o", "x.h5", cwd=tmp_path)
    assert says in one_line_error(p) and not (tmp_path / "x.h5").exists()


def test_costs_whose_sum_overflows_are_one_line_and_such_a_study_is_refused(tmp_path):
    """Issue 33 item 17: 24 x 1e308 (each finite) printed numpy's RuntimeWarnings and
    exited 1; a study holding such times printed them in report."""
    np.save(tmp_path / "c.npy", np.full(24, 1e308))
    line = one_line_error(hs("simulate", "-s", "dynamic", "-k", "2", "--costs", "c.npy",
                             "-o", "x.h5", cwd=tmp_path))
    assert "add up to more than" in line and not (tmp_path / "x.h5").exists()
    meas = _measured(tmp_path)
    with h5py.File(meas, "r+") as h5:
        rows = h5["runs"][()]
        rows["time_s"] = 1e308
        h5["runs"][...] = rows
    for cmd in (["report", meas], ["fit", meas], ["trace", meas]):
        p = hs(*cmd, cwd=tmp_path)
        assert "at most 1e+12 s" in one_line_error(p) and "Warning" not in p.stderr


def test_a_failed_simulated_run_says_why_and_keeps_its_technique(tmp_path):
    """Issue 33 item 16: simulate printed nothing for a failed run (run prints FAILED:
    ...) and stored it with an empty technique and hash."""
    (tmp_path / "negmod.py").write_text(
        "from hybridsched import Technique\n\n\nclass Neg(Technique):\n"
        "    def chunk(self, remaining, request, worker):\n        return -3\n")
    p = hs("simulate", "-s", "negmod:Neg,dynamic", "-k", "2", "-L", "24", "--reps", "1",
           "-o", "n.h5", cwd=tmp_path)
    assert p.returncode == 1
    assert "hybridsched: FAILED: simulated: technique neg: chunk() returned -3" in p.stderr
    from hybridsched.store import read_runs

    failed = read_runs(str(tmp_path / "n.h5"))[0]
    assert failed["technique"] == "negmod:Neg" and len(failed["technique_hash"]) == 64


def test_calibration_files_that_are_not_files_nested_or_misspelt_are_one_line(tmp_path):
    """Issue 33 items 12, 18: a file nested 100,000 deep raised RecursionError (exit 1); a
    directory or FIFO said 'no such file'; an unknown overhead (a typo) was ignored."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "dir.json").mkdir()
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "typo.json").write_text(json.dumps(
        {"format": "hybridsched-calibration", "version": 1, "overheads": {"forks_s": 1e-4}}))
    # a list where a number goes, a number where a list goes: TypeError tracebacks before
    (tmp_path / "list.json").write_text(json.dumps(
        {"format": "hybridsched-calibration", "version": 1, "overheads": {"fork_s": [1e-4, 2e-4]}}))
    (tmp_path / "num.json").write_text(json.dumps(
        {"format": "hybridsched-calibration", "version": 1,
         "overheads": {"claim_compiled_by_k": 5e-8}}))
    for name, says in (("deep.json", "nested too deep"), ("dir.json", "not a regular file"),
                       ("fifo.json", "not a regular file"), ("typo.json", "unknown overhead 'forks_s'"),
                       ("list.json", "fork_s must be a number"),
                       ("num.json", "claim_compiled_by_k must be a list of numbers")):
        p = hs("simulate", "-s", "dynamic", "-k", "2", "-L", "20", "--calibration", name,
               "-o", "x.h5", cwd=tmp_path)
        assert says in one_line_error(p), name
    assert not (tmp_path / "x.h5").exists()


def test_validate_simulates_the_chunk_search_of_a_chunk_auto_study(tmp_path):
    """A study run with --chunk auto: --validate ended in an IndexError traceback (chunk -1
    reached the model). The model now searches as the backend does (policies.search_chunk
    over simulated trial runs) and says what it chose."""
    meas = str(tmp_path / "auto.h5")
    assert hs("run", "-s", "serial,pipe-1to1,pipe-MtoM", "-k", "2", "-L", "32", "--height", "16",
              "--width", "16", "--chunk", "auto", "--reps", "1", "--seed", "1", "-o", meas,
              cwd=tmp_path).returncode == 0
    p = hs("simulate", "--validate", meas, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    table = p.stdout.split("\n\n")[1].splitlines()  # the per-configuration table
    assert sorted(r.split(" | ")[2] for r in table if "| 2 | auto |" in r) == ["pipe-1to1", "pipe-MtoM"]
    costs = np.full(32, 1e-4)
    cfg = RunConfig("pipe-1to1", 2, 32, 16, 16, chunk=policies.AUTO_CHUNK)
    rec = simulate(cfg, costs, None, 2, ZERO)
    assert rec.verified and rec.chunk_used >= 1 and f"auto chunk={rec.chunk_used}" in rec.notes
    assert rec.trace["count"].max() == rec.chunk_used


def test_search_chunk_finds_the_minimum_of_a_u_shaped_time_and_stops_climbing():
    """One search for the backend and the simulator: the candidates 1, 2, 4, ... until two
    in a row are 1.5x the best, then the refinements around the best."""
    tried: list[int] = []

    def time_of(c):
        tried.append(c)
        return abs(c - 12) + 1.0

    best, times = policies.search_chunk(10_000, 2, time_of)
    assert best == 12 and set(times) == set(tried)
    # 32 and 64 are each more than 1.5x the best so far (5): the climb stops there
    assert tried == [1, 2, 4, 8, 16, 32, 64, 6, 12]  # then 8's neighbours 6 and 12


def test_calibrate_never_replaces_a_study_being_written(tmp_path, capsys):
    """`calibrate -o STUDY --overwrite` replaced a study whose writer held its lock."""
    from hybridsched.cli import main as cli_main
    from hybridsched.store import StudyLock

    live = tmp_path / "live.h5"
    live.write_bytes(b"a study being written")
    with StudyLock(str(live)):
        assert cli_main(["calibrate", "-o", str(live), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "is being written by" in err and len(err.strip().splitlines()) == 1
    assert live.read_bytes() == b"a study being written"


def test_a_model_that_does_not_fit_in_memory_is_one_line(tmp_path, monkeypatch, capsys):
    """`-L 2147483647 --height 1 --width 1`: numpy's ArrayMemoryError from the model's
    per-task arrays, a traceback (hostile review). Raised here without the 32 GiB."""
    from hybridsched.cli import main as cli_main
    from hybridsched.commands import simulate as cmd

    def too_big(*a, **k):
        raise MemoryError("Unable to allocate 32.0 GiB")

    monkeypatch.setattr(cmd, "_overheads", too_big)
    out = tmp_path / "big.h5"
    assert cli_main(["simulate", "-s", "dynamic", "-k", "2", "-L", "8", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not fit in this machine's memory" in err
    assert not out.exists()


def test_a_simulated_time_out_of_range_is_said_to_be_the_models(tmp_path):
    """A calibration with a time slice of 1e-300 s made times of ~1e290 s, refused on the way
    into the file with a damaged file's words, "a verified run with time_s = ..." (hostile
    review)."""
    (tmp_path / "tiny.json").write_text(json.dumps(
        {"format": "hybridsched-calibration", "version": 1, "overheads": {"slice_s": 1e-300}}))
    p = hs("simulate", "-s", "dynamic", "-k", "2", "-L", "20", "--height", "8", "--width", "64",
           "--cores", "1", "--calibration", "tiny.json", "-o", "x.h5", cwd=tmp_path)
    assert p.returncode == 2 and "the model's time for dynamic k=2" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "x.h5").exists()


def test_simulated_splits_of_one_technique_with_other_params_stay_apart(tmp_path):
    """Two simulated studies splitting the frames over -P 2 with one user technique and two
    parameter sets, merged: the report keeps them apart (their parameters were stored
    where the report did not look, and they were pooled: the review)."""
    (tmp_path / "splitsim.py").write_text(
        "from hybridsched import Technique\n\n\nclass BySize(Technique):\n"
        "    deterministic = True\n\n    def chunk(self, remaining, request, worker):\n"
        "        return int(self.params['size'])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    shape = ["-s", "dynamic", "-k", "1", "-L", "40", "--height", "8", "--width", "16",
             "--reps", "1", "-P", "2", "--split", "splitsim:BySize"]
    for size in (2, 5):
        p = subprocess.run([*HS, "simulate", *shape, "--param", f"size={size}", "-o",
                            str(tmp_path / f"s{size}.h5")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    p = subprocess.run([*HS, "merge", "s2.h5", "s5.h5", "-o", "both.h5"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rep = subprocess.run([*HS, "report", "both.h5", "--no-plots"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    assert "(size=2)] — P = 2" in rep.stdout and "(size=5)] — P = 2" in rep.stdout, rep.stdout
