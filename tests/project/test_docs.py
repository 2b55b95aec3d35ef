"""Docs that cannot rot: every Python example marked ``<!-- runnable -->`` in docs/ runs,
every ``hybridsched`` command line in the README and the site's pages parses, every page
is in the site's navigation and the README stays short."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys

import pytest

from hybridsched.cli import make_parser
from hybridsched.errors import UsageError
from doclines import DOCS, hybridsched_words, pages
from repo import ROOT

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


def command_lines(text: str):
    """(line number, argv after ``hybridsched``) of every command line in a shell block."""
    for line, words in hybridsched_words(text):
        yield line, words[words.index("hybridsched") + 1:]


def cli_examples():
    return [(str(p.relative_to(ROOT)), line, argv)
            for p in pages() for line, argv in command_lines(p.read_text())]


def test_there_are_cli_examples():
    assert len(cli_examples()) >= 20


@pytest.mark.parametrize("page, line, argv", cli_examples(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_cli_example_parses(page, line, argv):
    """Every option a documented command line uses exists and takes the value given."""
    argv = [a for a in argv if not a.startswith(">")]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            make_parser(argv[0] if argv else "").parse_args(argv)
    except UsageError as exc:
        pytest.fail(f"{page}:{line}: hybridsched {shlex.join(argv)}: {exc}")
    except SystemExit as exc:  # --help and --version exit 0
        assert not exc.code, f"{page}:{line}: hybridsched {shlex.join(argv)}"


def test_every_page_is_in_the_navigation():
    text = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", text, re.M))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.glob("*.md")}
    assert listed == on_disk


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
