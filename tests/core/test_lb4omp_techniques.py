"""The LB4OMP portfolio (techniques/): each deterministic technique against its formula
and LB4OMP's rounding, the adaptive ones driven by fake chunk timings, every technique on
the thread backend and on pipe-MtoM on odd shapes, and auto converging on the technique
that is fastest by construction."""
from __future__ import annotations

import itertools
import math
import os

import pytest
from hypothesis import given, settings, strategies as st

from schedcheck import ODD_SHAPES, run_and_check

from hybridsched import cli
from hybridsched.core import policies, registry, techniques as tq
from hybridsched.core.techniques import adaptive, auto, dispense
from hybridsched.core.techniques.profiled import Profile

PROFILE = Profile(mu=1e-4, sigma=4e-5, h=1e-6, speeds=(1.0, 1.0, 1.0, 1.0))
# p >= 2: at one worker every LB4OMP technique hands out [0, N) in one chunk (tested apart)
GRID = dict(n=st.integers(1, 3000), p=st.integers(2, 17), c=st.integers(1, 40))
NON_INCREASING = ("trapezoidal", "fac2", "fac2a", "fac2b", "tfss", "fac", "faca", "tap")
NON_DECREASING = ("fiss", "viss")


def sizes(name, n, p, c, **params):
    return [cnt for _, cnt in tq.sequence(name, n, p, c, params or None, PROFILE)]


@pytest.mark.parametrize("name", tq.FIXED)
@settings(max_examples=60, deadline=None)
@given(**GRID)
def test_every_frame_handed_out_once(name, n, p, c):
    seq = tq.sequence(name, n, p, c, None, PROFILE)
    assert [f for f, _ in seq] == [0] + list(__import__("itertools").accumulate(x for _, x in seq))[:-1]
    assert sum(x for _, x in seq) == n and all(x >= 1 for _, x in seq)
    b = tq.bounds(name, n, p, c, None, PROFILE)
    assert b[0] == 0 and b[-1] == n and len(b) == len(seq) + 1


@pytest.mark.parametrize("name", NON_INCREASING)
@settings(max_examples=60, deadline=None)
@given(**GRID)
def test_decreasing_techniques_never_grow(name, n, p, c):
    s = sizes(name, n, p, c)[:-1]  # the last chunk is cut at N
    assert all(a >= b for a, b in zip(s, s[1:]))


@pytest.mark.parametrize("name", NON_DECREASING)
@settings(max_examples=60, deadline=None)
@given(**GRID)
def test_increasing_techniques_never_shrink(name, n, p, c):
    s = sizes(name, n, p, c)[:-1]
    assert all(a <= b for a, b in zip(s, s[1:]))


