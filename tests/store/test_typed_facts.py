"""Issue 36 item 2: what code reads back about a run (which chunk loop ran, the pipe-MtoM
producer's CPU, how a broken run's worker ended, technique parameters and portfolio) and
the machine's metadata are typed fields of the record and of the study file (format 4);
``notes`` are text for people that no module of the package reads, and files of earlier
versions still read, their facts taken from their notes once (store.legacy)."""
from __future__ import annotations

import ast
import math
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from hybridsched import store
from hybridsched.backends import compiled, threads
from hybridsched.backends.base import job_for
from hybridsched.core.capabilities import Family
from hybridsched.errors import BadStudy, WorkerFailed
from hybridsched.records import (NO_FAILURE, NOT_MEASURED, Failure, RunConfig, RunRecord,
                                 as_params, params_text, parse_params)
from hybridsched.sim.fromstudy import MeasuredStudy
from hybridsched.sim.models import Overheads
from hybridsched.store.metadata import METADATA, Resume, resume_differences, stored, typed
from hybridsched.study.output import this_machine
from hybridsched.study.runner import timed_run
from hybridsched.study.session import resume_conflicts
from hybridsched.study.spec import StudySpec
from hybridsched.workloads.slab import Slab
from repo import ROOT

PKG = ROOT / "src" / "hybridsched"
# Written by hybridsched at format 3 (git 6c98366) with
#   hybridsched run -s serial,dynamic,adaptive,pipe-MtoM,auto -k 1,2 -L 16 --height 8
#       --width 16 --reps 1 --seed 3 --portfolio fac2,guided --fiss-stages 3
# Its notes say "dispatch=compiled" for dynamic and auto, and hold the producer's CPU of the
# two pipe-MtoM runs ("producer cpu_s=0.000559", "producer cpu_s=0.000838").
V3 = str(ROOT / "tests" / "fixtures" / "study-v3.h5")


# --- no module reads notes ---------------------------------------------------------------

# The one module that reads old files' notes (their facts, once, as a file before format 4
# is read)
NOTES_READER = "hybridsched.store.legacy"
_TEXT_CALLS = {"find", "rfind", "index", "rindex", "split", "rsplit", "partition",
               "rpartition", "startswith", "endswith", "count", "removeprefix",
               "removesuffix", "splitlines"}


def _is_notes(node: ast.AST) -> bool:
    """A run's notes: a ``notes`` attribute, column, variable or method's text, or str() of
    one."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
            return _is_notes(node.args[0])
        return isinstance(node.func, ast.Attribute) and node.func.attr == "notes"
    if isinstance(node, ast.Attribute):
        return node.attr == "notes"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "notes"
    return isinstance(node, ast.Name) and node.id == "notes"


def notes_read(source: str) -> list[int]:
    """Lines that look inside notes: a substring or equality test on them, a text method
    that searches or splits them, a regular expression over them, or a slice of them."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            inside = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                _is_notes(c) for c in node.comparators)
            equal = any(_is_notes(o) for o in ops) and any(
                isinstance(o, ast.Constant) and isinstance(o.value, str) and o.value for o in ops)
            if inside or equal:
                out.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _TEXT_CALLS and _is_notes(node.func.value):
                out.append(node.lineno)
            elif any(_is_notes(a) for a in node.args) and (
                    node.func.attr in ("search", "match", "fullmatch", "findall", "finditer")
                    or (isinstance(node.func.value, ast.Name) and node.func.value.id == "re")):
                out.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_notes(node.value) and isinstance(
                node.slice, ast.Slice):
            out.append(node.lineno)
    return out


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PKG.parent).with_suffix("").parts): p
            for p in PKG.rglob("*.py")}


def test_no_module_of_the_package_reads_notes():
    found = [f"{name}:{line}" for name, p in sorted(_modules().items()) if name != NOTES_READER
             for line in notes_read(p.read_text())]
    assert found == [], "read the record's typed field (records.RunRecord) instead of its notes"


