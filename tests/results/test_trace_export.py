"""`hybridsched trace`: the Gantt chart and the Chrome Trace Event (Perfetto) export of one
run, for a thread, a process, a pipe and an AIMD run (and an MPI run, marked mpi): every
chunk present exactly once, times within the run; the JSON loaded back and its structure
checked; the report's Gantts and load imbalance."""
from __future__ import annotations

import collections
import json
import math
import os

import numpy as np
import pytest

from hybridsched.cli import main
from hybridsched.records import WORKER_DTYPE
from hybridsched.results import metrics, perfetto, timeline
from hybridsched.store import read_detail, read_runs

PNG = b"\x89PNG\r\n\x1a\n"
L = 12
FAMILIES = {"dynamic": "thread", "aimd": "thread", "prolific": "process", "pipe-MtoM": "pipe"}
# slack for float rounding of times stored relative to the run's start (seconds)
EPS = 1e-6


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("trace") / "t.h5")
    rc = main(["run", "-s", ",".join(FAMILIES), "-k", "2", "-L", str(L), "--height", "8",
               "--width", "16", "--reps", "2", "-o", path])
    assert rc == 0
    return path


def _chunks(path: str, run_id: int) -> collections.Counter:
    d = read_detail(path, run_id)
    return collections.Counter((int(r["worker"]), int(r["first"]), int(r["count"])) for r in d.trace)


def check_perfetto(data: dict, rt: timeline.RunTrace) -> None:
    """The structure of a Chrome Trace Event object and its chunks against the stored trace."""
    assert set(data) >= {"traceEvents", "displayTimeUnit", "otherData"}
    ev = data["traceEvents"]
    assert all(e["ph"] in ("X", "M", "C", "i") and isinstance(e["pid"], int) for e in ev)
    assert all(isinstance(e["ts"], (int, float)) for e in ev if e["ph"] != "M")
    slices = [e for e in ev if e["ph"] == "X"]
    got = collections.Counter((e["tid"], e["args"]["first"], e["args"]["count"]) for e in slices)
    want = collections.Counter((int(r["worker"]), int(r["first"]), int(r["count"]))
                               for r in rt.detail.trace)
    assert got == want and max(got.values()) == 1  # every chunk exactly once
    end_us = max(rt.end_s, rt.time_s) * 1e6
    for e in slices:
        assert e["cat"] == "chunk" and e["dur"] >= 0
        assert -EPS * 1e6 <= e["ts"] and e["ts"] + e["dur"] <= end_us + EPS * 1e6
    named = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert named == set(rt.lanes)
    busy = [e["args"]["busy"] for e in ev if e["ph"] == "C" and e["name"] == "busy workers"]
    assert busy and min(busy) >= 0 and busy[-1] == 0 and max(busy) <= len(rt.lanes)
    assert data["otherData"]["run_id"] == rt.run_id


def check_gantt(rt: timeline.RunTrace) -> None:
    """The figure draws each chunk once, inside [0, the run's end], one lane per worker."""
    fig = timeline.figure(rt)
    ax = fig.axes[0]
    bars = [c for c in ax.collections if c.get_gid() == "chunks"]
    n = sum(len(c.get_paths()) for c in bars)
    assert n == len(rt.detail.trace)
    xs = np.concatenate([p.vertices[:, 0] for c in bars for p in c.get_paths()])
    assert xs.min() >= -EPS * 1e3 and xs.max() <= max(rt.end_s, rt.time_s) * 1e3 + EPS * 1e3
    assert len(ax.get_yticks()) == len(rt.lanes) == rt.k * rt.P
    lines = {ln.get_label().split(" (")[0] for ln in ax.get_lines()}
    assert {"run start", "last worker ends"} <= lines


@pytest.mark.parametrize("scheduler", list(FAMILIES))
def test_trace_of_each_family(study, tmp_path, scheduler, capsys):
    png, js = str(tmp_path / "g.png"), str(tmp_path / "t.json")
    assert main(["trace", study, "-s", scheduler, "-k", "2", "--png", png, "--perfetto", js]) == 0
    out = capsys.readouterr().out
    with open(png, "rb") as fh:
        assert fh.read(8) == PNG
    with open(js) as fh:
        data = json.load(fh)
    row = timeline.select(read_runs(study), scheduler=scheduler, k=2)
    assert int(row["rep"]) == 0 and str(row["family"]) == FAMILIES[scheduler]
    rt = timeline.load(study, row)
    assert f"run {rt.run_id}: {scheduler}" in out and png in out and js in out
    check_perfetto(data, rt)
    check_gantt(rt)
    # the chunks cover the tensor exactly once
    cover = np.zeros(L, int)
    for _, first, count in _chunks(study, rt.run_id):
        cover[first:first + count] += 1
    assert (cover == 1).all()


