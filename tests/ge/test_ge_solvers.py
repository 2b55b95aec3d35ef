"""`hybridsched ge` (issue 11): both solvers verified on every architecture at small n,
including one thread per row and more user threads than CPUs; the stage timings and
counts recorded; a failing user thread fails its run with one line and no thread left; bad
input gets one line and exit 2; /ge round-trips and `report` shows it."""
from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hybridsched import cli
from hybridsched.ge import matrix
from hybridsched.ge.output import GE_DTYPE, GeWriter, has_ge, read_ge
from hybridsched.ge.runner import run_once
from hybridsched.usched import ARCHS


pytestmark = pytest.mark.usefixtures("no_thread_left")  # conftest.py


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("algo,n,threads,expect", [
    ("rows", 24, 24, 24),     # one thread per row
    ("rows", 50, 7, 7),       # uneven blocks, more threads than CPUs
    ("rows", 9, 1, 1),        # a single user thread
    ("tiles", 30, 36, 36),    # 6 x 6 tiles of 5 rows
    ("tiles", 23, 32, 36),    # nearest square grid, uneven tiles
    ("tiles", 5, 25, 25),     # 1-row tiles
    ("tiles", 7, 1, 1),
])
def test_solvers_verified(arch, algo, n, threads, expect):
    r = run_once(arch, algo, n, threads, 0, seed=3)
    assert r.error == "" and r.verified, r.error
    assert r.threads == expect and r.threads_requested == threads
    assert r.residual < 1e-10 and r.x_err <= 1e-8
    assert r.sched_threads == len(os.sched_getaffinity(0))
    assert 0 <= r.t_create_s <= r.t_total_s and 0 < r.t_forward_s <= r.t_total_s  # A0 may finish
    # its forward stage before the main thread, short of the GIL, has created the last thread
    assert r.t_total_s >= r.t_forward_s + r.t_back_s - 1e-9
    if threads > 1:
        assert r.blocks >= 1 or arch == "A0"
    assert r.wakeups == r.blocks
    assert (r.scans > 0) == (arch == "A1" and r.blocks > 0)
    assert (r.switches > 0) == (arch != "A0")


def test_verification_catches_a_wrong_answer():
    a, x, b = matrix.system(16, 1)
    assert matrix.verified(matrix.residual(a, x, b), matrix.x_error(x, np.linalg.solve(a, b)))
    y = x.copy()
    y[3] += 1e-6
    assert not matrix.verified(matrix.residual(a, y, b), matrix.x_error(y, np.linalg.solve(a, b)))


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("algo,fault", [("rows", "row3"), ("tiles", "tile2.1")])
def test_failing_user_thread(arch, algo, fault):
    r = run_once(arch, algo, 40, 16, 0, fault=fault)
    assert not r.verified
    assert r.error.startswith(f"{arch}: user thread {fault} raised InjectedFault")
    assert "\n" not in r.error


def test_output_roundtrip(tmp_path):
    p = str(tmp_path / "g.h5")
    r = run_once("A2", "rows", 16, 4, 0)
    with GeWriter(p, {"N": 2, "cpu_model": "x"}, {"n": 16}) as w:
        w.append(r)
        w.append(r)
    assert has_ge(p)
    ge = read_ge(p)
    assert len(ge) == 2 and list(ge["run_id"]) == [0, 1]
    assert str(ge["arch"][0]) == "A2" and bool(ge["verified"][0])
    for f in ("arch", "algo", "n", "threads", "sched_threads", "rep", "t_create_s",
              "t_forward_s", "t_back_s", "t_total_s", "blocks", "wakeups", "switches",
              "residual", "verified"):
        assert f in GE_DTYPE.names
    with h5py.File(p, "r") as h5:
        assert h5.attrs["format"] == "hybridsched" and h5.attrs["machine.N"] == 2
    with pytest.raises(Exception, match="file exists"):
        GeWriter(p, {}, {})


BAD = [
    ["--threads", "0"],
    ["--threads", "7937"],
    ["--threads", "32", "--n", "16"],               # rows: more threads than rows
    ["--algo", "tiles", "--threads", "400", "--n", "16"],  # 20 x 20 tiles of 16 rows
    ["--arch", "A3"],
    ["--algo", "cols"],
    ["--n", "0"],
    ["--n", "x"],
    ["--reps", "0"],
    ["--threads", "4,-1"],
]


@pytest.mark.parametrize("extra", BAD)
def test_bad_input_one_line_exit_2(extra, tmp_path, capsys):
    out = tmp_path / "bad.h5"
    rc = cli.main(["ge", "--n", "64", "--threads", "4", "--out", str(out), *extra])
    cap = capsys.readouterr()
    assert rc == 2, cap
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hybridsched"), cap.err
    assert cap.out == "" and not out.exists()


def test_existing_out_refused(tmp_path, capsys):
    out = tmp_path / "x.h5"
    out.write_bytes(b"")
    assert cli.main(["ge", "--n", "8", "--threads", "2", "--out", str(out)]) == 2
    assert "file exists" in capsys.readouterr().err


def _python_m(*args, env=None, timeout=240):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "hybridsched", *args], capture_output=True,
                          text=True, timeout=timeout, env=e)


def test_cli_end_to_end_and_report(tmp_path):
    out = str(tmp_path / "ge.h5")
    p = _python_m("ge", "--n", "36", "--threads", "4,36", "--reps", "2", "--out", out)
    assert p.returncode == 0, p.stderr
    assert "Acceleration over A0" in p.stdout
    ge = read_ge(out)
    assert len(ge) == 2 * 2 * 2 * 3 and ge["verified"].all()
    assert set(ge["arch"]) == {"A0", "A1", "A2"} and set(ge["algo"]) == {"rows", "tiles"}
    rep_dir = str(tmp_path / "rep")
    p = _python_m("report", out, "--out-dir", rep_dir)
    assert p.returncode == 0, p.stderr
    assert "### `tiles`, n = 36" in p.stdout and "A2 is faster than A0" not in p.stdout[:0]
    assert os.path.exists(os.path.join(rep_dir, "ge_summary.csv"))
    assert os.path.exists(os.path.join(rep_dir, "ge_rows_n36.png"))


def test_cli_failing_user_thread_one_line(tmp_path):
    out = str(tmp_path / "f.h5")
    p = _python_m("ge", "--arch", "A0,A2", "--algo", "rows", "--n", "16", "--threads", "8",
                  "--out", out, env={"HYBRIDSCHED_GE_FAULT": "row5"})
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "row5" in ln]
    assert len(lines) == 2 and all("user thread row5 raised InjectedFault" in ln for ln in lines)
    assert "Traceback" not in p.stderr
    ge = read_ge(out)
    assert not ge["verified"].any() and all("row5" in e for e in ge["error"])


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(ARCHS))
def test_thousands_of_user_threads(arch):
    r = run_once(arch, "tiles", 128, 2025, 0)  # 45 x 45 tiles
    assert r.verified, r.error
    assert r.threads == 2025