@pytest.mark.parametrize("line", [
    'x = "dispatch=compiled" in r["notes"]',
    'x = NOTE not in rec.notes',
    'x = "dispatch=compiled" in str(r["notes"])',
    'x = rec.notes == "dispatch=compiled"',
    'at = notes.find(PRODUCER_CPU)',
    'x = str(r["notes"]).split(";")',
    'x = re.search(r"cpu_s=(\\S+)", rec.notes)',
    'x = PATTERN.search(notes)',
    'x = notes[at + 3:]',
    'x = "compiled" in disp.notes()',
])
def test_the_notes_check_sees_a_look_inside_notes(line):
    assert notes_read(line) == [1]


@pytest.mark.parametrize("line", [
    'notes = f"split={split}; {ex.notes}"',
    'if ex.notes: self.notes = ex.notes',
    'x = "; ".join(r.notes for r in results if r.notes)',
    'x = RunRecord(cfg, fam, 1.0, True, notes=notes)',
    'x = r["dispatch"] == "compiled"',
])
def test_the_notes_check_lets_notes_be_written_and_passed_on(line):
    assert notes_read(line) == []


# --- the record and the file, typed ------------------------------------------------------


def _record(dispatch="compiled", cpu=NOT_MEASURED, failure=NO_FAILURE, notes="") -> RunRecord:
    cfg = RunConfig("auto", 2, 8, 4, 8, kernel="counting", seed=5,
                    params=as_params({"fiss_stages": 3, "viss_param": 2.5}),
                    portfolio=("fac2", "guided"))
    return RunRecord(cfg, "thread", 0.5, True, workers_used=2, notes=notes, dispatch=dispatch,
                     producer_cpu_s=cpu, failure=failure)


def test_facts_round_trip_typed_through_the_file(tmp_path):
    path = str(tmp_path / "s.h5")
    broke = Failure(worker=1, pid=4321, signal="SIGKILL", status=-1, exception="")
    records = [_record(), _record("python", 0.0125), _record("", failure=broke)]
    with store.StudyWriter(path, this_machine(), {}) as w:
        for r in records:
            w.append(r)
    with store.StudyFile(path) as study:
        runs = study.runs
        assert int(study.attrs["format_version"]) == store.FORMAT_VERSION == 4
    assert list(runs["dispatch"]) == ["compiled", "python", ""]
    assert list(runs["producer_cpu_s"]) == [NOT_MEASURED, 0.0125, NOT_MEASURED]
    assert [store.reader.row_failure(r) for r in runs] == [NO_FAILURE, NO_FAILURE, broke]
    for r, rec in zip(runs, records):
        cfg = store.row_config(r)
        assert cfg == rec.config and cfg.key() == rec.config.key()
        assert cfg.params == (("fiss_stages", 3), ("viss_param", 2.5))
        assert cfg.portfolio == ("fac2", "guided") and cfg.param_dict()["viss_param"] == 2.5


def test_a_new_files_notes_are_never_read_for_its_facts(tmp_path):
    """Words that an old file's notes carried mean nothing in a file of format 4."""
    path = str(tmp_path / "s.h5")
    with store.StudyWriter(path, {}, {}) as w:
        w.append(_record("python", notes="dispatch=compiled; producer cpu_s=9.5"))
    runs = store.read_runs(path)
    assert runs["dispatch"][0] == "python" and runs["producer_cpu_s"][0] == NOT_MEASURED


def test_run_config_refuses_text_for_typed_fields():
    with pytest.raises(TypeError):
        RunConfig("fiss", 1, 8, 4, 8, params="fiss_stages=3")
    with pytest.raises(TypeError):
        RunConfig("auto", 1, 8, 4, 8, portfolio="fac2,guided")
    assert parse_params(params_text(as_params({"b": "x", "a": 1}))) == (("a", 1), ("b", "x"))


