"""`run --kernel MODULE:FUNCTION`, `--verify`, `--input` (issue 12 item 3): a user kernel
runs on every backend and is verified by the user's verifier; a missing module, a name
that is not a function, a wrong signature or a missing verifier is one line and exit 2; a
kernel that raises is a failed run (stored, exit 1); the input file's hash is stored and
`--verify none` is reported as unverified by choice."""
from __future__ import annotations

import itertools
import textwrap

import numpy as np
import pytest

from hybridsched import cli
from hybridsched.store import read_runs

MODULE = textwrap.dedent("""
    import numba
    import numpy as np

    NOT_A_FUNCTION = 3

    @numba.njit(nogil=True, cache=False)
    def invert(task):
        for i in range(task.shape[0]):
            for j in range(task.shape[1]):
                task[i, j] = 255 - task[i, j]

    def inverted(original, result):
        return bool(np.array_equal(result, 255 - original))

    @numba.njit(nogil=True, cache=False)
    def halve(data, first, count):
        for t in range(first, first + count):
            data[t] = data[t] / 2

    def halved(original, result):
        return bool(np.allclose(result, original / 2))

    def py_invert(task):
        task[:] = 255 - task

    def boom(data, first, count):
        raise ValueError("boom in kernel")

    def two(a, b):
        pass

    @numba.njit(nogil=True, cache=False)
    def typo(data, first, count):
        data.no_such_method()

    def raises(original, result):
        raise KeyError("in verifier")

    def import_time_is_fine():
        pass
""")

_n = itertools.count()
ALL = "serial,dynamic,guided,prolific,collective,pipe-1to1,pipe-MtoM"
SMALL = ["-k", "2", "-L", "12", "--height", "3", "--width", "16", "--reps", "1"]


