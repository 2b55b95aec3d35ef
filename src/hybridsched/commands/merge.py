"""`hybridsched merge`: studies (one per Slurm job, say) combined into one."""
from __future__ import annotations

import sys

from ..results.merge import merge


def main(args) -> int:
    n = merge(args.files, args.out, args.overwrite)
    print(f"{n} runs from {len(args.files)} files written to {args.out}", file=sys.stderr)
    return 0
