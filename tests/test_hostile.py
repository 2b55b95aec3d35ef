"""Cases a hostile user found: each is one line and exit 2 (or a refusal) and leaves
nothing behind, never a traceback, a hang, or a device overwritten."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import h5py
import pytest

from hybridsched.cli import main
from hybridsched.coop.arbiter import Arbiter
from hybridsched.errors import UsageError

SMALL = ["--frames", "6", "--height", "4", "--width", "16", "--reps", "1"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_fit_plot_never_replaces_a_fifo(tmp_path, capsys):
    csv = tmp_path / "p.csv"
    csv.write_text("N,speedup\n1,1\n2,1.9\n4,3.5\n8,6\n")
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    assert main(["fit", str(csv), "--plot", str(fifo)]) == 2
    assert "not a regular file" in _one_line(capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("cmd", [["report"], ["fit"], ["merge", "-o", "m.h5"]])
def test_readers_refuse_a_fifo_instead_of_hanging(tmp_path, cmd):
    fifo = str(tmp_path / "s.h5")
    os.mkfifo(fifo)
    argv = [cmd[0], fifo] + cmd[1:]
    if cmd[0] == "merge":
        argv = ["merge", fifo, fifo, "-o", str(tmp_path / "m.h5")]
    p = subprocess.run([sys.executable, "-m", "hybridsched", *argv], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_deeply_nested_study_attribute_is_refused(tmp_path, capsys):
    path = str(tmp_path / "deep.h5")
    assert main(["run", "-s", "dynamic", "-k", "1", *SMALL, "--out", path]) == 0
    capsys.readouterr()
    with h5py.File(path, "r+") as h5:
        h5.attrs["study"] = '{"a":' * 100000
    assert main(["run", "-s", "dynamic", "-k", "1", *SMALL, "--out", path, "--resume"]) == 2
    _one_line(capsys)
    assert main(["merge", path, path, "-o", str(tmp_path / "m.h5")]) == 2
    _one_line(capsys)


@pytest.mark.parametrize("cmd", [["colocate", "--steps", "2", "--reps", "1"],
                                 ["ge", "--arch", "A1", "--algo", "rows", "--n", "16", "--threads", "2"]])
def test_empty_out_is_refused(cmd, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(cmd + ["--out", ""]) == 2
    assert "empty file name" in _one_line(capsys)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("spec", ["-1:1", "0:0", "0:99999999999999999999999", "0:1:kill:x"])
def test_out_of_range_fault_hooks_are_refused(spec, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HYBRIDSCHED_FAULT", spec)
    out = str(tmp_path / "f.h5")
    assert main(["run", "-s", "prolific", "-k", "1", *SMALL, "--out", out]) == 2
    _one_line(capsys)
    assert not os.path.exists(out)


def test_a_colocate_study_is_not_resumed_as_a_run_study(tmp_path, capsys):
    out = str(tmp_path / "co.h5")
    assert main(["colocate", "--steps", "3", "--reps", "1", "--policy", "linux", "-o", out]) == 0
    capsys.readouterr()
    assert main(["run", "-s", "dynamic", "-k", "1", *SMALL, "--out", out, "--resume"]) == 2
    assert "colocate" in _one_line(capsys)


@pytest.mark.parametrize("plant", ["garbage", "zeros", "empty", "mode644", "directory"])
def test_foreign_coop_segments_are_refused_and_nothing_is_left(tmp_path, plant):
    seg = str(tmp_path / "coop-seg")
    if plant == "directory":
        os.mkdir(seg)
    else:
        with open(seg, "wb") as fh:
            fh.write({"garbage": os.urandom(5000), "zeros": bytes(214208), "empty": b"",
                      "mode644": bytes(100)}[plant])
        os.chmod(seg, 0o644 if plant == "mode644" else 0o600)
    with pytest.raises(UsageError) as err:
        with Arbiter(path=seg):
            pass
    assert seg in str(err.value)
    assert not os.path.lexists(seg + ".lock")  # the refusal left no lock file of ours


def test_a_symlinked_coop_lock_is_refused(tmp_path):
    seg = str(tmp_path / "coop-seg")
    target = tmp_path / "victim"
    os.symlink(target, seg + ".lock")
    with pytest.raises(UsageError, match="cannot use it as the coop lock"):
        with Arbiter(path=seg):
            pass
    assert not target.exists() and not os.path.exists(seg)


def test_json_nesting_in_the_colocate_spec_does_not_matter(tmp_path):
    """The side-table spec attribute is written by us from a dict: plain JSON."""
    out = str(tmp_path / "co.h5")
    assert main(["colocate", "--steps", "3", "--reps", "1", "--policy", "linux", "-o", out]) == 0
    with h5py.File(out, "r") as h5:
        assert json.loads(h5.attrs["colocate_spec"])["steps"] == 3