@pytest.mark.parametrize("field,value", [("dispatch", b"gpu"), ("producer_cpu_s", -3.0),
                                         ("producer_cpu_s", np.inf)])
def test_a_crafted_fact_is_refused_in_one_line(tmp_path, field, value):
    path = str(tmp_path / "s.h5")
    with store.StudyWriter(path, {}, {}) as w:
        w.append(_record())
    with h5py.File(path, "a") as h5:
        rows = h5["runs"][()]
        rows[field] = value
        h5["runs"][...] = rows
    with pytest.raises(BadStudy, match=field):
        store.read_runs(path)


# --- files of format 3 and before --------------------------------------------------------


def test_a_version_3_file_reads_with_its_facts_from_its_notes():
    runs = store.read_runs(V3)
    by = {(str(r["scheduler"]), int(r["k"])): r for r in runs}
    assert {by[(s, k)]["dispatch"] for s in ("dynamic", "auto") for k in (1, 2)} == {"compiled"}
    # format 3 did not say "python": the Python loop's runs read as not saying
    assert {by[(s, k)]["dispatch"] for s in ("serial", "adaptive", "pipe-MtoM")
            for k in (1, 2) if (s, k) in by} == {""}
    assert by[("pipe-MtoM", 1)]["producer_cpu_s"] == 0.000559
    assert by[("pipe-MtoM", 2)]["producer_cpu_s"] == 0.000838
    assert (runs["producer_cpu_s"][runs["scheduler"] != "pipe-MtoM"] == NOT_MEASURED).all()
    assert (runs["failed_worker"] == -1).all() and (runs["failed_status"] == -1).all()
    auto = store.row_config(by[("auto", 2)])
    assert auto.params == (("fiss_stages", 3),) and auto.portfolio == ("fac2", "guided")


def test_the_simulator_takes_a_version_3_files_facts():
    """The producer's CPU and the compiled loop's claims of a format-3 study reach the
    simulator's overheads as they did when it read them out of the notes."""
    study = MeasuredStudy(V3)
    base = Overheads()
    ov = study.overheads(base)
    assert ov.claim_compiled_s != base.claim_compiled_s  # from dynamic's compiled runs
    # the Python loop's claims: the thread runs that did not run compiled (adaptive)
    assert {str(r["scheduler"]) for r in study._rows(Family.THREAD, compiled=False)} == {"adaptive"}
    assert {str(r["scheduler"]) for r in study._rows(Family.THREAD, compiled=True)} == {
        "dynamic", "auto"}
    mtom = next(r for r in study.runs if r["scheduler"] == "pipe-MtoM" and r["k"] == 2)
    got = study.overheads_for(mtom, ov)
    assert math.isclose(got.pipe_serve_s, 0.000838 / len(study.traces[int(mtom["run_id"])]))


def test_resuming_a_version_3_file_rewrites_it_as_version_4_keeping_its_facts(tmp_path):
    path = str(tmp_path / "v3.h5")
    shutil.copy(V3, path)
    before = store.read_runs(path)
    with store.StudyWriter(path, append=True) as w:
        w.append(_record("python", 0.25))
    assert int(store.read_attrs(path)["format_version"]) == 4
    after = store.read_runs(path)
    assert np.array_equal(after[:len(before)], before)  # the old rows' facts kept
    with h5py.File(path, "r") as h5:  # now in the file's own fields
        assert h5["runs"].dtype == store.RUN_DTYPE
    assert after["dispatch"][-1] == "python" and after["producer_cpu_s"][-1] == 0.25


# --- facts from the backends -------------------------------------------------------------


@pytest.mark.parametrize("dispatch", ["python", "compiled"])
def test_a_thread_run_records_which_loop_ran(dispatch):
    cfg = RunConfig("dynamic", 2, 12, 4, 8, kernel="quicksort", seed=2, dispatch=dispatch)
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
    assert rec.verified and rec.dispatch == dispatch and rec.failure == NO_FAILURE
    assert rec.producer_cpu_s == NOT_MEASURED


