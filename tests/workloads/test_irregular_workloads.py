"""Irregular workloads (issue 12 item 4): every workload reproducible task by task from the
seed (a node holding frames frame0.. builds exactly those, as an MPI rank does), every one
verified (a correct run passes, a corrupted one fails), parameters parsed and stored, and
the report's per-task cost section."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from hybridsched import cli
from hybridsched.workloads import catalogue as workloads
from hybridsched.workloads.build import build
from hybridsched.errors import UsageError
from hybridsched.records import RunConfig
from hybridsched.store import read_runs
from hybridsched.workloads import sorts
from repo import FIXTURES

NAMES = list(workloads.WORKLOADS)
SORTS = [n for n in NAMES if workloads.get(n).sort and n != "uniform"]
L, H, W = 40, 6, 48


def config(name: str, seed: int = 3, params: dict | None = None, kernel="quicksort", **kw):
    p = dict(workloads.get(name).params) if params is None else params
    if name == "mandelbrot":
        p["iters"] = 40
    return RunConfig("serial", 1, L, H, W, kernel=kernel, seed=seed, workload=name,
                     workload_params=workloads.params_json(p), **kw)


def run_all(space) -> np.ndarray:
    space.fresh_copy()
    if space.kernel is None:
        from hybridsched.kernels import get_kernel
        get_kernel("quicksort")(space.work, 0, space.frames)
    else:
        space.kernel(space.work, 0, space.frames)
    return space.work.copy()


@pytest.mark.parametrize("name", NAMES)
def test_each_workload_is_verified_and_corruption_is_caught(name, no_leaks):
    with build(config(name)) as space:
        assert space.bad_rows() > 0  # the work copy before any run: not done
        run_all(space)
        assert space.bad_rows() == 0
        w = space.work
        if name == "mandelbrot":
            w[3, 1, 5] += 1
        else:
            w[3, 0, 0], w[3, 0, 1] = 200, 10  # the first two bytes of an active row, unsorted
        assert space.bad_rows() == 1
        assert space.bad_rows(0, 3) == 0 and space.bad_rows(3, 1) == 1


@pytest.mark.parametrize("name", SORTS)
def test_bytes_outside_a_task_must_stay(name):
    with build(config(name)) as space:
        run_all(space)
        shp = sorts.shapes(name, 3, 0, L, L, H, W, *_ab(name))
        f = int(np.argmin(shp[:, 0] * shp[:, 1]))  # a frame with an inactive part
        rows, width = shp[f]
        assert rows < H or width < W
        if rows < H:
            space.work[f, H - 1, 0] ^= 1  # an inactive row changed
        else:
            space.work[f, 0, W - 1] ^= 1  # a byte beyond the active width changed
        assert space.bad_rows() == 1


def _ab(name):
    p = workloads.get(name).params
    return p.get("min", 1.0), p.get("heavy", p.get("alpha", 0.0))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("frame0, count", [(0, 7), (13, 9), (L - 5, 5)])
def test_a_block_of_tasks_is_built_and_run_alone(name, frame0, count, no_leaks):
    """What an MPI rank does: build only frames frame0.. and get exactly those of the whole."""
    cfg = config(name)
    with build(cfg) as whole, build(cfg, frames=count, frame0=frame0) as part:
        assert part.frames == count
        assert np.array_equal(part.original, whole.original[frame0:frame0 + count])
        full = run_all(whole)
        assert np.array_equal(run_all(part), full[frame0:frame0 + count])
        assert part.bad_rows() == 0


@pytest.mark.parametrize("name", SORTS)
def test_cost_rules_are_per_task_and_irregular(name):
    a, b = _ab(name)
    whole = sorts.shapes(name, 7, 0, 500, 500, 64, 64, a, b)
    assert np.array_equal(sorts.shapes(name, 7, 123, 50, 500, 64, 64, a, b), whole[123:173])
    assert not np.array_equal(sorts.shapes(name, 8, 0, 500, 500, 64, 64, a, b), whole) or name == "ramp"
    cost = whole[:, 0] * whole[:, 1]
    assert cost.min() >= 1 and cost.max() <= 64 * 64
    assert cost.max() >= 4 * cost.min()  # irregular, unlike uniform
    if name == "ramp":
        assert (np.diff(whole[:, 0]) >= 0).all()
    if name == "skewed":
        heavy = (whole[:, 0] == 64).mean()
        assert 0.0 < heavy < 0.1  # ~2 %: a few very costly tasks
    if name == "heavytail":
        assert np.median(cost) < cost.mean()  # right-skewed
    if name == "varying":
        assert (whole[:, 0] == 64).all() and len(set(whole[:, 1])) > 20


def test_mandelbrot_costs_are_irregular(no_leaks):
    with build(config("mandelbrot")) as space:
        run_all(space)
        per_band = space.work.astype(np.int64).sum(axis=(1, 2))
        assert per_band.max() > 4 * per_band.min()
        assert space.work.max() <= 40


def test_counting_kernel_runs_the_irregular_workloads(no_leaks):
    with build(config("heavytail", kernel="counting")) as space:
        run_all(space)
        assert space.bad_rows() == 0


@pytest.mark.parametrize("text, want", [
    ("uniform", ("uniform", {})),
    ("ramp", ("ramp", {"min": 0.1})),
    ("heavytail:alpha=1.2", ("heavytail", {"min": 0.05, "alpha": 1.2})),
    ("mandelbrot:iters=99, x0=-1", ("mandelbrot", {"x0": -1.0, "x1": 0.5, "y0": -1.25,
                                                   "y1": 1.25, "iters": 99})),
])
def test_parse(text, want):
    assert workloads.parse(text) == want


@pytest.mark.parametrize("text, match", [
    ("nosuch", "unknown workload"), ("ramp:max=1", "unknown parameter"),
    ("ramp:min=x", "must be a number"), ("ramp:min=0", r"\(0, 1\]"),
    ("skewed:heavy=2", "heavy"), ("heavytail:alpha=0", "alpha"), ("ramp:min=nan", "finite"),
    ("mandelbrot:iters=0", "iters"), ("mandelbrot:iters=70000", "iters"),
    ("mandelbrot:x0=1,x1=0", "x0 < x1"),
])
def test_parse_refuses(text, match):
    with pytest.raises(UsageError, match=match):
        workloads.parse(text)


def run_cli(args, capsys):
    rc = cli.main(["run", *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", ["skewed", "mandelbrot"])
def test_cli_stores_the_workload_and_reports_costs(name, tmp_path, capsys, no_leaks):
    out = str(tmp_path / "w.h5")
    spec = f"{name}:iters=30" if name == "mandelbrot" else name
    rc, _, err = run_cli(["-s", "serial,dynamic,guided,prolific,pipe-MtoM", "-k", "2", "-L", "30",
                          "--height", "4", "--width", "32", "--reps", "1", "--workload", spec,
                          "-o", out], capsys)
    assert rc == 0, err
    runs = read_runs(out)
    assert (runs["workload"] == name).all() and runs["verified"].all()
    params = json.loads(runs["workload_params"][0])
    assert params == workloads.parse(spec)[1]
    rd = str(tmp_path / "rep")
    assert cli.main(["report", out, "--out-dir", rd]) == 0
    text = capsys.readouterr().out
    assert f"workload `{name}`" in text and "| workload | run | tasks |" in text
    assert os.path.exists(os.path.join(rd, "task_costs_0.png"))
    # a resume with another workload would mix tensors: refused
    rc, _, err = run_cli(["-s", "serial", "-k", "2", "-L", "30", "--height", "4", "--width", "32",
                          "--reps", "1", "-o", out, "--resume"], capsys)
    assert rc == 2 and "workload" in err


def test_old_studies_read_as_uniform():
    here = str(FIXTURES)
    for f in ("study-v1.h5", "study-v1-old.h5"):
        runs = read_runs(os.path.join(here, f))
        assert (runs["workload"] == "uniform").all() and (runs["verify"] == "").all()
        assert (runs["input_hash"] == "").all()


def test_merge_refuses_studies_of_different_workloads(tmp_path, capsys, no_leaks):
    a, b = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    base = ["-s", "serial", "-k", "1", "-L", "4", "--height", "2", "--width", "8", "--reps", "1"]
    assert run_cli([*base, "-o", a], capsys)[0] == 0
    assert run_cli([*base, "--workload", "ramp", "-o", b], capsys)[0] == 0
    assert cli.main(["merge", a, b, "-o", str(tmp_path / "m.h5")]) == 2
    assert "ramp" in capsys.readouterr().err


@pytest.mark.parametrize("text, msg", [
    ("mandelbrot:iters=2.5", "must be an integer"),
    ("ramp:min=0.5,min=0.2", "given twice"),
    ("ramp:min", "needs a value"),
])
def test_workload_parameters_are_not_bent(text, msg):
    from hybridsched.errors import UsageError
    from hybridsched.workloads.catalogue import parse

    with pytest.raises(UsageError, match=msg):
        parse(text)


def test_the_workload_names_a_study_may_hold_are_the_catalogues():
    """The study reader refuses a workload outside records.WORKLOAD_NAMES (issue 33 item
    20); a workload added to the catalogue must be added there too."""
    from hybridsched.records import WORKLOAD_NAMES
    from hybridsched.workloads.catalogue import WORKLOADS

    assert tuple(WORKLOADS) == WORKLOAD_NAMES
