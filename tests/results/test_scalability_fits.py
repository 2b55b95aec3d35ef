"""Scalability fits: USL (Eq. 21-23), Amdahl (Eq. 6/8, 19/20), Gustafson (Eq. 9), from
synthetic data with known coefficients, CSV files and study files."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hybridsched.results import fit as F
from hybridsched.results import metrics
from hybridsched.cli import main
from hybridsched.records import RunConfig, RunRecord
from hybridsched.store import StudyWriter

NS = np.array([1, 2, 4, 8, 12, 16, 24, 32, 48, 64])


def _usl(alpha, beta, lam=1.0, ns=NS):
    return F.usl_throughput(ns, lam, alpha, beta)


def test_usl_recovers_known_coefficients_both_ways():
    res = F.fit(F.Data(NS, _usl(0.03, 0.0004)), "usl")
    assert res["alpha"] == pytest.approx(0.03, rel=1e-6)
    assert res["beta"] == pytest.approx(0.0004, rel=1e-6)
    assert res["lambda"] == pytest.approx(1.0, rel=1e-6)
    assert res["r2"] == pytest.approx(1.0)
    assert res["peak_N"] == pytest.approx(math.sqrt(0.97 / 0.0004), rel=1e-5)
    lin = res["linear"]  # Eq. 23 regression on the same points
    assert lin["alpha"]["value"] == pytest.approx(0.03, rel=1e-6)
    assert lin["beta"]["value"] == pytest.approx(0.0004, rel=1e-6)


def test_usl_on_throughput_fits_lambda():
    res = F.fit(F.Data(NS, _usl(0.1, 0.002, lam=250.0), "throughput"), "usl")
    assert (res["lambda"], res["alpha"], res["beta"]) == pytest.approx((250.0, 0.1, 0.002), rel=1e-5)
    assert res["lambda_fixed"] is False and "lambda" in res["params"]


def test_usl_on_speedups_fixes_lambda_at_one():
    """Eq. 21 has no lambda: speedups scaled by 0.9 (no N = 1 point) must be explained by
    alpha and beta, not by a free lambda of 0.9 (which would recover alpha = 0.05 exactly)."""
    ns = NS[1:]
    y = 0.9 * _usl(0.05, 0.0005, ns=ns)
    res = F.fit(F.Data(ns, y), "usl")
    assert res["lambda_fixed"] is True and res["lambda"] == 1.0 and "lambda" not in res["params"]
    assert res["alpha"] > 0.06  # the 10 % loss is charged to contention
    free = F.fit(F.Data(ns, y, "throughput"), "usl")
    assert free["lambda"] == pytest.approx(0.9, rel=1e-4) and free["alpha"] == pytest.approx(0.05, rel=1e-3)
    assert "lambda   1 (fixed" in F.text(res)


def test_usl_with_beta_zero_is_amdahl_and_has_no_peak():
    y = metrics.amdahl_speedup(0.07, NS)
    res = F.fit(F.Data(NS, y), "usl")
    assert res["alpha"] == pytest.approx(0.07, abs=1e-4)
    assert res["beta"] == pytest.approx(0.0, abs=1e-7)
    assert res["peak_N"] is None and res["beta_is_zero"]
    amd = F.fit(F.Data(NS, y), "amdahl")
    assert amd["alpha"] == pytest.approx(0.07, rel=1e-6)
    # Eq. 20 per point is exact on Amdahl data
    assert all(p["alpha"] == pytest.approx(0.07) for p in amd["points"] if p["N"] > 1)


def test_usl_on_noisy_data_is_close_and_intervals_cover_the_truth():
    rng = np.random.default_rng(7)
    ns = np.repeat(NS, 3)
    covered = 0
    for trial in range(10):
        y = _usl(0.05, 0.0005, ns=ns) * (1 + rng.normal(0, 0.02, len(ns)))
        res = F.fit(F.Data(ns, y), "usl")
        assert res["alpha"] == pytest.approx(0.05, abs=0.02)
        assert res["beta"] == pytest.approx(0.0005, abs=0.0002)
        assert 0.95 < res["r2"] <= 1.0
        lo, hi = res["params"]["beta"]["ci"]
        covered += lo <= 0.0005 <= hi
        assert res["params"]["alpha"]["stderr"] > 0
    assert covered >= 7  # a 95 % interval misses now and then, not most of the time


def test_gustafson_recovers_alpha_scaled():
    y = metrics.gustafson_speedup(0.15, NS)
    res = F.fit(F.Data(NS, y), "gustafson")
    assert res["alpha"] == pytest.approx(0.15)
    assert res["r2"] == pytest.approx(1.0)


def test_too_few_points_is_a_usage_error():
    with pytest.raises(F.UsageError, match="3 or more different N"):
        F.fit(F.Data(np.array([1, 2]), np.array([1.0, 1.9])), "usl")


# --- CLI: CSV and study files ---------------------------------------------------------


def _csv(path, ns, ys, col="speedup"):
    path.write_text(f"N,{col}\n" + "".join(f"{n},{float(y)!r}\n" for n, y in zip(ns, ys)))
    return str(path)


def test_cli_fit_csv_json_and_plot(tmp_path, capsys):
    src = _csv(tmp_path / "s.csv", NS, _usl(0.04, 0.0008))
    png = tmp_path / "usl.png"
    assert main(["fit", src, "--model", "usl", "--json", "--plot", str(png)]) == 0
    res = json.loads(capsys.readouterr().out)  # strict JSON: no NaN
    for key in ("alpha", "beta", "lambda", "peak_N", "r2", "params", "linear"):
        assert key in res
    assert res["alpha"] == pytest.approx(0.04, rel=1e-5)
    assert res["params"]["beta"]["ci"][0] <= res["beta"] <= res["params"]["beta"]["ci"][1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["fit", src, "--model", "amdahl"]) == 0
    assert "Eq. 20" in capsys.readouterr().out


def test_cli_fit_plot_replaces_a_plot_but_never_its_input(tmp_path, capsys):
    src = _csv(tmp_path / "s.csv", NS, _usl(0.04, 0.0008))
    before = open(src, "rb").read()
    png = tmp_path / "old.png"
    png.write_text("an old plot")
    assert main(["fit", src, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main(["fit", src, "--plot", src]) == 2
    assert "is also the input" in capsys.readouterr().err and open(src, "rb").read() == before


@pytest.mark.parametrize("text,needle", [
    ("N,time\n1,2\n", "columns N and speedup"),
    ("N,speedup\n1,x\n", "must be numbers"),
    ("N,speedup\n0,1\n", "whole number from 1"),
    ("N,speedup\n1,1\n2,1.9\n", "3 or more"),
    # past any machine: overflow warnings and an alpha of -inf before (the hostile review)
    ("N,speedup\n1,1\n2,1e308\n4,1e308\n8,1e308\n", "to 1e+12"),
    ("N,speedup\n1,1e-300\n2,1e-300\n4,1e-300\n", "from 1e-12"),
    ("N,speedup\n1,1\n2,1.9,5,6\n4,3.5\n", "line 3: more fields than the header"),
])
def test_cli_fit_bad_csv_is_one_line_exit_2(tmp_path, capsys, text, needle):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    assert main(["fit", str(p)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_cli_fit_reads_a_csv_a_spreadsheet_saved_with_a_byte_order_mark(tmp_path, capsys):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbfN,speedup\n1,1\n2,1.9\n4,3.5\n")
    assert main(["fit", str(p), "--model", "amdahl"]) == 0
    assert "amdahl fit of 3 points" in capsys.readouterr().out
    p.write_text("N,speedup\n1,1,\n2,1.9,\n4,3.5,\n")  # a trailing comma on each row
    assert main(["fit", str(p), "--model", "amdahl"]) == 0


def _record(scheduler, P, k, t, rep=0, verified=True):
    cfg = RunConfig(scheduler, k, 64, 8, 8, rep=rep, P=P)
    fam = "serial" if scheduler == "serial" else "thread"
    return RunRecord(cfg, fam, t, verified)


def test_cli_fit_study_uses_P_times_k_and_serial_baseline(tmp_path, capsys):
    """Speedups at N = P x k against T_serial (P = 1, k = 1) recover the coefficients."""
    path = str(tmp_path / "study.h5")
    t1, alpha, beta = 2.0, 0.02, 0.001
    with StudyWriter(path) as w:
        for rep in range(2):
            w.append(_record("serial", 1, 1, t1, rep))
        w.append(_record("serial", 2, 1, 0.5))        # a serial run at P=2 is no T_serial
        w.append(_record("dynamic", 4, 4, 0.01, verified=False))  # never enters a fit
        for P, k in [(1, 1), (1, 2), (2, 1), (1, 4), (2, 2), (4, 2), (2, 8), (4, 4), (4, 8)]:
            n = P * k
            w.append(_record("dynamic", P, k, t1 / float(_usl(alpha, beta, ns=np.array([n]))[0])))
        w.append(_record("guided", 2, 2, 0.7))
    assert main(["fit", path, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["alpha"] == pytest.approx(alpha, rel=1e-5)
    assert res["beta"] == pytest.approx(beta, rel=1e-5)
    assert sorted(res["data"]["N"]) == sorted([1, 2, 2, 4, 4, 8, 16, 16, 32])
    assert main(["fit", path, "--scheduler", "nope"]) == 2
    assert "no verified runs of scheduler 'nope'" in capsys.readouterr().err


def test_cli_fit_study_without_serial_runs_is_exit_2(tmp_path, capsys):
    path = str(tmp_path / "study.h5")
    with StudyWriter(path) as w:
        w.append(_record("dynamic", 2, 2, 1.0))
    assert main(["fit", path]) == 2
    assert "no verified serial runs at P=1, k=1" in capsys.readouterr().err


def _split_study(path, split, t_ranks):
    """A study of serial runs and dynamic runs on 1 and 2 ranks whose ranks split the
    frames by ``split`` (as `run --split` under mpiexec records it)."""
    path = str(path)
    with StudyWriter(path) as w:
        for rep in range(2):
            w.append(_record("serial", 1, 1, 2.0, rep))
        for P, k, t in [(1, 1, 2.0), (1, 2, 1.1), (1, 4, 0.6), (2, 1, t_ranks), (2, 2, t_ranks / 2)]:
            rec = _record("dynamic", P, k, t)
            if P > 1:
                rec.extra = {"split": split, "rank_time_s": [t, t]}
            w.append(rec)
    return path


def test_runs_of_two_splits_are_never_pooled(tmp_path, capsys):
    """A merge of a --split static and a --split dynamic study: report shows their
    multi-rank runs apart, and fit refuses to draw one curve through both (it averaged a
    1.9 ms static and a 5.7 ms dynamic run into one point)."""
    a = _split_study(tmp_path / "a.h5", "static", 1.0)
    b = _split_study(tmp_path / "b.h5", "dynamic", 3.0)
    m = str(tmp_path / "m.h5")
    assert main(["merge", a, b, "-o", m]) == 0
    capsys.readouterr()
    assert main(["report", m, "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "dynamic [split static]" in out and "dynamic [split dynamic]" in out
    assert main(["fit", m, "--scheduler", "dynamic"]) == 2
    err = capsys.readouterr().err
    assert "split the frames in 2 ways (dynamic, static)" in err and err.count("\n") == 1
    assert "--scheduler 'dynamic [split dynamic]'" in err
    for split, t in (("static", 1.0), ("dynamic", 3.0)):  # one split, as report names it
        assert main(["fit", m, "--scheduler", f"dynamic [split {split}]", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)["data"]
        speedups = [round(x, 6) for x in data["speedup"]]  # T_serial 2.0 s over each time
        other = 4.0 - t  # the other split's P = 2, k = 1 time
        assert round(2.0 / t, 6) in speedups and round(2.0 / other, 6) not in speedups, data
        assert sorted(data["N"]) == [1, 2, 2, 4, 4], data
    same = str(tmp_path / "same.h5")  # two studies of one split still fit as one
    assert main(["merge", a, _split_study(tmp_path / "c.h5", "static", 1.0), "-o", same]) == 0
    capsys.readouterr()
    assert main(["fit", same, "--scheduler", "dynamic", "--json"]) == 0
    assert "[split" not in capsys.readouterr().out


def test_names_kept_apart_are_never_cut_short():
    """A --split technique's reference may be 120 characters: its name and hash, cut at a
    fixed width, pooled two versions of it again."""
    from hybridsched.results.data import splits_apart

    long = "m" * 100 + ":Quarter"
    runs = np.zeros(3, [("scheduler", "U16"), ("P", "i8"), ("run_id", "i8")])
    runs["scheduler"], runs["P"], runs["run_id"] = ["dynamic", "dynamic", "serial"], [2, 2, 2], [0, 1, 2]
    ways = {0: f"{long}@c9e33b35", 1: f"{long}@e14056b1", 2: "static"}
    out = splits_apart(runs, ways)
    assert list(out["scheduler"]) == [f"dynamic [split {long}@c9e33b35]",
                                      f"dynamic [split {long}@e14056b1]", "serial"]


def test_t_serial_comes_from_one_node_only(tmp_path, capsys):
    """`serial` runs on several ranks (each rank sorting its share alone) are no T_serial
    (Eq. 4): report listed them beside the P = 1 one and took the family table's T_serial
    from them."""
    path = str(tmp_path / "s.h5")
    with StudyWriter(path) as w:
        w.append(_record("serial", 1, 1, 2.0))
        w.append(_record("serial", 2, 1, 0.9))
        w.append(_record("dynamic", 1, 2, 1.1))
    assert main(["report", path, "--no-plots"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("T_serial (Eq. 4"))
    assert "2000.00 ms" in line and "900.00" not in line, line
