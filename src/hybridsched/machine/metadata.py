"""The metadata stored with every study (pyperf's collector, once for every writer): the
machine, the software, the MPI launch, and the static facts of `hybridsched check`."""
from __future__ import annotations

import platform
import socket
import sys

from ..oslayer.cpus import n_cpus
from ..oslayer.procfs import cpu_model
from ..version import __version__
from .launch import detect_launch
from .probes import facts, metadata


def machine_metadata() -> dict[str, str | int]:
    """Description of this machine and software, stored as HDF5 attributes (pyperf style)."""
    import h5py
    import numba
    import numpy
    import psutil

    meta: dict[str, str | int] = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count_logical": psutil.cpu_count(logical=True) or 0,
        "cpu_count_physical": psutil.cpu_count(logical=False) or 0,
        "cpus_usable": n_cpus(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "hybridsched": __version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "psutil": psutil.__version__,
    }
    try:
        import mpi4py

        meta["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    meta.update(mpi_metadata())
    # the static facts of `hybridsched check`; the load is sampled once by `run` itself
    meta.update(metadata(facts(sample_load=False)))
    return meta


def mpi_metadata() -> dict[str, str]:
    """The MPI library (once MPI is initialised: never initialised here) and the launcher
    the environment names; {} for a plain P = 1 run."""
    out: dict[str, str] = {}
    launch = detect_launch()
    if launch is not None:
        out["mpi_launcher"] = launch.how
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized():
        lib = mpi.Get_library_version().strip().splitlines()
        out["mpi_library"] = lib[0][:200] if lib else "unknown"
        out["mpi_vendor"] = "{} {}".format(mpi.get_vendor()[0], ".".join(map(str, mpi.get_vendor()[1])))
    return out
