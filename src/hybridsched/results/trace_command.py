"""`hybridsched trace FILE.h5`: one run's timeline as a Gantt PNG and a Perfetto trace."""
from __future__ import annotations

import os
import sys

from ..argtypes import _nonnegative_int, _positive


def add_parser(sub) -> None:
    tr = sub.add_parser("trace", help="one run's timeline: a Gantt PNG and a Perfetto / "
                        "chrome://tracing JSON")
    tr.add_argument("file", metavar="FILE.h5")
    tr.add_argument("--run", type=_nonnegative_int("--run"), metavar="ID",
                    help="the run_id (see /runs) (default: the first verified run, lowest rep, "
                    "matching the options below)")
    tr.add_argument("-s", "--scheduler", help="scheduler of the run (default: any)")
    tr.add_argument("-k", type=_positive("-k"), help="workers k (default: any)")
    tr.add_argument("--frames", "-L", type=_positive("--frames"), help="L (default: any)")
    tr.add_argument("--rep", type=_nonnegative_int("--rep"), help="repetition (default: the lowest)")
    tr.add_argument("--png", metavar="OUT.png",
                    help="Gantt chart (default, with neither --png nor --perfetto: "
                    "<stem>_report/trace_run<ID>.png beside FILE)")
    tr.add_argument("--perfetto", metavar="OUT.json",
                    help="Chrome Trace Event JSON for ui.perfetto.dev or chrome://tracing "
                    "(default as for --png, .json)")
    tr.add_argument("--overwrite", action="store_true",
                    help="replace an existing --png/--perfetto file (default: refuse; the "
                    "default files in <stem>_report/ are always replaced, as report's are)")
    tr.set_defaults(func=cmd_trace)


def cmd_trace(args) -> int:
    from ..store import check_output, our_directory, read_runs
    from . import metrics, perfetto, timeline
    from .files import default_out_dir

    from ..errors import UsageError

    given = [o for o, v in (("-s", args.scheduler), ("-k", args.k), ("-L", args.frames),
                            ("--rep", args.rep)) if v is not None]
    if args.run is not None and given:
        raise UsageError(f"--run selects one run by its id: give it alone, not with {', '.join(given)}")
    runs = read_runs(args.file)
    row = timeline.select(runs, args.run, args.scheduler, args.k, args.frames, args.rep)
    png, js = args.png, args.perfetto
    if png is None and js is None:
        out_dir = default_out_dir(args.file)
        stem = os.path.join(out_dir, f"trace_run{int(row['run_id'])}")
        png, js = stem + ".png", stem + ".json"
    else:
        out_dir = None
    for path, what in ((png, "--png"), (js, "--perfetto")):
        if path is not None and out_dir is None:
            check_output(path, what)  # a regular file or nothing: never a device or FIFO
            if os.path.lexists(path) and not args.overwrite:
                raise UsageError(f"{what} {path}: file exists (use --overwrite to replace it)")
    rt = timeline.load(args.file, row)
    if out_dir is not None:
        our_directory(out_dir)
    written = []
    try:
        if png is not None:
            written.append(timeline.gantt(rt, png))
        if js is not None:
            written.append(perfetto.write(rt, js))
    except OSError as exc:
        raise UsageError(f"{exc.filename or png or js}: {exc.strerror or exc}") from None
    imb = metrics.load_imbalance(rt.detail.workers)
    print(f"{rt.title}: {len(rt.detail.trace)} chunks on {len(rt.lanes)} workers, "
          f"T = {rt.time_s * 1e3:.3f} ms, last worker ends at {rt.end_s * 1e3:.3f} ms, "
          f"load imbalance {'—' if imb != imb else f'{imb:.3f}'}")
    for p in written:
        print(p)
    print(f"hybridsched: {len(written)} files written", file=sys.stderr)
    return 0
