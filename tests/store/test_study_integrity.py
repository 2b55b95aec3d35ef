"""Issue 9: a study file is never lost. One writer per study, readers that never fail on a
live file, a full disk or a SIGKILL that leaves every committed run readable, no symlink or
pre-created path followed, an orphan sweep that touches only what is provably ours."""
from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hybridsched import cli, store
from hybridsched.errors import StudyBusy, UsageError
from hybridsched.records import TRACE_DTYPE, WORKER_DTYPE, RunConfig, RunRecord

HS = [sys.executable, "-m", "hybridsched"]
TINY = ["-s", "serial,dynamic", "-k", "2", "-L", "4", "--height", "8", "--width", "8",
        "--reps", "1"]


def rec(i: int, trace_rows: int = 3) -> RunRecord:
    workers = np.zeros(2, WORKER_DTYPE)
    workers["worker"] = [0, 1]
    workers["end"] = [0.5, 0.4]
    trace = np.zeros(trace_rows, TRACE_DTYPE)
    trace["count"] = 1
    trace["first"] = np.arange(trace_rows)
    return RunRecord(RunConfig("dynamic", 2, trace_rows, 4, 8, rep=i, kernel="counting", seed=3),
                     "thread", 0.25 + i, True, workers_used=2, workers=workers, trace=trace,
                     extra={"foreign_cpu": 0.0})


def one_line_error(p, rc=2) -> None:
    assert p.returncode == rc, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def hs(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*HS, *argv], capture_output=True, text=True, timeout=120, **kw)


def leftovers(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith((".tmp", ".lock")))


# Appends runs as fast as the writer can (tiny records), printing each committed count.
FAST_WRITER = textwrap.dedent("""
    import sys
    sys.path[:0] = [{tests!r}]
    from test_study_integrity import rec
    from hybridsched.store import StudyWriter
    n = int(sys.argv[2])
    with StudyWriter(sys.argv[1], {{"N": 2}}, {{"seed": 3}}) as w:
        for i in range(n):
            w.append(rec(i, trace_rows=int(sys.argv[3])))
            print(w.published_runs, flush=True)
""").format(tests=os.path.dirname(__file__))


# --- one writer per study ---------------------------------------------------------------


def test_second_writer_in_process_is_refused_and_the_study_kept(tmp_h5):
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
        before = open(tmp_h5, "rb").read()
        with pytest.raises(StudyBusy, match=f"pid {os.getpid()}"):
            store.StudyWriter(tmp_h5, {}, {})
        with pytest.raises(StudyBusy):
            store.StudyWriter(tmp_h5, append=True)
        assert open(tmp_h5, "rb").read() == before
        w.append(rec(1))
    assert len(store.read_runs(tmp_h5)) == 2
    assert leftovers(os.path.dirname(tmp_h5)) == []


@pytest.mark.parametrize("argv", [
    ["run", *TINY, "--overwrite"], ["run", *TINY], ["run", *TINY, "--resume"],
    ["merge", "{other}", "--overwrite"], ["simulate", "--overwrite"],
], ids=["overwrite", "plain", "resume", "merge-overwrite", "simulate-overwrite"])
def test_second_writer_process_gets_one_line_and_the_live_study_is_untouched(tmp_path, argv):
    live = str(tmp_path / "live.h5")
    other = str(tmp_path / "other.h5")
    with store.StudyWriter(other, {}, {"seed": 3}) as w:
        w.append(rec(0))
    with store.StudyWriter(live, {}, {"seed": 3}) as w:
        for i in range(3):
            w.append(rec(i))
        before = open(live, "rb").read()
        argv = [a.format(other=other) for a in argv]
        where = ["--out", live] if argv[0] == "run" else ["-o", live]
        p = hs(*argv, *where)
        one_line_error(p)
        assert "is being written by pid" in p.stderr
        assert "sorts in" not in p.stdout + p.stderr  # refused before simulate measured
        assert open(live, "rb").read() == before
        w.append(rec(3))
    assert len(store.read_runs(live)) == 4  # the first writer went on undisturbed


