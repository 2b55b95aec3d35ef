"""Issue 36 item 4: one check of a run request (`core.request.check_request`) for the API
and the command line: the same refusal, a `BadOption` naming the same field, worded with
each surface's own names for its options (``chunk`` in the API, ``--chunk`` on the CLI)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import hybridsched
from hybridsched import cli
from hybridsched.core import registry
from hybridsched.core.request import MAX_WORKERS, check_request
from hybridsched.errors import BadOption
from hybridsched.study.spec import StudySpec


def task(t):
    t[:] = t


# (field, parallel_for's arguments, StudySpec's, start of the API's line, of the CLI's)
CASES = [
    ("k", dict(k=0), dict(ks=[0]), "k must be from 1 to", "-k must be from 1 to"),
    ("k", dict(k=MAX_WORKERS + 1), dict(ks=[MAX_WORKERS + 1]), "k must be", "-k must be"),
    ("chunk", dict(chunk=-1), dict(chunks=[-1]), "chunk must be a size for dynamic: -1 (auto)",
     "--chunk must be a size for dynamic: auto"),
    ("chunk", dict(chunk=-3, scheduler="pipe-1to1"), dict(chunks=[-3], schedulers=["pipe-1to1"]),
     "chunk must be 0 (the scheduler's default) or more, or -1 (auto), got -3",
     "--chunk must be at least 1, or auto, got -3"),
    ("dispatch", dict(dispatch="fast"), dict(dispatch="fast"), "dispatch must be one of",
     "--dispatch must be one of"),
    ("dispatch", dict(dispatch="compiled", scheduler="static"),
     dict(dispatch="compiled", schedulers=["static"]),
     "dispatch='compiled': static cannot run compiled", "--dispatch compiled: static cannot"),
    ("dispatch", dict(dispatch="compiled", kernel="numpy"), dict(dispatch="compiled", kernel="numpy"),
     "dispatch='compiled': kernel 'numpy' is not a numba function; use dispatch='auto'",
     "--dispatch compiled: kernel 'numpy' is not a numba function; use --dispatch auto"),
]


@pytest.mark.parametrize("field, api, spec, api_line, cli_line", CASES)
def test_the_api_and_the_cli_refuse_the_same_field_each_in_its_own_words(field, api, spec,
                                                                          api_line, cli_line):
    data = np.zeros((4, 2, 8), np.uint8)
    kernel = api.pop("kernel", task)
    with pytest.raises(BadOption) as e:
        hybridsched.parallel_for(kernel, data, **{"scheduler": "dynamic", "k": 2, **api})
    assert e.value.field == field and str(e.value).startswith(api_line), str(e.value)
    with pytest.raises(BadOption) as e:
        StudySpec(**{"schedulers": ["dynamic", "serial"], "ks": [2], "frames": [4],
                     "height": 2, "width": 8, **spec}).validate()
    assert e.value.field == field and str(e.value).startswith(cli_line), str(e.value)


def test_coop_is_worded_by_the_cli(capsys, tmp_path):
    out = str(tmp_path / "c.h5")
    argv = ["run", "-s", "dynamic", "-k", "2", "-L", "4", "--height", "2", "--width", "8",
            "--reps", "1", "--dispatch", "compiled", "--coop", "-o", out]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hybridsched: error: --dispatch compiled: --coop needs a scheduling point "
                   "between chunks; use --dispatch auto"], err
    assert not os.path.exists(out)


def test_the_baseline_is_asked_no_chunk_in_a_study_but_is_in_a_call():
    StudySpec(["serial", "pipe-1to1"], [2], [4], height=2, width=8, chunks=[-1]).validate()
    with pytest.raises(BadOption, match="a size for serial"):
        check_request([registry.get("serial")], [1], [-1])
