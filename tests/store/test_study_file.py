"""The HDF5 study file: round trip of /runs and the per-run detail, root attributes, the
flush per run (a second process reads the completed runs while the writer is still open),
and refusing files that are not ours."""
from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hybridsched import store
from hybridsched.errors import NotOurFile, UsageError
from hybridsched.records import TRACE_DTYPE, WORKER_DTYPE, RunConfig, RunRecord
from hybridsched.machine.metadata import machine_metadata

REQUIRED = ("scheduler", "family", "P", "k", "L", "H", "W", "chunk", "affinity", "rep",
            "time_s", "verified")


def record(i: int, scheduler="dynamic", verified=True, error="") -> RunRecord:
    workers = np.zeros(2, WORKER_DTYPE)
    workers["worker"] = [0, 1]
    workers["frames"] = [3 + i, 2]
    workers["chunks"] = [2, 1]
    workers["start"] = [0.0, 0.001]
    workers["end"] = [0.5, 0.4 + i]
    trace = np.zeros(3, TRACE_DTYPE)
    trace["worker"] = [0, 1, 0]
    trace["first"] = [0, 1 + i, 3 + i]
    trace["count"] = [1 + i, 2, 2]
    trace["end"] = [0.1, 0.2, 0.3 + i]
    cfg = RunConfig(scheduler, 2 + i, 5 + i, 4, 8, chunk=i, affinity=bool(i % 2), rep=i,
                    kernel="counting", seed=11)
    return RunRecord(cfg, "thread" if scheduler != "serial" else "serial", 0.25 + i, verified,
                     bad_rows=0 if verified else 7, chunk_used=i or 1, workers_used=2,
                     error=error, notes=f"note {i}", started_at=1e9 + i,
                     workers=workers, trace=trace, extra={"rank_times": [1.0, 2.0 + i]})


def test_round_trip(tmp_h5):
    meta = machine_metadata()
    recs = [record(0, "serial"), record(1), record(2, "chunk-steal", verified=False,
                                                  error="worker 1 (pid 5) killed by SIGKILL")]
    with store.StudyWriter(tmp_h5, meta, {"reps": 3, "schedulers": ["serial"]}) as w:
        ids = [w.append(r) for r in recs]
    assert ids == [0, 1, 2]

    runs = store.read_runs(tmp_h5)
    assert len(runs) == 3
    assert set(REQUIRED) <= set(runs.dtype.names)
    for i, (row, r) in enumerate(zip(runs, recs)):
        c = r.config
        assert row["run_id"] == i
        assert (row["scheduler"], row["family"], row["kernel"]) == (c.scheduler, r.family, c.kernel)
        assert (row["P"], row["k"], row["L"], row["H"], row["W"]) == (c.P, c.k, c.frames, c.height, c.width)
        assert (row["chunk"], row["chunk_used"], row["rep"], row["seed"]) == (c.chunk, r.chunk_used, c.rep, c.seed)
        assert bool(row["affinity"]) == c.affinity and bool(row["verified"]) == r.verified
        assert row["time_s"] == r.time_s and row["bad_rows"] == r.bad_rows
        assert row["error"] == r.error and row["notes"] == r.notes
        assert row["started_at"] == r.started_at
        workers, trace, *_ = store.read_detail(tmp_h5, i)
        assert workers.dtype == WORKER_DTYPE and trace.dtype == TRACE_DTYPE
        assert np.array_equal(workers, r.workers) and np.array_equal(trace, r.trace)

    attrs = store.read_attrs(tmp_h5)
    assert attrs["format"] == "hybridsched"
    assert attrs["format_version"] == store.FORMAT_VERSION
    assert json.loads(attrs["study"]) == {"reps": 3, "schedulers": ["serial"]}
    for key in ("cpu_model", "cpus_usable", "memory_bytes", "kernel", "numpy", "numba", "h5py"):
        assert f"machine.{key}" in attrs, key
    assert attrs["machine.cpus_usable"] >= 1 and attrs["machine.memory_bytes"] > 0
    with h5py.File(tmp_h5, "r") as h5:
        assert json.loads(h5["detail/000001"].attrs["extra"]) == {"rank_times": [1.0, 3.0]}
        assert h5["runs"].ndim == 1


def test_empty_study_and_empty_trace(tmp_h5):
    with store.StudyWriter(tmp_h5, {}, {}):
        pass
    assert len(store.read_runs(tmp_h5)) == 0
    with store.StudyWriter(tmp_h5, append=True) as w:
        r = record(0)
        r.trace = np.zeros(0, TRACE_DTYPE)
        r.workers = np.zeros(0, WORKER_DTYPE)
        w.append(r)
    workers, trace, *_ = store.read_detail(tmp_h5, 0)
    assert len(workers) == 0 and len(trace) == 0


def test_long_and_unicode_strings_are_clipped_not_fatal(tmp_h5):
    r = record(0, error="é" * 400)
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(r)
    row = store.read_runs(tmp_h5)[0]
    assert set(row["error"]) == {"é"} and 100 <= len(row["error"]) <= 240


def test_append_mode_continues_the_run_ids(tmp_h5):
    with store.StudyWriter(tmp_h5, {"hostname": "a"}, {}) as w:
        w.append(record(0))
    with store.StudyWriter(tmp_h5, append=True) as w:
        assert w.append(record(1)) == 1
    runs = store.read_runs(tmp_h5)
    assert runs["run_id"].tolist() == [0, 1]
    assert store.read_attrs(tmp_h5)["machine.hostname"] == "a"