def test_a_pipe_mtom_run_records_its_producers_cpu():
    cfg = RunConfig("pipe-MtoM", 2, 12, 4, 8, kernel="quicksort", seed=2)
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        rec = timed_run(slab, cfg)
    assert rec.verified and rec.dispatch == "" and rec.producer_cpu_s > 0


def _raising(data, first, count):
    raise ValueError("frame is bad")


def test_a_broken_thread_run_records_how_its_worker_ended(monkeypatch):
    from hybridsched import kernels

    monkeypatch.setitem(kernels.KERNELS, "raising-py", (_raising, "test kernel"))
    cfg = RunConfig("dynamic", 2, 12, 4, 8, kernel="raising-py", seed=2)
    with Slab(cfg.frames, cfg.height, cfg.width, cfg.seed) as slab:
        with pytest.raises(WorkerFailed) as got:
            threads.execute(job_for(cfg, slab.work, original=slab.original))
        rec = timed_run(slab, cfg)
    assert got.value.dispatch == compiled.PYTHON  # a Python kernel: the Python loop
    assert not rec.verified and rec.dispatch == "python"
    assert rec.failure.worker in (0, 1) and rec.failure.exception == "ValueError"
    assert rec.failure.pid == 0 and rec.failure.signal == "" and rec.failure.status == -1


# --- the machine's metadata --------------------------------------------------------------


def test_every_collected_key_is_declared_and_reads_back_as_its_type(tmp_path):
    meta = this_machine(check_load=[0.1, 0.2], check_planned_bytes=64)
    assert sorted(set(meta) - set(METADATA)) == []
    path = str(tmp_path / "s.h5")
    with store.StudyWriter(path, meta, {}):
        pass
    with store.StudyFile(path) as study:
        back = study.machine
    assert back == {k: v for k, v in meta.items()}
    for key, value in back.items():
        assert METADATA[key].kind.read(stored({key: value})[f"machine.{key}"]) == value


def test_resume_compares_the_keys_declared_equal_by_their_type():
    equal = {k for k, info in METADATA.items() if info.resume is Resume.EQUAL}
    assert equal == {"N", "cpus_usable", "cpu_model"}
    here = {"N": 2, "cpus_usable": 2, "cpu_model": "AMD EPYC", "hostname": "a", "numpy": "2"}
    old = {"N": np.int64(2), "cpus_usable": np.int64(2), "cpu_model": "AMD EPYC",
           "hostname": "b", "numpy": "1"}
    assert resume_differences(old, here) == []  # only the ignored keys differ
    assert resume_differences({**old, "N": np.int64(4)}, here) == ["N"]
    spec = StudySpec(["serial"], [1], [4], height=8, width=8)
    assert resume_conflicts(spec.to_dict(), spec, {**old, "cpu_model": "Xeon"}, here) == [
        "machine cpu_model 'AMD EPYC' differs from the stored 'Xeon'"]


def test_a_metadata_value_not_of_its_type_is_refused_when_read():
    with pytest.raises(BadStudy, match="machine.N 'many' is not an integer"):
        typed("s.h5", {"machine.N": "many"})
    with pytest.raises(BadStudy, match="check_load"):
        typed("s.h5", {"machine.check_load": "[0.1,"})
    # a later hybridsched's key is kept as it was stored
    assert typed("s.h5", {"machine.future": "x", "study": "{}"}) == {"future": "x"}


def test_old_fixtures_machine_metadata_reads_typed():
    for name in ("study-v1.h5", "study-v1-old.h5", "colocate-v2.h5", "study-v3.h5"):
        with store.StudyFile(os.path.join(ROOT, "tests", "fixtures", name)) as study:
            m = study.machine
        assert isinstance(m["N"], int) and isinstance(m["cpu_model"], str)
