"""Safe sweeps: Ctrl-C keeps every completed run, --resume repeats none, the progress bar
stays off when stderr is not a terminal."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from hybridsched import cli
from hybridsched.study.progress import Progress
from hybridsched.records import RunConfig
from hybridsched.store import read_attrs, read_runs
from waiting import default_sigint

# Enough runs (3 x 40) of ~10-30 ms each that the sweep is still going when we interrupt it
# after a few are stored; small enough that the whole test takes a few seconds.
ARGS = ["-s", "serial,dynamic", "-k", "1,2", "-L", "64", "--height", "128", "--width", "128",
        "--reps", "40", "--seed", "3"]


def _cmd(out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "hybridsched", "run", *ARGS, "--out", out, *extra]


def _stored(path: str) -> int:
    """Rows in /runs, read while the writer may still have the file open."""
    try:
        with h5py.File(path, "r", locking=False) as h5:
            return int(h5["runs"].shape[0])
    except (OSError, KeyError):
        return 0


def _keys(runs: np.ndarray) -> list[tuple]:
    return [(str(r["scheduler"]), int(r["k"]), int(r["L"]), int(r["chunk"]), bool(r["affinity"]),
             int(r["rep"])) for r in runs]


@pytest.mark.slow
def test_sigint_then_resume(tmp_path):
    out = str(tmp_path / "sweep.h5")
    proc = subprocess.Popen(_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 60
        while _stored(out) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert b"interrupted; completed runs are kept" in err
    assert b"Traceback" not in err
    # progress output absent: stderr is a pipe, so no bar, no carriage returns
    assert b"\r" not in err and b"%|" not in err and b"it/s" not in err

    first = read_runs(out)  # readable after the interrupt
    n_first = len(first)
    assert n_first >= 5
    total = 3 * 40
    assert n_first < total
    assert first["verified"].all()
    assert len(set(_keys(first))) == n_first

    res = subprocess.run(_cmd(out, "--resume"), capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    assert f"{n_first} of {total} runs already stored".encode() in res.stderr
    runs = read_runs(out)
    assert len(runs) == total  # every configuration exactly once
    assert len(set(_keys(runs))) == total
    # the completed runs of the first invocation are kept untouched, in place
    assert np.array_equal(runs[:n_first]["time_s"], first["time_s"])
    assert np.array_equal(runs["run_id"], np.arange(total))
    attrs = read_attrs(out)
    assert len(json.loads(attrs["study_history"])) == 1

    # resuming a finished study runs nothing
    res = subprocess.run(_cmd(out, "--resume"), capture_output=True, timeout=120)
    assert res.returncode == 0 and len(read_runs(out)) == total
    assert f"{total} of {total} runs already stored, 0 to go".encode() in res.stderr


def test_resume_refuses_another_tensor(tmp_path, capsys):
    out = str(tmp_path / "s.h5")
    small = ["run", "-s", "serial", "-L", "4", "--height", "8", "--width", "8", "--reps", "1",
             "--out", out]
    assert cli.main(small + ["--seed", "1"]) == 0
    capsys.readouterr()
    before = os.path.getmtime(out)
    assert cli.main(small + ["--seed", "2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot continue this study: seed 2 differs" in err
    assert os.path.getmtime(out) == before and len(read_runs(out)) == 1
    assert cli.main(small[:-2] + ["--height", "16", "--out", out, "--seed", "1", "--resume"]) == 2
    assert "height 16 differs" in capsys.readouterr().err
    assert cli.main(small + ["--seed", "1", "--resume", "--overwrite"]) == 2
    # more repetitions of the same study: allowed, adds only the new ones
    assert cli.main(small[:-4] + ["--reps", "2", "--out", out, "--seed", "1", "--resume"]) == 0
    runs = read_runs(out)
    assert sorted(runs["rep"].tolist()) == [0, 1]


def test_resume_reads_the_study_once(tmp_path, request, capsys):
    """Issue 36 item 4: --resume's checks (which kind of study, its settings and history,
    the machine, the techniques that ran, the stored runs) take all they read from one
    open of the file (ten before)."""
    from hybridsched.study.output import this_machine
    from hybridsched.study.session import resume_check
    from hybridsched.study.spec import StudySpec

    out = str(tmp_path / "s.h5")
    assert cli.main(["run", "-s", "serial,dynamic", "-k", "1", "-L", "4", "--height", "8",
                     "--width", "8", "--reps", "1", "--seed", "1", "--out", out]) == 0
    spec = StudySpec(["serial", "dynamic"], [1], [4], height=8, width=8, reps=2, seed=1)
    meta = this_machine()
    opened = request.getfixturevalue("h5_opens")  # counted from here on
    done = resume_check(out, spec, meta)
    assert opened == [out]
    assert done == {c.key() for c in spec.configurations() if c.rep == 0}


def test_resume_without_file_starts_fresh(tmp_path, capsys):
    out = str(tmp_path / "new.h5")
    assert cli.main(["run", "-s", "serial", "-L", "4", "--height", "8", "--width", "8",
                     "--reps", "1", "--out", out, "--resume"]) == 0
    assert len(read_runs(out)) == 1
    attrs = read_attrs(out)
    assert int(attrs["machine.N"]) == len(os.sched_getaffinity(0))
    assert "machine.loadavg_at_start" in attrs
    with h5py.File(out, "r") as h5:  # each run records the other load it was timed under
        extra = json.loads(h5["detail"]["000000"].attrs["extra"])
    assert 0.0 <= extra["foreign_cpu"] <= 1.0


def test_interleave_runs_every_configuration_once_per_round(tmp_path, capsys):
    """--interleave: repetition-major order (the same runs, rep 0 of each configuration
    first); the default keeps a configuration's repetitions back to back; a resumed
    interleaved study adds only what is missing."""
    out = str(tmp_path / "i.h5")
    small = ["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "6", "--height", "8",
             "--width", "8", "--out", out]
    assert cli.main(small + ["--reps", "2", "--interleave"]) == 0
    runs = read_runs(out)
    assert runs["rep"].tolist() == [0, 0, 0, 1, 1, 1]
    assert json.loads(read_attrs(out)["study"])["interleave"] is True
    assert cli.main(small + ["--reps", "3", "--interleave", "--resume"]) == 0
    runs = read_runs(out)
    assert runs["rep"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len({(s, k, r) for s, k, r in zip(runs["scheduler"], runs["k"], runs["rep"])}) == 9
    assert cli.main(small + ["--reps", "2", "--overwrite"]) == 0
    assert read_runs(out)["rep"].tolist() == [0, 1, 0, 1, 0, 1]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _cfgs(n):
    return [RunConfig("dynamic", 2, 10, 8, 8, rep=i) for i in range(n)]


def test_progress_shows_configuration_rep_and_eta_on_a_terminal():
    stream = _Tty()
    cfgs = _cfgs(3)
    with Progress(cfgs, n=2, reps=3, stream=stream) as p:
        for c in cfgs:
            p.start(c)
            p.done(c)
    text = stream.getvalue()
    assert "dynamic k=2 L=10 rep 3/3" in text and "run 3/3" in text
    assert "<" in text and "100%" in text  # elapsed<remaining (the ETA) and completion


def test_progress_silent_when_not_a_terminal():
    stream = io.StringIO()
    cfgs = _cfgs(2)
    with Progress(cfgs, n=2, reps=2, stream=stream) as p:
        for c in cfgs:
            p.start(c)
            p.done(c)
    assert stream.getvalue() == ""


def test_ctrl_c_during_append_is_held_until_the_run_is_stored(tmp_path, monkeypatch):
    from hybridsched.records import RunRecord
    from hybridsched.store import StudyWriter

    out = str(tmp_path / "held.h5")
    rec = RunRecord(RunConfig("serial", 1, 4, 8, 8), "serial", 0.5, True)
    with StudyWriter(out, {}, {}) as w:
        real = w._append

        def interrupted(record):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the run is being written
            time.sleep(0.05)
            return real(record)
        monkeypatch.setattr(w, "_append", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.append(rec)
    runs = read_runs(out)
    assert len(runs) == 1 and runs["time_s"][0] == 0.5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _run_on_pty(argv: list[str], stdout_on_pty: bool) -> tuple[int, str]:
    """Run `python -m hybridsched argv` with stderr (and stdout if asked) on a pty with a
    window size, as a terminal has; returns the exit status and what the pty showed."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", *argv],
                            stdout=slave if stdout_on_pty else subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            seen += data
    finally:
        os.close(master)
        proc.wait(timeout=60)
    return proc.returncode, seen.decode(errors="replace")


