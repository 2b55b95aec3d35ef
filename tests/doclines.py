"""The command lines the documentation shows: the pages (README.md and docs/, without the
raw outputs under docs/results/, which quote the commands of their day), and the words of
every command of a shell block that runs ``hybridsched``. Shared by the docs test (each
line parses) and the hostile docs cases (each line runs)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Iterator

from repo import ROOT

DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)  # (language, body) of a block
_SHELL = {"", "console", "bash", "sh", "shell"}


def pages() -> list[Path]:
    return [ROOT / "README.md",
            *(p for p in sorted(DOCS.rglob("*.md")) if RESULTS not in p.parents)]


def hybridsched_words(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, words) of every command in a shell block whose words include
    ``hybridsched`` (pipelines and ``&&`` lists split into their commands); in a
    ``console`` block only the lines after a ``$`` prompt."""
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang not in _SHELL:
            continue
        first = text[:m.start()].count("\n") + 2
        for i, line in enumerate(body.replace("\\\n", "  ").splitlines()):
            line = line.strip()
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            for part in re.split(r"&&|\|\||;|\|", line):
                words = shlex.split(part, comments=True)
                if "hybridsched" in words:
                    yield first + i, words
