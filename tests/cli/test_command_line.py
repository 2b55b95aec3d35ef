"""The command line: every bad input of issue 2 item 11 gets one line on stderr and exit 2
with nothing left behind; `run --preset smoke` end to end; `list`; an unverified run is
warned about and kept out of the tables; SIGTERM and Ctrl-C keep the completed runs."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import psutil
import pytest

from hybridsched import cli, kernels
from hybridsched.core import registry as schedulers
from hybridsched.store import read_detail, read_runs
from hybridsched.oslayer.shm import our_shm_entries
from waiting import default_sigint, wait_for_rows
from repo import ROOT

TINY = ["-s", "serial", "-k", "1", "--frames", "2", "--height", "2", "--width", "2", "--reps", "1"]


def python_m(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hybridsched", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


def assert_one_line_usage_error(rc: int, out: str, err: str) -> None:
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hybridsched"), err
    assert out == ""


# --- bad input -----------------------------------------------------------------------------

RUN_OVERRIDES = {
    "k=0": ["-k", "0"],
    "k<0": ["-k", "-2"],
    "k-not-a-number": ["-k", "two"],
    "k-list-with-junk": ["-k", "1,x"],
    "k-empty": ["-k", ""],
    "frames=0": ["--frames", "0"],
    "frames<0": ["--frames", "-5"],
    "frames-not-a-number": ["--frames", "many"],
    "height=0": ["--height", "0"],
    "width=0": ["--width", "0"],
    "width<0": ["--width", "-3"],
    "reps=0": ["--reps", "0"],
    "chunk=0": ["--chunk", "0"],
    "chunk<0": ["--chunk", "-4"],
    "unknown-scheduler": ["-s", "nosuch"],
    "unknown-in-list": ["-s", "serial,bogus"],
    "empty-scheduler": ["-s", ","],
    "unknown-kernel": ["--kernel", "bogosort"],
    "too-big-for-memory": ["--frames", "100000000", "--height", "640", "--width", "640"],
    "out-dir-missing": ["--out", "/nonexistent-dir/sub/x.h5"],
    "unknown-preset": ["--preset", "huge"],
    "seed<0": ["--seed", "-1"],
    "seed-not-a-number": ["--seed", "x"],
    "unknown-option": ["--bogus"],
    "reps-absurd": ["--reps", "100000000"],
    "k-absurd": ["-k", "100000"],
    "seed-over-64-bits": ["--seed", "99999999999999999999"],
    "out-on-proc": ["--out", "/proc/x.h5"],
}


@pytest.mark.parametrize("override", list(RUN_OVERRIDES.values()), ids=list(RUN_OVERRIDES))
def test_run_bad_input(tmp_path, monkeypatch, capsys, override):
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "x.h5")
    tiny = TINY[2:] if "-s" in override else TINY  # -s appends: give it only once
    argv = ["run", *tiny, "--out", out, *override]
    rc = cli.main(argv)
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert os.listdir(tmp_path) == []  # no study file, no default-named file, nothing


def test_run_out_is_a_directory(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    rc = cli.main(["run", *TINY, "--out", str(tmp_path / "d")])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert os.listdir(tmp_path / "d") == []


def test_run_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "x.h5"
    out.write_bytes(b"precious")
    rc = cli.main(["run", *TINY, "--out", str(out)])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert out.read_bytes() == b"precious"


def _foreign_h5(path):
    with h5py.File(path, "w") as h5:
        h5["x"] = np.arange(4)
        h5.attrs["format"] = "someone-else"


REPORT_FILES = {
    "text": lambda p: p.write_text("scheduler,k\nserial,1\n"),
    "empty": lambda p: p.write_bytes(b""),
    "foreign-hdf5": _foreign_h5,
    "missing": lambda p: None,
    "directory": lambda p: p.mkdir(),
}


@pytest.mark.parametrize("make", list(REPORT_FILES.values()), ids=list(REPORT_FILES))
def test_report_not_our_file(tmp_path, capsys, make):
    f = tmp_path / "input.h5"
    make(f)
    before = sorted(os.listdir(tmp_path))
    rc = cli.main(["report", str(f), "--no-plots"])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert sorted(os.listdir(tmp_path)) == before  # no report directory made


PLAN_BAD = {
    "tasks=0": ["--policy", "static", "--tasks", "0", "--workers", "2"],
    "workers=0": ["--policy", "static", "--tasks", "5", "--workers", "0"],
    "workers-nan": ["--policy", "static", "--tasks", "5", "--workers", "x"],
    "chunk=-1": ["--policy", "dynamic", "--tasks", "5", "--workers", "2", "--chunk", "-1"],
    "unknown-policy": ["--policy", "fair", "--tasks", "5", "--workers", "2"],
    "missing-tasks": ["--policy", "static", "--workers", "2"],
    "tasks-absurd": ["--policy", "dynamic", "--tasks", "10000000000", "--workers", "2"],
}


@pytest.mark.parametrize("argv", list(PLAN_BAD.values()), ids=list(PLAN_BAD))
def test_plan_bad_input(capsys, argv):
    rc = cli.main(["plan", *argv])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)


@pytest.mark.parametrize("body", ["return 1.5", "raise ValueError('no')"], ids=["float", "raises"])
def test_plan_of_a_technique_that_misbehaves_is_bad_input(capsys, tmp_path, monkeypatch, body):
    """plan runs nothing: a chunk() that returns a float or raises makes the --policy given
    bad input, status 2 (it was 1, "a run failed": the review)."""
    (tmp_path / "badplan.py").write_text(
        "from hybridsched import Technique\n\n\nclass Bad(Technique):\n"
        "    deterministic = True\n\n    def chunk(self, remaining, request, worker):\n"
        f"        {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = cli.main(["plan", "--policy", "badplan:Bad", "--tasks", "10", "--workers", "2"])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert "chunk()" in cap.err


@pytest.mark.parametrize("argv", [[], ["frobnicate"]], ids=["no-command", "unknown-command"])
def test_top_level_bad_input(capsys, argv):
    rc = cli.main(argv)
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)


@pytest.mark.parametrize("argv", [
    ["run", "-k", "0"],
    ["run", "--frames", "100000000"],
    ["run", "-s", "serial", "--frames", "2", "--height", "2", "--width", "2", "--out", "/nonexistent-dir/x.h5"],
    ["report", "README.md"],
], ids=["k=0", "too-big", "unwritable", "report-text"])
def test_bad_input_in_a_real_process(tmp_path, argv):
    """The same through `python -m hybridsched`: no traceback at the process level, and
    no segment of that process left in /dev/shm."""
    repo = str(ROOT)
    if argv[0] == "report":
        argv = ["report", os.path.join(repo, argv[1])]
    p = subprocess.Popen([sys.executable, "-m", "hybridsched", *argv], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert_one_line_usage_error(p.returncode, out, err)
    assert os.listdir(tmp_path) == []
    assert our_shm_entries(p.pid) == []


# --- list, smoke, unverified ----------------------------------------------------------------


def test_list_prints_every_scheduler():
    p = python_m("list", timeout=60)
    assert p.returncode == 0, p.stderr
    first_words = [line.split()[0] for line in p.stdout.splitlines() if line.strip()]
    assert first_words == schedulers.names()
    for name in schedulers.ALL_NAMES:  # the contract's names
        assert name in first_words


@pytest.mark.parametrize("argv, rc", [(["list"], 0), (["nosuch"], 2)])
def test_a_closed_stdout_or_stderr_is_no_traceback(argv, rc):
    """`hybridsched list >&-`: Python makes the closed stream None, and the final flush
    raised AttributeError (status 1) where the command had done its work."""
    for closed in (1, 2):
        p = subprocess.run([sys.executable, "-m", "hybridsched", *argv], text=True, timeout=60,
                           preexec_fn=lambda: os.close(closed),
                           **{"stderr" if closed == 1 else "stdout": subprocess.PIPE})
        seen = p.stderr if closed == 1 else p.stdout
        assert p.returncode == rc and "Traceback" not in seen, (closed, seen)
        if closed == 2 and rc:
            assert seen == ""  # the error line, meant for stderr, is not on stdout

def test_run_smoke_end_to_end(tmp_path):
    out = tmp_path / "smoke.h5"
    p = python_m("run", "--preset", "smoke", "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    runs = read_runs(str(out))
    assert len(runs) > 0 and runs["verified"].all()
    names = set(runs["scheduler"].tolist())
    assert names == set(schedulers.paper_names())  # presets run the paper's schedulers only
    for name in names:
        assert f"| {name} |" in p.stdout  # a table row for each scheduler
    assert "σ" in p.stdout and "σE" in p.stdout and "α" in p.stdout
    for rid in runs["run_id"][:3]:
        workers, trace, *_ = read_detail(str(out), int(rid))
        assert len(workers) >= 1 and trace["count"].sum() == runs["L"][rid]


def timed_rows(table: str, scheduler: str) -> list[dict]:
    """Rows of the markdown table for ``scheduler`` that carry a timing (T (ms) not —)."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return [r for r in rows if r.get("scheduler") == scheduler and r.get("T (ms)", "—") != "—"]