@settings(max_examples=80, deadline=None)
@given(**GRID)
def test_fac2_formula(n, p, c):
    want, left, i = [], n, 0
    while left > 0:
        x = min(left, max(c, math.ceil(0.5 ** (i // p + 1) * n / p)))
        want.append(x)
        left -= x
        i += 1
    assert sizes("fac2", n, p, c) == want == sizes("fac2b", n, p, c)


@settings(max_examples=80, deadline=None)
@given(**GRID)
def test_fac2a_halves_with_a_ceiling_per_batch(n, p, c):
    s = sizes("fac2a", n, p, c)
    b0 = min(n, math.ceil(n / (2 * p)))
    assert s[0] == min(n, max(c, b0))
    if len(s) > p + 1:
        assert s[p] == max(c, math.ceil(b0 / 2))


@settings(max_examples=200, deadline=None)
@given(**GRID)
def test_trapezoidal_ends_within_llvms_step_count(n, p, c):
    from hybridsched.core.techniques.deterministic import Trapezoidal, hand_out

    r = Trapezoidal(n, p, c)
    assert len(hand_out(r)) <= r.steps  # the fallback past the last step is never needed


def test_pls_without_a_static_part_is_gss_from_the_start():
    assert sizes("pls", 7, 2, 1, pls_swr=0.0) == [4, 2, 1]  # was 1, 1, 4, 1


def test_trapezoidal_matches_llvm_integer_arithmetic():
    # N=1000, P=4: F = 125, L = 1, 16 steps, delta = (125 - 1) // 15 = 8
    assert sizes("trapezoidal", 1000, 4, 1)[:4] == [125, 117, 109, 101]


@settings(max_examples=80, deadline=None)
@given(**GRID)
def test_fiss_mfsc_pls_viss_formulas(n, p, c):
    s_ = p - 1
    c0 = max(c, math.floor(n / ((s_ + 2) * p)))
    assert sizes("fiss", n, p, c)[0] == min(n, max(1, c0))
    t = (n + p - 1) // p
    m = max(c, int(0.55 + t * math.log(2) / math.log(t)) if t > 1 else 1)
    assert set(sizes("mfsc", n, p, c)[:-1]) <= {m}
    assert sizes("pls", n, p, c)[0] == min(n, max(c, math.ceil(n * 0.5 / p)))
    assert sizes("pls", n, p, c, pls_swr=0.25)[0] == min(n, max(c, math.ceil(n * 0.25 / p)))
    # SWR 0: no static part, GSS over all N from the first chunk
    assert sizes("pls", n, p, c, pls_swr=0.0)[0] == min(n, max(c, math.ceil(n / p)))
    assert sizes("viss", n, p, c)[0] == min(n, max(1, n // (p * p)))
    assert sizes("viss", n, p, c, viss_param=1)[0] == min(n, max(1, n // p))


def test_fiss_stages_option_changes_the_step():
    a, b = sizes("fiss", 1000, 4, 1), sizes("fiss", 1000, 4, 1, fiss_stages=2)
    assert a != b and b[0] == 1000 // (4 * 4)


@settings(max_examples=40, deadline=None)
@given(**GRID)
def test_by_index_rules_ignore_the_remaining_count(n, p, c):
    for name in tq.BY_INDEX:
        r = tq.rule(name, n, p, c, None, PROFILE)
        assert [r.size(i, n) for i in range(8)] == [r.size(i, 1) for i in range(8)]


def test_rnd_is_a_pure_function_of_the_step_and_seed():
    a, b = sizes("rnd", 500, 4, 9), sizes("rnd", 500, 4, 9)
    assert a == b and max(a[:-1]) <= 9 and len(set(a)) > 1
    assert sizes("rnd", 500, 4, 9, seed=1) != a


@settings(max_examples=60, deadline=None)
@given(**GRID)
def test_static_steal_ranges_cover_all_chunks(n, p, c):
    size, ranges = tq.steal_blocks(n, p, c)
    if size == 0:  # fewer chunks than workers: one balanced block per worker
        assert -(-n // c) < p
        blocks = [tq.balanced_block(n, p, lo) for lo, hi in ranges if hi > lo]
        assert [f for f, _ in blocks] == list(itertools.accumulate([0] + [b for _, b in blocks]))[:-1]
        assert sum(b for _, b in blocks) == n and max(b for _, b in blocks) - min(b for _, b in blocks) <= 1
        return
    assert ranges[0][0] == 0 and ranges[-1][1] == -(-n // size)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("name", tq.NAMES)
def test_one_worker_gets_the_whole_loop_as_one_chunk(name):
    """LB4OMP at one thread: [0, N) in a single chunk, every technique (issue 24 item 6)."""
    d = dispense.dispenser(name, 1000, 1, 7, tq.check_params(None), PROFILE)
    assert d.claim(0) == (0, 1000) and d.claim(0) is None
    if name in tq.FIXED:
        assert tq.sequence(name, 1000, 1, 7, None, PROFILE) == [(0, 1000)]


def test_static_steal_falls_back_to_balanced_blocks_ignoring_the_chunk():
    """N = 37, chunk 4, 24 workers: ceil(37/4) = 10 chunks < 24, so 13 blocks of 2 and 11
    of 1 (LB4OMP), not 37 chunks of 1."""
    rows = policies.plan("static_steal", 37, 24, 4)
    assert sorted(r.count for r in rows) == [1] * 11 + [2] * 13
    assert [r.worker for r in rows] == list(range(24))
    d = dispense.StaticSteal(37, 24, 4)
    got = [d.claim(w) for w in range(24)]
    assert got[:2] == [(0, 2), (2, 2)] and got[-1] == (36, 1)
    assert all(d.claim(w) is None for w in range(24))


def test_static_steal_idle_workers_steal_everything():
    d = dispense.StaticSteal(100, 4, 3)
    got = []
    while (c := d.claim(1)) is not None:  # worker 1 first: its own range, then steals
        got.append(c)
    for w in (0, 2, 3):  # a victim's last chunk is its owner's (LB4OMP never steals it)
        while (c := d.claim(w)) is not None:
            got.append(c)
    assert sorted(f for f, _ in got) == list(range(0, 100, 3)) and d.steals > 0
    assert len(got) > 30 and sum(c for _, c in got) == 100


def test_plan_prints_every_deterministic_technique(capsys):
    for name in policies.TECHNIQUE_PLANS:
        assert cli.main(["plan", "--policy", name, "--tasks", "37", "--workers", "3"]) == 0
        rows = capsys.readouterr().out.split()[1:]
        assert sum(int(r.split(",")[2]) for r in rows) == 37


def test_plan_rejects_parameters_of_other_policies(capsys):
    assert cli.main(["plan", "--policy", "guided", "--tasks", "9", "--workers", "2",
                     "--fiss-stages", "2"]) == 2
    assert "takes no technique parameters" in capsys.readouterr().err


# --- adaptive techniques on fake timings ---------------------------------------------------

def simulate(learner, speeds, n):
    """Event simulation: worker w runs a frame in speeds[w] s; returns frames per chunk
    per worker and checks every frame is handed out once."""
    p = len(speeds)
    free = [0.0] * p
    nxt, chunks = 0, [[] for _ in range(p)]
    active = set(range(p))
    while active:
        w = min(active, key=lambda v: free[v])
        now = free[w]
        if nxt >= n:
            learner.finish(w, now)
            active.discard(w)
            continue
        c = min(max(1, learner.size(w, n - nxt, now)), n - nxt)
        nxt += c
        free[w] = now + c * speeds[w]
        learner.done(w, c, c * speeds[w])
        chunks[w].append(c)
    assert nxt == n
    return chunks


@pytest.mark.parametrize("name", ["awf_b", "awf_c", "awf_d", "awf_e"])
def test_a_slow_worker_gets_a_smaller_weight(name):
    lr = adaptive.LEARNERS[name](40000, 2, 1)
    fast, slow = simulate(lr, [1e-4, 2e-4], 40000)
    assert len(slow) > 1 and lr.weights[1] < 0.75 < 1.25 < lr.weights[0]


@pytest.mark.parametrize("name", ["af", "af_a"])
def test_a_slow_worker_gets_smaller_chunks(name):
    lr = adaptive.LEARNERS[name](4000, 2, 1)
    fast, slow = simulate(lr, [1e-4, 4e-4], 4000)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(slow[1:]) < mean(fast[1:])


def test_awf_learns_weights_across_executions():
    hist = adaptive.AwfHistory(2)
    for _ in range(3):
        lr = adaptive.Awf(2000, 2, 1, None, {"awf_history": hist})
        simulate(lr, [1e-4, 3e-4], 2000)
    assert hist.weights[1] < hist.weights[0] and math.isclose(sum(hist.weights), 2)


def test_wf_takes_its_weights_from_the_profile():
    lr = adaptive.Wf(1000, 2, 1, Profile(1e-4, 0, speeds=(1.5, 0.5)))
    assert lr.weights[0] == 3 * lr.weights[1]


@pytest.mark.parametrize("sigma", [0.0, 2e-5, 3e-4])
def test_bold_hands_out_every_frame(sigma):
    simulate(adaptive.Bold(3000, 3, 1, Profile(1e-4, sigma)), [1e-4, 1e-4, 2e-4], 3000)


# --- every technique on threads and pipe-MtoM ---------------------------------------------

THREAD_NAMES = registry.names("thread", technique=True)
PIPE_SHAPES = [ODD_SHAPES[0], ODD_SHAPES[4], ODD_SHAPES[-1]]


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
@pytest.mark.parametrize("name", THREAD_NAMES)
def test_thread_backend(name, shape):
    run_and_check(name, shape)


@pytest.mark.parametrize("shape", PIPE_SHAPES, ids=str)
@pytest.mark.parametrize("name", THREAD_NAMES)
def test_pipe_mtom(name, shape, no_leaks):
    run_and_check(f"pipe-MtoM:{name}", shape)


def test_techniques_are_not_paper_schedulers():
    assert not set(registry.paper_names()) & set(THREAD_NAMES)
    assert "pipe-MtoM:fac2" not in registry.names(everything=False)
    assert len(auto.PORTFOLIO) >= 12


# --- auto ------------------------------------------------------------------------------------

def test_racing_settles_on_the_fastest_by_construction():
    base = {a: 1.0 + 0.04 * i for i, a in enumerate(reversed(auto.PORTFOLIO))}
    fastest = auto.PORTFOLIO[-1]
    r = auto.Racing()
    for i in range(100):
        a = r.choose()
        noise = 1.0 + 0.02 * math.sin(i * 1.7)  # deterministic jitter
        r.record(a, base[a] * noise)
    assert r.settled and r.leader() == fastest
    # 27 techniques: 27 + 9 + 3 x 6 executions race, then the settled one plays
    assert len(auto.PORTFOLIO) == 27 and auto.race_length(27) == 54
    assert [a for a, _ in r.history[54:]] == [fastest] * 46
    assert r.plays[fastest] == auto.FINAL_SAMPLES + 46


def test_racing_compares_equal_sample_counts():
    # a lucky first sample of b cannot outlast a's consistently better later ones, and
    # a's many samples never count against b's few: rounds compare the first `target`
    r = auto.Racing(arms=("a", "b", "c", "d"), keep=2)
    times = {"a": [1.10] + [1.00] * 7, "b": [1.05] + [1.20] * 7, "c": [2.0], "d": [2.0]}
    seen = {a: 0 for a in times}
    while not r.settled:
        a = r.choose()
        r.record(a, times[a][seen[a]])
        seen[a] += 1
    assert r.leader() == "a"
    assert [a for a, _ in r.history] == ["a", "b", "c", "d"] + ["a", "b"] * 7
    assert auto.race_length(4, keep=2) == len(r.history)


def test_racing_plays_survivors_round_robin():
    r = auto.Racing(arms=tuple("abcdefghi"), keep=3)
    for a in "abcdefghi":
        assert r.choose() == a
        r.record(a, {"c": 1.0, "f": 1.1, "h": 1.2}.get(a, 5.0))
    assert r.alive == ("c", "f", "h")
    assert r.target == auto.FINAL_SAMPLES  # the finalists: more samples each
    order = []
    while not r.settled:
        a = r.choose()
        order.append(a)
        r.record(a, 1.0)
    assert order == ["c", "f", "h"] * (auto.FINAL_SAMPLES - 1) and r.leader() == "c"


def test_auto_dispenser_records_what_the_backend_timed_once():
    r = auto.Racing(arms=("x", "y"))
    for _ in range(4):
        d = auto.AutoDispenser(r, lambda name: registry.get("dynamic").dispenser(10, 2, 5, None), 10)
        while (c := d.claim(0)) is not None:
            d.done(0, c[1], 0.0)
        d.executed(0.5)
        d.executed(9.0)  # a second word changes nothing
    assert [a for a, _ in r.history] == ["x", "y", "x", "x"]  # a tie settles by order
    assert all(t == 0.5 for _, t in r.history)
    d = auto.AutoDispenser(r, lambda name: registry.get("dynamic").dispenser(10, 2, 5, None), 10)
    d.stop()
    d.executed(0.1)  # a stopped execution (Ctrl-C, a failed worker) teaches nothing
    assert len(r.history) == 4


def test_racing_drops_a_failed_arm_and_goes_on():
    r = auto.Racing(arms=("a", "b", "c", "d"), keep=2)
    r.record(r.choose(), 1.0)  # a
    r.drop(r.choose(), "b broke")  # b fails: the round ends with a, c, d
    r.record(r.choose(), 2.0)  # c
    r.record(r.choose(), 3.0)  # d: the round is complete without b
    assert r.dropped == {"b": "b broke"} and r.alive == ("a", "c")
    r.record("b", 0.1)  # a late word from the dropped arm's execution changes nothing
    assert "b" not in r.alive and r.plays["b"] == 0
    for arm in ("a", "c"):
        r.drop(arm, f"{arm} broke")
    with pytest.raises(Exception, match="every technique of the portfolio failed: b: b broke"):
        r.choose()


NEG = ("from hybridsched import Technique\n\n\nclass Neg(Technique):\n"
       "    def chunk(self, remaining, request, worker):\n        return -3\n\n\n"
       "class Two(Technique):\n    deterministic = True\n\n"
       "    def chunk(self, remaining, request, worker):\n        return 2\n")


def _neg_module(tmp_path) -> str:
    (tmp_path / "negmod.py").write_text(NEG)
    return os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))


def _hs(tmp_path, *argv):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hybridsched", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=_neg_module(tmp_path)))


def test_auto_drops_a_failing_portfolio_member_and_races_the_others(tmp_path):
    """Issue 33 item 14: all five repetitions failed on the one failing technique."""
    from hybridsched.store import read_runs

    out = tmp_path / "a.h5"
    p = _hs(tmp_path, "run", "-s", "auto", "--portfolio", "negmod:Neg,fac2,guided", "-k", "2",
            "-L", "24", "--height", "8", "--width", "16", "--reps", "5", "-o", str(out))
    assert p.returncode == 1 and p.stderr.count("FAILED") == 1, p.stderr
    runs = read_runs(str(out))
    assert list(runs["verified"]) == [False, True, True, True, True]
    assert runs["technique"][0] == "negmod:Neg" and "chunk() returned -3" in runs["error"][0]
    assert set(runs["technique"][1:]) <= {"fac2", "guided"}
    assert all("dropped from the portfolio: neg" in n for n in runs["notes"])


def test_auto_sim_drops_a_failing_member_and_names_it(tmp_path):
    """Issue 33 item 13: every run failed and the error blamed the 'profiling run'."""
    import json

    import h5py

    from hybridsched.store import read_runs

    out = tmp_path / "s.h5"
    p = _hs(tmp_path, "run", "-s", "auto-sim", "--portfolio", "negmod:Two,negmod:Neg", "-k", "2",
            "-L", "24", "--height", "8", "--width", "16", "--reps", "2", "-o", str(out))
    assert p.returncode == 0, p.stderr
    runs = read_runs(str(out))
    assert runs["verified"].all() and set(runs["technique"]) == {"negmod:Two"}
    with h5py.File(out) as h5:
        extra = json.loads(h5["detail"]["000000"].attrs["extra"])
    assert "chunk() returned -3" in extra["auto_sim"]["dropped"]["neg"]
    p = _hs(tmp_path, "run", "-s", "auto-sim", "--portfolio", "negmod:Neg", "-k", "2", "-L", "24",
            "--height", "8", "--width", "16", "--reps", "1", "-o", str(tmp_path / "t.h5"))
    assert p.returncode == 1 and "profiling run" not in p.stderr, p.stderr
    assert "auto-sim's preparation: every technique of the portfolio failed: neg: technique neg" in p.stderr


def test_auto_runs_a_fixed_hand_out_compiled_and_a_learning_one_in_python(tmp_path):
    from hybridsched.store import read_runs

    out = tmp_path / "a.h5"
    n = len(auto.PORTFOLIO)
    assert cli.main(["run", "-s", "auto", "-k", "2", "--frames", "40", "--height", "2",
                     "--width", "4", "--reps", str(n), "--out", str(out)]) == 0
    runs = read_runs(str(out))
    assert [str(t) for t in runs["technique"]] == list(auto.PORTFOLIO)
    assert runs["verified"].all()
    for tech, note in zip(runs["technique"], runs["notes"]):
        fixed = registry.get(str(tech)).sequence is not None
        assert ("dispatch=compiled" in str(note)) == fixed, (tech, note)
        assert f"auto chose {tech}" in str(note)


def test_auto_records_its_choice_and_the_report_shows_it(tmp_path, capsys):
    from hybridsched.store import read_runs

    out = tmp_path / "a.h5"
    assert cli.main(["run", "-s", "serial,fac2,auto", "-k", "2", "--frames", "6", "--height",
                     "2", "--width", "4", "--reps", "3", "--out", str(out)]) == 0
    runs = read_runs(str(out))
    techs = [str(t) for t in runs["technique"][runs["scheduler"] == "auto"]]
    assert techs == list(auto.PORTFOLIO[:3])
    assert set(str(t) for t in runs["technique"][runs["scheduler"] != "auto"]) == {""}
    capsys.readouterr()
    assert cli.main(["report", str(out), "--no-plots", "--out-dir", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert "## auto: the technique chosen at each repetition" in text
    assert ", ".join(auto.PORTFOLIO[:3]) in text
    assert "### Workload uniform, k = 2" in text and "Best at L = 6: **" in text


def test_percent_imbalance_is_the_papers_formula():
    from hybridsched.results.portfolio import percent_imbalance

    assert percent_imbalance([1.0, 1.0]) == 0.0
    assert percent_imbalance([1.0, 3.0]) == pytest.approx(50.0)  # max 3 / mean 2 - 1
    assert math.isnan(percent_imbalance([]))


# --- MPI --split <technique> -------------------------------------------------------------

@pytest.mark.parametrize("split", ["fac2", "trapezoidal", "fiss", "pls"])
@pytest.mark.parametrize("L,P,k", [(1, 1, 1), (10, 2, 1), (97, 3, 4), (1000, 8, 24)])
def test_split_chunks_are_the_techniques_sequence(split, L, P, k):
    from hybridsched.core.splits import dynamic_chunks, inter_node_min_chunk

    chunks = dynamic_chunks(L, P, k, split)
    assert chunks == tq.sequence(split, L, P, inter_node_min_chunk(k))
    assert sum(c for _, c in chunks) == L


@pytest.mark.parametrize("split", ["fac2", "trapezoidal"])
def test_mpiexec_split_by_technique(mpi, tmp_path, split):
    from mpicheck import SMALL, check_cover
    from hybridsched.store import read_runs

    out = str(tmp_path / f"{split}.h5")
    p = mpi.run(["run", "-s", "dynamic,fac2", "-k", "1", "-L", "30", *SMALL, "--split", split,
                 "-o", out])
    assert p.returncode == 0, p.stderr
    runs = read_runs(out)
    assert runs["verified"].all() and all(n.startswith(f"split={split}") for n in runs["notes"])
    for extra in check_cover(out, 30):
        assert extra["split"] == split and sum(extra["rank_frames"]) == 30


# --- a lost pipe worker, technique parameters through a study ---------------------------

@pytest.mark.parametrize("name", ["fac2", "static_steal", "awf_b", "auto"])
def test_pipe_mtom_technique_survives_a_lost_worker(name, monkeypatch, no_leaks):
    """A dead worker's unacknowledged chunks, and what the technique still held for it
    (static_steal's range), go to the survivors; every frame runs once."""
    from schedcheck import Shape, config

    from hybridsched.oslayer.proctree import FAULT_ENV
    from hybridsched.study.runner import timed_run
    from hybridsched.workloads.slab import Slab

    monkeypatch.setenv(FAULT_ENV, "1:1:kill")  # at its first chunk: auto may pick static
    # frames long enough (~0.2 s of sorting in all) that worker 1 starts before the others
    # have taken every chunk, however loaded the machine (with 40 of 16 x 64 they sometimes
    # had, and no worker was lost)
    cfg = config(f"pipe-MtoM:{name}", Shape("fault", 400, 64, 256, 3))
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
    assert rec.verified and rec.lost_workers == 1, rec.error
    covered = [0] * 400
    for r in rec.trace:
        for f in range(int(r["first"]), int(r["first"]) + int(r["count"])):
            covered[f] += 1
    assert covered == [1] * 400


def test_technique_parameters_are_stored_resumed_and_reported_apart(tmp_path, capsys):
    from hybridsched.store import read_runs

    out = str(tmp_path / "p.h5")
    base = ["run", "-s", "serial,fiss,fac2", "-k", "2", "--frames", "12", "--height", "2",
            "--width", "4", "--reps", "1", "--out", out, "--fiss-stages", "2"]
    assert cli.main(base) == 0
    assert cli.main(base + ["--resume"]) == 0  # nothing left to run
    runs = read_runs(out)
    assert len(runs) == 3
    got = {str(r["scheduler"]): str(r["params"]) for r in runs}
    assert got == {"serial": "", "fiss": "fiss_stages=2", "fac2": ""}
    capsys.readouterr()
    assert cli.main(["report", out, "--no-plots", "--out-dir", str(tmp_path / "r")]) == 0
    assert "| fiss (fiss_stages=2) |" in capsys.readouterr().out


def test_a_technique_option_no_scheduler_reads_is_refused(tmp_path, capsys):
    from hybridsched.cli import main

    out = str(tmp_path / "x.h5")
    assert main(["run", "-s", "dynamic", "-k", "2", "-L", "8", "--height", "4", "--width", "8",
                 "--reps", "1", "--pls-swr", "0.3", "-o", out]) == 2
    err = capsys.readouterr().err
    assert "--pls-swr" in err and len(err.strip().splitlines()) == 1 and not os.path.exists(out)


def test_every_technique_has_a_dispenser_builder_and_awf_alone_keeps_history():
    assert set(dispense.BUILDERS) == set(tq.NAMES)
    assert [n for n, cls in adaptive.LEARNERS.items() if cls.keeps_history] == ["awf"]
