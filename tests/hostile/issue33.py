"""Hostile cases: issue 33's defects that belong to the older areas (mpi, run, api, files),
each named ``i33_<n>_...`` after its item: a --split technique that differs between ranks
(1), ranks importing other code (7), --param to a split technique (8), a chunk near 2**63
(3), and study files whose rows or side tables are wrong (17, 19, 20). The techniques',
simulate's and signals' defects are in those areas' modules.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .common import HS, TINY, case, failed, hs, mpi_launch, ok, usage

ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
SPLITMOD = '''
import os
from hybridsched import Technique


class PidDet(Technique):  # "deterministic", but its chunks follow the process
    deterministic = True

    def chunk(self, remaining, request, worker):
        return 1 + (os.getpid() + request) % 5


class RandDet(Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        import random
        return random.randint(1, 5)


class EnvDet(Technique):  # reads the rank's environment
    deterministic = True

    def chunk(self, remaining, request, worker):
        rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
        return 2 + int(rank)


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


class Good(Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        return 2
'''
SPLIT_SIZE = ["-k", "1", "-L", "48", "--height", "16", "--width", "32", "--reps", "2"]


def _mpi(tmp: Path, *argv: str, env: dict | None = None, timeout: int = 120):
    import subprocess

    launcher, e = mpi_launch()
    path = os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")]))
    e.update(ENV, PYTHONPATH=path, **(env or {}))
    return subprocess.run(["timeout", "-s", "KILL", str(timeout), *launcher, "-n", "2", *HS,
                           *argv], capture_output=True, text=True, env=e, cwd=tmp)


def _runs(path: Path):
    from hybridsched.store import read_runs

    return read_runs(str(path))


# --- 1, 7, 8: --split and the ranks' code -------------------------------------------------

for _cls in ("PidDet", "RandDet", "EnvDet"):
    def _make(cls=_cls):
        def fn(tmp: Path) -> str | None:
            (tmp / "splitmod.py").write_text(SPLITMOD)
            p = _mpi(tmp, "run", "-s", "dynamic", "--split", f"splitmod:{cls}", *SPLIT_SIZE,
                     "-o", "o.h5")
            return usage(p, tmp / "o.h5", tmp / "o.h5.lock", says="runs other code than rank 0")
        return fn
    _fn = _make()
    _fn.__name__ = f"i33_1_split_{_cls.lower()}_refused"
    _fn.__doc__ = (f"mpiexec -n 2 run --split splitmod:{_cls} (rank-dependent chunks): refused "
                   "before any run (was stored verified)")
    case("mpi")(_fn)


@case("mpi")
def i33_1_split_that_drifts_is_not_verified(tmp: Path) -> str | None:
    """--split splitmod:Drift (equal at first, then rank 1 differs): runs stored unverified"""
    (tmp / "splitmod.py").write_text(SPLITMOD)
    p = _mpi(tmp, "run", "-s", "dynamic", "--split", "splitmod:Drift", *SPLIT_SIZE, "-o", "o.h5")
    if (problem := failed(p)):
        return problem
    runs = _runs(tmp / "o.h5")
    if runs["verified"].any():
        return "a run whose ranks' hand-outs differ is stored verified"
    return None if all("hand-out" in e for e in runs["error"]) else f"errors: {list(runs['error'])}"


@case("mpi")
def i33_1_good_split_technique_is_verified(tmp: Path) -> str | None:
    """--split splitmod:Good: every run verified, every frame once (the check passes a good one)"""
    (tmp / "splitmod.py").write_text(SPLITMOD)
    p = _mpi(tmp, "run", "-s", "dynamic,prolific", "--split", "splitmod:Good", *SPLIT_SIZE,
             "-o", "o.h5")
    if (problem := ok(p, tmp / "o.h5")):
        return problem
    return None if _runs(tmp / "o.h5")["verified"].all() else "unverified runs"


@case("mpi")
def i33_8_split_technique_takes_param(tmp: Path) -> str | None:
    """--split splitmod:BySize --param size=5: exit 0, 10 chunks of L = 48, stored params"""
    import json

    import h5py

    (tmp / "splitmod.py").write_text(SPLITMOD)
    p = _mpi(tmp, "run", "-s", "dynamic", "--split", "splitmod:BySize", "--param", "size=5",
             *SPLIT_SIZE, "-o", "o.h5")
    if (problem := ok(p, tmp / "o.h5")):
        return problem
    with h5py.File(tmp / "o.h5") as h5:
        extra = json.loads(h5["detail"]["000000"].attrs["extra"])
    if sum(extra["rank_chunks"]) != 10 or extra.get("split_params") != "size=5":
        return f"chunks {extra['rank_chunks']}, params {extra.get('split_params')!r}"
    return None


@case("mpi")
def i33_7_mpmd_other_module_refused(tmp: Path) -> str | None:
    """MPMD: rank 1 imports another samename.py for -s samename:Good: refused (stored rank 0's hash)"""
    import subprocess

    launcher, e = mpi_launch()
    for d, size in (("a", 2), ("b", 3)):
        (tmp / d).mkdir()
        (tmp / d / "samename.py").write_text(
            "from hybridsched import Technique\n\n\nclass Good(Technique):\n"
            f"    def chunk(self, remaining, request, worker):\n        return {size}\n")
    args = ["run", "-s", "samename:Good", "-k", "1", "-L", "16", "--height", "8", "--width", "16",
            "--reps", "1", "-o", "o.h5"]
    path = {d: os.pathsep.join(filter(None, [str(tmp / d), os.environ.get("PYTHONPATH")]))
            for d in "ab"}
    p = subprocess.run(["timeout", "-s", "KILL", "120", *launcher, "-n", "1", "env",
                        f"PYTHONPATH={path['a']}", *HS, *args, ":", "-n", "1", "env",
                        f"PYTHONPATH={path['b']}", *HS, *args], capture_output=True, text=True,
                       cwd=tmp, env=dict(e, **ENV))
    return usage(p, tmp / "o.h5", says="technique good is samename:Good")


# --- 3: a chunk near 2**63 ----------------------------------------------------------------

for _sched, _dispatch in (("dynamic", "auto"), ("dynamic", "python"), ("chunk", "compiled"),
                          ("guided", "auto"), ("static", "auto"), ("prolific", "auto"),
                          ("pipe-1to1", "auto"), ("pipe-MtoM", "auto"), ("fac2", "auto")):
    def _make(sched=_sched, dispatch=_dispatch):
        def fn(tmp: Path) -> str | None:
            from hybridsched.store import read_detail

            p = hs("run", "-s", sched, "--chunk", str(2 ** 63 - 1), "--verify", "none",
                   "--dispatch", dispatch, *TINY, "-o", "o.h5", env=ENV, cwd=tmp)
            if (problem := ok(p, tmp / "o.h5")):
                return problem
            row = _runs(tmp / "o.h5")[0]
            trace = read_detail(str(tmp / "o.h5"), int(row["run_id"])).trace
            if int(trace["count"].sum()) != int(row["L"]):
                return f"the trace ran {int(trace['count'].sum())} of {int(row['L'])} frames"
            return None if row["chunk_used"] <= row["L"] else f"chunk_used {row['chunk_used']}"
        return fn
    _fn = _make()
    _fn.__name__ = f"i33_3_chunk_2_63_{_sched.replace('-', '_')}_{_dispatch}"
    _fn.__doc__ = (f"run -s {_sched} --chunk 2**63-1 --verify none --dispatch {_dispatch}: every "
                   "frame runs once (it stored a run of 0 chunks)")
    case("run")(_fn)


@case("api")
def i33_3_parallel_for_chunk_2_62(tmp: Path) -> str | None:
    """parallel_for(numba kernel, data, 'dynamic', k=2, chunk=2**62): every task runs"""
    import numba

    import hybridsched

    @numba.njit(nogil=True)
    def add_one(data, first, count):
        for i in range(first, first + count):
            data[i] += 1.0

    for chunk in (2 ** 62, 2 ** 63 - 1):
        data = np.zeros((37, 2))
        r = hybridsched.parallel_for(add_one, data, "dynamic", k=2, chunk=chunk, verify="none")
        if not (data == 1.0).all():
            return f"chunk {chunk}: {int((data == 0).all(axis=1).sum())} tasks untouched"
        if r.record.chunk_used > 37:
            return f"chunk_used {r.record.chunk_used}"
    return None


# --- 17, 19, 20: study files edited with h5py ---------------------------------------------

def _study(tmp: Path, name: str = "s.h5") -> Path:
    p = hs("run", "-s", "serial,dynamic", "-k", "1,2", "-L", "8", "--height", "8", "--width",
           "16", "--reps", "1", "-o", name, env=ENV, cwd=tmp)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-300:])
    return tmp / name


