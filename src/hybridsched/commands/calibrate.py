"""`hybridsched calibrate`: measure this machine's scheduling overheads into a JSON file
that `simulate --calibration` reads."""
from __future__ import annotations

import json
import os
import sys
import time

from ..errors import UsageError
from ..store import single_output
from ..sim.calibrate import calibrate
from ..store.metadata import PREFIX, stored
from ..study.output import this_machine

from .args import PROG  # noqa: F401  (re-exported: the one definition is args.PROG)


def main(args) -> int:
    out = args.out
    if not out.strip():
        raise UsageError("--out: an empty file name")
    # a writable directory, not a link, a directory or a study being written: before measuring
    with single_output(out, "--out", args.overwrite):
        return _calibrate(args, out)


def _calibrate(args, out: str) -> int:
    t0 = time.perf_counter()
    ov = calibrate(args.width, lambda text: print(f"{PROG}: calibrating {text}", file=sys.stderr))
    meta = {k[len(PREFIX):]: v for k, v in stored(this_machine()).items()
            if isinstance(v, (str, int, float))}
    data = {"format": "hybridsched-calibration", "version": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": meta,
            "overheads": ov.to_dict()}
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for key, value in ov.to_dict().items():
        if isinstance(value, tuple):  # a figure per k
            print(f"{key:<20} " + (" ".join(f"{v:.4g}" for v in value) or "-"))
        else:
            print(f"{key:<20} {value:.4g}")
    print(f"\ncalibration written to {out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0
