"""A script's #! line as the kernel reads it (fs/binfmt_script.c): the interpreter and its
one argument, split on spaces and tabs only. A carriage return is no separator there: a
script saved with Windows line endings names `/bin/sh\\r`, which does not exist, where
Python's ``split()`` saw `/bin/sh`."""
from __future__ import annotations

HEAD_BYTES = 256  # the kernel reads a #! line up to this many bytes (BINPRM_BUF_SIZE)


def shebang(head: bytes) -> list[bytes] | None:
    """The words of the #! line at the start of ``head`` (the interpreter first, then its
    argument, if any), [] for a line that names none; None where ``head`` has no #!."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].replace(b"\t", b" ").strip(b" ")
    if not line:
        return []
    interp, _, arg = line.partition(b" ")
    arg = arg.strip(b" ")
    return [interp, arg] if arg else [interp]


def carriage_return(interp: bytes) -> str:
    """What to add to a refusal of interpreter ``interp``: why it is missing, where a
    carriage return ends it."""
    return " (the #! line ends in a carriage return: Windows line endings)" \
        if interp.endswith(b"\r") else ""
