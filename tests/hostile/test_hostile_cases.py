"""The hostile user's cases (issues 23 and 33): the package tried as a hostile user would, each
case a function ``case(tmp) -> None | str`` of an area module of this folder (None when the
package did what its contract says, else what went wrong; ``common.Skip`` where it cannot
run here). The contract: bad input is one line on stderr starting with "hybridsched" and exit
status 2 (the API: one UsageError line), never a traceback, and nothing left behind; 0 when
everything ran and verified; 1 when a run, job or rank failed, saying why; 130/143 for
SIGINT/SIGTERM. What a case may have left (a child process or zombie, a segment of ours, the
suite's coop segment) is checked by tests/conftest.py's ``no_leaks``, as for every test.

Every case carries the marker ``hostile``. ``python -m pytest -m hostile`` runs all of them;
``-k test_<area>`` one area (``test_signals``), ``-k <name>`` one case. A plain
``python -m pytest`` (CI's line) runs only the cases of ``DEFAULT`` below: conftest.py
deselects the others unless the ``-m`` expression names ``hostile`` or a case is named by
its node id.
"""
from __future__ import annotations

import fnmatch
import tempfile
import time
from pathlib import Path

import mpiimpls
import pytest

from hostile import common
# importing registers the cases, in this order (the order of each area's cases)
from hostile import api, colocate, concurrency, files, ge, mpi, run  # noqa: F401
from hostile import docs, issue33, signals, simulate, techniques  # noqa: F401

AREAS = ("api", "run", "colocate", "ge", "files", "mpi", "concurrency", "techniques",
         "simulate", "signals", "docs")

# The cases a plain `python -m pytest` runs (names or fnmatch patterns: the docs cases are
# named by their page's line numbers, which move). The rest run with -m hostile.
DEFAULT: dict[str, tuple[str, ...]] = {
    "api": ("pf_dynamic_numba_task",),           # parallel_for runs a numba kernel, verified
    "run": ("bad_k_zero",),                      # bad input: one line, exit 2, nothing left
    "colocate": ("sigint_bsp_coop",),            # Ctrl-C under coop: exit 130, no leak
    "ge": ("fault_row0_pivot_owner",),           # a failing user thread: exit 1, study kept
    "files": ("report_runs_of_ints",),           # a damaged study read: one line, exit 2
    "mpi": ("fail_rank_0_1",),                   # a failing rank: named, the runs kept
    "concurrency": ("two_runs_same_out",),       # a second writer refused
    "techniques": ("bad_zero_fails_its_run",),   # a user technique's bad chunk fails its run
    "simulate": ("costs_fifo",),                 # a FIFO never opened (it would block)
    "signals": ("run_pipes_working_sigint",),    # SIGINT mid-run: exit 130, nothing lost
    # a documented line first prepares the files the pages assume (two studies, one under
    # mpiexec): half a minute of one worker; tests/project/test_docs.py parses every line
    "docs": (),
}


def _default(case: common.Case) -> bool:
    return any(fnmatch.fnmatchcase(case.name, pat) for pat in DEFAULT[case.area])


_unknown = [(a, pat) for a, pats in DEFAULT.items() for pat in pats
            if not any(c.area == a and fnmatch.fnmatchcase(c.name, pat) for c in common.CASES)]
if _unknown or set(DEFAULT) != set(AREAS) or {c.area for c in common.CASES} - set(AREAS):
    raise RuntimeError(f"tests/hostile: DEFAULT names cases or areas that do not exist: {_unknown}")


def _params(area: str) -> list:
    return [pytest.param(c, id=c.name, marks=pytest.mark.hostile(default=_default(c)))
            for c in common.CASES if c.area == area]


# the areas whose cases launch MPI jobs: what MPI leaves of a rank that failed or was killed
# (MPICH's /dev/shm/mpich_shm_*) goes after the case, as the `mpi` fixture does for its tests
MPI_MODULES = {mpi.__name__, docs.__name__, issue33.__name__}


def _check(case: common.Case) -> None:
    # a directory of its own, named as the old runner named it: pytest's tmp_path holds the
    # case's name, which a case that counts the lines naming a word would count too
    started = time.time() - 1.0  # ctime has a coarser clock than time()
    try:
        with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
            try:
                problem = case.fn(Path(tmp))
            except common.Skip as exc:
                pytest.skip(str(exc))
    finally:
        if case.fn.__module__ in MPI_MODULES:
            mpiimpls.clean_after(started)
    assert problem is None, problem


def _area_test(area: str):
    """``test_<area>``, parametrized by that area's cases: the area is in every node id."""
    @pytest.mark.parametrize("case", _params(area))
    def test(case):
        _check(case)

    test.__name__ = test.__qualname__ = f"test_{area}"
    test.__doc__ = f"The {area} area's cases (tests/hostile/{area}.py)."
    return test


for _area in AREAS:
    globals()[f"test_{_area}"] = _area_test(_area)
