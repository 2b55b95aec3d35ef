"""Combine study files (e.g. one per Slurm job at a different P) into one, for the P x k fits.

Runs are renumbered in input order; each run's detail group (workers, trace, extra) is
copied along and tagged with where it came from. The output is written to a temporary
name and renamed at the end, so a failure leaves nothing behind.
"""
from __future__ import annotations

import json
import os

import h5py
import numpy as np

from ..errors import UsageError
from ..store import RUN_DTYPE, StudyWriter, conform, check_ours, check_writable, open_study, read_runs

_PART = ".part"


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def merge(inputs: list[str], out: str, overwrite: bool = False) -> int:
    """Write the union of the studies ``inputs`` to ``out``; returns the number of runs.

    Raises NotOurFile (a UsageError) for an input that is not a hybridsched study.
    """
    if not inputs:
        raise UsageError("merge: no input files")
    if len({os.path.realpath(p) for p in inputs}) < len(inputs):
        raise UsageError("merge: the same file is given twice (its runs would count twice)")
    tensors: dict[tuple, str] = {}
    for p in inputs:
        check_ours(p)
        runs = read_runs(p)
        for t in set(zip(runs["seed"].tolist(), runs["H"].tolist(), runs["W"].tolist(),
                         runs["kernel"].tolist())):
            tensors.setdefault(t, p)
    if len(tensors) > 1:
        # one T_serial per L: runs on other frames, seeds or kernels are not comparable
        shown = "; ".join(f"{p}: seed {s}, {h}x{w}, {kern}" for (s, h, w, kern), p in tensors.items())
        raise UsageError(f"merge: the studies sort different tensors or kernels ({shown})")
    check_writable(out)
    if any(_same(p, out) for p in inputs if os.path.exists(out)):
        raise UsageError(f"-o {out}: is also an input")
    if os.path.exists(out) and not overwrite:
        raise UsageError(f"-o {out}: file exists (use --overwrite to replace it)")
    tmp = out + _PART
    sources, machine = [], {}
    try:
        for i, p in enumerate(inputs):
            with open_study(p) as h5:
                a = dict(h5.attrs)
            if i == 0:
                machine = {k[len("machine."):]: v for k, v in a.items() if k.startswith("machine.")}
            sources.append({"path": os.path.abspath(p), "created": _s(a.get("created", "")),
                            "hostname": _s(a.get("machine.hostname", "")),
                            "study": json.loads(_s(a.get("study", "{}")) or "{}")})
        total = 0
        with StudyWriter(tmp, machine, {"merged_from": sources}) as w:
            for i, p in enumerate(inputs):
                total = _copy_runs(p, i, w.h5, total)
            w.h5.flush()
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return total


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _copy_runs(path: str, source: int, dst: h5py.File, first_id: int) -> int:
    with open_study(path) as src:
        raw = src["runs"][()]
        rows = conform(raw)
        old_ids = rows["run_id"].copy()
        rows["run_id"] = np.arange(first_id, first_id + len(rows))
        runs = dst["runs"]
        runs.resize((first_id + len(rows),))
        if len(rows):
            runs[first_id:] = rows
        detail = src.get("detail")
        for old, new in zip(old_ids, rows["run_id"]):
            name = f"{int(old):06d}"
            if detail is not None and name in detail:
                src.copy(detail[name], dst["detail"], name=f"{int(new):06d}")
            else:
                dst["detail"].create_group(f"{int(new):06d}")
            g = dst["detail"][f"{int(new):06d}"]
            g.attrs["merged_from"] = json.dumps({"source": source, "run_id": int(old)})
    return first_id + len(rows)
