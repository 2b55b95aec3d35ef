"""The arbiter's operations that need compiled code, behind one small contract (:class:`Ops`)
with two implementations, chosen by what the process runs:

* :class:`CompiledOps` — numba's: the Python workers' own paths (``run --coop``, colocate's
  built-in workloads), compiled (or loaded from numba's cache) before any worker forks;
* :class:`ShimOps` — the cooperative shim's C through ctypes (``shim/owner.c``), for a
  process whose jobs are all unmodified commands under the shim (``coop exec``), which then
  never loads numba: its start took ~0.8 s, most of it numba's import and the loading of
  the compiled rules.

Both apply the same rules (the C ones are held equal to :mod:`rules` byte for byte by
tests/coop/test_shim_rules_match_workers.py) to the same segment, under the same robust
mutex (:mod:`oslayer.shmlock`).
"""
from __future__ import annotations

import ctypes
import functools
import time
from types import SimpleNamespace
from typing import Any, Protocol

from ..oslayer.shmlock import lock_with
from .shimbuild import functions, shim_library
from .state import CompiledRules

# How long a waiting worker sleeps before checking for dead token holders: the bound on
# how long a killed job can stall the others (issue: within a second), against one lock
# round per period per waiting worker.
RECLAIM_POLL_S = 0.2


def now_ns() -> int:
    """The clock of the segment's times (CLOCK_MONOTONIC, the shim's too)."""
    return time.monotonic_ns()


class Ops(Protocol):
    def prepare(self) -> None:
        """Ready every compiled path before a worker forks (nothing to do for C)."""

    def bind(self, st: Any) -> Any:
        """What :meth:`post` needs of the state ``st`` (kept while it is mapped)."""

    def lock(self, region: Any, held: Any) -> bool:
        """The segment's mutex (``held[0]`` set by the call that takes it); True if its
        last owner died holding it (shmlock.lock_with)."""

    def unlock(self, region: Any, held: Any) -> None:
        """Give it back if ``held[0]`` says it was taken."""

    def post(self, bound: Any, slot: int) -> None:
        """Pin the worker just granted a token to its CPU and wake it."""

    def leave_worker(self, st: Any, w: int, now: int) -> int:
        """Free slot ``w`` (its token passed on): the slot woken, or -1."""

    def revoke_holder(self, st: Any, w: int, now: int) -> int:
        """Take the token of holder ``w``: the slot woken, or -1."""


class CompiledOps(CompiledRules):
    """numba's: the arbiter's compiled paths (warm, handoff, rules, native). Imported on
    first use, so that a process with :class:`ShimOps` never loads numba."""

    def prepare(self) -> None:
        from . import warm

        warm.prepare()

    def bind(self, st: Any) -> Any:
        from . import handoff

        return handoff.regions(st)

    def lock(self, region: Any, held: Any) -> bool:
        from ..oslayer import native

        return native.lock_into(region, held)

    def unlock(self, region: Any, held: Any) -> None:
        from ..oslayer import native

        native.unlock_from(region, held)

    def post(self, bound: Any, slot: int) -> None:
        from . import handoff

        handoff.post(bound, slot)


_OWNER = ("hs_x_lock_try", "hs_x_lock_wait", "hs_x_unlock", "hs_x_post", "hs_x_revoke_holder",
          "hs_x_leave_worker", "hs_x_bind", "hs_x_view_size")


@functools.lru_cache(maxsize=4)
def _library(path: str) -> Any:
    """The shim at ``path`` with owner.c's functions typed, by name."""
    fns = functions(path, _OWNER, "an owner of jobs (coop exec)",
                    "use the arbiter's compiled rules (Arbiter's default ops) instead")
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    types: tuple[tuple[list[Any], Any], ...] = (
        ([p, p], i), ([p, p, i64], i), ([p, p], i), ([p, i], None), ([p, i, i64], i),
        ([p, i, i64], i), ([p, p, i, i, i], ctypes.c_size_t), ([], ctypes.c_size_t))
    for fn, (args, res) in zip(fns, types):
        fn.argtypes, fn.restype = args, res
    return SimpleNamespace(**{name[5:]: fn for name, fn in zip(_OWNER, fns)})


class ShimOps:
    """The shim's C (``shim/owner.c``) through ctypes: no numba in this process. The
    library stays dormant here (its constructor acts only in a launched command)."""

    def __init__(self, library: str | None = None):
        """``library``: the shim's path (default: :func:`shimbuild.shim_library`'s)."""
        self._lib = _library(shim_library() if library is None else library)

    def prepare(self) -> None:
        pass

    def bind(self, st: Any) -> Any:
        return self._view(st)

    def _view(self, st: Any) -> Any:
        """A C view of ``st``'s segment (its regions start at the header): the address
        only, no reference to the mapping, which must stay free to be unmapped."""
        view = ctypes.create_string_buffer(self._lib.view_size())
        self._lib.bind(view, st.header.ctypes.data, len(st.cpus), len(st.jobs),
                       len(st.workers))
        return view

    def lock(self, region: Any, held: Any) -> bool:
        return lock_with(self._try, self._wait, region, held)

    def _try(self, region: Any, held: Any) -> int:
        return self._lib.lock_try(region.ctypes.data, held.ctypes.data)

    def _wait(self, region: Any, held: Any, ns: int) -> int:
        return self._lib.lock_wait(region.ctypes.data, held.ctypes.data, ns)

    def unlock(self, region: Any, held: Any) -> None:
        self._lib.unlock(region.ctypes.data, held.ctypes.data)

    def post(self, bound: Any, slot: int) -> None:
        self._lib.post(bound, slot)

    def leave_worker(self, st: Any, w: int, now: int) -> int:
        return int(self._lib.leave_worker(self._view(st), w, now))

    def revoke_holder(self, st: Any, w: int, now: int) -> int:
        return int(self._lib.revoke_holder(self._view(st), w, now))