def test_stale_lock_of_a_killed_writer_is_taken_over_with_a_notice(tmp_h5, capsys):
    code = ("import os, sys; from hybridsched.store import StudyLock; "
            "StudyLock(sys.argv[1]).acquire(); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code, tmp_h5], timeout=60)
    assert os.path.exists(tmp_h5 + ".lock")
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
    assert "taking over the lock" in capsys.readouterr().err
    assert not os.path.exists(tmp_h5 + ".lock")


@pytest.mark.parametrize("body", [b"", b"123 host 4026531836\n"])
def test_a_lock_left_empty_or_by_a_dead_writer_is_taken_over(tmp_h5, body):
    with open(tmp_h5 + ".lock", "wb") as fh:
        fh.write(body)
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
    assert not os.path.exists(tmp_h5 + ".lock") and len(store.read_runs(tmp_h5)) == 1


def test_a_study_named_like_the_lock_of_another_is_never_taken_over(tmp_h5):
    """`-o x.h5.lock` then `-o x.h5`: the second writer took the first study for a lock left
    by a dead writer, emptied it and removed it."""
    with store.StudyWriter(tmp_h5 + ".lock", {}, {}) as w:
        w.append(rec(0))
    before = open(tmp_h5 + ".lock", "rb").read()
    with pytest.raises(UsageError, match="is not a hybridsched lock"):
        with store.StudyWriter(tmp_h5, {}, {}) as w:
            w.append(rec(1))
    assert open(tmp_h5 + ".lock", "rb").read() == before
    assert not os.path.exists(tmp_h5)


def test_a_folder_removed_mid_run_is_one_error_not_a_traceback(tmp_path):
    """`rm -rf` of the output's folder while a study was written: FileNotFoundError from
    deep inside the writer, a traceback (hostile review)."""
    import shutil

    from hybridsched.errors import OutputLost

    sub = tmp_path / "sub"
    sub.mkdir()
    with pytest.raises(OutputLost, match="can no longer be written.*nothing of this run"):
        with store.StudyWriter(str(sub / "x.h5"), {}, {}) as w:
            w.append(rec(0))
            w.publish()
            shutil.rmtree(sub)
            w.append(rec(1))
            w.publish()
    assert not sub.exists()


def test_overwrite_replaces_only_when_the_new_study_exists(tmp_h5):
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
    before = open(tmp_h5, "rb").read()
    with pytest.raises(RuntimeError):
        with store.StudyWriter(tmp_h5, {}, {}):
            raise RuntimeError("a failed start")
    assert open(tmp_h5, "rb").read() == before
    assert leftovers(os.path.dirname(tmp_h5)) == []
    fresh = os.path.join(os.path.dirname(tmp_h5), "fresh.h5")
    with pytest.raises(RuntimeError):
        with store.StudyWriter(fresh, {}, {}):
            raise RuntimeError("a failed start")
    assert not os.path.exists(fresh)


# --- live readers ------------------------------------------------------------------------


@pytest.mark.slow
def test_readers_never_fail_on_a_study_written_at_full_speed(tmp_path, capsys):
    out = str(tmp_path / "live.h5")
    writer = subprocess.Popen([sys.executable, "-c", FAST_WRITER, out, "600", "50"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    failures, reads, seen = [], 0, 0
    try:
        writer.stdout.readline()  # the first snapshot is published
        while writer.poll() is None:
            try:
                runs = store.read_runs(out)
                assert len(runs) >= seen
                seen = len(runs)
                for rid in runs["run_id"][-2:]:
                    assert len(store.read_detail(out, int(rid)).trace) == 50
                rc = cli.main(["report", out, "--no-plots", "--out-dir", str(tmp_path / "r")])
                assert rc == 0
            except Exception as exc:  # noqa: BLE001 - count every kind of failure
                failures.append(repr(exc))
            reads += 1
    finally:
        writer.kill() if writer.poll() is None else None
        _, err = writer.communicate()
    capsys.readouterr()
    assert writer.returncode == 0, err
    assert reads >= 5 and seen > 0
    assert failures == []
    assert len(store.read_runs(out)) == 600


# --- a crash or a full disk --------------------------------------------------------------


def test_sigkill_of_the_writer_loses_no_committed_run_and_resume_continues(tmp_path):
    out = str(tmp_path / "k.h5")
    rng = random.Random(9)
    for attempt in range(3):
        writer = subprocess.Popen([sys.executable, "-c", FAST_WRITER, out + str(attempt),
                                   "100000", "20"], stdout=subprocess.PIPE, text=True)
        committed = 0
        for _ in range(rng.randint(5, 60)):
            committed = int(writer.stdout.readline())
        writer.kill()
        writer.communicate()
        path = out + str(attempt)
        runs = store.read_runs(path)
        assert len(runs) >= committed > 0
        for rid in runs["run_id"]:
            d = store.read_detail(path, int(rid))
            assert len(d.trace) == 20 and len(d.workers) == 2
        with store.StudyWriter(path, append=True) as w:  # takes the stale lock over
            assert w.append(rec(99)) == len(runs)
        assert len(store.read_runs(path)) == len(runs) + 1


def _mount_tmpfs(d, size="2m") -> None:
    os.makedirs(d, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"cannot mount a private tmpfs here ({p.stderr.strip() or 'not root'})")


@pytest.mark.slow
def test_full_disk_keeps_every_committed_run_and_resume_continues(tmp_path):
    d = tmp_path / "small"
    _mount_tmpfs(d)
    try:
        out = str(d / "full.h5")
        argv = ["run", "-s", "dynamic", "-k", "2", "-L", "3000", "--height", "1", "--width",
                "4", "--reps", "400", "--chunk", "1", "--out", out]
        p = hs(*argv)
        one_line_error(p, rc=1)
        assert "disk full:" in p.stderr and f"runs are safe in {out}" in p.stderr
        safe = int(p.stderr.split("disk full: ")[1].split()[0])
        runs = store.read_runs(out)
        assert len(runs) == safe > 0 and runs["verified"].all()
        for rid in runs["run_id"]:
            assert store.read_detail(out, int(rid)).trace["count"].sum() == 3000
        r = hs("report", out, "--no-plots", "--out-dir", str(tmp_path / "rep"))
        assert r.returncode == 0, r.stderr
        assert [n for n in os.listdir(d) if n != "full.h5"] == []  # no temp file, no lock
        subprocess.run(["mount", "-o", "remount,size=64m", str(d)], check=True)
        p = hs(*argv, "--resume")
        assert p.returncode == 0, p.stderr[-2000:]
        assert len(store.read_runs(out)) == 400
    finally:
        subprocess.run(["umount", "-l", str(d)])


# --- symlinks and pre-created paths ------------------------------------------------------


def test_planted_symlinks_are_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    src = str(tmp_path / "a.h5")
    with store.StudyWriter(src, {}, {"seed": 3}) as w:
        w.append(rec(0))
    out = tmp_path / "out.h5"
    out.symlink_to(victim)
    for argv in (["run", *TINY, "--out", str(out), "--overwrite"],
                 ["merge", src, "-o", str(out), "--overwrite"]):
        one_line_error(hs(*argv))
    out.unlink()
    (tmp_path / "out.h5.part").symlink_to(victim)   # the old merge temp name
    (tmp_path / "out.h5.lock").symlink_to(victim)   # the lock
    one_line_error(hs("merge", src, "-o", str(out)))
    (tmp_path / "out.h5.lock").unlink()
    p = hs("merge", src, "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert stat.S_ISREG(os.lstat(out).st_mode) and len(store.read_runs(str(out))) == 1
    # the report directory and the files in it
    rep = tmp_path / "a_report"
    rep.symlink_to(tmp_path / "elsewhere")
    one_line_error(hs("report", src, "--no-plots"))
    assert not (tmp_path / "elsewhere").exists()
    rep.unlink()
    rep.mkdir()
    (rep / "summary.csv").symlink_to(victim)
    assert hs("report", src, "--no-plots").returncode == 0
    assert stat.S_ISREG(os.lstat(rep / "summary.csv").st_mode)
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("target", ["", "/dev/null", "fifo"])
def test_out_must_be_a_regular_file_name(tmp_path, target):
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    p = hs("run", *TINY, "--out", target, "--overwrite")
    one_line_error(p)
    assert os.listdir(tmp_path) == (["fifo"] if target.endswith("fifo") else [])


# --- bounded inputs ----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["run", "-s", "serial", "-L", "2", "--height", "1", "--width", "2147483648", "--reps", "1"],
    ["run", "-s", "serial", "-L", "2", "--height", "2147483648", "--width", "1", "--reps", "1"],
    ["plan", "--policy", "static", "--tasks", "10", "--workers", str(10**12)],
], ids=["width", "height", "plan-workers"])
def test_oversize_dimensions_are_refused_up_front(tmp_path, argv):
    out = ["--out", str(tmp_path / "o.h5")] if argv[0] == "run" else []
    t0 = time.monotonic()
    one_line_error(hs(*argv, *out))
    assert time.monotonic() - t0 < 30 and os.listdir(tmp_path) == []


def test_malformed_fault_hook_is_refused_before_the_first_run(tmp_path):
    env = dict(os.environ, HYBRIDSCHED_FAULT="zero:one")
    p = hs("run", *TINY, "--out", str(tmp_path / "o.h5"), env=env)
    one_line_error(p)
    assert "HYBRIDSCHED_FAULT" in p.stderr and os.listdir(tmp_path) == []


def test_record_row_is_checked_before_the_table_grows(tmp_h5):
    import dataclasses

    bad = rec(0)
    bad.config = dataclasses.replace(bad.config, height=2**31)
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
        with pytest.raises(Exception, match="does not fit"):
            w.append(bad)
        assert w.runs.shape == (1,)
    assert len(store.read_runs(tmp_h5)) == 1


# --- the orphan sweep --------------------------------------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_sweep_leaves_alone_everything_not_provably_ours():
    from hybridsched.oslayer.procfs import pid_namespace
    from hybridsched.oslayer.shm import sweep_orphans

    ns, dead = pid_namespace(), _dead_pid()
    shm = "/dev/shm"
    mine = f"hybridsched.{dead}.{ns}.0.orig"
    others = {
        "foreign-user": f"hybridsched.{dead}.{ns}.1.orig",
        "other-namespace": f"hybridsched.{dead}.{ns + 1}.0.orig",
        "old-format": f"hybridsched.{dead}.0.orig",
        "odd-name": f"hybridsched.{dead}.{ns}.0.orig.bak",
    }
    made = []
    try:
        for name in [mine, *others.values()]:
            with open(os.path.join(shm, name), "wb") as fh:
                fh.write(b"x")
            made.append(name)
        os.chown(os.path.join(shm, others["foreign-user"]), 54321, 54321)
        adir = f"hybridsched.{dead}.{ns}.2.work"
        os.mkdir(os.path.join(shm, adir))
        made.append(adir)
        removed = sweep_orphans()
        assert mine in removed and not set(removed) & set(others.values())
        left = set(os.listdir(shm))
        assert set(others.values()) | {adir} <= left and mine not in left
    finally:
        for name in made:
            path = os.path.join(shm, name)
            if os.path.isdir(path):
                os.rmdir(path)
            elif os.path.exists(path):
                os.unlink(path)


def test_sweep_as_another_user_does_not_crash_on_roots_leftovers():
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    from hybridsched.oslayer.procfs import pid_namespace
    from hybridsched.oslayer.shm import sweep_orphans

    name = f"hybridsched.{_dead_pid()}.{pid_namespace()}.0.orig"
    with open(os.path.join("/dev/shm", name), "wb") as fh:
        fh.write(b"x")
    try:
        os.seteuid(65534)  # a non-root user meeting root's leftover
        try:
            removed = sweep_orphans()
        finally:
            os.seteuid(0)
        assert name not in removed and os.path.exists(os.path.join("/dev/shm", name))
        assert name in sweep_orphans()  # root's own orphan: removed by root
    finally:
        if os.path.exists(os.path.join("/dev/shm", name)):
            os.unlink(os.path.join("/dev/shm", name))


def test_full_dev_shm_is_an_error_message_not_sigbus():
    code = textwrap.dedent("""
        import subprocess, sys
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/dev/shm"])
        if r.returncode:
            sys.exit(77)
        from hybridsched.errors import ResourceError
        from hybridsched.oslayer.shm import Segment
        try:
            Segment((4, 1024, 1024))
        except ResourceError as exc:
            print("refused:", exc)
    """)
    p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 77 or "unshare failed" in p.stderr or p.returncode == 1 and not p.stdout:
        pytest.skip(f"cannot mount a private /dev/shm here: {p.stderr.strip()[:200]}")
    assert p.returncode == 0, p.stderr
    assert "refused: cannot reserve a shared-memory segment" in p.stdout


def test_temp_file_of_a_writer_killed_mid_publish_is_removed_by_the_next(tmp_h5):
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
    d, base = os.path.split(tmp_h5)
    stale = os.path.join(d, f".{base}.99999.0123456789ab.tmp")
    other = os.path.join(d, f".{base}.notours.tmp")
    for p in (stale, other):
        open(p, "wb").close()
    with store.StudyWriter(tmp_h5, append=True) as w:
        w.append(rec(1))
    assert not os.path.exists(stale) and os.path.exists(other)
    assert len(store.read_runs(tmp_h5)) == 2


def test_report_dir_parents_are_made_and_a_file_in_the_way_is_one_line(tmp_h5, tmp_path, capsys):
    with store.StudyWriter(tmp_h5, {}, {}) as w:
        w.append(rec(0))
    deep = tmp_path / "a" / "b" / "rep"
    assert cli.main(["report", tmp_h5, "--no-plots", "--out-dir", str(deep)]) == 0
    assert (deep / "summary.csv").is_file()
    capsys.readouterr()
    (tmp_path / "f").write_text("x")
    rc = cli.main(["report", tmp_h5, "--no-plots", "--out-dir", str(tmp_path / "f" / "rep")])
    cap = capsys.readouterr()
    assert rc == 2 and "Traceback" not in cap.err and len(cap.err.strip().splitlines()) == 1


@pytest.mark.slow
def test_full_disk_during_overwrite_says_the_old_study_is_intact(tmp_path):
    d = tmp_path / "small"
    _mount_tmpfs(d, "1m")
    try:
        out = str(d / "old.h5")
        assert hs("run", *TINY, "--out", out).returncode == 0
        before = open(out, "rb").read()
        with open(d / "filler", "wb") as fh:  # leave less than the new study needs
            try:
                fh.write(b"\0" * (4 << 20))
            except OSError:
                pass
        p = hs("run", "-s", "dynamic", "-k", "2", "-L", "3000", "--height", "1", "--width", "4",
               "--reps", "50", "--chunk", "1", "--out", out, "--overwrite")
        one_line_error(p, rc=1)
        assert "still holds the old one, unchanged" in p.stderr and "0 runs are safe" not in p.stderr
        assert open(out, "rb").read() == before
    finally:
        subprocess.run(["umount", "-l", str(d)])


def test_a_dead_ranks_lock_goes_with_the_temporary_files_it_left(tmp_path):
    """An MPI rank SIGKILLed mid-publish leaves `.<study>.<pid>.<hex>.tmp` beside the study;
    MPI studies are never resumed, so no later writer of it would remove that file. The
    watchdog's removal of the dead rank's lock takes that pid's temporary files with it,
    and nobody else's."""
    import socket

    from hybridsched.store.files import remove_left_by

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no process holds now
    study = tmp_path / "r.h5"
    study.write_bytes(b"")
    lock = tmp_path / "r.h5.lock"
    lock.write_text(f"{dead.pid} {socket.gethostname()} 4026531836\n")
    mine = tmp_path / f".r.h5.{dead.pid}.0123456789ab.tmp"
    other = tmp_path / f".r.h5.{os.getpid()}.0123456789ab.tmp"
    for f in (mine, other):
        f.write_bytes(b"x" * 100)
    assert remove_left_by(str(lock), dead.pid)
    assert not lock.exists() and not mine.exists()
    assert other.exists() and study.exists()


def test_merge_refuses_a_study_and_a_hard_link_to_it(tmp_path, capsys):
    """The same file under two names (a hard link: neither is a symbolic link, so their real
    paths differ) would count its runs twice (the review found them merged)."""
    a, link, out = str(tmp_path / "a.h5"), str(tmp_path / "a-too.h5"), str(tmp_path / "m.h5")
    assert cli.main(["run", *TINY, "-o", a]) == 0
    os.link(a, link)
    capsys.readouterr()
    assert cli.main(["merge", a, link, "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "given twice" in err, err
    assert not os.path.exists(out) and not os.path.exists(out + ".lock")


def test_merge_refuses_a_study_and_a_copy_of_it(tmp_path, capsys):
    """A copy (`cp`), not the same file: every run of it alike to the bit, start and time
    included, would count twice (the hostile review found its runs merged as 2 x 10)."""
    import shutil

    a, copy, out = str(tmp_path / "a.h5"), str(tmp_path / "copy.h5"), str(tmp_path / "m.h5")
    b = str(tmp_path / "b.h5")
    assert cli.main(["run", *TINY, "-o", a]) == 0
    assert cli.main(["run", *TINY, "-o", b]) == 0  # the same settings, measured again
    shutil.copyfile(a, copy)
    capsys.readouterr()
    assert cli.main(["merge", a, copy, "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hold the same runs" in err and copy in err, err
    assert not os.path.exists(out) and not os.path.exists(out + ".lock")
    assert cli.main(["merge", a, b, "-o", out]) == 0


def test_merge_refuses_a_ge_study_and_a_copy_of_it(tmp_path, capsys):
    """The side tables' rows too: a `ge` study and its copy merged into "2 ge rows" (the
    second review)."""
    import shutil

    g, copy, out = str(tmp_path / "g.h5"), str(tmp_path / "gcopy.h5"), str(tmp_path / "m.h5")
    assert cli.main(["ge", "--arch", "A1", "--algo", "rows", "--n", "32", "--threads", "2",
                     "--reps", "1", "--out", g]) == 0
    shutil.copyfile(g, copy)
    capsys.readouterr()
    assert cli.main(["merge", g, copy, "-o", out]) == 2
    assert "hold the same runs" in capsys.readouterr().err and not os.path.exists(out)


def test_merge_takes_two_studies_whose_turns_could_not_start_alike(tmp_path, capsys):
    """Rows with no measured time (a coop turn refused for the arbiter in use: NaN, alike
    in every study that met it) are no runs counted twice: not compared."""
    from hybridsched.colocate.output import ColocateWriter
    from hybridsched.colocate.spec import ColocateSpec
    from hybridsched.study.output import this_machine

    spec = ColocateSpec(workload="bsp", jobs=2, workers=1, policies=["coop"], steps=5, reps=1)
    paths = [str(tmp_path / f"c{i}.h5") for i in range(2)]
    for p in paths:
        with ColocateWriter(p, this_machine(), spec.to_dict(), False) as w:
            w.append(spec.not_run("coop", 0, "the arbiter is in use"))
    assert cli.main(["merge", *paths, "-o", str(tmp_path / "m.h5")]) == 0, capsys.readouterr().err
