"""How this process was started: the MPI launcher's environment, read before MPI is
initialised (``import mpi4py.MPI`` initialises it, which a plain P = 1 run must not do)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

# Environment variables that launchers set for every rank: (size variable, rank variable).
_LAUNCHERS = (
    ("PMI_SIZE", "PMI_RANK", "mpiexec (PMI: MPICH hydra, Intel MPI, srun --mpi=pmi2)"),
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)"),
    ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "srun (Slurm job step)"),
    ("PMIX_SIZE", "PMIX_RANK", "PMIx launcher"),
)

# Set to 1 to ignore any launcher and run as P = 1 (e.g. a serial post-processing step
# inside an allocation); documented in docs/cli.md and docs/mpi.md.
NO_MPI_ENV = "HYBRIDSCHED_NO_MPI"


@dataclass(frozen=True)
class Launch:
    """What the environment says about how we were started."""

    size: int | None     # ranks in the job; None when a launcher is present but silent about it
    rank: int | None
    how: str             # which launcher, for messages

    @property
    def parallel(self) -> bool:
        return self.size is None or self.size > 1


def detect_launch(env: Mapping[str, str] | None = None) -> Launch | None:
    """The launcher we run under, from its environment variables; None when none is.

    A launcher that started a single rank counts as none: P = 1 needs no MPI at all.
    """
    env = os.environ if env is None else env
    if env.get(NO_MPI_ENV, "") not in ("", "0"):
        return None
    for size_var, rank_var, how in _LAUNCHERS:
        # SLURM_PROCID is also set in a batch script's own shell, which is no launch
        if size_var in env or (rank_var in env and not rank_var.startswith("SLURM_")):
            size = _int_or_none(env.get(size_var))
            if size is None and size_var == "PMIX_SIZE":
                size = _int_or_none(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS"))
            launch = Launch(size, _int_or_none(env.get(rank_var)), how)
            return launch if launch.parallel else None
    return None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