def test_progress_bar_on_a_real_terminal(tmp_path):
    """Through a pty the bar shows the runs."""
    out = str(tmp_path / "tty.h5")
    rc, text = _run_on_pty(["run", "-s", "serial,dynamic", "-k", "2", "-L", "4", "--height", "8",
                            "--width", "8", "--reps", "2", "--out", out], stdout_on_pty=True)
    assert rc == 0
    assert "run 4/4: dynamic k=2 L=4 rep 2/2" in text and "100%" in text


def test_progress_bar_silent_when_stdout_is_redirected(tmp_path):
    """stderr on a terminal but stdout to a file (`run > table.md`): no bar (issue 4)."""
    out = str(tmp_path / "tty.h5")
    rc, text = _run_on_pty(["run", "-s", "serial", "-L", "2", "--height", "4", "--width", "4",
                            "--reps", "1", "--out", out], stdout_on_pty=False)
    assert rc == 0
    assert "written to" in text and "%" not in text


def test_append_replaces_a_half_written_run(tmp_path):
    """A crash between a run's detail group and its /runs row leaves an orphan group;
    the resumed writer replaces it instead of failing on the name."""
    from hybridsched.records import RunRecord
    from hybridsched.store import StudyWriter, read_detail

    out = str(tmp_path / "half.h5")
    rec = RunRecord(RunConfig("serial", 1, 4, 8, 8), "serial", 0.5, True)
    with StudyWriter(out, {}, {}) as w:
        w.append(rec)
        w.h5["detail"].create_group("000001").create_dataset("workers", data=np.arange(3))
    with StudyWriter(out, append=True) as w:
        assert w.append(rec) == 1
    assert len(read_runs(out)) == 2
    workers, *_ = read_detail(out, 1)
    assert workers.dtype.names is not None  # the real detail, not the orphan's


def test_resume_refuses_a_simulated_study(tmp_path, capsys):
    """`run --resume` of a `simulate` study counted its simulated runs as measured ones,
    "10 of 10 runs already stored", and reported them as this machine's (hostile review)."""
    out = str(tmp_path / "sim.h5")
    grid = ["-s", "serial,dynamic", "-k", "1,2", "-L", "8", "--height", "8", "--width", "8",
            "--reps", "1", "--out", out]
    assert cli.main(["simulate", *grid, "--cores", "2"]) == 0
    capsys.readouterr()
    before = open(out, "rb").read()
    assert cli.main(["run", *grid, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a simulated study" in err, err
    assert open(out, "rb").read() == before