def _broken_in_chunks(t, first, count):
    """Sorts every frame in one call (serial's); called for fewer (a dynamic chunk), sorts
    and then breaks a row."""
    t[first:first + count].sort(axis=-1)
    if count < len(t):
        row = t[first, 0]
        i = int(np.flatnonzero(row[1:] != row[:-1])[0])
        row[i + 1] = row[i]  # still sorted, no longer the same multiset


def test_unverified_runs_are_warned_and_kept_out_of_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(kernels.KERNELS, "broken", (_broken_in_chunks, "test kernel"))
    out = str(tmp_path / "u.h5")
    rc = cli.main(["run", "-s", "serial,dynamic", "-k", "2", "--frames", "6", "--height", "2",
                   "--width", "32", "--reps", "2", "--kernel", "broken", "--out", out])
    cap = capsys.readouterr()
    assert rc == 1  # some runs failed verification
    warnings = [line for line in cap.err.splitlines() if "UNVERIFIED" in line]
    assert len(warnings) == 2 and all("dynamic" in w for w in warnings)
    assert timed_rows(cap.out, "serial") and not timed_rows(cap.out, "dynamic")
    runs = read_runs(out)
    dyn = runs[runs["scheduler"] == "dynamic"]
    assert len(dyn) == 2 and not dyn["verified"].any() and (dyn["bad_rows"] > 0).all()
    assert runs[runs["scheduler"] == "serial"]["verified"].all()
    # and the report's tables leave them out too: no timing from an unverified run
    from hybridsched.results.data import summarise

    rows = summarise(runs)
    assert [r.reps for r in rows if r.scheduler == "serial"] == [2]
    assert all(r.reps == 0 and math.isnan(r.t_mean) for r in rows if r.scheduler == "dynamic")
    rc = cli.main(["report", out, "--no-plots", "--out-dir", str(tmp_path / "rep")])
    cap = capsys.readouterr()
    assert rc == 0 and "Traceback" not in cap.err


