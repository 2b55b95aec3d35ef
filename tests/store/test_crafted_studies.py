"""Every reader of a study (report, fit, merge, resume) on a crafted or damaged file: one
line and exit 2, never a traceback; and the version-1 files written before issue 9 (the
fixtures) still read back through all of them."""
from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest

from hybridsched import cli, store
from hybridsched.records import TRACE_DTYPE, WORKER_DTYPE, RunConfig, RunRecord
from repo import FIXTURES

V1 = os.path.join(FIXTURES, "study-v1.h5")            # written by the pre-issue-9 writer
V1_OLD = os.path.join(FIXTURES, "study-v1-old.h5")    # same, without pipe_batch/inflight
V1_SPEC = ["-s", "serial,dynamic,pipe-1to1,aimd", "-k", "1,2", "-L", "8", "--height", "8",
           "--width", "16"]
TINY = ["-s", "serial,dynamic", "-k", "1,2,3", "-L", "4", "--height", "8", "--width", "8",
        "--reps", "1"]


def _record(scheduler: str, k: int, t: float) -> RunRecord:
    workers = np.zeros(k, WORKER_DTYPE)
    workers["worker"] = range(k)
    workers["end"] = t
    trace = np.zeros(1, TRACE_DTYPE)
    trace["count"] = 4
    return RunRecord(RunConfig(scheduler, k, 4, 8, 8), "serial" if scheduler == "serial" else
                     "thread", t, True, workers_used=k, workers=workers, trace=trace)


@pytest.fixture
def base(tmp_path) -> str:
    path = str(tmp_path / "base.h5")
    with store.StudyWriter(path, {"N": 2}, {}) as w:
        for s, k, t in (("serial", 1, 0.4), ("dynamic", 1, 0.41), ("dynamic", 2, 0.22),
                        ("dynamic", 4, 0.2)):
            w.append(_record(s, k, t))
    return path


def _rewrite_runs(path: str, change) -> None:
    with h5py.File(path, "a") as h5:
        rows = h5["runs"][()]
        change(rows)
        h5["runs"][...] = rows


def _bad_utf8(rows):
    rows["scheduler"][1] = b"dyn\xff\xfeamic"


def _name_nul(rows):  # zeroed bytes inside a name (a hostile user's fuzzing): a matplotlib
    rows["scheduler"][1] = b"dyn\x00amic"  # glyph warning on stderr and a broken label


def _time_inf(rows):
    rows["time_s"][2] = np.inf


def _p_zero(rows):
    rows["P"][1] = 0


def _unknown_workload(rows):  # issue 33 item 20: report and trace took it as a workload
    rows["workload"][1] = b"nosuchwork"


def _verified_bad_rows(rows):  # issue 33 item 20: pooled as a verified run
    rows["bad_rows"][1] = 10


def _time_huge(rows):  # issue 33 item 17: its means overflowed into numpy's warnings
    rows["time_s"][2] = 1e308


def _replace_runs(data):
    def change(path):
        with h5py.File(path, "a") as h5:
            del h5["runs"]
            h5["runs"] = data
    return change


def _attr(name, value):
    def change(path):
        with h5py.File(path, "a") as h5:
            h5.attrs[name] = value
    return change


CRAFTED = {
    "scheduler-not-utf8": lambda p: _rewrite_runs(p, _bad_utf8),
    "scheduler-control-character": lambda p: _rewrite_runs(p, _name_nul),
    "time_s-inf": lambda p: _rewrite_runs(p, _time_inf),
    "P-zero": lambda p: _rewrite_runs(p, _p_zero),
    "workload-unknown": lambda p: _rewrite_runs(p, _unknown_workload),
    "verified-with-bad-rows": lambda p: _rewrite_runs(p, _verified_bad_rows),
    "time_s-1e308": lambda p: _rewrite_runs(p, _time_huge),
    "runs-of-ints": _replace_runs(np.arange(4)),
    "runs-other-fields": _replace_runs(np.zeros(2, [("run_id", "i8"), ("x", "f8")])),
    "runs-string-time": _replace_runs(np.zeros(2, [(n, "S8" if n == "time_s" else
                                                    store.RUN_DTYPE[n])
                                                   for n in store.RUN_DTYPE.names])),
    "study-not-json": _attr("study", "{not json"),
    "history-not-json": _attr("study_history", "[{"),
    "format_version-text": _attr("format_version", "one"),
    "machine-N-text": _attr("machine.N", "many"),
}


