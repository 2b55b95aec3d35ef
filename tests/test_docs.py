"""Docs that cannot rot: every Python example marked ``<!-- runnable -->`` in docs/ runs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
_RUNNABLE = re.compile(r"<!-- runnable -->\s*\n```python\n(.*?)\n```", re.S)


def runnable_examples() -> list[tuple[str, int, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        for m in _RUNNABLE.finditer(text):
            out.append((str(page.relative_to(DOCS)), text[:m.start()].count("\n") + 1, m.group(1)))
    return out


def test_there_are_runnable_examples():
    assert any(page == "techniques.md" for page, _, _ in runnable_examples())


@pytest.mark.parametrize("page, line, code", runnable_examples(),
                         ids=lambda v: v if isinstance(v, str) and v.endswith(".md") else None)
def test_runnable_example(page, line, code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"docs/{page}:{line}: {p.stderr[-2000:]}"
