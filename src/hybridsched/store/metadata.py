"""The machine's metadata a study stores as ``machine.<key>`` attributes, every key declared
once: its type, how it is kept in the file, and how ``run --resume`` compares the stored
value with this machine's (pyperf's table of metadata keys is the model). The collector
(:mod:`machine.metadata`) makes values of these types, the writer stores them
(:func:`stored`), the reader gives them back typed (:func:`typed`, ``StudyFile.machine``)
and ``--resume`` compares by the table (:func:`resume_differences`). A key not declared
here (a later hybridsched's) is kept and read as it was stored, and never compared.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from ..errors import BadStudy

PREFIX = "machine."


class Resume(Enum):
    """How a resumed study compares a key's stored value with this machine's."""

    EQUAL = "equal"    # runs are comparable only on a machine where it is the same
    IGNORE = "ignore"  # describes one invocation (the load, a library's version): may differ


def _int(v: Any) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):  # numpy's ints have __index__
        raise TypeError("not an integer")
    return int(v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("not text")
    return v


def _json(v: Any) -> Any:
    return json.loads(_text(v))


def _int_or_none(v: Any) -> int | None:
    return None if isinstance(v, str) and v == "null" else _int(v)


@dataclass(frozen=True)
class Kind:
    """How values of one type are kept in an HDF5 attribute and read back."""

    name: str
    store: Callable[[Any], Any]   # a value of the type -> what the attribute holds
    read: Callable[[Any], Any]    # what the attribute holds -> the value (TypeError, ValueError)


INT = Kind("an integer", _int, _int)
TEXT = Kind("text", _text, _text)
# lists of numbers and the like: JSON text in the file ("null" for None)
JSON = Kind("JSON text", lambda v: json.dumps(v), _json)
# an integer, None where not known ("null" in the file)
INT_OR_NONE = Kind("an integer or null", lambda v: "null" if v is None else _int(v), _int_or_none)


@dataclass(frozen=True)
class Key:
    """One metadata key: its kind, how --resume compares it, and what it says."""

    name: str
    kind: Kind
    resume: Resume
    doc: str


_E, _I = Resume.EQUAL, Resume.IGNORE
METADATA: dict[str, Key] = {k.name: k for k in (
    Key("N", INT, _E, "usable CPUs when the study ran: the N of k_eff = min(k, N)"),
    Key("cpus_usable", INT, _E, "CPUs this process may run on"),
    Key("cpu_model", TEXT, _E, "the CPU's model name"),
    Key("hostname", TEXT, _I, "the machine's name"),
    Key("cpu_count_logical", INT, _I, "logical CPUs of the machine"),
    Key("cpu_count_physical", INT, _I, "physical cores of the machine"),
    Key("memory_bytes", INT, _I, "the machine's memory"),
    Key("kernel", TEXT, _I, "the kernel's release"),
    Key("platform", TEXT, _I, "platform.platform()"),
    Key("loadavg_at_start", TEXT, _I, "the load average when the study started"),
    Key("loadavg_at_resume", TEXT, _I, "the load average when it was last resumed"),
    *(Key(lib, TEXT, _I, f"{lib}'s version") for lib in (
        "python", "hybridsched", "numpy", "numba", "h5py", "hdf5", "psutil", "mpi4py")),
    Key("mpi_launcher", TEXT, _I, "the launcher the environment names"),
    Key("mpi_implementation", TEXT, _I, "the MPI library's name"),
    Key("mpi_version", TEXT, _I, "its version"),
    Key("mpi_standard", TEXT, _I, "the MPI standard it implements"),
    Key("mpi_library", TEXT, _I, "the first line of its banner"),
    Key("mpi_vendor", TEXT, _I, "name and version in one, as older studies have it"),
    # the static facts of `hybridsched check` (machine.probes.Facts) and run's load probe
    Key("check_cpus", JSON, _I, "the usable CPUs' numbers"),
    Key("check_governor", TEXT, _I, "the CPU frequency governor"),
    Key("check_boost", TEXT, _I, "whether frequency boost is on"),
    Key("check_smt", JSON, _I, "hyperthread sibling groups (null: not known)"),
    Key("check_cores_usable", INT, _I, "usable CPUs less hyperthread siblings"),
    Key("check_load", JSON, _I, "other processes' share of the CPUs, per probe window"),
    Key("check_mem_available", INT, _I, "available memory"),
    Key("check_shm_free", INT_OR_NONE, _I, "free shared memory (null: not known)"),
    Key("check_planned_bytes", INT, _I, "original + work copy of the planned tensor"),
)}


def stored(meta: dict) -> dict:
    """``meta`` (key -> value) as the attributes a study keeps (``machine.<key>`` -> value):
    declared keys in their kind's form; a value that is in that form already (one read
    back from a study, which a merge copies as it found it) and undeclared keys as they
    are."""
    out = {}
    for key, value in meta.items():
        info = METADATA.get(key)
        if info is not None:
            try:
                value = info.kind.store(value)
            except (TypeError, ValueError):
                pass  # not of the declared type: a value copied from a file, kept as it was
        out[PREFIX + key] = value
    return out


def typed(path: str, attrs: dict) -> dict:
    """The machine's metadata among a study's root ``attrs`` (decoded), each declared key
    as a value of its type; BadStudy naming the first that is not."""
    out = {}
    for name, value in attrs.items():
        if not name.startswith(PREFIX):
            continue
        key = name[len(PREFIX):]
        info = METADATA.get(key)
        if info is not None:
            try:
                value = info.kind.read(value)
            except (TypeError, ValueError, RecursionError):
                raise BadStudy(f"{path}: attribute {name} {str(value)[:40]!r} is not "
                               f"{info.kind.name}") from None
        out[key] = value
    return out


def resume_differences(stored_meta: dict, here: dict) -> list[str]:
    """The declared keys a resumed study must share (Resume.EQUAL) whose value differs
    between the study's typed metadata and this machine's (keys either lacks are not
    compared: an older study did not record them)."""
    return [key for key, info in METADATA.items()
            if info.resume is Resume.EQUAL and key in stored_meta and key in here
            and stored_meta[key] != here[key]]
