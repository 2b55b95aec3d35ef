"""The Slurm round trip as a cluster user makes it: a controller and two slurmd on this
host (tests/slurmcluster.py), launch/slurm-PxK.sbatch submitted for P = 1 and P = 2 (its
P = 2 job starts the ranks with srun: --mpi=pmi2 for MPICH, pmix for Open MPI), then
`merge` of the two studies and `fit --model usl`. Once per MPI implementation; skipped,
with the reason, without root or without Slurm."""
from __future__ import annotations

import os
import sys

import pytest

import slurmcluster
from hybridsched.cli import main
from hybridsched.store import read_attrs, read_runs
from repo import ROOT

SCRIPT = os.path.join(ROOT, "launch", "slurm-PxK.sbatch")
# srun's --mpi for each implementation, as the script picks it from the library
PMI = {"mpich": "pmi2", "openmpi": "pmix"}
# Open MPI 5's own crash in MPI_Init under srun and PMIx, a fragment matched before the
# world's peers are set up (open-mpi/ompi#12495, still open; the same faulting address
# 0xe0 here): seen once in this test's CI runs, never alone in 20 runs, loaded or not.
# A job that shows it is submitted again, once; any other failure fails at once.
OMPI_INIT_RACE = ("mca_pml_ob1_recv_frag_callback_match", "ompi_mpi_init")


@pytest.fixture
def cluster():
    why = slurmcluster.missing()
    if why:
        pytest.skip(why)
    with slurmcluster.SlurmCluster() as c:
        yield c


@pytest.mark.slurm
def test_slurm_round_trip_of_the_batch_template(mpi, cluster, tmp_path, capsys):
    pmi = PMI[mpi.impl.name]
    why = cluster.cannot(pmi)
    if why:
        pytest.skip(f"{why} (needed by {mpi.impl.title})")
    results = tmp_path / "results"
    env = mpi.env(K_LIST="1,2", FRAMES="12", SIDE="16", REPS="1", SCHEDULERS="dynamic",
                  RESULTS=str(results),
                  PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cpus = str(os.cpu_count() or 1)  # the template asks for 24 cores per node
    jobs = {}
    mpi.begin()  # srun's ranks, unwatched: what they leave in /dev/shm goes at the end
    for P in (1, 2):
        log = str(tmp_path / f"job-P{P}.log")
        jobs[P] = (cluster.submit(SCRIPT, f"--nodes={P}", f"--cpus-per-task={cpus}",
                                  f"--output={log}", "--time=10", env=env, cwd=str(tmp_path)),
                   log)
    files = []
    for P, (job, log) in jobs.items():
        done = cluster.wait(job, log)
        if done.state != "COMPLETED" and all(x in done.log for x in OMPI_INIT_RACE):
            again = cluster.submit(SCRIPT, f"--nodes={P}", f"--cpus-per-task={cpus}",
                                   f"--output={log}.again", "--time=10", env=env,
                                   cwd=str(tmp_path))
            done = cluster.wait(again, f"{log}.again")
        assert done.state == "COMPLETED", f"P={P}: {done.state}\n{done.log}\n{cluster.logs()}"
        assert f"MPI library: {mpi.impl.title}" in done.log, done.log
        (line,) = [ln for ln in done.log.splitlines() if ln.startswith("wrote ")]
        files.append(os.path.join(str(tmp_path), line.split(" ", 1)[1]))
    p2 = read_attrs(files[1])
    assert p2["machine.mpi_implementation"] == mpi.impl.title
    assert "srun" in p2["machine.mpi_launcher"], p2["machine.mpi_launcher"]
    merged = str(tmp_path / "all.h5")
    assert main(["merge", *files, "-o", merged]) == 0
    runs = read_runs(merged)
    assert sorted(set(runs["P"].tolist())) == [1, 2] and runs["verified"].all()
    capsys.readouterr()
    assert main(["fit", merged, "--model", "usl"]) == 0
    assert "usl fit of 4 points" in capsys.readouterr().out


def test_no_cluster_without_root_or_slurm(monkeypatch):
    """Where the round trip cannot run it is skipped with the reason, never passed."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert slurmcluster.missing().startswith("needs root")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurmcluster.shutil, "which", lambda name: None)
    monkeypatch.setattr(slurmcluster.os.path, "exists", lambda path: False)
    assert slurmcluster.missing().startswith("Slurm is not installed (munged, slurmctld")
