"""Opening a new study file, the one way every writer does it (`run` at P = 1 and under
MPI, `ge`, `colocate`, `merge`, ``write_study``): the study's lock taken before anything is
looked at, an existing file refused unless replaced on purpose, and the machine's metadata
(:func:`this_machine`) stored with it."""
from __future__ import annotations

import os

from ..machine.metadata import machine_metadata
from ..oslayer.cpus import n_cpus
from ..store import StudyLock, StudyWriter, open_new


def this_machine(**extra) -> dict:
    """The metadata of this machine as a new study stores it: :func:`machine_metadata`,
    N (the usable CPUs: the N of k_eff = min(k, N) and of the presets) and the load average
    at the start; ``extra`` adds what the command measured itself (the load probe)."""
    meta = machine_metadata()
    meta["N"] = n_cpus()
    meta["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta.update(extra)
    return meta


def new_study(path: str, study: dict, *, overwrite: bool = False, lock: StudyLock | None = None,
              metadata: dict | None = None, what: str = "--out",
              hint: str = "use --overwrite to replace it", resumable: bool = False) -> StudyWriter:
    """The writer of a new study at ``path`` with this machine's metadata (or ``metadata``:
    a merge keeps its inputs'); see :func:`store.open_new` for the lock and the refusal."""
    return open_new(path, this_machine() if metadata is None else metadata, study,
                    overwrite=overwrite, lock=lock, what=what, hint=hint, resumable=resumable)
