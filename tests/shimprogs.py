"""Small C programs for the cooperative shim's tests (tests/cprogs/NAME.c, each saying
what it does), compiled with cc into a test's folder (the shim_lib fixture has skipped the
test already where there is no compiler)."""
from __future__ import annotations

import os
import subprocess

import pytest

PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cprogs")


def source(name: str) -> str:
    """The path of program ``name``'s source."""
    path = os.path.join(PROGS, f"{name}.c")
    if not os.path.isfile(path):
        raise KeyError(name)
    return path


def build(name: str, folder, *flags: str) -> str:
    """The program ``name`` compiled into ``folder``; skips the test when the compiler
    cannot make it (e.g. no static libc for -static, no OpenMP)."""
    exe = os.path.join(folder, name + ("-" + "-".join(f.strip("-") for f in flags) if flags else ""))
    openmp = ("-fopenmp",) if name.startswith("omp") else ()
    p = subprocess.run(["cc", "-O1", *openmp, *flags, source(name), "-o", exe, "-lpthread"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cc could not build {name} {' '.join(flags)}: {p.stderr.strip()[:200]}")
    return exe
