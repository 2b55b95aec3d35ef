"""One run as a Chrome Trace Event file (the JSON object form), which the Perfetto UI and
chrome://tracing open.

Mapping: an MPI rank is a process (pid = rank + 1; one process at P = 1), a worker a thread
(tid = worker id), each chunk a complete event (ph "X") named by its frames with ``first``
and ``count`` in args, worker lifetimes as metadata names, and counters (ph "C") for the
number of workers busy in a chunk and for each stored series (AIMD's window and U).
Timestamps are microseconds since the run's start, as the format wants.
"""
from __future__ import annotations

import json
import math

import numpy as np

from .timeline import RunTrace

_US = 1e6


def _pid(rt: RunTrace, worker: int) -> int:
    return (worker // rt.k if rt.P > 1 and rt.k > 0 else 0) + 1


def _busy_counter(rt: RunTrace) -> list[dict]:
    """Workers inside a chunk over time: +1 at each start, -1 at each end."""
    tr = rt.detail.trace
    edges = [(float(s), 1) for s in tr["start"]] + [(float(e), -1) for e in tr["end"]]
    edges.sort(key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    out, n = [], 0
    for t, d in edges:
        n += d
        out.append({"name": "busy workers", "ph": "C", "pid": 1, "ts": t * _US,
                    "args": {"busy": n}})
    return out


def chrome_trace(rt: RunTrace) -> dict:
    """The trace of one run as a JSON-ready dict."""
    ev: list[dict] = []
    pids = sorted({_pid(rt, w) for w in rt.lanes}) or [1]
    host = rt.detail.extra.get("rank_host") or []
    for p in pids:
        name = (f"rank {p - 1}" + (f" on {host[p - 1]}" if p - 1 < len(host) else "")
                if rt.P > 1 else f"{rt.scheduler} k={rt.k}")
        ev.append({"name": "process_name", "ph": "M", "pid": p, "args": {"name": name}})
    cpu = {int(w["worker"]): int(w["cpu"]) for w in rt.detail.workers}
    for w in rt.lanes:
        lab = rt.lane_label(w) + (f" (cpu {cpu[w]})" if cpu.get(w, -1) >= 0 else "")
        ev.append({"name": "thread_name", "ph": "M", "pid": _pid(rt, w), "tid": w,
                   "args": {"name": lab}})
        ev.append({"name": "thread_sort_index", "ph": "M", "pid": _pid(rt, w), "tid": w,
                   "args": {"sort_index": w}})
    for r in rt.detail.trace:
        first, count, w = int(r["first"]), int(r["count"]), int(r["worker"])
        ev.append({"name": f"frames {first}–{first + count - 1}", "cat": "chunk", "ph": "X",
                   "pid": _pid(rt, w), "tid": w, "ts": float(r["start"]) * _US,
                   "dur": max(float(r["end"] - r["start"]), 0.0) * _US,
                   "args": {"first": first, "count": count}})
    ev += _busy_counter(rt)
    for name, arr in sorted(rt.detail.series.items()):
        names = arr.dtype.names or ()
        cols = [c for c in names if c != "t" and arr.dtype[c].kind in "iuf"]
        if "t" not in names or not cols:
            continue
        for row in arr:
            args = {c: (float(row[c]) if arr.dtype[c].kind == "f" else int(row[c])) for c in cols}
            if all(math.isfinite(v) for v in args.values()):
                ev.append({"name": name, "ph": "C", "pid": 1, "ts": float(row["t"]) * _US,
                           "args": args})
    for label, t in (("run start", 0.0), ("last worker ends", rt.end_s)):
        ev.append({"name": label, "ph": "i", "s": "g", "pid": 1, "tid": 0, "ts": t * _US})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"run_id": rt.run_id, "scheduler": rt.scheduler, "family": rt.family,
                          "P": rt.P, "k": rt.k, "L": rt.L, "rep": rt.rep,
                          "time_s": rt.time_s if math.isfinite(rt.time_s) else None}}


def write(rt: RunTrace, path: str) -> str:
    """Write the run's trace to ``path`` (by rename; strict JSON)."""
    from ..store import write_text

    data = chrome_trace(rt)
    write_text(path, lambda fh: json.dump(data, fh, allow_nan=False, default=_plain))
    return path


def _plain(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON: {type(obj).__name__}")
