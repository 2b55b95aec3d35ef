"""The report sections of a study's side tables (``/ge``, ``/colocate``): each module that
reads a side table offers ``section(study, out_dir, plots, n) -> (markdown lines, files)``
(``study`` an open :class:`store.StudyFile`);
this table lists them, so the report needs no test of which table a file has."""
from __future__ import annotations

import os

from .data import Study


def _ge(study, out_dir, plots, n):
    from .ge_report import section

    return section(study, out_dir, plots)


def _colocate(study, out_dir, plots, n):
    from .colocate_report import section

    return section(study, out_dir, plots, n)


SIDE_TABLES = (("ge", _ge), ("colocate", _colocate))


def side_sections(study: Study, out_dir: str | None, plots: bool) -> tuple[list[str], list[str]]:
    """Every side table's section of ``study`` (Markdown lines, files written), in table
    order."""
    lines, files = [], []
    with study.file() as source:
        for table, section in SIDE_TABLES:
            if not source.has_table(table):
                continue
            md, fs = section(source, out_dir, plots, study.n)
            lines += md
            files += fs
    return lines, files


def side_report(study: Study, out_dir: str | None, plots: bool) -> tuple[str | None, list[str]]:
    """The report of a study with no `/runs` rows: a header and its side sections (None
    when it has none either)."""
    head = [f"# Study {os.path.basename(study.path)}", "",
            study.machine_line(), ""]
    lines, files = side_sections(study, out_dir, plots)
    return ("\n".join(head + lines) if lines else None), files
