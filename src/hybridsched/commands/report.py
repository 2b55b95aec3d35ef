"""`hybridsched report`: the paper's tables, claims, CSV and plots of a study."""
from __future__ import annotations

import sys

from ..errors import UsageError
from ..results.files import default_out_dir
from ..results.data import load_open
from ..results.report import build_report
from ..results.sections import side_report
from ..store import OutputDir, StudyFile
from .common import PROG


def main(args) -> int:
    with StudyFile(args.file) as source:  # every section reads from this one open
        study = load_open(source)
        if args.out_dir is not None and not args.out_dir.strip():
            raise UsageError("--out-dir: an empty name (leave it out for the default)")
        out_dir = args.out_dir or default_out_dir(args.file)
        text: str | None
        # written aside, then moved in: a name of the user's in their folder is refused
        # before anything is replaced
        with OutputDir(out_dir, named=args.out_dir is None) as out:
            try:
                if len(study.runs):
                    text, files = build_report(study, out.stage, plots=not args.no_plots)
                else:  # a `ge` or `colocate` study: its side tables only
                    text, files = side_report(study, out.stage, plots=not args.no_plots)
                files = out.commit(files)
            except OSError as exc:
                raise UsageError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
    if text is None:
        print(f"{args.file}: the study holds no runs yet")
        return 0
    print(text)
    print(f"{PROG}: {len(files)} file{'s' * (len(files) != 1)} written to {out_dir}",
          file=sys.stderr)
    return 0
