"""Start-up paid once (issue 22 item 5): every numba function of the package, the compiled
dispatch loop included, is loaded from numba's on-disk cache by a second process, and a
run loads only what it uses. Compilation is seen through numba's own ``numba:compile``
events, which fire only when numba really compiles (never on a cache load)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys
from numba.core import event
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        f = getattr(ev.data.get("dispatcher"), "py_func", None)
        compiled.append(f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', '?')}")
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
exec(sys.argv[1])
from hybridsched import kernels
print(json.dumps({"compiled": compiled, "loops": len(kernels.claim_loop.overloads),
                  "hits": sum(kernels.claim_loop.stats.cache_hits.values())}))
"""

LOOP = """
import numpy as np
from hybridsched import kernels
from hybridsched.workloads import sorts
a = np.zeros((4, 2, 8), np.uint8)
kernels.prepare("quicksort", loop=True)
kernels.loop_entry(sorts.make_kernel("ramp", 0, 0, 4, 2, 8, 0.5, 0.0), a)
"""


def _child(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, code, *args], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_compiled_loop_and_the_kernels_from_the_cache():
    _child(LOOP)  # the first process may compile (a cold cache); it writes the cache
    second = _child(LOOP)
    assert second["compiled"] == []
    assert second["loops"] == 2 and second["hits"] == 2  # quicksort's and a bound kernel's


def test_a_run_with_the_python_loop_loads_no_compiled_loop(tmp_path):
    code = ("from hybridsched.cli import main\n"
            f"assert main(['run', '-s', 'dynamic', '-k', '2', '-L', '6', '--height', '4', "
            f"'--width', '8', '--reps', '1', '--dispatch', 'python', "
            f"'--out', {str(tmp_path / 'p.h5')!r}]) == 0\n")
    _child(code)
    again = _child(code.replace("p.h5", "q.h5"))
    assert again["loops"] == 0 and again["compiled"] == []


@pytest.mark.parametrize("dispatch", ["auto", "compiled"])
def test_a_compiled_run_in_a_new_process_compiles_nothing(tmp_path, dispatch):
    code = ("from hybridsched.cli import main\n"
            f"assert main(['run', '-s', 'dynamic,guided', '-k', '2', '-L', '6', '--height', '4', "
            f"'--width', '8', '--reps', '1', '--dispatch', {dispatch!r}, "
            f"'--out', {str(tmp_path / 'c.h5')!r}, '--overwrite']) == 0\n")
    _child(code)
    again = _child(code)
    assert again["compiled"] == [] and again["loops"] == 1
