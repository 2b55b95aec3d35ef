"""The `run` options of issue 12 (--kernel, --input, --verify, --workload): their
definitions and how they enter a StudySpec, kept here so cli.py only calls two functions."""
from __future__ import annotations

import argparse

from ..errors import UsageError

# The longest name a run row stores (store.format: kernel and verify are 120 bytes).
MAX_REF = 120


def add_arguments(r: argparse.ArgumentParser) -> None:
    from ..kernels import KERNELS
    from .catalogue import WORKLOADS

    r.add_argument("--kernel", metavar="NAME|MODULE:FUNCTION",
                   help="chunk kernel (default: quicksort): "
                   + "; ".join(f"{k}: {d}" for k, (_, d) in KERNELS.items())
                   + "; or your own package.module:function, fn(data, first, count) or "
                   "fn(task), imported and compiled before any fork")
    r.add_argument("--input", metavar="FILE.npy",
                   help="the tasks from a .npy array (first axis) instead of the generator; "
                   "its sha256 is stored with every run (default: none, the generator)")
    r.add_argument("--verify", metavar="MODULE:FUNCTION|none",
                   help="verifier fn(original, result) -> bool, or none to store runs as "
                   "unverified by choice (default: the workload's own check)")
    r.add_argument("--workload", metavar="NAME[:KEY=V,...]",
                   help="tasks and their cost (default: uniform): "
                   + "; ".join(f"{n}: {w.description}" for n, w in WORKLOADS.items())
                   + "; parameters after a colon, e.g. heavytail:alpha=1.2")


def apply(args, spec) -> None:
    """Put the options into ``spec`` (validated later with the rest of it)."""
    from .catalogue import file_hash, input_dims, load_input, parse

    for opt in ("kernel", "verify"):
        v = getattr(args, opt, None)
        if v is not None and len(v.encode()) > MAX_REF:
            raise UsageError(f"--{opt}: names longer than {MAX_REF} bytes cannot be stored")
    if args.kernel is not None:
        spec.kernel = args.kernel
    if args.verify is not None:
        spec.verify = args.verify
    if args.workload is not None:
        spec.workload, spec.workload_params = parse(args.workload)
        from .catalogue import get

        if args.kernel is not None and not get(spec.workload).sort:
            raise UsageError(f"--workload {spec.workload} computes its own tasks with its own "
                             f"kernel; --kernel {args.kernel} does not apply")
    if args.input is not None:
        arr = load_input(args.input)
        L, H, W = input_dims(arr.shape)
        if args.frames is not None and args.frames != [L]:
            raise UsageError(f"--input {args.input} holds {L} tasks; --frames must be {L} or left out")
        if args.height is not None or args.width is not None:
            raise UsageError("--input gives the shape; leave out --height and --width")
        spec.input, spec.input_hash = args.input, file_hash(args.input)
        spec.frames, spec.height, spec.width = [L], H, W