def test_aimd_window_is_a_counter_and_a_step_line(study):
    rt = timeline.load(study, timeline.select(read_runs(study), scheduler="aimd", k=2))
    assert "aimd_window" in rt.detail.series
    data = perfetto.chrome_trace(rt)
    win = [e for e in data["traceEvents"] if e["ph"] == "C" and e["name"] == "aimd_window"]
    assert len(win) == len(rt.detail.series["aimd_window"]) and all("window" in e["args"] for e in win)
    fig = timeline.figure(rt)
    assert len(fig.axes) == 2 and fig.axes[1].get_lines()[0].get_label() == "aimd_window"


def test_trace_by_run_id_and_default_outputs(study, capsys):
    runs = read_runs(study)
    rid = int(runs["run_id"][runs["scheduler"] == "prolific"][-1])
    assert main(["trace", study, "--run", str(rid)]) == 0
    out_dir = os.path.splitext(study)[0] + "_report"
    for ext in ("png", "json"):
        assert os.path.isfile(os.path.join(out_dir, f"trace_run{rid}.{ext}"))
    assert f"run {rid}: prolific" in capsys.readouterr().out


@pytest.mark.parametrize("argv, msg", [
    (["--run", "99999"], "no such run"),
    (["-s", "guided"], "no run matches"),
])
def test_trace_bad_selection_is_one_line(study, tmp_path, capsys, argv, msg):
    assert main(["trace", study, *argv, "--png", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "x.png")


def test_trace_never_writes_through_a_symlink(study, tmp_path, capsys):
    target = tmp_path / "precious"
    target.write_text("keep")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    assert main(["trace", study, "-s", "dynamic", "--perfetto", str(link)]) == 2
    assert target.read_text() == "keep" and "symbolic link" in capsys.readouterr().err


def test_load_imbalance_is_lb4omps_percent_imbalance():
    w = np.zeros(4, WORKER_DTYPE)
    w["busy"] = 1.0
    assert metrics.load_imbalance(w) == 0.0  # balanced
    w["busy"] = [4.0, 0.0, 0.0, 0.0]
    assert metrics.load_imbalance(w) == pytest.approx(1.0)  # one worker did everything
    w["busy"] = [2.0, 1.0, 1.0, 0.0]  # (2 - 1) / 2 x 4/3
    assert metrics.load_imbalance(w) == pytest.approx(2 / 3)
    assert math.isnan(metrics.load_imbalance(w[:1]))


def test_report_draws_a_gantt_per_scheduler_and_tables_carry_li(study, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", study, "--out-dir", str(out)]) == 0
    text = capsys.readouterr().out
    names = set(os.listdir(out))
    assert {f"gantt_{s}.png" for s in FAMILIES} <= names
    table = text.split("### dynamic")[1].split("###")[0]
    head = [ln for ln in table.splitlines() if ln.startswith("| k |")][0]
    assert "| min |" in head and "| LI |" in head
    row = [ln for ln in table.splitlines() if ln.startswith("| 2 |")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "±" in cells[1]  # two repetitions: mean ± sd
    assert 0.0 <= float(cells[7]) <= 1.0  # LI of two workers


@pytest.mark.parametrize("split", ["static", "dynamic"])
def test_trace_of_an_mpi_run(mpi, tmp_path, split, capsys):
    from mpicheck import SMALL, process_schedulers

    out = str(tmp_path / "p2.h5")
    names = ",".join(["dynamic"] + process_schedulers()[:1])
    p = mpi.run(["run", "-s", names, "-k", "2", "-L", "20", *SMALL, "--split", split, "-o", out])
    assert p.returncode == 0, p.stderr
    # progress under mpiexec: one line per run, in the single-node bar's words
    assert "[1/2] P=2 dynamic k=2 L=20 rep 1/1: " in p.stderr
    from hybridsched.store import read_attrs

    attrs = read_attrs(out)  # the MPI implementation, library and launcher are recorded
    assert attrs["machine.mpi_implementation"] == mpi.impl.title
    assert attrs["machine.mpi_library"] and attrs["machine.mpi_version"]
    assert attrs["machine.mpi_launcher"].startswith(("mpiexec", "mpirun"))
    for name in names.split(","):
        row = timeline.select(read_runs(out), scheduler=name)
        rt = timeline.load(out, row)
        assert rt.P == 2 and rt.lanes == [0, 1, 2, 3]  # rank x k + w
        assert [rt.lane_label(w) for w in rt.lanes] == ["r0 w0", "r0 w1", "r1 w0", "r1 w1"]
        js = str(tmp_path / f"{name}.json")
        assert main(["trace", out, "-s", name, "--perfetto", js, "--png", js[:-4] + "png"]) == 0
        with open(js) as fh:
            data = json.load(fh)
        check_perfetto(data, rt)
        check_gantt(rt)
        procs = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        assert sorted(procs) == [1, 2] and procs[2].startswith("rank 1")
        # the chunks of both ranks cover every global frame once
        cover = np.zeros(20, int)
        for r in rt.detail.trace:
            cover[r["first"]:r["first"] + r["count"]] += 1
        assert (cover == 1).all()
        # other load is recorded for MPI runs too (per rank, and the worst rank's)
        assert len(rt.detail.extra["rank_foreign_cpu"]) == 2 and "foreign_cpu" in rt.detail.extra


def test_trace_keeps_an_existing_file_unless_overwrite(study, tmp_path, capsys):
    keep = tmp_path / "keep.png"
    keep.write_text("precious")
    assert main(["trace", study, "-s", "dynamic", "--png", str(keep)]) == 2
    assert keep.read_text() == "precious" and "--overwrite" in capsys.readouterr().err
    assert main(["trace", study, "-s", "dynamic", "--png", str(keep), "--overwrite"]) == 0
    assert keep.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_run_id_with_other_selectors_is_refused(study, tmp_path, capsys):
    assert main(["trace", study, "--run", "0", "-s", "prolific", "--png", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "--run" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "x.png")


def test_trace_never_replaces_its_input_or_a_study_being_written(study, tmp_path, capsys):
    """`--overwrite` let `trace` replace its own input study with a PNG, and a study being
    written (its writer's lock held) with a trace: killed before its next save, the writer
    lost it (hostile review)."""
    import shutil

    from hybridsched.store import StudyLock

    mine = str(tmp_path / "mine.h5")
    shutil.copy(study, mine)
    before = open(mine, "rb").read()
    assert main(["trace", mine, "-s", "dynamic", "--png", mine, "--overwrite"]) == 2
    assert "is also the input" in capsys.readouterr().err and open(mine, "rb").read() == before
    live = str(tmp_path / "live.h5")
    shutil.copy(study, live)
    with StudyLock(live):
        assert main(["trace", study, "-s", "dynamic", "--perfetto", live, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "is being written by" in err and len(err.strip().splitlines()) == 1
    assert open(live, "rb").read() == before and not os.path.exists(live + ".lock")
    assert main(["trace", study, "-s", "dynamic", "--perfetto", live, "--overwrite"]) == 0
    assert not os.path.exists(live + ".lock")


def test_trace_of_a_failed_run_says_it_failed(tmp_path, capsys):
    """Where no matching run verified, `trace -s` draws the first that failed, and its
    line (and the chart's title) say so, with why (before, only "T = nan ms" told). A
    failed multi-rank run keeps its other ranks' traces; here a stored run is marked
    failed by hand, as such a run's row reads."""
    import h5py

    out = str(tmp_path / "f.h5")
    assert main(["run", "-s", "dynamic", "-k", "2", "-L", "16", "--height", "8", "--width", "8",
                 "--reps", "1", "-o", out]) == 0
    with h5py.File(out, "r+") as h5:
        runs = h5["runs"][()]
        runs["verified"] = False
        runs["error"] = b"rank 1 on vm: dynamic: worker 1 was killed by signal 9 (SIGKILL)"
        h5["runs"][...] = runs
    capsys.readouterr()
    assert main(["trace", out, "-s", "dynamic", "--png", str(tmp_path / "f.png")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "[failed: rank 1 on vm: dynamic: worker 1 was killed by signal 9 (SIGKILL)]" in line