def _edit_runs(path: Path, change) -> None:
    import h5py

    with h5py.File(path, "r+") as h5:
        rows = h5["runs"][()]
        change(rows)
        h5["runs"][...] = rows


def _every_reader_refuses(tmp: Path, path: Path, says: str) -> str | None:
    for argv in (["report", str(path), "--no-plots", "--out-dir", "rep"], ["trace", str(path)],
                 ["fit", str(path), "--model", "amdahl"], ["merge", str(path), "-o", "m.h5"],
                 ["simulate", "--from", str(path), "-o", "x.h5"]):
        p = hs(*argv, env=ENV, cwd=tmp)
        if (problem := usage(p, tmp / "rep", tmp / "m.h5", tmp / "x.h5", says=says)):
            return f"{argv[0]}: {problem}"
        if "Warning" in p.stderr:
            return f"{argv[0]}: a numpy warning"
    return None


for _name, _change, _says in (
        ("i33_20_unknown_workload", lambda r: r["workload"].__setitem__(1, b"nosuchwork"), "nosuchwork"),
        ("i33_20_verified_with_bad_rows", lambda r: r["bad_rows"].__setitem__(1, 10), "bad_rows = 10"),
        ("i33_17_time_1e308", lambda r: r["time_s"].__setitem__(slice(None), 1e308), "at most")):
    def _make(change=_change, says=_says):
        def fn(tmp: Path) -> str | None:
            path = _study(tmp)
            _edit_runs(path, change)
            return _every_reader_refuses(tmp, path, says)
        return fn
    _fn = _make()
    _fn.__name__ = _name
    _fn.__doc__ = f"{_name.split('_', 2)[2]}: report, trace, fit, merge, simulate --from refuse it"
    case("files")(_fn)


