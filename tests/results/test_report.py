"""`hybridsched report`: tables, family comparison, claims, CSV and PNG files.

Two kinds of study: a synthetic one written through StudyWriter with chosen times (so the
table figures can be checked by hand), and a small real sweep over every scheduler.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os

import numpy as np
import pytest

from hybridsched import cli
from hybridsched.core import registry as schedulers
from hybridsched.records import RunConfig, RunRecord, WORKER_DTYPE
from hybridsched.results.data import load_study, summarise
from hybridsched.results.report import build_report
from hybridsched.store import StudyWriter, read_runs
from hybridsched.study.spec import StudySpec
from hybridsched.study.session import run_configurations
from repo import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def _rec(s, fam, k, t, rep=0, L=100, verified=True, chunk=0, affinity=True):
    w = np.zeros(k, WORKER_DTYPE)
    w["start"], w["end"] = 0.0, t
    w["user"] = t * 0.9  # each worker busy 90 % of the run
    return RunRecord(RunConfig(s, k, L, 8, 8, chunk, affinity, rep), fam, t, verified, workers=w)


@pytest.fixture
def synthetic(tmp_path):
    """serial 1.0/1.2 s (mean 1.1); dynamic k=2 0.55/0.6 s plus an unverified 0.1 s run;
    prolific k=2 0.59 s (2.6 % slower than dynamic's 0.575) and k=4 0.9 s;
    pipe-1to1 k=2 0.578 s (0.52 % slower than dynamic: practically equivalent)."""
    path = str(tmp_path / "syn.h5")
    recs = [_rec("serial", "serial", 1, 1.0, 0), _rec("serial", "serial", 1, 1.2, 1),
            _rec("dynamic", "thread", 2, 0.55, 0), _rec("dynamic", "thread", 2, 0.6, 1),
            _rec("dynamic", "thread", 2, 0.1, 2, verified=False),
            _rec("dynamic", "thread", 4, 0.6, 0),
            _rec("prolific", "process", 2, 0.59, 0), _rec("prolific", "process", 4, 0.9, 0),
            _rec("pipe-1to1", "pipe", 2, 0.578, 0)]
    for i, r in enumerate(recs):
        r.extra["foreign_cpu"] = 0.3 if i == 3 else 0.01  # one run timed beside a neighbour
    with StudyWriter(path, {"N": 2, "cpus_usable": 2, "cpu_model": "test"}, {}) as w:
        for r in recs:
            w.append(r)
    return path


def test_table_figures_by_hand(synthetic, tmp_path):
    study = load_study(synthetic)
    assert study.n == 2
    rows = {(r.scheduler, r.k): r for r in summarise(study.runs, study.n, study.util, study.foreign)}
    dyn = rows[("dynamic", 2)]
    # unverified 0.1 s excluded: mean (0.55 + 0.6) / 2 = 0.575; sigma = 1.1 / 0.575
    assert dyn.reps == 2 and dyn.failed == 1
    assert dyn.t_mean == pytest.approx(0.575)
    assert dyn.sigma == pytest.approx(1.1 / 0.575)
    assert dyn.sigma_e == pytest.approx(1.1 / 0.575 / 2)
    # sigma 1.913 < k: alpha = (0.575/1.1 - 0.5) / 0.5, not flagged
    assert dyn.alpha == pytest.approx((0.575 / 1.1 - 0.5) / 0.5) and not dyn.alpha_flagged
    # E_p: P = (1/0.55, 1/0.6), P_max = 1/0.55 -> mean(1, 0.55/0.6)
    assert dyn.e_p == pytest.approx((1 + 0.55 / 0.6) / 2)
    # U_thread 0.9 per worker; U_N = 2 * 0.9 t / (2 * t) = 0.9
    assert dyn.u_thread == pytest.approx(0.9) and dyn.u_n == pytest.approx(0.9)
    # k = 4 on N = 2: epsilon at k_eff = 2, sigma = 1.1/0.6 = 1.8333
    d4 = rows[("dynamic", 4)]
    assert d4.epsilon == pytest.approx((0.6 / 1.1 - 0.5) / 0.5)

    text, files = build_report(study, str(tmp_path / "out"), plots=True)
    # the spread: mean ± sample sd (0.55, 0.6 -> 35.36 ms), min 550 ms; ‡: timed beside
    # a neighbour (median foreign share 15.5 % > 5 %)
    assert "| 2 | 575.00 ± 35.36 ‡ (2/3) | 550.00 | 1.913 | 0.957 |" in text
    assert dyn.t_std == pytest.approx(0.05 / 2 ** 0.5) and dyn.t_min == pytest.approx(0.55)
    assert "‡ other processes took more than 5 %" in text and "sample standard deviation" in text
    assert "T_serial (Eq. 4, `serial` runs): L = 100: 1100.00 ms (2 reps)" in text
    # 8 verified runs, one timed while others used 30 % of the CPUs (dynamic rep 1)
    # one run in eight disturbed is more than the one in ten a dedicated machine allows
    assert "median 1.0 %, max 30.0 %; 1 of 8 runs above 5 % — the machine was shared" in text
    assert dyn.foreign_cpu == pytest.approx((0.01 + 0.3) / 2)
    # Table 17 style at k = N = 2: dynamic fastest, pipe-1to1 +0.5 % -> practically
    # equivalent, prolific +2.6 % -> not
    fam = text.split("## Best scheduler per family")[1].split("## The paper's claims")[0]
    assert "**L = 100, k = 2** (k = N" in fam and "**L = 100, k = 4** (largest k" in fam
    at_n = fam.split("**L = 100, k = 4**")[0]
    lines = {ln.split("|")[1].strip(): ln for ln in at_n.splitlines() if ln.startswith("| ")}
    assert "fastest" in lines["thread"]
    assert "+0.5 % time — practically equivalent" in lines["pipe"]
    assert "+2.6 % time" in lines["process"] and "equivalent" not in lines["process"]
    names = {os.path.basename(f) for f in files}
    assert {"summary.csv", "best_per_family.csv", "claims.csv"} <= names
    assert {"speedup_dynamic.png", "speedup_prolific.png", "family_thread_L100.png"} <= names
    for f in files:
        if f.endswith(".png"):
            with open(f, "rb") as fh:
                assert fh.read(8) == PNG
    with open(tmp_path / "out" / "summary.csv") as fh:
        got = {(r["scheduler"], r["k"]): r for r in csv.DictReader(fh)}
    assert float(got[("dynamic", "2")]["t_mean"]) == pytest.approx(0.575)


def test_claims_on_synthetic_study(synthetic, tmp_path):
    text, _ = build_report(load_study(synthetic), None)
    claims = text.split("## The paper's claims")[1]
    # dynamic sigma_E at k = N = 2 is 0.957 (< the paper's near-ideal 0.97), but one of its
    # two runs was timed beside a neighbour (median 15.5 % > 5 %): no verdict from it
    assert ("- dynamic near-ideal up to k = N, L = 100 (the paper's 1000), 2 ≤ k ≤ 2: ours k=2: "
            "σE 0.957; paper σ 23.421 at k = 24 (σE = σ/24 = 0.976) → **cannot tell here** "
            "(shared machine: other processes took a median 16 % of the CPUs during the dynamic "
            "k = 2 runs, above 5 %)") in claims
    # no k = ⌈4N/3⌉ = 3: the fork collapse cannot be judged at the paper's 32
    assert ("prolific collapses pinned at k = ⌈4N/3⌉ (the paper's 32; not in this study), L = 100 (the paper's 1000): ours —; paper fork σ "
            "'roughly 15–16") in claims
    assert "**cannot tell here** (the study has no k = ⌈4N/3⌉ = 3 > N = 2)" in claims
    # the control at the largest pinned k = 4 says what it lacks
    assert "the control is incomplete at L = 100, k = 4" in claims
    assert "not in this study: pinned pipe-1to1 at a tuned chunk at k=2" in claims
    assert "not in this study: pinned aimd at k=2" in claims


def test_study_without_serial_says_so(tmp_path, capsys):
    path = str(tmp_path / "noserial.h5")
    with StudyWriter(path, {"N": 2}, {}) as w:
        w.append(_rec("dynamic", "thread", 2, 0.5))
    assert cli.main(["report", path, "--no-plots", "--out-dir", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "no verified `serial` runs" in out and "| 2 | 500.00 | 500.00 | — | — | — | 1.000 |" in out
    assert "resume with `--resume`" in out
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".png")]


def test_a_study_on_several_ranks_without_serial_is_told_to_merge(tmp_path, capsys):
    """Runs on several ranks are never resumed (refused at P = 1 and under mpiexec), so the
    advice to add `-s serial` with --resume could not be followed."""
    path = str(tmp_path / "ranks.h5")
    with StudyWriter(path, {"N": 2}, {}) as w:
        rec = _rec("dynamic", "thread", 2, 0.5)
        rec.config = dataclasses.replace(rec.config, P=2)
        w.append(rec)
    assert cli.main(["report", path, "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "no verified `serial` runs" in out and "--resume" not in out
    assert "at P = 1 (no mpiexec) into a new study and `hybridsched merge` the two" in out


def test_report_bad_file_is_usage_error(tmp_path, capsys):
    bad = tmp_path / "x.h5"
    bad.write_text("not hdf5")
    assert cli.main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a hybridsched study" in err


@pytest.fixture(scope="module")
def real_study(tmp_path_factory):
    """Every scheduler, k in {1, 2, 3}, two L, pipes also at a second chunk at k = 2,
    fork schedulers also unpinned: a miniature of the scaled preset (a few seconds)."""
    path = str(tmp_path_factory.mktemp("real") / "real.h5")
    # the paper's schedulers and variants; the LB4OMP techniques have core/test_lb4omp_techniques.py
    spec = StudySpec(schedulers=schedulers.names(technique=False), ks=[1, 2, 3], frames=[16, 32],
                     height=32,
                     width=32, reps=2, unpinned_families=["process"], tuned_k=2,
                     tuned_chunks={16: 4, 32: 8})
    spec.validate()
    with StudyWriter(path, {"N": 2, "cpus_usable": 2}, spec.to_dict()) as w:
        for _ in run_configurations(spec.configurations(), w.append):
            pass
    return path, spec


def test_report_on_real_study(real_study, tmp_path, capsys):
    path, spec = real_study
    runs = read_runs(path)
    assert len(runs) == len(spec.configurations())
    out_dir = tmp_path / "rep"
    assert cli.main(["report", path, "--out-dir", str(out_dir)]) == 0
    text = capsys.readouterr().out
    per = text.split("## Per scheduler")[1].split("## Best scheduler per family")[0]
    tables = {t.split("\n")[0]: t for t in per.split("### ")[1:]}
    for name in schedulers.names(technique=False):
        if name == "serial":
            continue
        head = [h for h in tables if h.startswith(f"{name} — affinity on, default chunk")]
        assert head, f"no table for {name}"
        body = tables[head[0]]
        for k in spec.ks:
            assert f"\n| {k} |" in body, f"{name}: no row k={k}"
        assert "T (ms) L=16" in body and "T (ms) L=32" in body
    for name in schedulers.names("process", technique=False):
        assert any(h.startswith(f"{name} — affinity off") for h in tables)
    for name in schedulers.names("pipe", technique=False):
        assert any(h.startswith(f"{name} — affinity on, chunk 4") for h in tables)
        assert (f"- {name} tuned chunk faster than chunk 1 at k = 2 = N (the paper's 24), L = 16 "
                "(the paper's 1000): ours chunk 4 ") in text  # claim 3 figures
    files = set(os.listdir(out_dir))
    for name in schedulers.names(technique=False):
        if name != "serial":
            assert f"speedup_{name}.png" in files
    for fam in ("thread", "process", "pipe"):
        assert f"family_{fam}_L16.png" in files and f"family_{fam}_L32.png" in files
    with open(out_dir / "summary.csv") as fh:
        rows = list(csv.DictReader(fh))
    got = {(r["scheduler"], int(r["k"]), int(r["L"])) for r in rows}
    for name in schedulers.names(technique=False):
        for L in spec.frames:
            for k in ([1] if name == "serial" else spec.ks):
                assert (name, k, L) in got
    # the CSV T is the mean of the stored verified times, to the last digit
    ok = runs[(runs["scheduler"] == "dynamic") & (runs["k"] == 2) & (runs["L"] == 16) & runs["verified"]]
    row = next(r for r in rows if (r["scheduler"], r["k"], r["L"]) == ("dynamic", "2", "16"))
    assert math.isclose(float(row["t_mean"]), float(ok["time_s"].mean()), rel_tol=1e-12)


def test_standalone_analysis_script_agrees(synthetic, tmp_path):
    import subprocess
    import sys

    script = os.path.join(ROOT, "analysis", "rebuild_tables.py")
    res = subprocess.run([sys.executable, script, synthetic, str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    # the same dynamic k=2 figures as the package's report (0.575 s mean, σ 1.913)
    assert "| 2 | 575.00 | 1.913 | 0.957 |" in res.stdout
    assert "speedup_dynamic.png" in os.listdir(tmp_path / "a")
    assert "tables.csv" in os.listdir(tmp_path / "a")


def test_disturbed_serial_is_flagged(tmp_path):
    """T_serial 1.0 s against dynamic's own k = 1 time of 0.8 s: +25 % -> a warning, and
    claim 1 (σE 1.176 at k=2) cannot be told rather than 'reproduces'."""
    path = str(tmp_path / "dist.h5")
    with StudyWriter(path, {"N": 2}, {}) as w:
        for r in (_rec("serial", "serial", 1, 1.0), _rec("dynamic", "thread", 1, 0.8),
                  _rec("dynamic", "thread", 2, 0.425)):
            w.append(r)
    text, _ = build_report(load_study(path), None)
    assert "T_serial is +25.0 % off the median k = 1 time of the thread schedulers" in text
    ln = next(x for x in text.splitlines() if x.startswith("- dynamic near-ideal"))
    assert "ours k=2: σE 1.176" in ln
    assert ln.endswith("→ **cannot tell here** (T_serial disturbed: +25.0 % off the k = 1 "
                       "thread times at L = 100)")


def test_summarise_keeps_mpi_ranks_apart_and_counts_p_times_k_units():
    import numpy as np

    from hybridsched.results.data import summarise
    from hybridsched.store import RUN_DTYPE, decode

    runs = decode(np.zeros(4, RUN_DTYPE))
    rows = [("serial", "serial", 1, 1, 8.0), ("serial", "serial", 2, 1, 2.0),  # P=2 serial: not T_serial
            ("dynamic", "thread", 1, 2, 4.0), ("dynamic", "thread", 2, 2, 2.5)]
    for i, (s, fam, P, k, t) in enumerate(rows):
        runs[i]["run_id"], runs[i]["scheduler"], runs[i]["family"] = i, s, fam
        runs[i]["P"], runs[i]["k"], runs[i]["L"], runs[i]["time_s"] = P, k, 100, t
        runs[i]["verified"], runs[i]["affinity"] = True, True
    out = {(r.scheduler, r.P): r for r in summarise(runs)}
    assert len(out) == 4
    one, two = out[("dynamic", 1)], out[("dynamic", 2)]
    assert one.sigma == pytest.approx(2.0) and one.sigma_e == pytest.approx(1.0)
    assert two.sigma == pytest.approx(8.0 / 2.5)
    assert two.sigma_e == pytest.approx(8.0 / 2.5 / 4)  # Eq. 19-20: P x k = 4 units


def test_standalone_analysis_script_keeps_mpi_ranks_apart(tmp_path):
    """A merged study with dynamic at P = 1 and P = 2 (k = 2 each): two tables, never one
    mean of both, and σE over P x k units for the MPI one."""
    import subprocess
    import sys
    from dataclasses import replace

    path = str(tmp_path / "mpi.h5")
    one = _rec("dynamic", "thread", 2, 0.5)
    two = _rec("dynamic", "thread", 2, 0.3)
    two.config = replace(two.config, P=2)
    with StudyWriter(path, {"N": 2}, {}) as w:
        for r in (_rec("serial", "serial", 1, 1.0), one, two):
            w.append(r)
    script = os.path.join(ROOT, "analysis", "rebuild_tables.py")
    res = subprocess.run([sys.executable, script, path, str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "### dynamic (affinity on, chunk default)\n" in res.stdout
    assert "### dynamic (affinity on, chunk default, P = 2 ranks)" in res.stdout
    assert "| 2 | 500.00 | 2.000 | 1.000 |" in res.stdout      # P = 1: σ 2 over 2 units
    assert "| 2 | 300.00 | 3.333 | 0.833 |" in res.stdout      # P = 2: σ 3.33 over 4 units
    assert "400.00" not in res.stdout                          # no mean across P


@pytest.mark.parametrize("kind", ["runs", "colocate"])
def test_report_reads_the_study_once(kind, tmp_path, request, capsys):
    """Issue 36 item 4: the report's every section (tables, Gantt charts, task costs, the
    portfolio's imbalances, side tables) reads from one open of the file (20 before, for a
    study with techniques and traces)."""
    if kind == "runs":
        path = str(tmp_path / "s.h5")
        assert cli.main(["run", "-s", "serial,dynamic,fac2", "-k", "1,2", "-L", "16", "--height", "16",
                         "--width", "16", "--reps", "2", "--seed", "1", "--out", path]) == 0
    else:
        path = os.path.join(ROOT, "tests", "fixtures", "colocate-v2.h5")
    capsys.readouterr()
    opened = request.getfixturevalue("h5_opens")  # counted from here on
    assert cli.main(["report", path, "--out-dir", str(tmp_path / "r")]) == 0
    files = os.listdir(tmp_path / "r")
    assert opened == [path]
    if kind == "runs":  # the sections that read per-run detail did run
        assert "gantt_dynamic.png" in files and "task_costs_0.png" in files
        assert "## Every technique at k = N" in capsys.readouterr().out  # the portfolio's imbalances
    else:
        assert "colocate_summary.csv" in files


@pytest.mark.parametrize("text, span", [
    ("./a.out 3", "`./a.out 3`"),
    ("echo `date`", "`` echo `date` ``"),
    ("sh -c 'a ``b``'", "```sh -c 'a ``b``'```"),
    ("`x`", "`` `x` ``"),
])
def test_a_command_is_one_code_span_whatever_backticks_it_has(text, span):
    """A command's own backticks closed the report's code span early and broke its heading
    (the hostile review): the fence is one backtick longer than the command's longest run,
    padded where the command begins or ends with one."""
    from hybridsched.results.data import code

    assert code(text) == span
