"""`hybridsched merge`: studies (one per Slurm job, say) combined into one."""
from __future__ import annotations

import sys

from ..results.merge import merge


def main(args) -> int:
    counts = merge(args.files, args.out, args.overwrite)
    what = ", ".join([f"{counts['runs']} runs"] + [f"{n} {t} rows" for t, n in counts.items()
                                                   if t != "runs"])
    print(f"{what} from {len(args.files)} file{'s' * (len(args.files) != 1)} written to {args.out}", file=sys.stderr)
    return 0