# --- SIGTERM and Ctrl-C during a run ---------------------------------------------------------

LONG_RUN = ["--frames", "40", "--height", "128", "--width", "640", "--reps", "500", "-k", "2"]


@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "Ctrl-C"])
@pytest.mark.parametrize("scheds", ["serial,dynamic", "prolific,pipe-MtoM"])
def test_signal_keeps_completed_runs_and_leaves_nothing(tmp_path, sig, rc, scheds):
    out = str(tmp_path / "sig.h5")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsched", "run", "-s", scheds, *LONG_RUN,
                             "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)
    try:
        wait_for_rows(out, 3, proc)
        kids = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == rc, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    runs = read_runs(out)
    assert len(runs) >= 3
    assert runs["run_id"].tolist() == list(range(len(runs)))
    assert runs["verified"].all()
    for rid in runs["run_id"]:
        workers, trace, *_ = read_detail(out, int(rid))
        assert trace["count"].sum() == 40
    assert our_shm_entries(proc.pid) == []
    deadline = time.monotonic() + 5
    while any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


def test_a_signal_whose_exception_python_drops_is_raised_again():
    """A handler's exception raised inside a weakref callback is dropped by Python (h5py's
    registry runs such callbacks by the thousand while merge copies a study: one SIGTERM
    was lost and merge ran to its end); the signal stays pending and is raised again at the
    next checkpoint, which long loops and the CLI's exit call."""
    import weakref

    from hybridsched.errors import Terminated
    from hybridsched.oslayer import signals

    class Obj:
        pass

    def callback(ref):
        signal.raise_signal(signal.SIGTERM)
        for _ in range(100):  # the handler runs here, inside the callback
            pass

    dropped = []
    old = signal.signal(signal.SIGTERM, signals.raising(lambda s: Terminated(128 + s)))
    old_hook, sys.unraisablehook = sys.unraisablehook, dropped.append
    try:
        obj = Obj()
        ref = weakref.ref(obj, callback)  # noqa: F841
        del obj
        assert dropped and isinstance(dropped[0].exc_value, Terminated)  # Python dropped it
        assert signals.pending() == signal.SIGTERM
        with pytest.raises(Terminated):
            signals.honour_pending()
    finally:
        signals.taken()
        sys.unraisablehook = old_hook
        signal.signal(signal.SIGTERM, old)
    signals.honour_pending()  # taken: nothing is raised any more


