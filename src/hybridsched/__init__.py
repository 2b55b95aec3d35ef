"""hybridsched: fork-, pipe- and thread-based schedulers over a shared-memory row-sorting
workload, measured one node at a time or across P nodes with MPI.

The Python API (loaded on first use, so ``import hybridsched`` stays light):
``parallel_for`` runs a kernel over the tasks of an array under any scheduler,
``shared_array`` allocates an array that forked workers write into directly,
``write_study`` stores results for ``hybridsched report``, ``plan`` gives a policy's
hand-out (what ``hybridsched plan`` prints), ``Technique`` is the base class of a
scheduling technique of your own, and ``Memory`` keeps what a loop learns across
``parallel_for`` calls that are given it. Bad arguments raise ``UsageError``; every error
raised on purpose is a ``HybridschedError``.
"""

from .version import __version__

_API = {"parallel_for": "api", "write_study": "api", "Result": "api", "RunFailed": "errors",
        "shared_array": "shared", "is_shared": "shared", "GILWarning": "errors",
        "plan": "core.policies", "Technique": "core.contract", "TechniqueError": "errors",
        "Memory": "core.memory", "UsageError": "errors", "HybridschedError": "errors"}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
