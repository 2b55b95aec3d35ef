"""Backends move chunks to workers: threads, forked processes, pipes (and MPI above them).

Each backend module exposes ``execute(job) -> Execution``; the chunking decisions come from
:mod:`hybridsched.core.policies`, never from a copy inside the backend.
"""
from __future__ import annotations

import importlib
from .base import Backend, Job

BACKENDS = ("serial", "threads", "forks", "pipes")


def get_backend(name: str) -> Backend:
    """The ``execute`` function of a backend module, imported on first use."""
    if name not in BACKENDS:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}").execute


__all__ = ["BACKENDS", "Backend", "Job", "get_backend"]