# commands that do not use a crafted field at all, and so may go on without it
NOT_READ_BY = {"study-not-json": {"report", "fit"}, "history-not-json": {"report", "fit", "merge"},
               "machine-N-text": {"fit", "merge"}}


def _commands(path: str, tmp_path) -> dict[str, list[str]]:
    return {"report": ["report", path, "--no-plots", "--out-dir", str(tmp_path / "rep")],
            "fit": ["fit", path, "--model", "amdahl"],
            "merge": ["merge", path, "-o", str(tmp_path / "merged.h5")],
            "resume": ["run", *TINY, "--resume", "--out", path]}


def _one_line(rc, cap, want_rc=2):
    assert "Traceback" not in cap.err
    assert rc == want_rc, cap.err
    assert len(cap.err.strip().splitlines()) == 1, cap.err


@pytest.mark.parametrize("craft", list(CRAFTED.values()), ids=list(CRAFTED))
def test_crafted_study_gives_one_line_and_exit_2_everywhere(base, tmp_path, capsys, craft):
    craft(base)
    before = open(base, "rb").read()
    which = next(k for k, v in CRAFTED.items() if v is craft)
    for name, argv in _commands(base, tmp_path).items():
        rc = cli.main(argv)
        cap = capsys.readouterr()
        if name in NOT_READ_BY.get(which, ()):
            assert rc == 0 and "Traceback" not in cap.err, (name, cap.err)
        else:
            _one_line(rc, cap)
    assert open(base, "rb").read() == before  # resume refused before touching it
    if not NOT_READ_BY.get(which):
        assert not os.path.exists(tmp_path / "merged.h5")


def test_a_study_holding_two_tensors_is_named_once_by_merge(base, tmp_path, capsys):
    """Issue 33 item 20: the refusal named the same file twice, once per tensor."""
    _rewrite_runs(base, lambda rows: rows["seed"].__setitem__(1, 7))
    other = str(tmp_path / "other.h5")
    shutil.copy(base, other)
    _rewrite_runs(other, lambda rows: rows["seed"].__setitem__(slice(None), 0))
    assert cli.main(["merge", other, base, "-o", str(tmp_path / "m.h5")]) == 2
    err = capsys.readouterr().err
    assert f"merge: {base} itself holds runs of 2 tensors" in err and err.count(base) == 1, err
    assert not os.path.exists(tmp_path / "m.h5")


def _ge_study(tmp_path) -> str:
    path = str(tmp_path / "ge.h5")
    assert cli.main(["ge", "--arch", "A0", "--n", "64", "--threads", "2", "--reps", "1",
                     "-o", path]) == 0
    return path


@pytest.mark.parametrize("damage", ["field-dropped", "field-retyped", "text-not-utf8"])
def test_merge_refuses_a_side_table_that_report_refuses(tmp_path, capsys, damage):
    """Issue 33 item 19: merge copied an invalid /ge (exit 0) that report then refused; a
    retyped field gave report a traceback."""
    path = _ge_study(tmp_path)
    with h5py.File(path, "a") as h5:
        rows = h5["ge"][()]
        names = rows.dtype.names
        if damage == "field-dropped":
            keep = [(n, rows.dtype[n]) for n in names if n != "error"]
        else:
            keep = [(n, "f8" if n == "verified" and damage == "field-retyped" else rows.dtype[n])
                    for n in names]
        new = np.zeros(len(rows), keep)
        for n, _ in keep:
            new[n] = rows[n]
        if damage == "text-not-utf8":
            new["arch"] = b"A\xff"
        del h5["ge"]
        h5["ge"] = new
    capsys.readouterr()
    for argv in (["report", path, "--no-plots", "--out-dir", str(tmp_path / "r")],
                 ["merge", path, "-o", str(tmp_path / "m.h5")]):
        _one_line(cli.main(argv), capsys.readouterr())
    assert not os.path.exists(tmp_path / "m.h5")


def test_a_study_attribute_nested_too_deep_is_not_a_traceback(base, tmp_path, capsys):
    """Found by issue 33's hostile re-run: report and fit read the study attribute for a
    simulated study's cores, and a nesting past Python's stack raised RecursionError."""
    _attr("study", "[" * 100_000 + "]" * 100_000)(base)
    for argv in (["report", base, "--no-plots", "--out-dir", str(tmp_path / "r")],
                 ["fit", base, "--model", "amdahl"]):
        rc = cli.main(argv)
        err = capsys.readouterr().err
        assert rc in (0, 2) and "Traceback" not in err and len(err.strip().splitlines()) <= 1, err


