"""What the MPI tests share (tests/mpi/, and the MPI cases of the technique and trace tests):
the small shape of their runs, the fork and pipe schedulers of this tree, and the check that
the ranks' traces cover every global frame once."""
from __future__ import annotations

import json

import h5py
import numpy as np

from hybridsched.core import registry as schedulers

SMALL = ["--height", "32", "--width", "32", "--reps", "1"]


def process_schedulers() -> list[str]:
    """A fork and a pipe scheduler where the backends exist in this tree."""
    return [s for s in ("prolific", "pipe-MtoM") if s in schedulers.SCHEDULERS]


def check_cover(path: str, L: int) -> list[dict]:
    """Every verified run's trace covers each global frame exactly once; returns extras."""
    extras = []
    with h5py.File(path, "r") as h5:
        for name in h5["detail"]:
            g = h5["detail"][name]
            trace = g["trace"][()]
            covered = np.zeros(L, int)
            for r in trace:
                covered[r["first"]:r["first"] + r["count"]] += 1
            assert (covered == 1).all(), (name, covered)
            extras.append(json.loads(g.attrs["extra"]))
    return extras
