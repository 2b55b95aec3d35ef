"""The folder a report writes into: a user's own files there are never replaced (the
hostile review: `report --out-dir mine` replaced mine/claims.csv), hybridsched's own are."""
from __future__ import annotations

import os

from hybridsched import cli
from hybridsched.store import StudyWriter
from hybridsched.store.outputs import LISTED


def _study(tmp_path) -> str:
    from test_report import _rec

    path = str(tmp_path / "s.h5")
    with StudyWriter(path, {"N": 2}, {}) as w:
        w.append(_rec("serial", "serial", 1, 1.0))
        w.append(_rec("dynamic", "thread", 2, 0.5))
    return path


def _report(path, out) -> int:
    return cli.main(["report", path, "--no-plots", "--out-dir", str(out)])


def test_a_users_file_in_the_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    path = _study(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "claims.csv").write_text("my precious data\n")
    (mine / "notes.txt").write_text("mine too\n")
    assert _report(path, mine) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "claims.csv is there already and hybridsched did not write it" in err[0]
    assert (mine / "claims.csv").read_text() == "my precious data\n"
    assert sorted(os.listdir(mine)) == ["claims.csv", "notes.txt"]  # no stage, no list, no CSV


def test_its_own_files_in_a_users_folder_are_replaced_and_the_users_kept(tmp_path, capsys):
    path = _study(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert _report(path, mine) == 0
    written = set(os.listdir(mine)) - {"notes.txt", LISTED}
    assert "summary.csv" in written
    (mine / "summary.csv").write_text("stale\n")
    assert _report(path, mine) == 0  # the second report replaces the first's files
    assert (mine / "summary.csv").read_text() != "stale\n"
    assert (mine / "notes.txt").read_text() == "mine\n"
    assert set((mine / LISTED).read_text().split()) == written
    assert not [n for n in os.listdir(mine) if n.startswith(".hybridsched-stage")]


def test_a_folder_it_made_or_named_is_its_own(tmp_path, capsys):
    path = _study(tmp_path)
    made = tmp_path / "made"
    assert _report(path, made) == 0 and (made / LISTED).read_text() == "*\n"
    assert _report(path, made) == 0
    named = tmp_path / "s_report"  # the default, <stem>_report, from an older hybridsched
    named.mkdir()
    (named / "summary.csv").write_text("an older report's\n")
    assert cli.main(["report", path, "--no-plots"]) == 0
    assert (named / "summary.csv").read_text() != "an older report's\n"


def test_a_failed_report_leaves_no_folder_it_made(tmp_path, capsys, monkeypatch):
    """A report that fails while writing (a full disk, here a failing CSV writer) leaves
    neither its files nor the folder it made (the review: a CSV was left on ENOSPC)."""
    import errno

    from hybridsched.results import report

    path = _study(tmp_path)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "write_csv", full)
    assert _report(path, tmp_path / "new") == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_file_where_a_folder_of_the_path_should_be_is_named_so(tmp_path, capsys):
    path = _study(tmp_path)
    (tmp_path / "afile").write_text("x")
    assert _report(path, tmp_path / "afile" / "sub") == 2
    assert "a part of the path is a file, not a folder" in capsys.readouterr().err


def test_a_report_interrupted_between_its_moves_leaves_a_folder_a_later_one_takes(
        tmp_path, capsys, monkeypatch):
    """A Ctrl-C between two of the moves into a new folder: the files moved so far stay,
    with the folder's list (its own: `*`), and a later report there replaces them. Before,
    the list went and the files stayed, refused by every later report as the user's (the
    review); removing them instead could take another report's, moved in meanwhile."""
    import hybridsched.store.outputs as outputs

    path = _study(tmp_path)
    real, moves = os.replace, []

    def interrupted(src, dst):
        if ".hybridsched-stage-" in str(src) and ".hybridsched-stage-" not in str(dst):
            moves.append(dst)  # out of the stage: commit's, not a CSV's own rename in it
            if len(moves) == 2:
                raise KeyboardInterrupt
        return real(src, dst)

    new = tmp_path / "p1" / "p2" / "new"
    monkeypatch.setattr(outputs.os, "replace", interrupted)
    try:
        cli.main(["report", path, "--no-plots", "--out-dir", str(new)])
    except KeyboardInterrupt:
        pass
    assert len(moves) == 2 and (new / LISTED).read_text() == "*\n"
    assert not [n for n in os.listdir(new) if n.startswith(".hybridsched-stage")]
    monkeypatch.setattr(outputs.os, "replace", real)
    assert _report(path, new) == 0


def test_an_interrupt_while_the_folder_is_made_leaves_none(tmp_path, capsys, monkeypatch):
    """A Ctrl-C after the folder (and `mkdir -p`'s parents) was made, before any file: all
    of it goes (the review found the folders, the list and the stage left)."""
    import hybridsched.store.outputs as outputs

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.tempfile, "mkdtemp", interrupted)
    path = _study(tmp_path)
    try:
        cli.main(["report", path, "--no-plots", "--out-dir", str(tmp_path / "q1" / "q2")])
    except KeyboardInterrupt:
        pass
    assert not (tmp_path / "q1").exists()


def test_a_path_through_a_link_and_back_is_the_kernels(tmp_path, capsys):
    """`lnk/../new`: the folder beside lnk's target, as the kernel reads it; abspath's
    text made a stray `new` beside lnk (the review)."""
    path = _study(tmp_path)
    (tmp_path / "elsewhere" / "inner").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "elsewhere" / "inner")
    assert _report(path, tmp_path / "lnk" / ".." / "newA") == 0
    assert (tmp_path / "elsewhere" / "newA" / "summary.csv").exists()
    assert not (tmp_path / "newA").exists()


def test_a_list_that_is_no_regular_file_is_not_read(tmp_path, capsys):
    """The folder's list as a symbolic link to /dev/zero, or a FIFO: read whole, it hung the
    report (the review). Not a list then: the report writes, and its list replaces the
    link (never written through)."""
    path = _study(tmp_path)
    for i, make in enumerate((lambda p: os.symlink("/dev/zero", p), os.mkfifo)):
        mine = tmp_path / f"mine{i}"
        mine.mkdir()
        make(mine / LISTED)
        assert _report(path, mine) == 0
        assert (mine / LISTED).is_file() and not (mine / LISTED).is_symlink()
        assert "summary.csv" in (mine / LISTED).read_text().split()
