"""Fits that say how sure they are (results/fitcheck.py): one test per warning, the
"0 (at bound)" print, the cores marked on the plot and the (P, k) pairs told apart."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.cli import main
from hybridsched.records import RunConfig, RunRecord
from hybridsched.results import fit as F
from hybridsched.results import fitcheck, fitplot
from hybridsched.store import StudyWriter

NS9 = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24])


def _usl(ns, alpha, beta):
    return F.usl_throughput(ns, 1.0, alpha, beta)


def _has(res, text) -> bool:
    return any(text in w for w in res["warnings"])


def test_three_points_leave_too_few_degrees_of_freedom():
    ns = np.array([1, 2, 4])
    res = F.fit(F.Data(ns, _usl(ns, 0.05, 0.001)), "usl")
    assert _has(res, "leave 1 degree(s) of freedom")
    assert "WARNING: 3 points for 2 fitted parameter(s)" in F.text(res)
    ok = F.fit(F.Data(NS9, _usl(NS9, 0.05, 0.001)), "usl")  # 7 degrees of freedom: quiet
    assert not _has(ok, "degree(s) of freedom")
    # amdahl fits one parameter: 3 points leave 2, enough
    assert not _has(F.fit(F.Data(ns, _usl(ns, 0.05, 0.0)), "amdahl"), "degree(s) of freedom")


def test_points_beyond_the_physical_cores_are_warned_and_marked():
    res = F.fit(F.Data(NS9, _usl(NS9, 0.01, 0.001), cores=8), "usl")
    assert _has(res, "N = 12, 16, 24 exceed the 8 physical cores")
    fig = fitplot.figure(res)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "N = 8 physical cores" in labels and any("oversubscribed" in t for t in labels)
    quiet = F.fit(F.Data(NS9, _usl(NS9, 0.01, 0.001), cores=24), "usl")
    assert not _has(quiet, "physical cores")
    fig = fitplot.figure(quiet)
    assert not any("physical" in t.get_text() for t in fig.axes[0].get_legend().get_texts())


def test_a_parameter_at_its_bound_prints_as_at_bound():
    # pure Amdahl (beta = 0) and a slightly super-Amdahl point: beta is pushed onto 0
    y = _usl(NS9, 0.02, 0.0)
    y[-1] *= 1.01
    res = F.fit(F.Data(NS9, y), "usl")
    assert res["params"]["beta"].get("at_bound") is True
    assert _has(res, "beta sits at its bound 0")
    text = F.text(res)
    beta_line = [ln for ln in text.splitlines() if ln.strip().startswith("beta ")][0]
    assert beta_line.split() == ["beta", "0", "(at", "bound)"]  # no 1.6e-14, no interval
    clean = F.fit(F.Data(NS9, _usl(NS9, 0.02, 0.001)), "usl")
    assert not _has(clean, "bound") and "(at bound)" not in F.text(clean)


def _param(v, lo, hi):
    return {"value": v, "stderr": (hi - lo) / 4, "ci": [lo, hi]}


def test_regression_and_nonlinear_fit_disagreeing_beyond_their_intervals():
    res = {"model": "usl", "n_points": 9, "data": {"N": list(NS9)},
           "params": {"alpha": _param(0.02, 0.015, 0.025), "beta": _param(0.001, 0.0009, 0.0011)},
           "linear": {"alpha": _param(0.05, 0.04, 0.06), "beta": _param(0.001, 0.0008, 0.0012)}}
    w = fitcheck.warnings(res)
    assert len(w) == 1 and "Eq. 23 regression (alpha 0.05" in w[0] and "disagree" in w[0]
    res["linear"]["alpha"] = _param(0.022, 0.01, 0.03)  # overlapping: no warning
    assert fitcheck.warnings(res) == []
    # on exact USL data both ways agree
    good = F.fit(F.Data(NS9, _usl(NS9, 0.03, 0.0005)), "usl")
    assert not _has(good, "disagree")


def test_usl_plot_tells_the_P_k_pairs_of_one_N_apart():
    P = np.array([1, 1, 2, 1, 2, 4, 2, 4])
    k = np.array([1, 2, 1, 4, 2, 1, 4, 2])
    n = P * k
    res = F.fit(F.Data(n, _usl(n, 0.03, 0.002), "speedup", "", P, k), "usl")
    fig = fitplot.figure(res)
    notes = {t.get_text() for t in fig.axes[0].texts}
    assert {"1×4", "2×2", "4×1", "2×4", "4×2"} <= notes
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"measured, P = 1", "measured, P = 2", "measured, P = 4"} <= set(labels)


def test_study_fit_warns_about_oversubscription_from_the_recorded_cores(tmp_path, capsys):
    path = str(tmp_path / "s.h5")
    with StudyWriter(path, {"N": 2, "cpu_count_physical": 2}, {}) as w:
        w.append(RunRecord(RunConfig("serial", 1, 64, 8, 8), "serial", 1.0, True))
        for k, t in ((1, 1.0), (2, 0.52), (3, 0.5), (4, 0.49)):
            w.append(RunRecord(RunConfig("dynamic", k, 64, 8, 8), "thread", t, True))
    assert main(["fit", path, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["cores"] == 2 and any("N = 3, 4 exceed the 2 physical cores" in w
                                     for w in res["warnings"])
    assert main(["fit", path, "--cores", "4"]) == 0
    assert "physical cores" not in capsys.readouterr().out


def test_csv_fit_prints_warnings_and_plots(tmp_path, capsys):
    csv = tmp_path / "p.csv"
    csv.write_text("N,speedup\n1,1\n2,1.9\n4,3.5\n")
    png = tmp_path / "p.png"
    assert main(["fit", str(csv), "--cores", "2", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.count("WARNING:") >= 2 and "exceeds the 2 physical cores" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, value, text", [("alpha", 0.0, "0 (at bound)"),
                                                ("alpha", 1.0, "1 (at bound)"),
                                                ("beta", 1.6e-14, "0 (at bound)"),
                                                ("beta", 2e-5, "2e-05")])
def test_value_text(name, value, text):
    assert fitcheck.value_text(name, {"value": value}) == text
