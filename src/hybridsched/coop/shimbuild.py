"""The cooperative shim's shared library: built from its C sources (package data,
``coop/shim/``) with the system C compiler on first use, into a per-user cache.

Why on first use and not at ``pip install``: the package stays pure Python (one wheel for
every machine, no compiler needed to install it), every policy but ``coop`` works
without a compiler, and a build that fails refuses ``coop`` alone, in one line, instead
of breaking the install. The cached library's name carries a hash of everything that
decides its bytes — the sources, the layout header generated from :mod:`layout`, the
flags, the compiler's version and the machine — so a new hybridsched, layout or compiler
builds anew and never loads a stale one. It is written under a temporary name and renamed
into place: a concurrent first use builds at most twice and nobody loads half a file.
``HYBRIDSCHED_COOP_SHIM`` names a library built elsewhere instead.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from ..errors import ShimUnavailable
from ..oslayer.folders import first_missing, remove_made
from .layout import VERSION, c_header

SHIM_ENV = "HYBRIDSCHED_COOP_SHIM"
SOURCES = ("rules.c", "runtime.c", "cs.c", "members.c", "early.c", "segment.c", "sud.c",
           "wrap_sync.c", "wrap_locks.c", "wrap_rwlocks.c", "wrap_io.c", "wrap_process.c",
           "wrap_exec.c", "wrap_omp.c", "wrap_stdio.c", "wrap_printf.c", "watch.c", "owner.c")
HEADERS = ("coop.h", "wrap.h", "wrap_stdio.h")
LAYOUT_HEADER = "hs_layout.h"
# -fvisibility=hidden: only the interposed functions (and the hs_x_ test entry points) are
# exported, so the shim's own calls between its files never go through the PLT;
# -fexceptions: a thread cancelled inside a wrapped call unwinds through its frame
CFLAGS = ("-O2", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-fexceptions",
          "-Wall", "-Wextra", "-Wno-unused-parameter")
LIBS = ("-ldl", "-lpthread")
# A built shim exports this test entry point (sud.c): what tells it from other libraries;
# and, since 2026-12-07, the watchdog's looks (watch.c), without which a build from an
# older hybridsched was refused only once a job had started
_SHIM_MARK = b"hs_x_nudge_signal"
_WATCH_MARK = b"hs_watch_wait"
_MAX_SHIM_BYTES = 16 << 20  # a build is ~100 KiB; more than this is not one
# what to use instead, in every refusal's line
NO_SHIM = "use --policy env or gang, which need no shim"
NO_COMPILER = ("the coop shim is built on first use with a C compiler, and no cc is on PATH, "
               "nor is a build of this version cached")


def sources() -> dict[str, str]:
    """The shim's C files (package data) and the generated layout header, by name."""
    folder = resources.files(__package__) / "shim"
    out = {name: (folder / name).read_text() for name in SOURCES + HEADERS}
    out[LAYOUT_HEADER] = c_header()
    return out


def compiler() -> tuple[str, ...] | None:
    """The C compiler's command: $CC (with its options, as make takes it: ``gcc -O0``,
    ``ccache cc``), else cc, its program found on PATH; None where it is not."""
    try:
        words = shlex.split(os.environ.get("CC") or "cc")
    except ValueError:  # an unbalanced quote: no command to run
        return None
    path = shutil.which(words[0]) if words else None
    return (path, *words[1:]) if path else None


def no_compiler() -> str:
    """Why there is no shim to be had, :func:`compiler` having found none."""
    given = os.environ.get("CC")
    if given:
        try:
            shlex.split(given)
            what = "names no program on PATH"
        except ValueError:
            what = "cannot be split into words (an unbalanced quote)"
        return (f"the coop shim is built on first use with a C compiler, and CC={given!r} "
                f"{what}, nor is a build of this version cached")
    return NO_COMPILER


def cache_dir() -> str:
    """Where built shims are kept: $XDG_CACHE_HOME/hybridsched (~/.cache/hybridsched). A
    relative $XDG_CACHE_HOME is ignored, as the XDG spec says: taken as given, the build's
    link step failed in another folder, with a linker's message and a folder left behind."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hybridsched")


def _private_dir(path: str) -> None:
    """Make ``path`` (mode 0700) or accept it only if it is this user's and nobody else
    may write in it: a library loaded into other programs is never taken from a folder
    someone else could have planted it in."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise ShimUnavailable(f"coop shim cache {path}: {exc.strerror}; set {SHIM_ENV} or "
                              "XDG_CACHE_HOME", NO_SHIM) from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ShimUnavailable(f"coop shim cache {path} is not a private folder of this user: "
                              "refusing it (set XDG_CACHE_HOME)", NO_SHIM)


