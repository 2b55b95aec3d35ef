"""Workloads under mpiexec -n 2 (static split): each rank builds only its block of tasks
(global ids frame0..), runs and verifies it; the other issue-12 options are refused there
with one line."""
from __future__ import annotations

import os

import pytest
from mpicheck import SMALL, check_cover

from hybridsched.store import read_runs


@pytest.mark.parametrize("workload", ["heavytail", "mandelbrot:iters=32"])
def test_ranks_build_their_block_of_a_workload(mpi, tmp_path, workload):
    out = str(tmp_path / "w.h5")
    L = 30
    p = mpi.run(["run", "-s", "dynamic,prolific", "-k", "2", "-L", str(L), *SMALL,
                 "--workload", workload, "-o", out])
    assert p.returncode == 0, p.stderr
    runs = read_runs(out)
    assert len(runs) == 2 and runs["verified"].all() and (runs["bad_rows"] == 0).all()
    assert (runs["workload"] == workload.split(":")[0]).all()
    for extra in check_cover(out, L):  # global frame ids: rank 1's trace starts at 15
        assert extra["rank_frames"] == [15, 15]


@pytest.mark.parametrize("extra, match", [
    (["--workload", "ramp", "--split", "dynamic"], "--split static"),
    (["--verify", "none"], "not supported under mpiexec"),
])
def test_unsupported_under_mpiexec_is_one_line(mpi, tmp_path, extra, match):
    out = str(tmp_path / "x.h5")
    p = mpi.run(["run", "-s", "static", "-L", "4", *SMALL, *extra, "-o", out])
    assert p.returncode == 2, p.stderr
    (line,) = mpi.ours(p.stderr)
    assert match in line, p.stderr
    assert not os.path.exists(out)
