"""What several subcommands share: the output file's name, the test hooks' check, and
what `run` loads before any fork (at P = 1 and on every MPI rank)."""
from __future__ import annotations

import time

from ..kernels import KERNELS, prepare as load_kernels
from ..backends import compiled
from ..errors import ResourceError, UsageError
from ..machine.probes import LoadCheck
from ..oslayer.cpus import usable_cpus
from ..mpi.ranks import rank_hooks
from ..oslayer.proctree import fault_plan
from ..records import RunConfig
from ..study.spec import StudySpec

from .args import PROG  # noqa: F401  (re-exported: the one definition is args.PROG)


def out_name(out: str | None, stem: str = "hybridsched") -> str:
    """--out as given (an empty name refused), else a fresh ``<stem>-<time>.h5``."""
    if out is None:
        return time.strftime(f"{stem}-%Y%m%d-%H%M%S.h5")
    if not out.strip():
        raise UsageError("--out: an empty file name")
    return out


def check_test_hooks() -> None:
    """Refuse a malformed test hook (HYBRIDSCHED_FAULT, the MPI ones) before the first run,
    not at it."""
    try:
        fault_plan()
        rank_hooks()
    except ResourceError as exc:
        raise UsageError(str(exc)) from None


def load(spec: StudySpec, configs: list[RunConfig]) -> None:
    """Before any worker or fork exists: the built-in kernel and, when a run may use it, the
    compiled dispatch loop (a user's or a workload's kernel is compiled with its workspace,
    workloads.build)."""
    load_kernels(spec.kernel if spec.kernel in KERNELS else "",
                 loop=compiled.wanted(configs))


def load_checked(spec: StudySpec, configs: list[RunConfig], probe: LoadCheck | None = None) -> dict:
    """:func:`load` while the machine's load is sampled (`run` at P = 1 and on MPI rank 0):
    the metadata they add to the study (the load windows, warned about once if the machine
    looks shared, and the planned tensor's bytes). ``probe``: one already sampling (`run`
    at P = 1 starts it before its imports); none: one starts now, the input being good."""
    if probe is None:
        with LoadCheck(usable_cpus()) as own:
            return load_checked(spec, configs, own)
    load(spec, configs)
    return {"check_load": probe.result(),
            "check_planned_bytes": 2 * max(spec.frames) * spec.height * spec.width}