def test_a_signal_whose_exception_broke_the_unwinding_still_ends_the_command_by_it(
        monkeypatch, capsys):
    """A SIGTERM whose Terminated was replaced on the way out (raised in threading's `with
    lock:` as a thread started, CPython's __exit__ released a lock it never took and raised
    RuntimeError: a traceback and status 1, once in a CI run) is still the SIGTERM: 143 and
    one line."""
    from hybridsched.errors import Terminated

    def command(args):
        try:
            signal.raise_signal(signal.SIGTERM)
        except Terminated:
            raise RuntimeError("release unlocked lock") from None
        return 0

    class Importer:
        @staticmethod
        def import_module(name):
            return type("Command", (), {"main": staticmethod(command)})

    monkeypatch.setattr(cli, "importlib", Importer)
    rc = cli.main(["report", "nothing.h5"])
    assert rc == 143
    assert capsys.readouterr().err == "hybridsched: terminated\n"


def test_an_ignored_sigint_held_does_not_hide_a_sigterm():
    """signals_held leaves an ignored signal ignored: held, a background job's ignored
    SIGINT came first, and only the first held signal is replayed, so a SIGTERM after it
    was dropped and the command ran on (found by a review: `coop exec` ran its command to
    the end and exited 0)."""
    from hybridsched.errors import Terminated
    from hybridsched.oslayer import signals

    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signals.raising(lambda s: Terminated(128 + s)))
    try:
        with pytest.raises(Terminated):
            with signals.signals_held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signals.taken()
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


# An import hook that, when `module` is looked for, signals the process and then runs
# Python code, where a handler that raises would raise; like numpy, it turns a
# KeyboardInterrupt met there into an ImportError (seen: "PyCapsule_Import could not import
# module datetime" after a Ctrl-C 65 ms into `hybridsched list`).
_SIGNAL_HOOK = """import os, signal, sys
class Signal:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            try:
                os.kill(os.getpid(), signal.{sig})
                sum(range(1000))
            except KeyboardInterrupt:
                raise ImportError("cut by a KeyboardInterrupt")
sys.meta_path.insert(0, Signal())
"""


