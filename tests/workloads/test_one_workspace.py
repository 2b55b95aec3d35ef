"""Issue 36 item 4: one workspace type (`workloads.space.Workspace`) for "original + work
copy in shared memory": the study's generated arrays, the paper's slab (a thin layer over
it) and `parallel_for`'s wrap of a caller's array all own their segments the same way."""
from __future__ import annotations

import os

import numpy as np
import pytest

import hybridsched
from hybridsched.oslayer.shm import our_shm_entries
from hybridsched.records import RunConfig
from hybridsched.workloads.build import build
from hybridsched.workloads.slab import Slab
from hybridsched.workloads.space import NOT_CHECKED, Workspace


def mine() -> set[str]:
    return set(our_shm_entries(os.getpid()))


def test_the_slab_and_the_studys_arrays_are_one_type_that_removes_its_segments():
    before = mine()
    with Slab(5, 3, 8, seed=2) as slab, build(RunConfig("dynamic", 2, 4, 3, 8,
                                                      workload="mandelbrot")) as space:
        assert isinstance(slab, Workspace) and isinstance(space, Workspace)
        assert len(mine() - before) == 4  # original and work copy of each
        assert not slab.original.flags.writeable and slab.bad_rows() == 5 * 3  # zeros: no row is the original's
        slab.fresh_copy()
        slab.work.sort(axis=-1)
        assert slab.bad_rows() == 0
    assert mine() == before


def test_a_failing_fill_leaves_no_segment():
    def fill(out, first):
        raise RuntimeError("fill failed")
    before = mine()
    with pytest.raises(RuntimeError, match="fill failed"):
        Workspace((4, 2), np.float64, fill, None)
    assert mine() == before


@pytest.mark.parametrize("in_place", [True, False])
def test_a_callers_array_is_the_work_copy_or_one_segment_and_its_first_run_starts_from_it(in_place):
    data = np.arange(8.0).reshape(4, 2)
    before = mine()
    with Workspace.around(data, in_place, True, None) as space:
        assert (space.work is data) == in_place
        assert len(mine() - before) == (0 if in_place else 1)  # the original is private
        space.work[:] = -1  # as a profiling run would, which puts the original back itself
        space.fresh_copy()  # the caller's input is the run's input: nothing copied before it
        assert (space.work == -1).all()
        space.fresh_copy()  # a second run starts from the original
        assert np.array_equal(space.work, np.arange(8.0).reshape(4, 2))
        assert space.bad_rows() == NOT_CHECKED
    assert mine() == before


def test_parallel_for_copies_into_the_one_workspace_and_back(no_leaks):
    data = np.arange(12.0).reshape(6, 2)
    res = hybridsched.parallel_for(_double, data, scheduler="prolific", k=2,
                                   verify=lambda o, r: np.array_equal(r, 2 * o))
    assert res.verified and np.array_equal(data, 2 * np.arange(12.0).reshape(6, 2))


def _double(data, first, count):
    data[first:first + count] *= 2
