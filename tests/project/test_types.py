"""The type check: mypy over src/hybridsched with the project's configuration
([tool.mypy] in pyproject.toml) finds nothing.

mypy keeps its cache in the repository's .mypy_cache (ignored by git): a fresh clone pays
the whole check once, later runs only what changed."""
import subprocess
import sys

from repo import ROOT


def test_mypy_finds_no_error():
    # run from the root, so that mypy reads pyproject.toml's [tool.mypy] (files, options)
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mypy (exit {proc.returncode}):\n{out}"
    assert "Success: no issues found" in out, out
