"""`hybridsched trace FILE.h5`: one run's timeline as a Gantt PNG and a Perfetto trace."""
from __future__ import annotations

import contextlib
import os
import sys

from ..errors import UsageError
from ..results import metrics, perfetto, timeline
from ..results.files import default_out_dir
from ..store import our_directory, read_runs, single_output


def main(args) -> int:
    given = [o for o, v in (("-s", args.scheduler), ("-k", args.k), ("-L", args.frames),
                            ("--rep", args.rep)) if v is not None]
    if args.run is not None and given:
        raise UsageError(f"--run selects one run by its id: give it alone, not with {', '.join(given)}")
    runs = read_runs(args.file)
    if not len(runs):
        raise UsageError(f"{args.file}: the study holds no runs to trace (a `ge` or `colocate` "
                         "study has only its own table; `hybridsched report` shows it)")
    row = timeline.select(runs, args.run, args.scheduler, args.k, args.frames, args.rep)
    png, js = args.png, args.perfetto
    if png is None and js is None:
        out_dir = default_out_dir(args.file)
        stem = os.path.join(out_dir, f"trace_run{int(row['run_id'])}")
        png, js = stem + ".png", stem + ".json"
    else:
        out_dir = None
    with contextlib.ExitStack() as outputs:
        for path, what in ((png, "--png"), (js, "--perfetto")):
            if path is not None and out_dir is None:  # a regular file or nothing, not the
                # input, not a study being written: never a device or FIFO
                outputs.enter_context(single_output(path, what, args.overwrite, (args.file,)))
        rt, written = _write(args.file, row, png, js, out_dir)
    imb = metrics.load_imbalance(rt.detail.workers)
    print(f"{rt.title}: {len(rt.detail.trace)} chunks on {len(rt.lanes)} workers, "
          f"T = {rt.time_s * 1e3:.3f} ms, last worker ends at {rt.end_s * 1e3:.3f} ms, "
          f"load imbalance {'—' if imb != imb else f'{imb:.3f}'}")
    for p in written:
        print(p)
    print(f"hybridsched: {len(written)} file{'s' if len(written) != 1 else ''} written", file=sys.stderr)
    return 0


def _write(study: str, row, png: str | None, js: str | None,
           out_dir: str | None) -> tuple[timeline.RunTrace, list[str]]:
    """The run's trace loaded, and the files written from it."""
    rt = timeline.load(study, row)
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
    return rt, written
