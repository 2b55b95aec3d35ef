"""`hybridsched run`: one study, written run by run to HDF5 (P = 1: :mod:`.run_single`;
under mpiexec the ranks' flow is :mod:`.run_mpi`).

At P = 1 the machine's load is sampled first (machine.probes.LoadCheck, 0.4 s of waiting in
a thread of its own) and the study's modules are imported after it started: numba's, the
store's and ours take longer than its windows, so they hide its wait instead of following it."""
from __future__ import annotations

from ..machine.probes import LoadCheck
from ..mpi.ranks import Solo, world
from ..oslayer.cpus import usable_cpus


def main(args) -> int:
    w = world()  # P = 1 (no MPI at all) unless mpiexec/mpirun/srun started several ranks
    if not isinstance(w, Solo):  # is_mpi
        from .run_mpi import main_mpi

        return main_mpi(args, w)
    with LoadCheck(usable_cpus()) as probe:  # stopped at once if the input turns out bad
        from .run_single import single

        return single(args, probe)
