"""A command's folder of output files (a report's CSV and PNG files, a trace): written
aside, then moved in only where no name is the user's.

A folder the user names may hold files of their own, and a report writes names such as
``claims.csv`` or ``summary.csv``: those are never replaced. The folder's list
(:data:`LISTED`) says which names hybridsched wrote there before, which a later report may
replace; a folder hybridsched made, or one it named itself (``<stem>_report``), is its own
throughout.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from ..errors import UsageError
from .files import our_directory, write_text

# the names hybridsched wrote into an output folder, one a line; "*": all of them (it made
# the folder)
LISTED = ".hybridsched-outputs"
_ALL = "*"


def _lines(fh, names: list[str]) -> None:
    fh.write("".join(n + "\n" for n in names))


class OutputDir:
    """Files go into :attr:`stage`, a hidden folder inside ``path`` (made as
    :func:`our_directory` makes it); :meth:`commit` moves them into ``path``, refusing
    before anything is moved if one of their names is there already and hybridsched did
    not write it. The stage goes on every exit path. ``named``: hybridsched chose ``path``
    (``<stem>_report``), so every name in it is its own."""

    def __init__(self, path: str, what: str = "--out-dir", named: bool = False) -> None:
        self.path, self.what, self.named = path, what, named
        self.stage = ""
        self.made = False

    def __enter__(self) -> OutputDir:
        self.made = not os.path.lexists(self.path)
        our_directory(self.path, self.what)
        try:
            if self.made:
                write_text(os.path.join(self.path, LISTED), lambda fh: _lines(fh, [_ALL]))
            self.stage = tempfile.mkdtemp(prefix=".hybridsched-stage-", dir=self.path)
        except OSError as exc:
            raise UsageError(f"{self.what} {self.path}: {exc.strerror or exc}") from None
        return self

    def __exit__(self, kind, *exc) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        if kind is not None and self.made:  # a failed command leaves no folder it made
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.path, LISTED))
                os.rmdir(self.path)

    def _ours(self) -> set[str]:
        try:
            with open(os.path.join(self.path, LISTED), encoding="utf-8") as fh:
                names = {line.rstrip("\n") for line in fh}
        except (OSError, UnicodeDecodeError):
            names = set()
        return names | ({_ALL} if self.named else set())

    def commit(self, files: list[str]) -> list[str]:
        """``files`` (written into the stage) moved into the folder: their new paths."""
        names = [os.path.basename(f) for f in files]
        ours = self._ours()
        if _ALL not in ours:
            theirs = [n for n in names if n not in ours and os.path.lexists(os.path.join(self.path, n))]
            if theirs:
                raise UsageError(f"{self.what} {self.path}: {theirs[0]} is there already and "
                                 "hybridsched did not write it; nothing written (name another "
                                 "folder, or move the file)")
            listed = sorted((ours | set(names)) - {""})
            write_text(os.path.join(self.path, LISTED), lambda fh: _lines(fh, listed))
        out = []
        for f, n in zip(files, names):
            os.replace(f, os.path.join(self.path, n))
            out.append(os.path.join(self.path, n))
        return out
