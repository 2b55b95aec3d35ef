"""What several subcommands share: the output file's name, the test hooks' check, and
what `run` loads before any fork (at P = 1 and on every MPI rank)."""
from __future__ import annotations

import time

from ..kernels import KERNELS, prepare as load_kernels
from ..backends import compiled
from ..errors import ResourceError, UsageError
from ..oslayer.proctree import fault_plan
from ..records import RunConfig
from ..study.spec import StudySpec

PROG = "hybridsched"


def out_name(out: str | None, stem: str = "hybridsched") -> str:
    """--out as given (an empty name refused), else a fresh ``<stem>-<time>.h5``."""
    if out is None:
        return time.strftime(f"{stem}-%Y%m%d-%H%M%S.h5")
    if not out.strip():
        raise UsageError("--out: an empty file name")
    return out


def check_test_hooks() -> None:
    """Refuse a malformed test hook (HYBRIDSCHED_FAULT) before the first run, not at it."""
    try:
        fault_plan()
    except ResourceError as exc:
        raise UsageError(str(exc)) from None


def load(spec: StudySpec, configs: list[RunConfig]) -> None:
    """Before any worker or fork exists: the built-in kernel and, when a run may use it, the
    compiled dispatch loop (a user's or a workload's kernel is compiled with its workspace,
    workloads.build)."""
    load_kernels(spec.kernel if spec.kernel in KERNELS else "",
                 loop=compiled.wanted(configs))
