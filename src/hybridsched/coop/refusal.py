"""Whether the cooperative shim can manage a command here, decided before anything starts:
the machine (Linux on x86_64, a kernel with Syscall User Dispatch), the shim (a C compiler
to build it, or one built already) and the program (a dynamically linked glibc ELF the
loader will preload the shim into, followed through ``#!`` lines)."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import stat
import struct

from ..oslayer.shebang import HEAD_BYTES, carriage_return, shebang
from . import shimbuild

# prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0) succeeds on a kernel
# that has it (>= 5.11, CONFIG_GENERIC_ENTRY) and changes nothing; older ones say EINVAL
_PR_SET_SYSCALL_USER_DISPATCH, _PR_SYS_DISPATCH_OFF = 59, 0
_PT_DYNAMIC, _PT_INTERP = 2, 3
_EM_X86_64 = 62
_PHDR_SIZE = 56  # an ELF64 program header's bytes: a smaller entry size is no program
# env's options that take the next word as their value (GNU and BSD env)
_ENV_OPTIONS_WITH_VALUE = ("-u", "--unset", "-C", "--chdir", "-P")
_MAX_SHEBANGS = 4  # #! lines followed before giving up (the kernel allows 4 too)
# a command that cannot run at all: no alternative policy helps it
NOT_FOUND, NOT_EXECUTABLE = "no such command", "not an executable file"


def sud_available() -> bool:
    """Whether this kernel has Syscall User Dispatch (the shim's way to libgomp's waits)."""
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        return prctl(_PR_SET_SYSCALL_USER_DISPATCH, _PR_SYS_DISPATCH_OFF, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _elf_loader(path: str, head: bytes) -> tuple[str | None, str | None]:
    """(the program's loader (PT_INTERP) or None when static, a reason it cannot take the
    shim or None). A table or loader name past the file's end is a file cut short (an
    interrupted copy), not a program to unpack."""
    cut = f"{path} is an ELF file cut short, not a complete program"
    if len(head) < 64:
        return None, cut
    if head[4] != 2 or head[5] != 1:
        return None, f"{path} is not a 64-bit little-endian program"
    machine, = struct.unpack_from("<H", head, 18)
    if machine != _EM_X86_64:
        return None, f"{path} is for another architecture (ELF machine {machine})"
    phoff, = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    if phnum and phentsize < _PHDR_SIZE:
        return None, f"{path} is not a valid ELF program (program headers of {phentsize} bytes)"
    with open(path, "rb") as fh:
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
        if len(table) < phentsize * phnum:
            return None, cut
        for i in range(phnum):
            kind, = struct.unpack_from("<I", table, i * phentsize)
            if kind == _PT_INTERP:
                offset, = struct.unpack_from("<Q", table, i * phentsize + 8)
                size, = struct.unpack_from("<Q", table, i * phentsize + 32)
                fh.seek(offset)
                name = fh.read(min(size, 4096)).split(b"\0")[0].decode(errors="replace")
                return (name, None) if name else (None, cut)
    return None, None


def _env_program(words: list[str]) -> str | None:
    """The program of a ``#!/usr/bin/env ...`` line's words (after ``env``): env's options
    (``-S`` splits the rest into words, as the line already is) and NAME=VALUE words
    skipped; None when it names none."""
    options = True
    i = 0
    while i < len(words):
        w = words[i]
        if options and w == "--":
            options = False
        elif options and w in _ENV_OPTIONS_WITH_VALUE:
            i += 1
        elif options and w.startswith("-S") and len(w) > 2:
            return w[2:]
        elif options and w.startswith("--split-string="):
            if (split := w.partition("=")[2]):
                return split
        elif not (options and w.startswith("-")) and "=" not in w:
            return w
        i += 1
    return None


def program_refusal(command: str, _depth: int = 0) -> str | None:
    """Why the shim cannot be preloaded into ``command`` (a name on $PATH or a path), or
    None. Scripts are judged by their interpreter."""
    path = command if "/" in command else shutil.which(command)
    if path is None or not os.path.exists(path):
        return f"{command}: {NOT_FOUND}"
    try:
        st = os.stat(path)
        # a FIFO or device too: exec refuses them, and a read of a FIFO waits for a writer
        if not stat.S_ISREG(st.st_mode) or not os.access(path, os.X_OK):
            return f"{path}: {NOT_EXECUTABLE}"
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror})"
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        return f"{path} is setuid or setgid: the loader ignores LD_PRELOAD for it"
    line = shebang(head)
    if line is not None:
        if not line or _depth >= _MAX_SHEBANGS:
            return f"{path}: a #! line that cannot be followed"
        if carriage_return(line[0]):  # the command cannot run at all: no alternative
            return (f"{path}: its #! line ends in a carriage return (Windows line endings), "
                    f"so its interpreter {os.fsdecode(line[0])!r} is {NOT_FOUND}")
        words = [os.fsdecode(w) for w in line]
        # `env -S a b` (the kernel's one argument, split again by env itself)
        program = _env_program(" ".join(words[1:]).split()) \
            if os.path.basename(words[0]) == "env" else words[0]
        if program is None:
            return f"{path}: a #! line that cannot be followed"
        why = program_refusal(program, _depth + 1)
        if why is not None and why.endswith((NOT_FOUND, NOT_EXECUTABLE)):
            return f"{path}: its #! interpreter {why}"  # the script named, not only its interpreter
        return why
    if head[:4] != b"\x7fELF":
        return (f"{path} is neither a program nor a script with a #! line (a shell runs "
                f"such a script: name it, as in `sh {path}`)")
    loader, why = _elf_loader(path, head)
    if why:
        return why
    if loader is None:
        return f"{path} is statically linked: no loader runs to preload the shim"
    if "musl" in loader or not os.path.basename(loader).startswith("ld-linux"):
        return f"{path} uses the loader {loader}, not glibc's: the shim is a glibc library"
    return None


def shim_refusal(argv: list[str], alternative: str = shimbuild.NO_SHIM) -> str | None:
    """One line saying why ``argv`` cannot run under the cooperative shim here, ending with
    ``alternative`` (a command that cannot run at all gets none); None when it can. Costs
    no build (see shimbuild.available)."""
    if not argv or not argv[0]:
        return "coop: no command given"
    program = program_refusal(argv[0])
    if program is not None and program.endswith((NOT_FOUND, NOT_EXECUTABLE)):
        return f"coop: {program}"
    machine = platform.machine()
    why: str | None
    if platform.system() != "Linux" or machine != "x86_64":
        why = f"the coop shim runs on Linux x86_64 only, not {platform.system()} {machine}"
    elif not sud_available():
        why = ("this kernel has no Syscall User Dispatch (Linux 5.11 or later), without which "
               "the coop shim cannot see libgomp's waits and its threads would sleep holding tokens")
    elif not shimbuild.available():
        why = f"{shimbuild.no_compiler()} (install one, or set {shimbuild.SHIM_ENV} to a built one)"
    else:
        why = program
    return None if why is None else f"coop: {why}; {alternative}"
