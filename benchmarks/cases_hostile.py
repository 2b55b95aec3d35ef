"""Issue 23's hostile-user case list, kept so the next run can repeat it:

    python benchmarks/cases_hostile.py [--area A] [--list] [--quick] [--name SUBSTRING]

The cases live in ``benchmarks/hostile/<area>.py`` (areas: api, run, colocate, ge, files,
mpi, concurrency), each a function ``case(tmp: Path) -> str | None`` registered with
:func:`hostile.common.case`: None when the package did what its contract says, else what
went wrong. The contract: bad input is one line on stderr starting with "hybridsched" and
exit status 2 (the API: one UsageError line), never a traceback, and nothing left behind;
0 when everything ran and verified; 1 when a run, job or rank failed, saying why; 130/143
for SIGINT/SIGTERM. After every case the runner checks what it may have leaked: our
/dev/shm segments (hybridsched.* of a dead creator, the coop segment), child processes and
zombies. MPICH's own /dev/shm/mpich_shm_* files after a killed MPI job are documented
(README, "Distributed runs") and not counted.

Prints one line per case, ``PASS|FAIL|SKIP area name: detail``, then the counts per area.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile import common  # noqa: E402
from hostile import api, colocate, concurrency, files, ge, mpi, run  # noqa: E402,F401
from hostile import docs, issue33, signals, simulate, techniques  # noqa: E402,F401

AREAS = ("api", "run", "colocate", "ge", "files", "mpi", "concurrency", "techniques",
         "simulate", "signals", "docs")


def _mapped(path: str) -> bool:
    """Whether a live process maps ``path`` (the per-user coop segment is shared by every
    hybridsched of the user: other sessions on the machine may be using it now)."""
    import glob

    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as fh:
                if path in fh.read():
                    return True
        except OSError:
            continue
    return False


def _leaks(before: set[str]) -> str:
    """What the case left: new segments whose creator is gone, the coop segment, children."""
    import psutil

    from hybridsched.oslayer.procfs import pid_alive
    from hybridsched.oslayer.shm import our_shm_entries

    time.sleep(0.05)
    out = []
    for name in sorted(set(our_shm_entries()) - before):
        pid = int(name.split(".")[1])
        if pid != os.getpid() and not pid_alive(pid):
            out.append(f"/dev/shm/{name}")
    coop = f"/dev/shm/hybridsched-coop.{os.getuid()}"
    if os.path.exists(coop) and not _mapped(coop):  # one mapped is another session's, live
        out += [p for p in (coop, coop + ".lock") if os.path.exists(p)]
    deadline = time.monotonic() + 3
    while True:
        kids = [c for c in psutil.Process().children(recursive=True) if c.is_running()]
        if not kids or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    out += [f"process {c.pid} ({c.status()}: {' '.join(c.cmdline()[:4])})" for c in kids]
    return "; ".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--area", choices=AREAS, action="append", help="only these areas")
    ap.add_argument("--name", help="only cases whose name contains this")
    ap.add_argument("--list", action="store_true", help="print the case list and stop")
    ap.add_argument("--quick", action="store_true", help="every fourth case")
    args = ap.parse_args(argv)
    cases = [c for c in common.CASES if (not args.area or c.area in args.area)
             and (not args.name or args.name in c.name)]
    if args.quick:
        cases = cases[::4]
    if args.list:
        for c in cases:
            print(f"{c.area:<12} {c.name}: {c.doc}")
        print(f"{len(cases)} cases")
        return 0
    from hybridsched.oslayer.shm import our_shm_entries

    counts: dict[str, list[int]] = {a: [0, 0, 0] for a in AREAS}
    t0 = time.monotonic()
    for c in cases:
        before = set(our_shm_entries())
        with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
            try:
                problem = c.fn(Path(tmp))
            except common.Skip as exc:
                print(f"SKIP {c.area} {c.name}: {exc}", flush=True)
                counts[c.area][2] += 1
                continue
            except Exception:  # noqa: BLE001 - the case's own check blew up: a failure
                problem = "the case raised: " + traceback.format_exc().strip().splitlines()[-1]
        leaked = _leaks(before)
        if leaked:
            problem = (problem + "; " if problem else "") + f"left behind: {leaked}"
        counts[c.area][0 if not problem else 1] += 1
        print(f"{'PASS' if not problem else 'FAIL'} {c.area} {c.name}" + (f": {problem}" if problem else ""),
              flush=True)
    print(f"\n{len(cases)} cases in {time.monotonic() - t0:.0f} s")
    print("| area | pass | fail | skipped |\n|---|---:|---:|---:|")
    for a, (p, f, s) in counts.items():
        if p or f or s:
            print(f"| {a} | {p} | {f} | {s} |")
    total = [sum(v[i] for v in counts.values()) for i in range(3)]
    print(f"| all | {total[0]} | {total[1]} | {total[2]} |")
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
