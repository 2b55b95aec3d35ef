"""What the tests of `colocate --cmd` share: the examples' folder, the interpreter as a
command word, and a validated spec of commands."""
from __future__ import annotations

import shlex
import sys

from hybridsched.colocate.spec import ColocateSpec
from hybridsched.oslayer.cpus import n_cpus
from repo import ROOT

N = n_cpus()
EX = ROOT / "examples" / "unmodified"
PY = shlex.quote(sys.executable)


def cmd_spec(commands, policies, **kw) -> ColocateSpec:
    """A spec of ``commands`` under ``policies``, validated for this machine's CPUs."""
    spec = ColocateSpec("cmd", kw.pop("jobs", 0), 0, list(policies), commands=list(commands), **kw)
    spec.validate(N)
    return spec
