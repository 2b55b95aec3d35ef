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

import pytest

from hostile import common
# importing registers the cases, in this order (the order of each area's cases)
from hostile import api, colocate, concurrency, files, ge, mpi, run  # noqa: F401
from hostile import docs, issue33, signals, simulate, techniques  # noqa: F401

AREAS = ("api", "run", "colocate", "ge", "files", "mpi", "concurrency", "techniques",
         "simulate", "signals", "docs")

# The cases a plain `python -m pytest` runs: per area a few that cover the contract's kinds
# (bad input refused, a run or job that fails, a signal, a file damaged), chosen among the
# quick ones so that the default suite does not take longer. The rest run with -m hostile.
DEFAULT: dict[str, tuple[str, ...]] = {
    "api": (),
    "run": (),
    "colocate": (),
    "ge": (),
    "files": (),
    "mpi": (),
    "concurrency": (),
    "techniques": (),
    "simulate": (),
    "signals": (),
    "docs": (),
}

_unknown = sorted({(a, n) for a, names in DEFAULT.items() for n in names}
                  - {(c.area, c.name) for c in common.CASES})
if _unknown or set(DEFAULT) != set(AREAS) or {c.area for c in common.CASES} - set(AREAS):
    raise RuntimeError(f"tests/hostile: DEFAULT names cases or areas that do not exist: {_unknown}")


def _params(area: str) -> list:
    return [pytest.param(c, id=c.name, marks=pytest.mark.hostile(default=c.name in DEFAULT[area]))
            for c in common.CASES if c.area == area]


def _check(case: common.Case, tmp_path) -> None:
    try:
        problem = case.fn(tmp_path)
    except common.Skip as exc:
        pytest.skip(str(exc))
    assert problem is None, problem


def _area_test(area: str):
    """``test_<area>``, parametrized by that area's cases: the area is in every node id."""
    @pytest.mark.parametrize("case", _params(area))
    def test(case, tmp_path):
        _check(case, tmp_path)

    test.__name__ = test.__qualname__ = f"test_{area}"
    test.__doc__ = f"The {area} area's cases (tests/hostile/{area}.py)."
    return test


for _area in AREAS:
    globals()[f"test_{_area}"] = _area_test(_area)
