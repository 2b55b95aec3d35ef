"""`hybridsched fit`: Amdahl, Gustafson or USL over N = P x k."""
from __future__ import annotations

import json
import sys

from ..results import fit, fitplot


def main(args) -> int:
    data = fit.load(args.file, args.scheduler, args.frames)
    if args.cores:
        data.cores = args.cores
    res = fit.fit(data, args.model)
    if args.plot:
        fitplot.plot(res, args.plot, args.file)
    if args.json:
        print(json.dumps(fit.jsonable(res), indent=2, allow_nan=False))
    else:
        print(fit.text(res))
        if args.plot:
            print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