@functools.lru_cache(maxsize=8)
def _version(cc: tuple[str, ...]) -> str:
    """The compiler's first line of `--version` and its options, asked once per process and
    compiler: a coop start looks the library up twice (the refusal's check, then the job),
    and each asking forked a large process (~20-30 ms)."""
    options = " ".join(cc[1:])
    try:
        out = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:  # not "did not build": never tried
        why = getattr(exc, "strerror", None) or str(exc)
        raise ShimUnavailable(f"cannot ask {shlex.join(cc)} its version ({why})", NO_SHIM) \
            from None
    first = out.stdout.splitlines()[0] if out.stdout else cc[0]
    return f"{first} {options}".rstrip()


def source_key(files: dict[str, str]) -> str:
    """What a build is made of, but the compiler: the sources, flags and platform."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    h.update(" ".join(CFLAGS + LIBS).encode() + b"\0")
    h.update(platform.machine().encode() + " ".join(platform.libc_ver()).encode())
    return h.hexdigest()[:16]


def build_key(files: dict[str, str], cc: tuple[str, ...]) -> str:
    """A build's name in the cache: its sources' key, then its compiler's."""
    return f"{source_key(files)}-{hashlib.sha256(_version(cc).encode()).hexdigest()[:8]}"


def _cached(folder: str, files: dict[str, str]) -> str | None:
    """A build of ``files`` in ``folder`` by any compiler (the newest), this user's; None.
    What serves where no compiler is on PATH now (a job's environment without it)."""
    prefix, suffix = f"coopshim-{source_key(files)}-", f"-{platform.machine()}.so"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(suffix)]
    except OSError:
        return None
    found = []
    for name in names:
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            st = os.stat(path, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                found.append((st.st_mtime, path))
    # the newest that is a whole build (an empty or foreign file beside a good one was
    # taken, and refused as a library that cannot be loaded: the review)
    return next((path for _, path in sorted(found, reverse=True) if _is_build(path)), None)


def _is_build(path: str) -> bool:
    """Whether ``path`` holds a build of these sources' kind (an ELF file with the marks)."""
    try:
        with open(path, "rb") as fh:
            body = fh.read(_MAX_SHIM_BYTES)
    except OSError:
        return False
    return body.startswith(b"\x7fELF") and _SHIM_MARK in body and _WATCH_MARK in body


def _compile(cc: tuple[str, ...], files: dict[str, str], out: str) -> None:
    try:
        _build(cc, files, out)
    except OSError as exc:  # the cache's file system full, say: one line, not a traceback
        raise ShimUnavailable(f"the coop shim could not be built in {os.path.dirname(out)}: "
                              f"{exc.strerror or exc}", NO_SHIM) from None


def _build(cc: tuple[str, ...], files: dict[str, str], out: str) -> None:
    with tempfile.TemporaryDirectory(prefix="coopshim-", dir=os.path.dirname(out)) as tmp:
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w") as fh:
                fh.write(text)
        lib = os.path.join(tmp, "coopshim.so")
        # each file compiled apart, as many at once as there are CPUs, then linked: 1.25 s
        # on this 2-CPU machine against 2.34 s in one cc call (medians of 5, alternated)
        objects = [name[:-2] + ".o" for name in SOURCES]
        with ThreadPoolExecutor(min(len(SOURCES), os.cpu_count() or 1)) as pool:
            runs = list(pool.map(lambda src, obj: _cc(cc, tmp, [*CFLAGS, "-c", src, "-o", obj]),
                                 SOURCES, objects))
        for p in [*runs, _cc(cc, tmp, ["-shared", "-o", lib, *objects, *LIBS])]:
            if p.returncode != 0:
                first = next((ln for ln in p.stderr.splitlines() if "error" in ln),
                             p.stderr.strip()[:200]) or f"exit status {p.returncode}"
                raise ShimUnavailable(f"the coop shim did not build with {shlex.join(cc)}: {first}",
                                      NO_SHIM)
        os.chmod(lib, 0o755)
        _loads(cc, lib)
        os.replace(lib, out)  # atomic: whoever loads it sees all of it


def _loads(cc: tuple[str, ...], lib: str) -> None:
    """Refuse a build that a program cannot load, before it is cached: one made with options
    that change what it needs (`CC='gcc -fsanitize=address'` built, and then every command
    failed with the sanitizer's complaint; the review). Tried in a child: a dormant load."""
    try:
        p = subprocess.run([sys.executable, "-S", "-c", ""], env={"LD_PRELOAD": lib},
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ShimUnavailable(f"the coop shim built with {shlex.join(cc)} could not be tried "
                              f"({exc})", NO_SHIM) from None
    if p.returncode != 0 or p.stderr:
        first = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[0][:200]
        raise ShimUnavailable(f"the coop shim built with {shlex.join(cc)} does not load into "
                              f"a program: {first}", NO_SHIM)


def _cc(cc: tuple[str, ...], cwd: str, args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*cc, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ShimUnavailable(f"the coop shim did not build ({shlex.join(cc)}: {exc})",
                              NO_SHIM) from None


def shim_library(cache: str | None = None) -> str:
    """The path of the built shim: $HYBRIDSCHED_COOP_SHIM when set, else the build in
    ``cache`` (default :func:`cache_dir`), made now if missing (a second or two). Raises
    ShimUnavailable."""
    given = os.environ.get(SHIM_ENV) if cache is None else None
    if given:
        return _carried(_given(given))
    files = sources()
    # as the kernel resolves it (`new/../mine` is `mine`, and `new` is never made for it)
    folder = _carried(os.path.realpath(cache or cache_dir()))
    cc = compiler()
    if cc is None:
        built = _cached(folder, files)
        if built is None:
            raise ShimUnavailable(f"{no_compiler()}; install one or set {SHIM_ENV}", NO_SHIM)
        _private_dir(folder)
        return built
    made = first_missing(folder)
    _private_dir(folder)
    try:
        try:
            key = build_key(files, cc)
        except ShimUnavailable:  # the compiler cannot be run now (`ulimit -n 8` took its
            built = _cached(folder, files)  # descriptors): a build of these sources by any
            if built is None:               # compiler serves, as where none is on PATH
                raise
            return built
        path = os.path.join(folder, f"coopshim-{key}-{platform.machine()}.so")
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            _compile(cc, files, path)
            return path
    except BaseException:  # refused or interrupted: the folders made for it go (if empty)
        remove_made(folder, made)
        raise
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        raise ShimUnavailable(f"{path} is not this user's file: refusing to load it", NO_SHIM)
    return path


def _carried(path: str) -> str:
    """``path``, refused before anything is built there when LD_PRELOAD cannot carry it (its
    list is split at spaces and colons)."""
    if any(c in path for c in " :"):
        raise ShimUnavailable(f"the coop shim's path {path} has a space or a colon, which "
                              f"LD_PRELOAD cannot carry; set XDG_CACHE_HOME (or {SHIM_ENV}) "
                              "elsewhere", NO_SHIM)
    return path


def _given(path: str) -> str:
    """$HYBRIDSCHED_COOP_SHIM's library, refused unless it is a build of the shim's sources:
    anything else (a typo for another library, /etc/passwd) ran the command unmanaged, every
    counter 0, with only the loader's complaint to show for it."""
    try:
        with open(path, "rb") as fh:
            body = fh.read(_MAX_SHIM_BYTES)
    except IsADirectoryError:
        raise ShimUnavailable(f"{SHIM_ENV}={path}: a directory, not the shim's library",
                              NO_SHIM) from None
    except OSError as exc:
        raise ShimUnavailable(f"{SHIM_ENV}={path}: {exc.strerror}", NO_SHIM) from None
    if not body.startswith(b"\x7fELF") or _SHIM_MARK not in body:
        raise ShimUnavailable(f"{SHIM_ENV}={path}: not a build of the coop shim (unset it to "
                              "have one built)", NO_SHIM)
    if _WATCH_MARK not in body:
        raise ShimUnavailable(f"{SHIM_ENV}={path}: a build of an older hybridsched's coop shim "
                              "(unset it to have one built)", NO_SHIM)
    return os.path.abspath(path)


@functools.lru_cache(maxsize=8)
def functions(path: str, names: tuple[str, ...], purpose: str,
              alternative: str = NO_SHIM) -> tuple:
    """The shim's functions ``names`` from its library at ``path``, loaded dormant through
    ctypes (its constructor acts only in a launched command), for ``purpose`` (what the
    refusal names, with ``alternative``); ShimUnavailable for a library that cannot be
    loaded, a build without them (another hybridsched's) or one that reads another segment
    layout."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise ShimUnavailable(f"the coop shim {path!r} cannot be loaded ({exc})",
                              alternative) from None
    try:
        fns = tuple(getattr(lib, name) for name in names)
        version = lib.hs_layout_version()
    except AttributeError as exc:
        raise ShimUnavailable(f"the coop shim {path!r} cannot serve {purpose} ({exc}): a "
                              f"build of another hybridsched? unset {SHIM_ENV} or rebuild it",
                              alternative) from None
    if version != VERSION:  # it would read the tables at another layout's offsets
        raise ShimUnavailable(f"the coop shim {path!r} reads segment layout {version}, this "
                              f"hybridsched's is {VERSION}: unset {SHIM_ENV} or rebuild it",
                              alternative)
    return fns


def available() -> bool:
    """Whether the shim can be had without building anything new: a given or cached one,
    or a C compiler to build it (cheap: used to refuse before anything starts)."""
    return (bool(os.environ.get(SHIM_ENV)) or compiler() is not None
            or _cached(cache_dir(), sources()) is not None)
