"""The metadata stored with every study (pyperf's collector, once for every writer): the
machine, the software, the MPI launch, and the static facts of `hybridsched check`."""
from __future__ import annotations

import platform
import re
import socket
import sys

from ..oslayer.cpus import n_cpus
from ..oslayer.procfs import cpu_model
from ..version import __version__
from .launch import detect_launch
from .probes import facts, metadata

# The longest text stored for one fact: the first line of a library's banner (Open MPI's
# is ~115 characters) fits, and a runaway value (a hostname or an environment variable
# holding a whole file) cannot bloat every study's attributes.
TEXT_LIMIT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean_text(value: object, limit: int = TEXT_LIMIT) -> str:
    """A string from a library or the environment as a study may store it: NULs dropped
    (HDF5's strings cannot hold them; Open MPI's library version ends in one), other
    control characters (newlines, tabs, escapes) and runs of blanks as one space, and at
    most ``limit`` characters."""
    text = str(value).replace("\0", "")
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text[:limit]


def machine_metadata() -> dict:
    """Description of this machine and software, stored as HDF5 attributes (pyperf style):
    the keys and types that store.metadata declares."""
    import h5py
    import numba
    import numpy
    import psutil

    meta: dict = {
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
    # names and versions come from the kernel, the libraries and the environment
    meta = {k: clean_text(v) if isinstance(v, str) else v for k, v in meta.items()}
    meta.update(mpi_metadata())
    # the static facts of `hybridsched check` (numbers and JSON lists of them: never cut);
    # the load is sampled once by `run` itself
    meta.update(metadata(facts(sample_load=False)))
    return meta


def mpi_metadata() -> dict[str, str]:
    """The MPI implementation, its version and library banner (once MPI is initialised:
    never initialised here) and the launcher the environment names; {} for a plain
    P = 1 run. Every value is :func:`clean_text`."""
    out: dict[str, str] = {}
    launch = detect_launch()
    if launch is not None:
        out["mpi_launcher"] = launch.how
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized():
        name, version = mpi.get_vendor()
        lib = clean_text(mpi.Get_library_version().split("\n", 1)[0])
        out["mpi_implementation"] = name
        out["mpi_version"] = ".".join(map(str, version))
        out["mpi_standard"] = "{}.{}".format(*mpi.Get_version())
        out["mpi_library"] = lib or "unknown"
        out["mpi_vendor"] = f"{name} {out['mpi_version']}"  # both in one, as older studies have it
    return {k: clean_text(v) for k, v in out.items()}
