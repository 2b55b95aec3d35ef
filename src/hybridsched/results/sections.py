"""The report sections of a study's side tables (``/ge``, ``/colocate``): each module that
reads a side table offers ``section(path, out_dir, plots, n) -> (markdown lines, files)``;
this table lists them, so the report needs no test of which table a file has."""
from __future__ import annotations

import os


def _ge(path, out_dir, plots, n):
    from .ge_report import section

    return section(path, out_dir, plots)


def _colocate(path, out_dir, plots, n):
    from .colocate_report import section

    return section(path, out_dir, plots, n)


SIDE_TABLES = (("ge", _ge), ("colocate", _colocate))


def side_sections(path: str, out_dir: str | None, plots: bool, n: int) -> tuple[list[str], list[str]]:
    """Every side table's section (Markdown lines, files written), in table order."""
    from ..store import has_table

    lines, files = [], []
    for table, section in SIDE_TABLES:
        if has_table(path, table):
            md, fs = section(path, out_dir, plots, n)
            lines += md
            files += fs
    return lines, files


def side_report(study, out_dir: str | None, plots: bool) -> tuple[str | None, list[str]]:
    """The report of a study with no `/runs` rows: a header and its side sections (None
    when it has none either)."""
    head = [f"# Study {os.path.basename(study.path)}", "",
            study.machine_line(), ""]
    lines, files = side_sections(study.path, out_dir, plots, study.n)
    return ("\n".join(head + lines) if lines else None), files
