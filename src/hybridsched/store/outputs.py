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
import stat
import tempfile

from ..errors import UsageError
from ..oslayer.folders import first_missing, remove_made
from .files import our_directory, write_text

# the names hybridsched wrote into an output folder, one a line; "*": all of them (it made
# the folder)
LISTED = ".hybridsched-outputs"
_ALL = "*"


# the most of a list read: a report writes tens of names
_LISTED_MAX = 1 << 20


def _listed(path: str) -> set[str]:
    """The names a folder's list holds; none where it is not a regular file of ours (a
    symbolic link to /dev/zero or a FIFO there hung the report: the review), or cannot be
    read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return set()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return set()
        text = os.read(fd, _LISTED_MAX).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return set()
    finally:
        os.close(fd)
    return {line for line in text.split("\n") if line and "/" not in line}


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
        # the folder as the kernel finds it: `lnk/../new` is new beside lnk's target, not
        # beside lnk (abspath's text made a stray folder there: the review)
        self.real = os.path.join(os.path.realpath(os.path.dirname(path) or "."),
                                 os.path.basename(os.path.normpath(path)))
        self.stage = ""
        self.made: str | None = None  # the first folder of the path we made, if any
        self._moved = False

    def __enter__(self) -> OutputDir:
        try:  # an interrupt in here too leaves no folder made for it (the review)
            self.made = first_missing(self.real)
            our_directory(self.real, self.what)
            if self.made:
                write_text(os.path.join(self.real, LISTED), lambda fh: _lines(fh, [_ALL]))
            self.stage = tempfile.mkdtemp(prefix=".hybridsched-stage-", dir=self.real)
        except BaseException as exc:
            self.__exit__(type(exc))
            if isinstance(exc, OSError):
                raise UsageError(f"{self.what} {self.path}: {exc.strerror or exc}") from None
            raise
        return self

    def __exit__(self, kind, *exc) -> None:
        if self.stage:
            shutil.rmtree(self.stage, ignore_errors=True)
        if kind is None or not self.made or self._moved:
            # once a file is moved in, the folder stays as it is, with its list: a file
            # removed by name could be another report's, moved in meanwhile (the review)
            return
        with contextlib.suppress(OSError):  # nothing of ours in it but the list
            if set(os.listdir(self.real)) <= {LISTED}:
                os.unlink(os.path.join(self.real, LISTED))
        remove_made(self.real, self.made)  # then the folders made for it, `mkdir -p`'s too

    def _ours(self) -> set[str]:
        if self.named:
            return {_ALL}
        return _listed(os.path.join(self.real, LISTED))

    def commit(self, files: list[str]) -> list[str]:
        """``files`` (written into the stage) moved into the folder: their new paths."""
        names = [os.path.basename(f) for f in files]
        ours = self._ours()
        if _ALL not in ours:
            theirs = [n for n in names if n not in ours and os.path.lexists(os.path.join(self.real, n))]
            if theirs:
                raise UsageError(f"{self.what} {self.path}: {theirs[0]} is there already and "
                                 "hybridsched did not write it; nothing written (name another "
                                 "folder, or move the file)")
            listed = sorted((ours | set(names)) - {""})
            write_text(os.path.join(self.real, LISTED), lambda fh: _lines(fh, listed))
        out = []
        for f, n in zip(files, names):
            self._moved = True  # before the move: an interrupt right after it is seen so
            os.replace(f, os.path.join(self.real, n))
            out.append(os.path.join(self.path, n))
        return out