@case("files")
def i33_20_merge_names_a_two_tensor_study_once(tmp: Path) -> str | None:
    """merge of a study whose rows hold two seeds: the refusal names that file once"""
    path = _study(tmp)
    other = _study(tmp, "t.h5")
    _edit_runs(path, lambda r: r["seed"].__setitem__(1, 7))
    p = hs("merge", str(other), str(path), "-o", "m.h5", env=ENV, cwd=tmp)
    if (problem := usage(p, tmp / "m.h5", says="itself holds runs of 2 tensors")):
        return problem
    return None if p.stderr.count(str(path)) == 1 else "the file is named twice"


def _ge(tmp: Path) -> Path:
    p = hs("ge", "--arch", "A0", "--n", "64", "--threads", "2", "--reps", "1", "-o", "g.h5",
           env=ENV, cwd=tmp)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-300:])
    return tmp / "g.h5"


for _damage in ("dropped", "retyped", "not_utf8"):
    def _make(damage=_damage):
        def fn(tmp: Path) -> str | None:
            import h5py

            path = _ge(tmp)
            with h5py.File(path, "r+") as h5:
                rows = h5["ge"][()]
                names = rows.dtype.names
                keep = [(n, "f8" if damage == "retyped" and n == "verified" else rows.dtype[n])
                        for n in names if not (damage == "dropped" and n == "error")]
                new = np.zeros(len(rows), keep)
                for n, _ in keep:
                    new[n] = rows[n]
                if damage == "not_utf8":
                    new["algo"] = b"r\xffws"
                del h5["ge"]
                h5["ge"] = new
            for argv in (["merge", str(path), "-o", "m.h5"],
                         ["report", str(path), "--no-plots", "--out-dir", "rep"]):
                p = hs(*argv, env=ENV, cwd=tmp)
                if (problem := usage(p, tmp / "m.h5", tmp / "rep")):
                    return f"{argv[0]}: {problem}"
            return None
        return fn
    _fn = _make()
    _fn.__name__ = f"i33_19_ge_table_{_damage}"
    _fn.__doc__ = f"/ge with a field {_damage.replace('_', ' ')}: merge refuses what report refuses"
    case("files")(_fn)


@case("files")
def ge_spec_attribute_not_json(tmp: Path) -> str | None:
    """(found by issue 33's re-run) a ge study whose ge_spec is not JSON: merge one line"""
    import h5py

    path = _ge(tmp)
    with h5py.File(path, "r+") as h5:
        h5.attrs["ge_spec"] = "{not json"
    return usage(hs("merge", str(path), "-o", "m.h5", env=ENV, cwd=tmp), tmp / "m.h5", says="ge_spec")
