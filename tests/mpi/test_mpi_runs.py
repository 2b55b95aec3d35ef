"""The distributed layer: launcher detection, P = 1 without MPI, mpiexec -n 2 end to end
(static and dynamic split, thread and process schedulers), faults, and merge."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from hybridsched.cli import main
from hybridsched.core.splits import dynamic_chunks
from hybridsched.mpi.ranks import Launch, detect_launch, local_cpus
from hybridsched.store import StudyFile, read_runs
from mpicheck import SMALL, check_cover, process_schedulers
from repo import ROOT

HYBRIDSCHED = os.path.join(os.path.dirname(sys.executable), "hybridsched")


def _clean_env(**extra) -> dict:
    from mpiimpls import _base_env

    env = _base_env()
    env.update(extra)
    return env


# --- pure -----------------------------------------------------------------------------


def test_detect_launch_from_environment():
    assert detect_launch({}) is None
    assert detect_launch({"PMI_SIZE": "1", "PMI_RANK": "0"}) is None  # one rank needs no MPI
    assert detect_launch({"PMI_SIZE": "4", "PMI_RANK": "2"}) == Launch(
        4, 2, "mpiexec (PMI: MPICH hydra, Intel MPI, srun --mpi=pmi2)")
    assert detect_launch({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}) == Launch(
        2, 1, "mpirun (Open MPI)")
    slurm = detect_launch({"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3"})
    assert (slurm.size, slurm.rank) == (8, 3) and slurm.how.startswith("srun")
    # a batch script's own shell (SLURM_NTASKS without a job step) is not a launch
    assert detect_launch({"SLURM_NTASKS": "8", "SLURM_JOB_ID": "1", "SLURM_PROCID": "0"}) is None
    assert detect_launch({"PMIX_RANK": "0", "SLURM_STEP_NUM_TASKS": "2"}).size == 2
    assert detect_launch({"PMI_SIZE": "4", "HYBRIDSCHED_NO_MPI": "1"}) is None


def test_local_cpus_partition_the_node():
    cpus = list(range(8))
    parts = [local_cpus(cpus, r, 3) for r in range(3)]
    assert sorted(sum(parts, [])) == cpus and all(parts)
    assert local_cpus([0, 1], 1, 4) == [0, 1]  # fewer CPUs than ranks: share them all
    assert local_cpus(cpus, 0, 1) == cpus


@pytest.mark.parametrize("L,P,k", [(1, 1, 1), (10, 2, 1), (97, 3, 4), (1000, 8, 24), (5, 4, 8)])
def test_dynamic_chunks_cover_every_frame_once(L, P, k):
    chunks = dynamic_chunks(L, P, k)
    covered = np.zeros(L, int)
    for first, count in chunks:
        assert count >= 1
        covered[first:first + count] += 1
    assert (covered == 1).all()
    sizes = [c for _, c in chunks]
    assert sizes == sorted(sizes, reverse=True)  # guided: chunks shrink


class _FakeMPI:
    """What mpi_metadata and World read of mpi4py.MPI, for an MPI that is not here."""

    COMM_TYPE_SHARED = 0

    def __init__(self, size=2, vendor=("Open MPI", (5, 0, 11)),
                 library="Open MPI v5.0.11, package: Open MPI user@localhost Distribution, "
                         "ident: 5.0.11, repo rev: v5.0.11rc1, Sep 16, 2026\x00"):
        self.size, self.vendor, self.library = size, vendor, library
        self.COMM_WORLD = self

    def Is_initialized(self):
        return True

    def get_vendor(self):
        return self.vendor

    def Get_library_version(self):
        return self.library

    def Get_version(self):
        return (3, 1)

    def Get_processor_name(self):
        return "node\x001\tx"

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.size

    def Split_type(self, kind, key=0):
        return self


def test_strings_from_the_mpi_library_are_cleaned_before_they_are_stored(monkeypatch, tmp_path):
    """Open MPI's library version ends in a NUL, which HDF5 strings cannot hold: the study
    of an Open MPI job failed on rank 0 before its first run."""
    from hybridsched.machine.metadata import clean_text, machine_metadata
    from hybridsched.store import read_attrs
    from hybridsched.study.output import new_study

    assert clean_text("a\x00b") == "ab"
    assert clean_text(" MPICH Version:\t5.0.2\nMPICH Release date: x\x1b[0m ") == \
        "MPICH Version: 5.0.2 MPICH Release date: x [0m"
    assert clean_text("x" * 500) == "x" * 200 and clean_text("é€", 1) == "é"
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", _FakeMPI())
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    meta = machine_metadata()
    assert meta["mpi_implementation"] == "Open MPI" and meta["mpi_version"] == "5.0.11"
    assert meta["mpi_library"].endswith("Sep 16, 2026") and meta["mpi_standard"] == "3.1"
    assert meta["mpi_launcher"] == "mpirun (Open MPI)"
    assert all("\x00" not in v for v in meta.values() if isinstance(v, str))
    out = str(tmp_path / "s.h5")
    with new_study(out, {"P": 2}, metadata=meta):
        pass
    assert read_attrs(out)["machine.mpi_library"] == meta["mpi_library"]


def test_an_mpi_library_that_is_not_the_launchers_is_refused(monkeypatch):
    """Both wheels in one environment: mpirun (Open MPI) started 2 ranks, but mpi4py loaded
    MPICH, so each copy is a singleton that would run the whole study alone."""
    from hybridsched.errors import UsageError
    from hybridsched.mpi import ranks as W

    import types

    fake = _FakeMPI(size=1, vendor=("MPICH", (5, 0, 2)))
    package = types.ModuleType("mpi4py")
    package.MPI = fake
    monkeypatch.setitem(sys.modules, "mpi4py", package)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    with pytest.raises(UsageError, match=r"started 2 ranks but the MPI library mpi4py loaded "
                                         r"\(MPICH 5\.0\.2\) sees 1.*MPI4PY_LIBMPI"):
        W._make_world()
    monkeypatch.setattr(fake, "size", 2)
    assert W._make_world().host == "node1 x"  # the processor name, cleaned


def test_a_copy_alone_under_launcher_variables_names_the_way_out(monkeypatch, tmp_path,
                                                                 capsys):
    """Launcher variables left in the environment (SLURM_STEP_NUM_TASKS=4, SLURM_PROCID=0
    with no srun): the MPI library sees one process; the refusal also names
    HYBRIDSCHED_NO_MPI=1, which runs such a copy as P = 1. (A copy the variables call rank
    2 stays silent, as every rank but 0 does under a real launcher, whose rank 0 speaks.)"""
    import types

    from hybridsched.mpi import ranks as W

    fake = _FakeMPI(size=1, vendor=("MPICH", (5, 0, 2)))
    package = types.ModuleType("mpi4py")
    package.MPI = fake
    monkeypatch.setitem(sys.modules, "mpi4py", package)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    monkeypatch.setattr(W, "_world", None)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "0")
    out = str(tmp_path / "s.h5")
    assert main(["run", "-s", "dynamic", "-L", "8", "--height", "16", "--width", "16",
                 "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sees 1" in err and "HYBRIDSCHED_NO_MPI=1" in err, err
    assert not os.path.exists(out)


def test_launcher_without_mpi4py_runs_as_P1_on_rank_0_only(monkeypatch, capsys):
    from hybridsched.mpi import ranks as W

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py -> ImportError
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "0")
    w = W._make_world()
    assert isinstance(w, W.Solo) and w.size == 1
    assert "mpi4py is not installed" in capsys.readouterr().err
    monkeypatch.setenv("PMI_RANK", "1")
    with pytest.raises(SystemExit) as exc:  # the other copies leave instead of repeating it
        W._make_world()
    assert exc.value.code == 0


def test_plain_run_is_P1_and_never_initialises_mpi(tmp_path):
    out = tmp_path / "p1.h5"
    code = ("import sys; from hybridsched.cli import main; "
            f"rc = main(['run', '-s', 'dynamic', '-k', '2', '-L', '6', '--height', '8', "
            f"'--width', '8', '--reps', '1', '-o', {str(out)!r}]); "
            "print('MPI' if 'mpi4py.MPI' in sys.modules else 'noMPI'); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=_clean_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("noMPI")
    runs = read_runs(str(out))
    assert (runs["P"] == 1).all() and runs["verified"].all()


# --- mpiexec -n 2 ---------------------------------------------------------------------


@pytest.mark.parametrize("split", ["static", "dynamic"])
def test_mpiexec_two_ranks_end_to_end(mpi, tmp_path, split):
    out = str(tmp_path / f"{split}.h5")
    L = 30
    names = ",".join(["dynamic"] + process_schedulers())
    p = mpi.run(["run", "-s", names, "-k", "1,2", "-L", str(L), *SMALL, "--split", split, "-o", out])
    assert p.returncode == 0, p.stderr
    # rank 0 alone prints the summary table (once); progress goes to stderr
    assert p.stdout.count("| scheduler |") == 1 and "| 2×2 |" in p.stdout
    assert p.stderr.count("written to") == 1
    assert f"runs at P=2 under {mpi.impl.title} " in p.stderr  # which MPI ran
    runs = read_runs(out)
    assert len(runs) == 2 * len(names.split(","))
    assert (runs["P"] == 2).all() and runs["verified"].all() and (runs["bad_rows"] == 0).all()
    assert all(n.startswith(f"split={split}") for n in runs["notes"])
    for extra, run in zip(check_cover(out, L), runs):
        assert extra["split"] == split
        assert sum(extra["rank_frames"]) == L and len(extra["rank_time_s"]) == 2
        assert run["time_s"] == pytest.approx(max(extra["rank_time_s"]))
        if split == "static":
            assert extra["rank_frames"] == [15, 15]
        else:
            assert extra["compute_time_s"] <= run["time_s"]
            assert all(g >= 0 for g in extra["rank_gen_s"])
    with h5py.File(out, "r") as h5:
        study = json.loads(h5.attrs["study"])
    assert study["P"] == 2 and study["split"] == split
    if split == "static":  # the report names the MPI that ran the ranks, also once merged
        _report_names_the_mpi(mpi, out, tmp_path)


def _report_names_the_mpi(mpi, out: str, tmp_path) -> None:
    import contextlib
    import io

    p1, merged = str(tmp_path / "p1.h5"), str(tmp_path / "all.h5")
    assert main(["run", "-s", "serial", "-k", "1", "-L", "30", *SMALL, "-o", p1]) == 0
    assert main(["merge", p1, out, "-o", merged]) == 0
    for path, where in ((out, ""), (merged, f" ({os.path.basename(out)})")):
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert main(["report", path, "--no-plots", "--out-dir", str(tmp_path / "rep")]) == 0
        line = next(ln for ln in text.getvalue().splitlines() if ln.startswith("MPI: "))
        assert line.startswith(f"MPI: {mpi.impl.title} ") and line.endswith(f"{where}."), line
        assert "started by mp" in line and "; --split static over P = 2" in line, line


def test_verification_is_summed_over_ranks(mpi, tmp_path):
    out = str(tmp_path / "bad.h5")
    p = mpi.run(["run", "-s", "static", "-k", "1", "-L", "8", *SMALL, "-o", out],
                HYBRIDSCHED_CORRUPT_RANK="1")
    assert p.returncode == 1
    assert "UNVERIFIED" in p.stderr
    runs = read_runs(out)
    assert not runs["verified"][0] and runs["bad_rows"][0] == 1
    (extra,) = check_cover(out, 8)
    assert extra["rank_bad_rows"] == [0, 1]


@pytest.mark.parametrize("split", ["static", "dynamic"])
def test_failing_rank_aborts_the_job_quickly(mpi, tmp_path, split):
    """The job ends (a rank left waiting in a collective would hang it until the deadline,
    which only bounds that failure) and keeps what rank 0 had published: the first run
    always, the second unless a loaded machine made the writer space its snapshots out."""
    out = str(tmp_path / "fault.h5")
    p = mpi.run(["run", "-s", "dynamic", "-k", "1", "-L", "8", *SMALL[:-1], "4",
                 "--split", split, "-o", out], timeout=300, HYBRIDSCHED_FAIL_RANK="1:2")
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("hybridsched: rank")]
    assert len(lines) == 1 and "rank 1 of 2 on " in lines[0] and "test fault" in lines[0], p.stderr
    runs = _read_when_released(out)
    assert 1 <= len(runs) <= 2 and runs["verified"].all() and list(runs["rep"]) == [0, 1][:len(runs)]


def test_killed_rank_ends_the_job(mpi, tmp_path):
    out = str(tmp_path / "killed.h5")
    p = mpi.run(["run", "-s", "static", "-k", "1", "-L", "8", *SMALL[:-1], "3", "-o", out],
                timeout=300, HYBRIDSCHED_FAIL_RANK="0:1:kill")  # the deadline bounds a hang
    assert p.returncode != 0
    assert len(_read_when_released(out)) == 1
    # the killed rank is named, once (its watchdog), and the others say nothing of their own
    named = [ln for ln in p.stderr.splitlines() if ln.startswith("hybridsched: MPI rank")]
    assert len(named) == 1, p.stderr
    assert named[0].startswith("hybridsched: MPI rank 0 of 2 on ") and "pid" in named[0], named
    assert "SIGKILL" in named[0] or "killed by a signal" in named[0]


def test_ranks_behind_a_wrapper_that_does_not_exec_are_warned_of(mpi, tmp_path):
    """A rank killed outright behind a shell script that did not `exec` it is, to MPICH's
    mpiexec, the script exiting 137: the job went on, the other ranks waiting for it
    forever at full CPU. That cannot be undone from inside, so the start says so."""
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/bash\n"{HYBRIDSCHED}" "$@"\nexit $?\n')
    wrapper.chmod(0o755)
    out = str(tmp_path / "w.h5")
    args = ["run", "-s", "dynamic", "-k", "1", "-L", "8", *SMALL, "-o", out]
    p = mpi.call([*mpi.argv(2), str(wrapper), *args], env=mpi.env())
    assert p.returncode == 0, p.stderr
    warned = [ln for ln in p.stderr.splitlines() if "does not `exec` them" in ln]
    assert len(warned) == 1 and "a bash script" in warned[0], p.stderr
    p = mpi.run(args + ["--overwrite"])  # started directly: no warning
    assert p.returncode == 0 and "exec" not in p.stderr, p.stderr


def test_a_failing_rank_is_named_once_and_not_as_killed(mpi, tmp_path):
    out = str(tmp_path / "raised.h5")
    p = mpi.run(["run", "-s", "static", "-k", "1", "-L", "8", *SMALL[:-1], "3", "-o", out],
                timeout=60, HYBRIDSCHED_FAIL_RANK="1:1")
    assert p.returncode != 0
    assert "rank 1 of 2" in p.stderr and "failed: RuntimeError" in p.stderr
    assert "hybridsched: MPI rank" not in p.stderr, p.stderr  # watchdogs stay quiet


def test_dynamic_split_gives_a_slow_rank_less_work(mpi, tmp_path):
    """Self-scheduling between ranks: a rank that is 4x slower (test hook) claims fewer
    frames, and the ranks finish close together, unlike the static halves."""
    out = str(tmp_path / "slow.h5")
    L = 64
    p = mpi.run(["run", "-s", "static", "-k", "1", "-L", str(L), "--height", "128", "--width",
                "128", "--reps", "1", "--split", "dynamic", "-o", out],
                HYBRIDSCHED_SLOW_RANK="1:4")
    assert p.returncode == 0, p.stderr
    (extra,) = check_cover(out, L)
    assert extra["rank_frames"][0] > extra["rank_frames"][1], extra


@pytest.mark.parametrize("coop", [False, True], ids=["", "coop"])
def test_ctrl_c_to_the_launcher_ends_the_job_and_keeps_the_runs(mpi, tmp_path, coop):
    """SIGINT to mpiexec/mpirun (Ctrl-C at the terminal): the launcher passes it on, every
    rank ends, the runs already written stay readable and no lock, process or segment of
    the job is left (the `mpi` fixture and the leak check look). Under --coop the ranks'
    arbiter segment goes too: the watchdog of the last rank to die sweeps it (it stayed
    in /dev/shm until the next --coop run)."""
    out = str(tmp_path / "int.h5")
    seg = f"/dev/shm/hybridsched-coop.{os.getuid()}.mpitest-{os.getpid()}-{tmp_path.name}"
    cmd = [*mpi.argv(2), HYBRIDSCHED, "run", "-s", "dynamic", "-k", "1", "-L", "40",
           "--height", "64", "--width", "64", "--reps", "2000", "-o", out]
    cmd += ["--coop"] if coop else []
    proc = mpi.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                     env=mpi.env(HYBRIDSCHED_COOP_SEGMENT=seg))
    try:
        seen = []
        while not any(ln.startswith("[2/") for ln in seen):  # two runs stored: mid-study
            line = proc.stderr.readline()
            assert line, f"the job ended before its second run: {''.join(seen)}"
            seen.append(line)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.watch.__exit__(None, None, None)
    assert proc.returncode != 0, err
    runs = _read_when_released(out)
    assert len(runs) >= 2 and runs["verified"].all()
    deadline = time.monotonic() + 120  # a rank's watchdog removes the lock of a dead rank
    while (os.path.exists(out + ".lock") or os.path.exists(seg)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(out + ".lock")
    assert not os.path.exists(seg), "the ranks' arbiter segment was left"
    assert not os.path.exists(seg + ".lock")


def _read_when_released(path: str, wait: float = 120.0) -> np.ndarray:
    """hydra's mpiexec returns while a killed rank may still be dying (orphaned, holding
    the HDF5 file lock for some milliseconds); wait for the lock to go."""
    from hybridsched.errors import NotOurFile

    deadline = time.monotonic() + wait
    while True:
        try:
            return read_runs(path)
        except NotOurFile:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_bad_input_under_mpiexec_is_one_line_and_exit_2(mpi, tmp_path):
    out = str(tmp_path / "x.h5")
    p = mpi.run(["run", "-s", "static", "-L", "1", *SMALL, "-o", out])
    assert p.returncode == 2
    (line,) = mpi.ours(p.stderr)
    assert "smaller than the 2 MPI ranks" in line, p.stderr
    assert not os.path.exists(out)


@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_refusing_input_are_quiet_to_their_watchdogs_before_any_leaves(rank):
    """The launcher kills the other ranks as soon as one leaves. A rank still in the
    verdict's broadcast (a loaded node) was killed before it could tell its watchdog, which
    then printed a second line, 'rank 1 ... killed by SIGTERM', under the refusal's: each
    rank tells its watchdog, then all meet, then they leave."""
    import types

    from hybridsched.errors import UsageError
    from hybridsched.mpi.ranks import agree

    said: list[str] = []
    w = types.SimpleNamespace(
        rank=rank, bcast=lambda msg: "bad input",
        barrier=lambda: said.append("barrier"),
        watchdog=types.SimpleNamespace(refusing=lambda: said.append("refusing")))
    with pytest.raises(UsageError if rank == 0 else SystemExit):
        agree(w, lambda: None)
    assert said == ["refusing", "barrier"]


# --- issue 33: a --split technique, the ranks' code ----------------------------------

SPLIT_TECHNIQUES = """
import os
from hybridsched import Technique