@pytest.fixture
def mod(tmp_path, monkeypatch):
    name = f"userkern_{next(_n)}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def run(capsys, *args):
    rc = cli.main(["run", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(rc, out, err):
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hybridsched") and "Traceback" not in err, err
    assert out == ""


def test_user_kernel_on_every_backend(mod, tmp_path, capsys, no_leaks):
    out = str(tmp_path / "u.h5")
    rc, _, err = run(capsys, "-s", ALL, *SMALL, "--kernel", f"{mod}:invert", "--verify",
                     f"{mod}:inverted", "-o", out)
    assert rc == 0, err
    runs = read_runs(out)
    assert len(runs) == 7 and runs["verified"].all() and (runs["bad_rows"] == 0).all()
    assert (runs["kernel"] == f"{mod}:invert").all() and (runs["verify"] == f"{mod}:inverted").all()


def test_python_kernel_is_warned_about_on_threads(mod, tmp_path, capsys, no_leaks):
    out = str(tmp_path / "p.h5")
    rc, _, err = run(capsys, "-s", "dynamic,prolific", *SMALL, "--kernel", f"{mod}:py_invert",
                     "--verify", f"{mod}:inverted", "-o", out)
    assert rc == 0, err
    warn = [line for line in err.splitlines() if "hold the GIL" in line]
    assert len(warn) == 1 and "(dynamic)" in warn[0] and "plain Python" in warn[0]
    assert read_runs(out)["verified"].all()


def test_input_file_changed_during_the_study_is_refused(tmp_path, monkeypatch, no_leaks):
    from hybridsched.workloads import catalogue as workloads
    from hybridsched.workloads.build import build
    from hybridsched.errors import UsageError
    from hybridsched.records import RunConfig

    src = tmp_path / "c.npy"
    np.save(src, np.zeros((4, 2, 8), np.uint8))
    cfg = RunConfig("serial", 1, 4, 2, 8, input_hash=workloads.file_hash(str(src)))
    with build(cfg, str(src)) as space:
        assert space.frames == 4
    np.save(src, np.ones((4, 2, 8), np.uint8))
    with pytest.raises(UsageError, match="changed"):
        build(cfg, str(src))


def test_verifier_rejecting_is_an_unverified_run(mod, tmp_path, capsys, no_leaks):
    out = str(tmp_path / "u.h5")
    rc, _, err = run(capsys, "-s", "dynamic", *SMALL, "--kernel", f"{mod}:invert", "--verify",
                     f"{mod}:halved", "-o", out)
    assert rc == 1 and "rejected" in err
    assert not read_runs(out)["verified"].any()
    rc, _, err = run(capsys, "-s", "prolific", *SMALL, "--kernel", f"{mod}:invert", "--verify",
                     f"{mod}:raises", "-o", out, "--overwrite")
    assert rc == 1 and "raised KeyError" in err and "Traceback" not in err


@pytest.mark.parametrize("kernel, verify, match", [
    ("nosuchmodule_xyz:f", "none", "cannot import"),
    ("{mod}_broken:f", "none", "raised RuntimeError"),
    ("{mod}:missing", "none", "no attribute"),
    ("{mod}:NOT_A_FUNCTION", "none", "not a function"),
    ("{mod}:two", "none", "takes 2 arguments"),
    ("{mod}:invert", None, "needs --verify"),
    ("{mod}:invert", "{mod}:missing", "no attribute"),
    ("{mod}:invert", "{mod}:boom", "takes 3 arguments"),
    ("{mod}:", "none", "package.module:function"),
    ("nonsense", None, "unknown kernel"),
    ("{mod}:typo", "none", "does not compile"),
])
def test_bad_kernels_are_one_line(mod, tmp_path, capsys, kernel, verify, match):
    args = ["-s", "serial", *SMALL, "--kernel", kernel.format(mod=mod), "-o", str(tmp_path / "x.h5")]
    if verify is not None:
        args += ["--verify", verify.format(mod=mod)]
    rc, out, err = run(capsys, *args)
    one_line(rc, out, err)
    assert match in err
    assert not (tmp_path / "x.h5").exists()


def test_kernel_that_raises_fails_its_runs(mod, tmp_path, capsys, no_leaks):
    out = str(tmp_path / "b.h5")
    rc, _, err = run(capsys, "-s", "serial,dynamic,prolific,pipe-1toN", *SMALL, "--kernel",
                     f"{mod}:boom", "--verify", "none", "-o", out)
    assert rc == 1 and "Traceback" not in err and err.count("boom in kernel") == 4
    runs = read_runs(out)
    assert len(runs) == 4 and not runs["verified"].any()
    assert all("boom in kernel" in e for e in runs["error"])


def test_input_file_with_user_kernel_and_hash(mod, tmp_path, capsys, no_leaks):
    src = tmp_path / "in.npy"
    np.save(src, np.random.default_rng(0).random((20, 3, 2)))
    out = str(tmp_path / "i.h5")
    rc, _, err = run(capsys, "-s", "serial,guided,pipe-1to1", "-k", "2", "--reps", "1",
                     "--input", str(src), "--kernel", f"{mod}:halve", "--verify", f"{mod}:halved",
                     "-o", out)
    assert rc == 0, err
    runs = read_runs(out)
    import hashlib
    digest = "sha256:" + hashlib.sha256(src.read_bytes()).hexdigest()
    assert (runs["input_hash"] == digest).all() and runs["verified"].all()
    assert (runs["L"] == 20).all() and (runs["H"] == 3).all() and (runs["W"] == 2).all()
    assert np.array_equal(np.load(src), np.load(src))  # the input file is never written


def test_input_uint8_default_sort_check_and_verify_none(tmp_path, capsys, no_leaks):
    src = tmp_path / "t.npy"
    np.save(src, np.random.default_rng(1).integers(0, 256, (15, 3, 20), dtype=np.uint8))
    out = str(tmp_path / "t.h5")
    rc, _, err = run(capsys, "-s", "serial,dynamic,prolific", "-k", "2", "--reps", "1",
                     "--input", str(src), "-o", out)
    assert rc == 0, err
    assert (read_runs(out)["verify"] == "").all()
    out2 = str(tmp_path / "n.h5")
    rc, _, err = run(capsys, "-s", "serial,dynamic", "-k", "2", "--reps", "1", "--input",
                     str(src), "--verify", "none", "-o", out2)
    assert rc == 0, err
    runs = read_runs(out2)
    assert (runs["verify"] == "none").all() and (runs["bad_rows"] == -1).all()
    assert cli.main(["report", out2, "--no-plots", "--out-dir", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert "unverified by choice" in text
    # not "verified (... unverified ...)" as before the review
    assert f"Runs: {len(runs)} stored, 0 verified, {len(runs)} not checked by choice" in text


@pytest.mark.parametrize("extra, match", [
    (["--input", "{d}/missing.npy"], "No such file"),
    (["--input", "{d}/fifo.npy"], "not a regular file"),
    (["--input", "{d}"], "not a regular file"),
    (["--input", "{d}/junk.npy"], "not a readable"),
    (["--input", "{d}/f.npy"], "sort kernels need uint8"),
    (["--input", "{d}/u.npy", "-L", "3"], "--frames must be"),
    (["--input", "{d}/u.npy", "--height", "3"], "leave out"),
    (["--input", "{d}/u.npy", "--workload", "ramp"], "use one of the two"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, match):
    import os
    os.mkfifo(tmp_path / "fifo.npy")
    (tmp_path / "junk.npy").write_text("not numpy")
    np.save(tmp_path / "f.npy", np.zeros((4, 2)))
    np.save(tmp_path / "u.npy", np.zeros((4, 2, 2), np.uint8))
    args = ["-s", "serial", "--reps", "1", "-o", str(tmp_path / "x.h5")]
    rc, out, err = run(capsys, *args, *[a.format(d=tmp_path) for a in extra])
    one_line(rc, out, err)
    assert match in err
