"""Start-up paid once (issue 22 item 5): every numba function of the package, the compiled
dispatch loop included, is loaded from numba's on-disk cache by a second process, and a
run loads only what it uses. Compilation is seen through numba's own ``numba:compile``
events, which fire only when numba really compiles (never on a cache load)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

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


# Imported by a run, but only after its load probe started: their time hides the probe's
# 0.4 s of waiting instead of adding to it (issue 36: a tiny run 2.8x the import yardstick).
AFTER_PROBE = ("numba", "llvmlite", "scipy", "h5py", "hybridsched.kernels", "hybridsched.store")
# Never imported by a run: what only the report (matplotlib, 0.3 s) or MPI use.
NEVER = ("matplotlib", "mpi4py.MPI", "hybridsched.results.report")

PROBE_ORDER = r"""
import json, sys
from hybridsched.machine import probes
seen = []
start = probes.LoadCheck.start
def spy(self):
    seen.append(sorted(m for m in AFTER if m in sys.modules))
    return start(self)
probes.LoadCheck.start = spy
from hybridsched.cli import main
assert main(ARGS) == 0
print(json.dumps({"at_start": seen, "after": sorted(m for m in AFTER if m in sys.modules),
                  "never": sorted(m for m in NEVER if m in sys.modules)}))
"""


def test_a_run_starts_its_load_probe_before_its_heavy_imports(tmp_path):
    args = ["run", "-s", "dynamic", "-k", "2", "-L", "6", "--height", "4", "--width", "8",
            "--reps", "1", "-o", str(tmp_path / "t.h5")]
    code = (f"AFTER, NEVER, ARGS = {AFTER_PROBE!r}, {NEVER!r}, {args!r}\n" + PROBE_ORDER)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["at_start"] == [[]]  # one probe, started before any of them was imported
    assert seen["after"] == sorted(AFTER_PROBE)  # the run did need them, after it
    assert seen["never"] == []


def test_bad_input_stops_the_load_probe_at_once(tmp_path, monkeypatch, capsys):
    from hybridsched.cli import main
    from hybridsched.machine import probes

    windows = []
    real = probes.load_now

    def slow(cpus, *a, stop=None, **k):  # windows of a minute: only the stop ends them early
        windows.append(real(cpus, 4, 60.0, stop=stop))
        return windows[-1]

    monkeypatch.delenv(probes.NO_PROBE_ENV)
    monkeypatch.setattr(probes, "load_now", slow)
    out = tmp_path / "bad.h5"
    assert main(["run", "-s", "no-such-scheduler", "-o", str(out)]) == 2
    assert "unknown scheduler 'no-such-scheduler'" in capsys.readouterr().err
    assert windows == [[]]  # sampled, and stopped before its first window ended
    assert not [t for t in threading.enumerate() if t.name == "hybridsched-loadcheck"]
    assert not out.exists()