def test_merge_refuses_a_side_tables_spec_that_is_not_json(tmp_path, capsys):
    """Found by issue 33's hostile re-run: a crafted ge_spec gave merge a JSONDecodeError."""
    path = _ge_study(tmp_path)
    _attr("ge_spec", "{not json")(path)
    capsys.readouterr()
    _one_line(cli.main(["merge", path, "-o", str(tmp_path / "m.h5")]), capsys.readouterr())
    assert not os.path.exists(tmp_path / "m.h5")


def test_study_without_detail_reads_reports_merges_and_resumes(base, tmp_path, capsys):
    with h5py.File(base, "a") as h5:
        del h5["detail"]
    cmds = _commands(base, tmp_path)
    for name in ("report", "fit", "merge", "resume"):
        rc = cli.main(cmds[name])
        cap = capsys.readouterr()
        assert rc == 0 and "Traceback" not in cap.err, (name, cap.err)
    assert len(store.read_runs(base)) == 4 + 1  # TINY adds dynamic k=3
    d = store.read_detail(base, 0)
    assert len(d.workers) == 0 and d.extra == {} and d.series == {}


def test_verified_row_whose_detail_is_unreadable_still_reports(base, tmp_path, capsys):
    """What a version-1 writer left on a full disk: a row whose detail is broken."""
    with h5py.File(base, "a") as h5:
        del h5["detail/000002/workers"]
        h5["detail/000002/workers"] = np.arange(3)  # not a worker table
    rc = cli.main(_commands(base, tmp_path)["report"])
    cap = capsys.readouterr()
    assert rc == 0 and "Traceback" not in cap.err
    assert "4 stored, 4 verified" in cap.out


# --- version-1 files -------------------------------------------------------------------


@pytest.mark.parametrize("fixture", [V1, V1_OLD], ids=["v1", "v1-without-pipe-fields"])
def test_version_1_fixture_reads_back_everywhere(fixture, tmp_path, capsys):
    path = str(tmp_path / "v1.h5")
    shutil.copy(fixture, path)
    with h5py.File(path, "a") as h5:  # resume checks the machine: make it this one
        for key in ("machine.N", "machine.cpus_usable", "machine.cpu_model"):
            h5.attrs.pop(key, None)
    runs = store.read_runs(path)
    assert len(runs) == 14 and runs["verified"].all()
    assert (runs["pipe_batch"] == 1).all() and (runs["inflight"] == 1).all()
    aimd = [int(r) for r in runs["run_id"][runs["scheduler"] == "aimd"]]
    d = store.read_detail(path, aimd[0])
    assert "aimd_window" in d.series and len(d.series["aimd_window"]) > 0
    assert len(d.workers) >= 1 and d.trace["count"].sum() == 8
    rc = cli.main(["report", path, "--no-plots", "--out-dir", str(tmp_path / "rep")])
    cap = capsys.readouterr()
    assert rc == 0 and "14 stored, 14 verified" in cap.out, cap.err
    rc = cli.main(["fit", path, "--model", "amdahl"])
    assert rc == 0, capsys.readouterr().err
    # the other fixture holds the same 14 runs (another layout of them): counted twice, refused
    rc = cli.main(["merge", path, V1 if fixture == V1_OLD else V1_OLD, "-o", str(tmp_path / "m.h5")])
    assert rc == 2 and "hold the same runs" in capsys.readouterr().err
    fresh = str(tmp_path / "fresh.h5")
    assert cli.main(["run", *V1_SPEC, "--reps", "1", "--out", fresh]) == 0
    rc = cli.main(["merge", path, fresh, "-o", str(tmp_path / "m.h5")])
    assert rc == 0, capsys.readouterr().err
    assert len(store.read_runs(str(tmp_path / "m.h5"))) == 14 + len(store.read_runs(fresh))
    rc = cli.main(["run", *V1_SPEC, "--reps", "3", "--resume", "--out", path])
    cap = capsys.readouterr()
    assert rc == 0 and "14 of 21 runs already stored" in cap.err, cap.err
    after = store.read_runs(path)
    assert len(after) == 21 and np.array_equal(after[:14], runs)


FUZZ_CASES = 40  # corrupted copies: a hostile user's 40 found 4 tracebacks in report


