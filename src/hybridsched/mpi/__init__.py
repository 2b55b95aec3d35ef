"""The distributed layer: MPI ranks over P nodes, each running a local scheduler.

``world()`` tells a process its rank (P = 1 without a launcher or without mpi4py; mpi4py
is imported only then); ``runs.run_split`` runs a study across the ranks.
"""
from __future__ import annotations

from .ranks import Launch, Solo, abort_on_error, agree, detect_launch, local_cpus, world

__all__ = ["Launch", "Solo", "abort_on_error", "agree", "detect_launch", "local_cpus", "world"]
