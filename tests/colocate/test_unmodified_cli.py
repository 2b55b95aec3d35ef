"""`hybridsched colocate --cmd` from the command line: the commands stored and reported,
failed jobs and exit statuses, merged studies, snapshots of whole repetitions, damaged
rows, and bad input (one line, exit 2, nothing started)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

import h5py
import pytest

from hybridsched.cli import main
from hybridsched.colocate.cmdrun import run_commands_once
from hybridsched.colocate.output import read_colocate
from hybridsched.oslayer import cmdjobs
from repo import FIXTURES
from unmodrun import PY, cmd_spec


def test_what_a_job_printed_reaches_the_terminal_escaped(tmp_path, capsys):
    """A failed job's stderr (a terminal title, a colour, a bell) is shown escaped on the
    FAILED line and in the report, never written raw to the reader's terminal."""
    out = str(tmp_path / "e.h5")
    cmd = "sh -c 'printf \"\\033]0;pwned\\007\\033[31mred\" >&2; exit 1'"
    assert main(["colocate", "--cmd", cmd, "--policy", "linux", "--reps", "1", "-o", out]) == 1
    assert main(["report", "--no-plots", out]) == 0
    captured = capsys.readouterr()
    for text in (captured.err, captured.out):
        assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07\\x1b[31mred" in captured.err
    assert "- failed: linux rep 0 job 0 exited with status 1; its stderr ends: " \
        "`\\x1b]0;pwned\\x07\\x1b[31mred`" in captured.out


def test_cli_stores_the_commands_and_reports_them(tmp_path, capsys):
    out = str(tmp_path / "c.h5")
    a, b = "sh -c 'echo ok'", f"{PY} -c 'print(\"ok\")'"
    rc = main(["colocate", "--cmd", a, "--cmd", b, "--policy", "linux,env,partition,gang",
               "--reps", "2", "--expect", "^ok$", "-o", out])
    assert rc == 0
    rows = read_colocate(out)
    assert len(rows) == 2 * 4 * 2 and rows["verified"].all()
    assert [str(c) for c in rows["command"][:2]] == [a, b]
    assert set(rows["workload"]) == {"cmd"} and len(set(rows["experiment"])) == 1
    with h5py.File(out) as h5:
        assert h5.attrs["format_version"] >= 3  # /colocate with its commands (format 3 on)
        spec = json.loads(h5.attrs["colocate_spec"])
    assert spec["commands"] == [a, b] and spec["expect"] == "^ok$"
    assert spec["environment"]["env"]["OMP_WAIT_POLICY"] == "passive"
    assert spec["environment"]["linux"] == {} and "OMP_WAIT_POLICY" in spec["inherited_environment"]
    text = capsys.readouterr().out
    assert "### cmd: 2 co-located jobs: `sh -c 'echo ok'`" in text
    assert "| gang | 2 |" in text and "slices" in text
    assert main(["report", out]) == 0
    assert list((tmp_path / "c_report").glob("colocate_cmd_J2_*.png"))


def test_a_command_in_a_script_the_font_lacks_is_plotted_without_a_warning_a_glyph(tmp_path,
                                                                                  capsys):
    """A CJK command in the plot's title: matplotlib's font draws boxes for it, and warned
    once per missing glyph on stderr, four lines for one command (the hostile review). The
    warnings are silenced while we draw only: a filter for the whole process hid them from
    the caller's own figures afterwards (the second review)."""
    import warnings

    out = str(tmp_path / "c.h5")
    assert main(["colocate", "--cmd", "echo 漢字テスト", "--policy", "linux", "--reps", "2",
                 "-o", out]) == 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["report", out]) == 0
        # only while it drew: a caller's own figures keep their warnings (the second review)
        assert not [f for f in warnings.filters if f[1] is not None and "Glyph" in f[1].pattern]
    assert not [w for w in seen if "missing from font" in str(w.message)], seen
    assert list((tmp_path / "c_report").glob("colocate_cmd_*.png"))