READER = """
import sys
from hybridsched.store import read_runs, read_detail
runs = read_runs(sys.argv[1])
w, t, *_ = read_detail(sys.argv[1], len(runs) - 1)
print(len(runs), len(t))
"""


def test_each_run_is_visible_to_a_second_process_while_writing(tmp_h5):
    """Flush per run: another process (a `report` during a long study) reads every
    completed run while the writer still has the file open."""
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        for i in range(2):
            w.append(record(i))
            p = subprocess.run([sys.executable, "-c", READER, tmp_h5], capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            assert p.stdout.split() == [str(i + 1), "3"]
        p = subprocess.run([sys.executable, "-m", "hybridsched", "report", tmp_h5],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr


def test_not_our_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(NotOurFile):
        store.read_runs(str(text))
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as h5:
        h5["data"] = np.arange(3)
    with pytest.raises(NotOurFile):
        store.read_runs(str(other))
    with pytest.raises(NotOurFile):
        store.read_runs(str(tmp_path / "missing.h5"))
    with pytest.raises(NotOurFile):
        store.StudyWriter(str(other), append=True)
    assert issubclass(NotOurFile, UsageError)


def test_unknown_format_version_is_refused(tmp_h5):
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(record(0))
    with h5py.File(tmp_h5, "a") as h5:
        h5.attrs["format_version"] = store.FORMAT_VERSION + 1
    with pytest.raises(NotOurFile, match="format_version"):
        store.read_runs(tmp_h5)


def test_check_writable(tmp_path):
    store.check_output(str(tmp_path / "new.h5"))
    with pytest.raises(UsageError):
        store.check_output(str(tmp_path / "no" / "such" / "dir.h5"))
    with pytest.raises(UsageError):
        store.check_output(str(tmp_path))
    assert not (tmp_path / "new.h5").exists()


# The child: a command of the CLI whose numpy decode leaves a mark when it starts, so the
# test can send its signal while the big /runs is being decoded (a state, not a delay).
_MARKED_CLI = """
import os, sys
import numpy as np
real = np.char.decode
def marked(*args, **kw):
    if not os.path.exists(os.environ["DECODE_MARK"]):
        open(os.environ["DECODE_MARK"], "w").close()
    return real(*args, **kw)
np.char.decode = marked
from hybridsched.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _tiled_study(tmp_path, rows: int) -> str:
    """A real study whose /runs is tiled to ``rows`` rows (run ids kept unique)."""
    from hybridsched.cli import main

    small = str(tmp_path / "small.h5")
    assert main(["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "8", "--height", "8",
                 "--width", "16", "--reps", "2", "-o", small]) == 0
    big = str(tmp_path / "big.h5")
    with h5py.File(small, "r") as src, h5py.File(big, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        tiled = np.resize(src["runs"][()], rows)
        tiled["run_id"] = np.arange(rows)
        dst.create_dataset("runs", data=tiled, maxshape=(None,), chunks=(64,))
    return big


@pytest.mark.slow
def test_every_reader_of_runs_honours_the_first_signal_while_decoding(tmp_path):
    """Issue 33 item 4: numpy's element-wise decode dropped the exception of a signal
    handler that ran inside it, and `report` or `merge` of a large study ran to its end
    after one SIGTERM/Ctrl-C. Each command gets its signal while decoding, three times."""
    import os
    import signal
    import time

    big = _tiled_study(tmp_path, 60_000)
    commands = {"report": ["report", big, "--out-dir", str(tmp_path / "rep")],
                "merge": ["merge", big, "-o", str(tmp_path / "merged.h5")]}
    for attempt in range(3):
        for name, argv in commands.items():
            sig, rc = ((signal.SIGTERM, 143), (signal.SIGINT, 130))[attempt % 2]
            mark = tmp_path / f"mark-{name}-{attempt}"
            env = dict(os.environ, DECODE_MARK=str(mark))
            proc = subprocess.Popen([sys.executable, "-c", _MARKED_CLI, *argv], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                while not mark.exists() and proc.poll() is None:
                    time.sleep(0.001)
                proc.send_signal(sig)
                _, err = proc.communicate(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            assert mark.exists(), err
            assert proc.returncode == rc, f"{name}, try {attempt}: exit {proc.returncode}: {err}"
            assert not (tmp_path / "merged.h5").exists()


def test_report_fit_and_the_simulator_load_a_study_with_one_open(tmp_path, monkeypatch):
    """Issue 36 item 4: one study loader (store.StudyFile) that the report, fit and the
    simulator share, each reading the file in one open (five, four and five before)."""
    from hybridsched.cli import main
    from hybridsched.results import data, fit
    from hybridsched.sim.fromstudy import MeasuredStudy

    out = str(tmp_path / "s.h5")
    assert main(["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "8", "--height", "4",
                 "--width", "8", "--reps", "1", "--out", out]) == 0
    opened: list[str] = []

    class Counted(h5py.File):
        def __init__(self, name, *args, **kwargs):
            opened.append(str(name))
            super().__init__(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", Counted)
    loaded = [data.load_study(out), fit.load_study(out, "dynamic"), MeasuredStudy(out)]
    assert opened == [out] * 3
    assert len(loaded[0].runs) == 3 and list(loaded[1].N) == [1, 2]
    assert loaded[0].util and len(loaded[2].traces) == 3  # the detail came from the same open