def _read_or_refused(case: int, commands: dict[str, list[str]], capsys) -> list[str]:
    """Each command on a damaged copy: what went wrong, where one did not read it (status
    0) or refuse it in one line with status 2 (a traceback, another status, a merge's
    output left after its refusal)."""
    bad = []
    for name, argv in commands.items():
        try:
            rc = cli.main(argv)
        except Exception as exc:  # noqa: BLE001 - what the tests are about
            bad.append(f"{case} {name}: {type(exc).__name__}: {exc}")
            continue
        err = capsys.readouterr().err
        if rc not in (0, 2) or (rc == 2 and len(err.strip().splitlines()) != 1):
            bad.append(f"{case} {name}: status {rc}: {err[-200:]}")
        if name == "merge" and rc == 2 and os.path.exists(argv[-1]):
            bad.append(f"{case} merge: refused, but left {argv[-1]}")
    return bad


def test_random_damage_to_a_study_is_never_a_traceback(base, tmp_path, capsys):
    """Bytes flipped at random in a study (seeded, so every run damages the same way): each
    command reads it (status 0, the damage missed whatever it reads) or refuses it in one
    line with status 2. h5py raises RuntimeError as well as OSError for a damaged heap or
    B-tree ("addr overflow", "bad heap free list"), which came out as tracebacks."""
    original = open(base, "rb").read()
    rng = np.random.default_rng(1)
    bad = []
    for case in range(FUZZ_CASES):
        data = bytearray(original)
        at = int(rng.integers(0, max(1, len(data) - 4096)))
        for i in rng.integers(at, min(len(data), at + 4096), 40):
            data[i] ^= int(rng.integers(1, 256))
        path = str(tmp_path / f"fuzz{case}.h5")
        with open(path, "wb") as fh:
            fh.write(data)
        commands = dict(_commands(path, tmp_path), trace=["trace", path, "--run", "2", "--png",
                                                          str(tmp_path / f"t{case}.png")])
        commands["merge"][-1] = str(tmp_path / f"merged{case}.h5")
        del commands["resume"]  # it writes into the file: covered by the crafted cases above
        bad += _read_or_refused(case, commands, capsys)
    assert not bad, "\n".join(bad)


def test_random_damage_to_a_side_table_study_is_never_a_traceback(tmp_path, capsys):
    """A `colocate --cmd` study with bits flipped at random (seeded), merged with a sound
    one and reported: read, or refused in one line with status 2. `merge` read each side
    table's spec through root attributes whose damaged storage h5py reports as
    RuntimeError ("Error iterating over attributes"): 5 of 40 copies came out as
    tracebacks (the review of 2026-12-07)."""
    import random

    base, sound = str(tmp_path / "c.h5"), str(tmp_path / "s.h5")
    for path in (base, sound):
        assert cli.main(["colocate", "--cmd", "true", "--jobs", "2", "--policy", "linux,env",
                         "--reps", "1", "-o", path]) == 0
    capsys.readouterr()
    original = open(base, "rb").read()
    bad = []
    for case in range(FUZZ_CASES):
        rng = random.Random(case)
        data = bytearray(original)
        for _ in range(20):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path = str(tmp_path / f"d{case}.h5")
        with open(path, "wb") as fh:
            fh.write(data)
        bad += _read_or_refused(case, {"merge": ["merge", path, sound, "-o",
                                                 str(tmp_path / f"m{case}.h5")],
                                       "report": ["report", "--no-plots", path]}, capsys)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name, damaged", [(b"machine.hostname", b"machine.hostn\xe5me"),
                                           (b"chunk_used", b"chunk_us\xe5d")],
                         ids=["an attribute's name", "a field's name of /runs"])
def test_a_name_that_is_not_utf8_is_refused_in_one_line(name, damaged, tmp_path, capsys):
    """One bit flipped in a name (a root attribute's, a field's of /runs): h5py hands over
    bytes where a str was due, or raises UnicodeDecodeError; merge came out with a
    traceback and status 1 for both (the second review)."""
    path, sound = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    for p in (path, sound):
        assert cli.main(["run", *TINY, "--out", p]) == 0
    data = open(path, "rb").read()
    assert data.count(name) == 1
    with open(path, "wb") as fh:
        fh.write(data.replace(name, damaged))
    capsys.readouterr()
    merged = str(tmp_path / "m.h5")
    for argv in (["merge", path, sound, "-o", merged], ["report", "--no-plots", path]):
        rc = cli.main(argv)
        _one_line(rc, capsys.readouterr())
    assert not os.path.exists(merged)
