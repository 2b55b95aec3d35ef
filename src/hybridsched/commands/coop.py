"""`hybridsched coop exec [--] CMD ...`: one unmodified command as a job of the node's
cooperative arbiter; the command's exit status is ours."""
from __future__ import annotations

import os
import sys

from ..coop.arbiter import check_quantum
from ..coop.launch import exec_command
from ..errors import UsageError
from .args import PROG


def main(args) -> int:
    argv = list(args.cmd)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError(f"{PROG} coop exec: a command is required ({PROG} coop exec [--] CMD ...)")
    if args.segment is not None and not args.segment.strip():
        raise UsageError(f"{PROG} coop exec: --segment: an empty path (leave it out for the node's)")
    if args.segment is not None and not os.path.dirname(os.path.abspath(args.segment)).strip("/"):
        # `/name` is shm_open's spelling of /dev/shm/name: as a path it made a file at the
        # root of the file system (the review)
        raise UsageError(f"{PROG} coop exec: --segment {args.segment}: a file at the root of "
                         f"the file system; name one in /dev/shm "
                         f"(/dev/shm/{os.path.basename(args.segment)}) or "
                         "another folder")
    quantum_s = None if args.quantum_ms is None else args.quantum_ms / 1e3
    if quantum_s is not None:
        check_quantum(quantum_s)
    result = exec_command(argv, segment=args.segment, quantum_s=quantum_s, keep_env=args.keep_env)
    if args.counters:
        print(f"{PROG} coop: " + ", ".join(f"{k} {v}" for k, v in result.counters.as_dict().items()),
              file=sys.stderr)
    return result.status