@pytest.mark.parametrize("start", [
    "import runpy; runpy.run_module('hybridsched', run_name='__main__', alter_sys=True)",
    "import sys; from hybridsched.__main__ import entry; sys.exit(entry())"],
    ids=["python -m", "console script"])
@pytest.mark.parametrize("module,args", [
    ("hybridsched.cli", ["fit", "x.h5"]), ("hybridsched.commands.fit", ["fit", "x.h5"]),
    ("numpy", ["colocate", "--help"])],  # colocate's parser imports numpy
    ids=["cli", "the command's module", "a parser's import"])
def test_a_signal_while_the_modules_load_ends_the_command_cleanly(tmp_path, start, module,
                                                                  args):
    """Ctrl-C or SIGTERM while the command's modules load, whether it runs as `python -m`
    or as the installed `hybridsched` script: Ctrl-C is one line and 130; SIGTERM the
    default's silent end before main() took it over, one line and 143 after; never a
    traceback or an ImportError (a parser's numpy import gave one, found by a review)."""
    term = ((-signal.SIGTERM, "") if module == "hybridsched.cli"
            else (143, "hybridsched: terminated\n"))
    for sig, want in (("SIGINT", (130, "hybridsched: interrupted\n")), ("SIGTERM", term)):
        code = _SIGNAL_HOOK.format(module=module, sig=sig) + start + "\n"
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert (p.returncode, p.stderr) == want, (sig, p.returncode, p.stderr)
    assert not list(tmp_path.iterdir())


def test_ctrl_c_while_the_modules_load_is_one_line_and_130(tmp_path):
    """`python -m hybridsched` interrupted while hybridsched.cli loads (before main() takes
    the signals over): one line and status 130, where CPython printed the traceback and
    exited 1 (seen by the hostile `fit_big_start_sigint` case). The interrupt is made
    certain by an import hook that raises it when the module is looked for."""
    import subprocess
    import sys

    hook = ("import runpy, sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'hybridsched.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "runpy.run_module('hybridsched', run_name='__main__', alter_sys=True)\n")
    p = subprocess.run([sys.executable, "-c", hook, "fit", "x.h5"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 130 and p.stderr == "hybridsched: interrupted\n", (p.returncode, p.stderr)


def test_an_unknown_option_is_an_error_line_like_any_other(capsys):
    """The top-level parser's refusals read "hybridsched: error: ...", as every other
    refusal does (they lacked "error:")."""
    for argv in (["run", "--bogus"], ["--bogus"]):
        assert cli.main(argv) == 2
        assert capsys.readouterr().err == "hybridsched: error: unrecognized arguments: --bogus\n"


def test_plan_chunk_0_is_the_policys_own(capsys):
    """`--chunk 0` is documented (`plan --help`, cli.md) as the policy's own chunk, as the
    API's chunk=0; it was refused (the hostile review)."""
    assert cli.main(["plan", "--policy", "guided", "--tasks", "10", "--workers", "2"]) == 0
    default = capsys.readouterr().out
    assert cli.main(["plan", "--policy", "guided", "--tasks", "10", "--workers", "2",
                     "--chunk", "0"]) == 0
    assert capsys.readouterr().out == default


@pytest.mark.parametrize("names", ["dynamic,,guided", "dynamic,"])
def test_an_empty_scheduler_name_is_refused_as_an_empty_k_is(capsys, tmp_path, names):
    before = sorted(os.listdir(tmp_path))
    rc = cli.main(["run", "-s", names, "-k", "2", "-o", str(tmp_path / "x.h5")])
    cap = capsys.readouterr()
    assert_one_line_usage_error(rc, cap.out, cap.err)
    assert "an empty name" in cap.err and sorted(os.listdir(tmp_path)) == before