def test_a_policy_with_no_verified_repetition_gets_no_bar_and_none_at_all_no_plot(tmp_path,
                                                                                  capsys):
    """Every repetition failed: the report drew an empty plot on a -0.04..0.04 axis (the
    review); a policy whose repetitions all failed has no bar beside those that ran."""
    import matplotlib.image

    out, both = str(tmp_path / "f.h5"), str(tmp_path / "b.h5")
    assert main(["colocate", "--cmd", "false", "--policy", "linux,env", "--reps", "1",
                 "-o", out]) == 1
    assert main(["report", out]) == 0
    assert not list((tmp_path / "f_report").glob("colocate_cmd_*.png"))
    assert "- failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out
    # env's runs fail (its variable is checked), linux's verify: one bar
    cmd = "sh -c 'test -z \"$OMP_WAIT_POLICY\"'"
    assert main(["colocate", "--cmd", cmd, "--policy", "linux,env", "--reps", "1",
                 "-o", both]) == 1
    assert main(["report", both]) == 0
    png, = (tmp_path / "b_report").glob("colocate_cmd_*.png")
    assert matplotlib.image.imread(png).size  # drawn


def test_a_command_gone_during_the_study_ends_it_1_keeping_its_rows(tmp_path, capsys):
    """Looked up again for every repetition: one that deleted itself (or a binary being
    rebuilt) ended the study as bad input, status 2, a study left behind (the review)."""
    script = tmp_path / "once.sh"
    script.write_text('#!/bin/sh\nrm -f "$0"\necho ok\n')
    script.chmod(0o755)
    out = tmp_path / "s.h5"
    assert main(["colocate", "--cmd", str(script), "--policy", "linux,env", "--reps", "2",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no such file, since the study began" in err and "Traceback" not in err, err
    assert len(read_colocate(str(out))) == 1


def test_a_failing_job_makes_the_exit_status_1_and_is_reported(tmp_path, capsys):
    out = str(tmp_path / "f.h5")
    assert main(["colocate", "--cmd", "sh -c 'echo broken >&2; exit 4'", "--policy", "linux",
                 "--reps", "1", "-o", out]) == 1
    captured = capsys.readouterr()
    assert "FAILED exited with status 4; its stderr ends: broken" in captured.err
    assert "failed: linux rep 0 job 0 exited with status 4; its stderr ends: `broken`" in captured.out
    # named though no repetition verified: the title said "1 co-located commands:" and no
    # more (the review)
    from hybridsched.results.colocate_report import summary
    (rec,) = summary(read_colocate(out), 2)
    assert rec["commands"] == "sh -c 'echo broken >&2; exit 4'" and rec["reps"] == 0


def test_a_job_failing_beside_one_that_verified_leaves_a_study_report_reads(tmp_path, capsys):
    """The verified job's row has no makespan (NaN: its repetition has none worth a
    number); colocate's own report, and report later, read the study all the same."""
    out = str(tmp_path / "f.h5")
    assert main(["colocate", "--cmd", "false", "--cmd", "true", "--policy", "linux",
                 "--reps", "1", "-o", out]) == 1
    assert "failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out
    rows = read_colocate(out)
    assert [bool(v) for v in rows["verified"]] == [False, True]
    assert main(["report", out]) == 0
    assert "failed: linux rep 0 job 0 exited with status 1" in capsys.readouterr().out


def test_studies_of_both_format_versions_merge(tmp_path, capsys):
    new = str(tmp_path / "n.h5")
    assert main(["colocate", "--cmd", "true", "--policy", "linux", "--reps", "1", "-o", new]) == 0
    v2 = str(FIXTURES / "colocate-v2.h5")
    merged = str(tmp_path / "m.h5")
    assert main(["merge", v2, new, "-o", merged]) == 0
    rows = read_colocate(merged)
    assert len(rows) == 13 and sorted(set(rows["workload"])) == ["bsp", "cmd"]
    capsys.readouterr()
    assert main(["report", merged, "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "### bsp: 2 jobs × 2 workers" in text and "### cmd: 1 job, `true`" in text


@pytest.mark.parametrize("how", [["--cmd", "true", "--jobs", "2"],
                                 ["--jobs", "2", "--workers", "1", "--steps", "5",
                                  "--step-us", "50"]], ids=["cmd", "bsp"])
def test_merged_studies_keep_each_repetition_apart(how, tmp_path, capsys):
    """Each study's rep 0 ran its own two jobs together: merged, they are two repetitions
    of two jobs, not one of four (the makespan and fairness are per repetition)."""
    a, b, merged = (str(tmp_path / n) for n in ("a.h5", "b.h5", "m.h5"))
    for out in (a, b):
        assert main(["colocate", *how, "--policy", "linux", "--reps", "1", "-o", out]) == 0
    assert main(["merge", a, b, "-o", merged]) == 0
    rows = read_colocate(merged)
    assert sorted(rows["rep"].tolist()) == [0, 0, 1, 1]
    capsys.readouterr()
    assert main(["report", merged, "--no-plots"]) == 0
    assert "| linux | 2 |" in capsys.readouterr().out


def _not_started(monkeypatch):
    def refuse(self):
        raise AssertionError("a job was started")
    monkeypatch.setattr(cmdjobs.CommandJobs, "__enter__", refuse)


@pytest.mark.parametrize("argv, words", [
    (["--cmd", "no-such-command-hs32"], "command not found"),
    (["--cmd", "./no/such/file"], "no such file"),
    (["--cmd", ""], "empty command"),
    (["--cmd", "   "], "empty command"),
    (["--cmd", "'unbalanced"], "quotation"),
    (["--cmd", "true", "--workload", "bsp"], "--workload"),
    (["--cmd", "true", "--steps", "5", "--barrier", "spin"], "--barrier, --steps"),
    (["--cmd", "true", "--jobs", "0"], "--jobs"),
    (["--cmd", "true", "--cmd", "false", "--jobs", "3"], "number of --cmd"),
    (["--cmd", "true", "--policy", "linux,fifo"], "unknown policy"),
    (["--cmd", "true", "--expect", "("], "not a regular expression"),
    (["--cmd", "true", "--cmd", "true", "--expect", "a", "--expect", "("], "not a regular"),
    (["--cmd", "true", "--cmd", "true", "--cmd", "true", "--expect", "a", "--expect", "b"],
     "one per --cmd"),
    (["--cmd", "true", "--jobs", "2", "--expect", "a", "--expect", "b"], "it holds for every copy"),
    (["--cmd", "true", "--quantum-ms", "0"], "--quantum-ms"),
    (["--cmd", "true", "--timeout", "0"], "--timeout"),
    (["--cmd", "true", "--timeout", "soon"], "--timeout"),
    (["--cmd", "true", "--timeout", "1e9"], "--timeout"),
    (["--expect", "ok"], "for --cmd only"),
    (["--timeout", "5"], "for --cmd only"),
    (["--policy", "gang"], "for unmodified commands"),
    # hostile review: tracebacks before
    (["--cmd", "echo ok\udcff"], "not UTF-8"),
    (["--cmd", "true", "--expect", "\udcff"], "not UTF-8"),
    (["--cmd", "true", "--expect", "a{99999999999}"], "not a regular expression"),
    (["--cmd", "true", "--expect", "(" * 2000 + ")" * 2000], "not a regular expression"),
    # grep's class, a set of '[', ':', 'a'... to re (a FutureWarning and its source line
    # printed, then every job failed: the review)
    (["--cmd", "true", "--expect", "[[:alpha:]]+"], "is grep's, not Python's re"),
    (["--cmd", "/dev/null"], "not a regular file"),  # it said "chmod +x it"
])
def test_bad_input_is_one_line_exit_2_and_starts_nothing(argv, words, tmp_path, capsys,
                                                         monkeypatch):
    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    assert main(["colocate", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err
    assert not out.exists()


WHAT_CANNOT_RUN = {  # kind: (the file's bytes or None for a directory, its mode, the words)
    "directory": (None, 0o755, "is a directory"),
    "not executable": (b"#!/bin/sh\necho hi\n", 0o644, "not executable"),
    "no #! line": (b"echo hi\n", 0o755, "#!"),
    "a missing interpreter": (b"#!/no/such/interpreter -x\necho hi\n", 0o755,
                              "#! interpreter /no/such/interpreter is not an executable"),
    "an empty #! line": (b"#!\necho hi\n", 0o755, "names no interpreter"),
    # the kernel looks for `/bin/sh\r`: it ran, and failed 127 every repetition (the review)
    "Windows line endings": (b"#!/bin/sh\r\necho hi\r\n", 0o755, "ends in a carriage return"),
    "an ELF header cut short": (b"\x7fELF\x02\x01\x01", 0o755, "cut short"),
}


@pytest.mark.parametrize("policy", ["linux", "coop"])
@pytest.mark.parametrize("kind", list(WHAT_CANNOT_RUN))
def test_what_cannot_be_executed_is_refused(kind, policy, tmp_path, capsys, monkeypatch):
    """Whatever the policy (coop's own checks come after these): one line, exit 2,
    nothing started, where execve would fail and the job would only show status 127."""
    _not_started(monkeypatch)
    body, mode, words = WHAT_CANNOT_RUN[kind]
    target = tmp_path / "thing"
    if body is None:
        target.mkdir()
    else:
        target.write_bytes(body)
        target.chmod(mode)
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", str(target), "--policy", policy, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_a_static_program_under_coop_is_refused_in_one_line_and_starts_nothing(
        shim_lib, tmp_path, capsys, monkeypatch):
    from shimprogs import build

    static = build("thread_exit", tmp_path, "-static")
    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", "true", "--cmd", static, "--policy", "linux,coop",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "statically linked" in err and "--policy env or gang" in err
    assert not out.exists()


def test_report_compares_policies_over_the_repetitions_both_verified(tmp_path):
    """An interrupted study has fewer repetitions of the policies after the Ctrl-C: "vs
    linux" compares the repetitions both have (it compared means over different sets), and
    one repetition shows no spread (it showed ± 0.000)."""
    from hybridsched.results.colocate_cmd import _vs, cmd_table

    out = str(tmp_path / "r.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "1", "--policy", "linux,env",
                 "--reps", "3", "-o", out]) == 0
    rows = read_colocate(out)
    rows = rows[~((rows["policy"] == "env") & (rows["rep"] == 2))]  # as if interrupted
    rows["makespan_s"][(rows["policy"] == "linux") & (rows["rep"] == 2)] = 1e6
    mk = {(str(r["policy"]), int(r["rep"])): float(r["makespan_s"]) for r in rows}
    want = (mk["linux", 0] + mk["linux", 1]) / (mk["env", 0] + mk["env", 1])
    assert _vs(rows, "linux", "env") == pytest.approx(want)
    one = rows[rows["rep"] == 0]
    recs = [dict(policy=p, reps=1, failed=0, makespan_s=0.1, makespan_sd=0.0, job_time_s=0.1,
                 jain=1.0, cpu_s=0.0, nivcsw=0.0, counters="") for p in ("linux", "env")]
    assert "± —" in cmd_table(recs, one)[2] and "± 0.000" not in "".join(cmd_table(recs, one))


def test_a_line_too_long_to_search_never_verifies_a_job():
    """A line over LINE_MAX (4 MiB) is not searched, and the failure says so: cut in
    pieces, `y` + 5 MB of `x` + `END` matched '^x+END$' (a piece began with x)."""
    line = "printf y; head -c 5000000 /dev/zero | tr '\\\\0' x; echo END"
    spec = cmd_spec([f"sh -c {shlex.quote(line)}"], ["linux"], expect=r"^x+END$", reps=1)
    (rec,) = run_commands_once(spec, "linux", 0)
    assert rec.exit_status == 0 and not rec.verified
    assert "1 line over 4 MiB was not searched" in rec.error, rec.error


def test_every_snapshot_holds_whole_repetitions(tmp_path, monkeypatch, capsys):
    """Each job's row was published on its own: a run interrupted between two jobs of one
    repetition left part of it on disk, and `report` counted it as a whole repetition (41
    of 64 jobs, hostile review). Every snapshot published now holds J rows per repetition."""
    from hybridsched.store import writer

    monkeypatch.setattr(writer, "PUBLISH_ALWAYS_S", float("inf"))  # publish at every append
    seen = []
    publish = writer.StudyWriter.publish

    def counting(self):
        ds = self.h5.get("colocate")
        seen.append(0 if ds is None else int(ds.shape[0]))
        publish(self)

    monkeypatch.setattr(writer.StudyWriter, "publish", counting)
    out = str(tmp_path / "whole.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "3", "--policy", "linux,env",
                 "--reps", "2", "-o", out]) == 0
    capsys.readouterr()
    assert seen and all(n % 3 == 0 for n in seen), seen
    assert len(read_colocate(out)) == 12


def test_a_repetition_stored_in_part_by_an_older_run_is_not_counted(tmp_path):
    """Files written before the rows of a repetition were stored together may hold some of
    an interrupted repetition's jobs: `report` counted them as a whole repetition."""
    from dataclasses import replace

    from hybridsched.colocate.output import ColocateWriter
    from hybridsched.colocate.spec import JobRecord
    from hybridsched.results.colocate_report import summary

    one = JobRecord("cmd", "linux", "", 3, 0, 1, 0, 0.0, 0, 0.1, 0.1, 0, 0, 0, 0, True,
                    command="true", experiment="e")
    whole = [replace(one, job=j) for j in range(3)]
    part = [replace(one, job=j, rep=1, time_s=9.0, makespan_s=9.0) for j in range(2)]
    out = str(tmp_path / "old.h5")
    with ColocateWriter(out, {"N": 2}, {}) as w:
        w.append(whole)
        w.append(part)
    (rec,) = summary(read_colocate(out), 2)
    assert rec["reps"] == 1 and rec["failed"] == 0 and rec["makespan_s"] == pytest.approx(0.1)


@pytest.mark.parametrize("field, value, words", [
    ("counters", "not json", "not a JSON object of numbers"),
    ("counters", '{"slices": {"a": 1}}', "not a JSON object of numbers"),
    ("counters", "[1, 2]", "not a JSON object of numbers"),
    ("time_s", float("inf"), "time_s = inf"),
    ("time_s", -1.0, "time_s = -1"),
    ("cpu_s", float("inf"), "cpu_s = inf"),
    ("job", 7, "job 7 of 2"),
])
def test_damaged_rows_are_refused_in_one_line_by_report_and_merge(tmp_path, capsys, field,
                                                                  value, words):
    """report gave JSONDecodeError, AttributeError or TypeError tracebacks on damaged
    counters and printed a job time of inf; merge copied such rows on (hostile review)."""
    good = str(tmp_path / "good.h5")
    assert main(["colocate", "--cmd", "true", "--jobs", "2", "--policy", "linux", "--reps",
                 "1", "-o", good]) == 0
    bad = str(tmp_path / "bad.h5")
    shutil.copy(good, bad)
    with h5py.File(bad, "r+") as h5:
        rows = h5["colocate"][()]
        rows[field][1] = value
        h5["colocate"][...] = rows
    capsys.readouterr()
    for argv in (["report", "--no-plots", bad], ["merge", bad, good, "-o", str(tmp_path / "m.h5")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "m.h5")


def test_policy_given_twice_runs_both(tmp_path, capsys):
    """`--policy linux --policy gang` ran gang alone (hostile review)."""
    out = str(tmp_path / "two.h5")
    assert main(["colocate", "--cmd", "true", "--policy", "linux", "--policy", "gang,linux",
                 "--reps", "1", "-o", out]) == 0
    assert read_colocate(out)["policy"].tolist() == ["linux", "gang"]


def _segment() -> str:
    from hybridsched.coop.paths import segment_path

    return segment_path()


@pytest.mark.parametrize("cause", ["no such shim", "not a shim", "a cache path with a space"])
def test_a_coop_refusal_comes_before_any_policy_runs(cause, tmp_path, capsys, monkeypatch):
    """Found only as coop's turn came (the review): the linux rows were written, the exit
    status 2, and the segment made for the session was left behind."""
    from hybridsched.coop import shimbuild

    _not_started(monkeypatch)
    cache = tmp_path / "a cache"
    if cause == "a cache path with a space":
        monkeypatch.delenv(shimbuild.SHIM_ENV, raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    else:
        monkeypatch.setenv(shimbuild.SHIM_ENV, "/no/such/shim.so" if cause == "no such shim"
                           else "/bin/true")
    out = tmp_path / "x.h5"
    assert main(["colocate", "--cmd", "true", "--policy", "linux,coop", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--policy env or gang" in err, err
    assert not out.exists() and not os.path.exists(out.with_suffix(".h5.lock"))
    assert not os.path.exists(_segment()) and not os.path.exists(_segment() + ".lock")
    assert not cache.exists()  # nothing built where LD_PRELOAD could not have carried it


def test_a_segment_in_use_with_another_quantum_is_refused(shim_lib, tmp_path, capsys,
                                                          monkeypatch):
    """The jobs keep the quantum of the segment they joined: the study recorded 7 ms where
    the run had 20 (the review)."""
    from hybridsched.coop.arbiter import Arbiter

    _not_started(monkeypatch)
    out = tmp_path / "x.h5"
    with Arbiter(quantum_s=0.020):  # another coop run's, still going
        assert main(["colocate", "--cmd", "true", "--policy", "linux,coop",
                     "--quantum-ms", "7", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "in use with a 20 ms quantum" in err, err
    assert not out.exists()


def test_colocate_in_a_coop_job_is_refused(tmp_path, capsys, monkeypatch):
    """Its jobs inherited the job's shim, so "linux" was not plain Linux, and under coop
    they died of the outer shim's rotation signal (the review)."""
    from hybridsched.coop.shimjob import JOB_ENV

    _not_started(monkeypatch)
    monkeypatch.setenv(JOB_ENV, "12345")
    out = tmp_path / "x.h5"
    for argv in (["--cmd", "true", "--policy", "linux"], ["--workload", "bsp"]):
        assert main(["colocate", *argv, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "outside `coop exec`" in err, err
        assert not out.exists()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM],
                         ids=["SIGHUP", "SIGUSR1", "SIGALRM"])
def test_under_nohup_the_jobs_keep_sighup_ignored(sig, tmp_path):
    """`nohup hybridsched colocate ...`: the jobs started with SIGHUP's default action (the
    third review), so a job's group orphaned with a member stopped, which the kernel sends
    SIGHUP, died of it. So with a batch script's `trap '' USR1`: the jobs died of the
    warning it meant to ignore (the review of the change that made USR1 an ending signal)."""
    out = str(tmp_path / "n.h5")
    bit = f"$(( 0x$(awk '/^SigIgn/ {{print $2}}' /proc/self/status) >> {sig - 1} & 1 ))"
    p = subprocess.run([sys.executable, "-m", "hybridsched", "colocate", "--cmd",
                        f"sh -c {shlex.quote(f'echo ignored-{bit}')}", "--policy", "linux,gang",
                        "--reps", "1", "--expect", "^ignored-1$", "-o", out],
                       capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN))
    assert p.returncode == 0, p.stderr
