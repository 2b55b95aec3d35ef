"""An unmodified command of `colocate --cmd`: its words (shell quoting, no shell) and the
executable they name, checked before anything starts, as ``execvp`` would find it."""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass

from ..errors import UsageError
from ..oslayer.shebang import HEAD_BYTES, carriage_return, shebang

MAX_COMMAND = 512  # bytes of the command as given, stored with every row of its job


@dataclass(frozen=True)
class Command:
    text: str                # as given, stored in the study
    argv: tuple[str, ...]
    path: str                # the executable: absolute, resolved through PATH if need be


def parse_command(text: str, path_env: str | None = None) -> Command:
    """The command ``text`` names, or UsageError (one line) when it is empty, badly quoted,
    not found, or not something the kernel can execute."""
    shown = f"--cmd {text!r}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # stored as UTF-8 text with every row of its job
        raise UsageError(f"{shown}: not UTF-8 text (put the command in a script)") from None
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{shown}: {exc} (its words are split as shlex.split does)") from None
    if not argv:
        raise UsageError(f"{shown}: an empty command")
    if len(text.encode("utf-8")) > MAX_COMMAND:
        raise UsageError(f"{shown[:60]}...: longer than {MAX_COMMAND} bytes; put it in a script")
    exe = argv[0]
    if "/" in exe:
        path = os.path.abspath(exe)
        if not os.path.exists(path):
            raise UsageError(f"{shown}: {exe}: no such file")
        if os.path.isdir(path):
            raise UsageError(f"{shown}: {exe}: is a directory")
        if not os.path.isfile(path):  # /dev/null: no chmod makes it a program
            raise UsageError(f"{shown}: {exe}: not a regular file (a device, a FIFO or a socket)")
        if not os.access(path, os.X_OK):
            raise UsageError(f"{shown}: {exe}: not executable (chmod +x it, or name its "
                             "interpreter first)")
    else:
        found = shutil.which(exe, path=path_env if path_env is not None else os.environ.get("PATH"))
        if found is None:
            raise UsageError(f"{shown}: {exe}: command not found (not an executable on PATH)")
        path = os.path.abspath(found)
    why = _not_executable(path)
    if why:
        raise UsageError(f"{shown}: {exe}: {why}")
    return Command(text, argv, path)


def _not_executable(path: str) -> str:
    """Why execve cannot run ``path`` ("" when it can, as far as its first bytes tell): an
    ELF header cut short, or a #! script whose interpreter is missing (execve's ENOEXEC
    and ENOENT, which would show only as a job failing with status 127); neither a binary
    nor a #! script is refused too (a shell would run it through sh; execve does not).
    Nothing to say when it cannot be read (an execute-only binary)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return ""
    if head.startswith(b"\x7fELF"):
        return "" if len(head) >= _ELF_HEADER else "an ELF file cut short (not a complete program)"
    words = shebang(head)
    if words is None:
        return "neither a binary nor a script with a #! line (name its interpreter first)"
    if not words:
        return "its #! line names no interpreter"
    interp = os.fsdecode(words[0])
    if not os.path.isfile(interp) or not os.access(interp, os.X_OK):
        shown = repr(interp) if "\r" in interp else interp
        return f"its #! interpreter {shown} is not an executable file{carriage_return(words[0])}"
    return ""


_ELF_HEADER = 64   # bytes of a 64-bit ELF header; fewer cannot be executed