class PidDet(Technique):  # declares itself deterministic, but its chunks follow the process
    deterministic = True

    def chunk(self, remaining, request, worker):
        return 1 + (os.getpid() + request) % 5


_starts = [0]


class Drift(Technique):  # the same on every rank at first, then rank 1 drifts
    deterministic = True

    def start(self):
        _starts[0] += 1

    def chunk(self, remaining, request, worker):
        from mpi4py import MPI

        return 2 if _starts[0] <= 1 or MPI.COMM_WORLD.Get_rank() == 0 else 3


class BySize(Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        return int(self.params["size"])
"""


def _split_module(tmp_path) -> str:
    """A PYTHONPATH where the ranks find the module (before the one they were given)."""
    (tmp_path / "splitmod.py").write_text(SPLIT_TECHNIQUES)
    return os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))


def test_a_split_technique_that_differs_between_ranks_is_refused(mpi, tmp_path):
    """Issue 33 item 1: the ranks compare the hand-out they computed before any run (each
    checks only the frames it ran: 43-58 frame claims for 48 frames were stored verified)."""
    out = str(tmp_path / "pid.h5")
    p = mpi.run(["run", "-s", "dynamic", "--split", "splitmod:PidDet", "-k", "1", "-L", "48",
                 *SMALL, "-o", out], PYTHONPATH=_split_module(tmp_path))
    assert p.returncode == 2, p.stderr
    (line,) = mpi.ours(p.stderr)
    assert "rank 1 runs other code than rank 0" in line
    assert "hand-out at L=48 k=1" in p.stderr
    assert not os.path.exists(out) and not os.path.exists(out + ".lock")


def test_a_split_hand_out_that_drifts_during_the_study_is_not_verified(mpi, tmp_path):
    """Issue 33 item 1: whatever the technique does later, a run counts as verified only
    when the ranks ran every frame of the study exactly once from one hand-out."""
    out = str(tmp_path / "drift.h5")
    p = mpi.run(["run", "-s", "dynamic", "--split", "splitmod:Drift", "-k", "1", "-L", "48",
                 *SMALL, "-o", out], PYTHONPATH=_split_module(tmp_path))
    assert p.returncode == 1, p.stderr
    runs = read_runs(out)
    assert len(runs) == 1 and not runs["verified"][0]
    assert "rank 1 computed another --split splitmod:Drift hand-out" in runs["error"][0]


def test_ranks_that_import_other_code_for_a_technique_are_refused(mpi, tmp_path):
    """Issue 33 item 7: an MPMD launch whose rank 1 imports another module under the same
    reference stopped nothing, and rank 0's hash was stored for both."""
    for d, size in (("a", 2), ("b", 3)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "samename.py").write_text(
            "from hybridsched import Technique\n\n\nclass Good(Technique):\n"
            f"    def chunk(self, remaining, request, worker):\n        return {size}\n")
    out = str(tmp_path / "mpmd.h5")
    args = ["run", "-s", "samename:Good", "-k", "1", "-L", "16", *SMALL, "-o", out]
    path = {d: os.pathsep.join(filter(None, [str(tmp_path / d), os.environ.get("PYTHONPATH")]))
            for d in "ab"}
    p = mpi.call([*mpi.argv(1), "env", f"PYTHONPATH={path['a']}", HYBRIDSCHED, *args,
                  ":", "-n", "1", "env", f"PYTHONPATH={path['b']}", HYBRIDSCHED, *args],
                 timeout=120)
    assert p.returncode == 2, p.stderr
    assert "technique good is samename:Good (source sha256" in p.stderr, p.stderr
    assert not os.path.exists(out)


def test_a_split_technique_takes_param(mpi, tmp_path):
    """Issue 33 item 8: --param reaches the --split technique (it was refused: 'no
    scheduler of this study reads it (user techniques read any ...)')."""
    out = str(tmp_path / "size.h5")
    p = mpi.run(["run", "-s", "dynamic", "--split", "splitmod:BySize", "--param", "size=5",
                 "-k", "1", "-L", "48", *SMALL, "-o", out], PYTHONPATH=_split_module(tmp_path))
    assert p.returncode == 0, p.stderr
    (extra,) = check_cover(out, 48)
    assert sum(extra["rank_chunks"]) == 10  # 9 chunks of 5 frames and the last 3
    assert extra["split_params"] == "size=5" and extra["split_technique"] == "splitmod:BySize"


def test_a_profiled_scheduler_under_a_dynamic_split_is_refused_in_good_english():
    """Issue 33 item 22: 'fac need a profiling run'."""
    from hybridsched.errors import UsageError
    from hybridsched.mpi.runs import check_split
    from hybridsched.records import RunConfig

    one = [RunConfig("fac", 1, 8, 8, 8)]
    with pytest.raises(UsageError, match="^fac needs a profiling run"):
        check_split(one, 2, "dynamic")
    with pytest.raises(UsageError, match="^fac, tap need a profiling run"):
        check_split(one + [RunConfig("tap", 1, 8, 8, 8)], 2, "dynamic")


def test_a_dynamic_split_counts_a_whole_slab_for_every_rank_of_the_node(monkeypatch):
    """Each rank of a dynamic split holds a slab for all L frames: three ranks on a node
    need three of them. The check allowed for one; such a study passed it, then aborted
    mid-study when a rank could not reserve its segment."""
    from hybridsched.errors import UsageError
    from hybridsched.mpi import runs as R
    from hybridsched.records import RunConfig

    one = [RunConfig("dynamic", 1, 48, 1024, 1024)]  # 2 x 48 MiB a slab
    monkeypatch.setattr(R, "available_memory", lambda: 250 * 2**20)
    R.check_split(one, 3, "static", local_ranks=3)  # blocks: one tensor in all
    R.check_split(one, 3, "dynamic", local_ranks=2)  # 192 MiB
    want = (r"^--split dynamic: each of the 3 ranks on this node holds the whole "
            r"48x1024x1024 tensor.*288\.0 MiB in all, but only 250\.0 MiB")
    with pytest.raises(UsageError, match=want):
        R.check_split(one, 3, "dynamic", local_ranks=3)


def test_ranks_record_is_verified_only_when_the_ranks_ran_every_frame_once():
    """Issue 33 item 1, rank 0's check: two ranks that each verified their own frames, but
    between them ran frames 0-5 and 4-9 of 12, give an unverified record."""
    from hybridsched.records import TRACE_DTYPE, RunConfig
    from hybridsched.study.measure import Measured, ranks_record

    cfg = RunConfig("dynamic", 1, 12, 8, 8, 0, True, 0, "quicksort", 0, P=2)

    def rank(r, first, count, handout="same"):
        m = Measured(cfg, "thread", 0.0, rank=r, time_s=0.01, handout=handout)
        m.trace = np.zeros(1, TRACE_DTYPE)
        m.trace["first"], m.trace["count"], m.trace["worker"] = first, count, r
        return m
    good = ranks_record([rank(0, 0, 6), rank(1, 6, 6)], 0, "dynamic")
    assert good.verified and not good.error
    bad = ranks_record([rank(0, 0, 6), rank(1, 4, 6)], 0, "dynamic")
    assert not bad.verified and "2 never ran, 2 ran more than once" in bad.error
    other = ranks_record([rank(0, 0, 6), rank(1, 6, 6, "other")], 0, "dynamic")
    assert not other.verified and "rank 1 computed another --split dynamic hand-out" in other.error


def test_param_for_a_split_technique_is_not_refused_and_the_refusal_does_not_contradict_itself():
    from hybridsched.study.spec import StudySpec

    spec = StudySpec(["dynamic"], [1], [8], 8, 8, params={"size": 5})
    spec.validate(split="splitmod:BySize")  # read by the split technique
    with pytest.raises(Exception, match="to --split under mpiexec, reads any") as err:
        spec.validate()
    assert "user techniques read any" not in str(err.value)


# --- merge ----------------------------------------------------------------------------


def _study(path: str, scheduler: str, k: str) -> None:
    assert main(["run", "-s", scheduler, "-k", k, "-L", "6", "--height", "8", "--width", "8",
                 "--reps", "1", "-o", path]) == 0


def test_merge_round_trip(tmp_path, capsys):
    a, b, out = (str(tmp_path / n) for n in ("a.h5", "b.h5", "all.h5"))
    _study(a, "serial", "1")
    _study(b, "dynamic", "1,2")
    assert main(["merge", a, b, "-o", out]) == 0
    ra, rb, ro = read_runs(a), read_runs(b), read_runs(out)
    assert len(ro) == len(ra) + len(rb)
    assert list(ro["run_id"]) == list(range(len(ro)))
    for name in ("scheduler", "P", "k", "L", "time_s", "verified"):
        assert list(ro[name]) == list(ra[name]) + list(rb[name])
    with h5py.File(b, "r") as hb, h5py.File(out, "r") as ho:
        for i in range(len(rb)):
            src, dst = hb["detail"][f"{i:06d}"], ho["detail"][f"{len(ra) + i:06d}"]
            assert np.array_equal(src["workers"][()], dst["workers"][()])
            assert np.array_equal(src["trace"][()], dst["trace"][()])
            assert json.loads(dst.attrs["merged_from"]) == {"source": 1, "run_id": i}
        merged = json.loads(ho.attrs["study"])["merged_from"]
    assert [m["path"] for m in merged] == [os.path.abspath(a), os.path.abspath(b)]
    # a merged file merges again (and reads as ours), but not with one of its own inputs,
    # whose runs it holds already: they would count twice
    assert main(["merge", out, a, "-o", str(tmp_path / "again.h5")]) == 2
    assert main(["merge", out, "-o", str(tmp_path / "again.h5")]) == 0
    assert len(read_runs(str(tmp_path / "again.h5"))) == len(ro)


def test_merge_refuses_files_that_are_not_ours(tmp_path, capsys):
    a = str(tmp_path / "a.h5")
    _study(a, "serial", "1")
    alien = tmp_path / "alien.h5"
    with h5py.File(alien, "w") as h5:
        h5["x"] = 1
    out = tmp_path / "all.h5"
    capsys.readouterr()
    assert main(["merge", a, str(alien), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a hybridsched study" in err
    assert not out.exists() and not (tmp_path / "all.h5.part").exists()
    assert main(["merge", a, "-o", a]) == 2  # output is an input


def test_merge_refuses_a_repeated_file_and_different_tensors(tmp_path, capsys):
    a, b, out = (str(tmp_path / n) for n in ("a.h5", "b.h5", "all.h5"))
    _study(a, "serial", "1")
    assert main(["run", "-s", "dynamic", "-k", "2", "-L", "6", "--height", "16", "--width", "8",
                 "--reps", "1", "-o", b]) == 0
    capsys.readouterr()
    assert main(["merge", a, a, "-o", out]) == 2  # its runs would count twice
    assert "given twice" in capsys.readouterr().err
    assert main(["merge", a, b, "-o", out]) == 2  # 8x8 and 16x8 frames: no common T_serial
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different tensors" in err
    assert not os.path.exists(out)


def test_argparse_error_under_mpiexec_is_printed_once(mpi, tmp_path):
    p = mpi.run(["run", "--no-such-option", "-o", str(tmp_path / "x.h5")])
    assert p.returncode == 2
    assert p.stderr.count("unrecognized arguments") == 1, p.stderr
    assert os.listdir(tmp_path) == []


def test_the_one_node_launch_script_runs_under_either_mpi(mpi, tmp_path):
    """launch/mpirun-node.sh as it stands: P = 1 and 2, merge, the USL fit; it names the
    MPI library, and passes Open MPI's launcher what hybridsched needs of it."""
    script = os.path.join(ROOT, "launch", "mpirun-node.sh")
    env = mpi.env(MPIEXEC=mpi.found.launcher[0], P_LIST="1 2", K_LIST="1,2", FRAMES="8",
                  SIDE="16", REPS="1", PATH=os.path.dirname(sys.executable) + os.pathsep
                  + os.environ.get("PATH", ""))
    p = mpi.call([script, str(tmp_path / "node")], env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"mpirun-node.sh: MPI library: {mpi.impl.title}" in p.stdout, p.stdout
    assert "usl fit of" in p.stdout and os.path.exists(tmp_path / "node" / "usl.png")
    runs = read_runs(str(tmp_path / "node" / "all.h5"))
    assert sorted(set(runs["P"].tolist())) == [1, 2] and runs["verified"].all()


def test_an_mpi_segment_nobody_holds_is_found_as_left_behind(tmp_path):
    """The `mpi` fixture's last resort: a segment a rank made and died with between two of
    the job watch's looks is found by name and age once no process maps or holds it; one
    held open is never taken."""
    import time as _time

    from mpiimpls import _orphans

    patterns = (r"/dev/shm/mpich_sh\w+",)
    since = _time.time() - 1.0
    path = f"/dev/shm/mpich_shm_hstest{os.getpid()}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        assert path not in _orphans(patterns, since)  # held open: a job is making it
        os.close(fd)
        fd = -1
        assert path in _orphans(patterns, since)
        assert path not in _orphans(patterns, _time.time() + 5)  # older than the test's jobs
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)


def test_a_merge_of_two_splits_is_re_simulated_split_by_split(mpi, tmp_path):
    """`simulate --from` a merge holding runs of both splits re-simulates each run with its
    own split (it gave every run the default, static, and pooled them: the review), keeps
    them apart in the report, refuses --split beside --from, and refuses a study with no
    P = 1 runs in one line naming what it lacks."""
    L, shape = 16, ["-s", "dynamic", "-k", "1", "-L", "16", *SMALL]
    studies = {split: str(tmp_path / f"{split}.h5") for split in ("static", "dynamic")}
    for split, out in studies.items():
        p = mpi.run(["run", *shape, "--split", split, "-o", out])
        assert p.returncode == 0, p.stderr
    p1, merged, sim = (str(tmp_path / n) for n in ("p1.h5", "all.h5", "sim.h5"))
    assert main(["run", "-s", "serial,dynamic", "-k", "1", "-L", str(L), *SMALL, "-o", p1]) == 0
    assert main(["merge", p1, *studies.values(), "-o", merged]) == 0
    hs = [sys.executable, "-m", "hybridsched"]
    p = subprocess.run([*hs, "simulate", "--from", merged, "-o", sim], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    with StudyFile(merged) as a, StudyFile(sim) as b:
        multi = a.runs["run_id"][a.runs["P"] > 1]
        was = {rid: d.extra["split"] for rid, d in a.details(multi)}
        now = {rid: d.extra["simulated"]["split"] for rid, d in b.details(multi)}
    assert now == was and sorted(set(was.values())) == ["dynamic", "static"]
    rep = subprocess.run([*hs, "report", sim, "--no-plots"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert "dynamic [split dynamic] — P = 2" in rep.stdout, rep.stdout
    assert "dynamic [split static] — P = 2" in rep.stdout, rep.stdout
    for argv, says in ((["--from", merged, "--split", "dynamic"], "--split cannot change"),
                       (["--from", studies["static"]], "no verified single-node (P = 1) runs"),
                       (["--validate", studies["static"]], "no verified single-node (P = 1) runs")):
        p = subprocess.run([*hs, "simulate", *argv, "-o", str(tmp_path / "no.h5")],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and says in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "no.h5")


@pytest.mark.parametrize("argv", [["merge", "a.h5", "b.h5", "-o", "m.h5"], ["fit", "a.h5"],
                                  ["report", "a.h5"], ["colocate", "--cmd", "true"]])
def test_a_command_that_runs_once_is_refused_under_a_launch_of_several_ranks(tmp_path, argv):
    """Under a launcher every rank would run it again, racing the others for its output
    (`mpiexec -n 2 hybridsched merge` wrote its file, then said "file exists": the review);
    `run`, `coop exec` and those that write nothing (`check`, `list`, `plan`) run on every
    rank. Rank 0 alone says it."""
    for rank, lines in (("0", 1), ("1", 0)):
        env = _clean_env(PMI_SIZE="2", PMI_RANK=rank)
        p = subprocess.run([sys.executable, "-m", "hybridsched", *argv], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=120)
        assert p.returncode == 2 and p.stderr.count("\n") == lines, p.stderr
        if lines:
            assert f"{argv[0]} runs once, not on every rank" in p.stderr
            assert "HYBRIDSCHED_NO_MPI=1" in p.stderr
    for extra in ({"HYBRIDSCHED_NO_MPI": "1"}, {}):  # and list writes nothing: every rank's
        env = _clean_env(PMI_SIZE="2", PMI_RANK="1", **extra)
        p = subprocess.run([sys.executable, "-m", "hybridsched", "list"], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path) == []


def test_simulate_from_refuses_a_tensor_no_p1_run_measured_before_writing(mpi, tmp_path):
    """A merge whose P = 2 runs are of a tensor no P = 1 run measured: refused before the
    output is made (it was found mid-write, a study of 4 of the 5 runs left behind: the
    review)."""
    p2, p1, merged = (str(tmp_path / n) for n in ("p2.h5", "p1.h5", "all.h5"))
    p = mpi.run(["run", "-s", "dynamic", "-k", "1", "-L", "20", *SMALL, "-o", p2])
    assert p.returncode == 0, p.stderr
    assert main(["run", "-s", "serial,dynamic", "-k", "1", "-L", "16", *SMALL, "-o", p1]) == 0
    assert main(["merge", p1, p2, "-o", merged]) == 0
    out = tmp_path / "sim.h5"
    p = subprocess.run([sys.executable, "-m", "hybridsched", "simulate", "--from", merged, "-o",
                        str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "no verified single-node (P = 1) run of the tensor of dynamic P=2" in p.stderr
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith("sim")]
