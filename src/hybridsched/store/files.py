"""Files we create, created safely: the writer's lock beside a study, files published by an
atomic rename, and the report directory.

Nothing here follows a symlink or writes into a pre-created path: new files are opened with
O_CREAT | O_EXCL | O_NOFOLLOW under a name nobody can guess, then renamed into place (a
rename replaces a symlink at the destination instead of writing through it).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import re
import secrets
import socket
import stat
import sys
import time
from typing import Callable, Iterator

from ..errors import DiskFull, OutputLost, StudyBusy, UsageError
from ..oslayer.procfs import pid_alive, pid_namespace

LOCK_SUFFIX = ".lock"
_LOCK_TEXT = re.compile(rb"\d{1,10} \S{1,200} \d{1,20}\n?")  # StudyLock._write_holder's line
_NEW = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FULL = (errno.ENOSPC, errno.EDQUOT)

# fsync every published snapshot before the rename: without it a power cut (not a kill, the
# page cache survives those) can leave the renamed name pointing at an empty file. It costs
# a few ms per run on a disk, nothing on tmpfs; losing the whole study is worse.
FSYNC = True


def check_output(path: str, what: str = "--out") -> None:
    """Raise UsageError unless ``path`` can be (re)placed by a study we write: a name in an
    existing writable directory that is absent or a regular file. Creates nothing."""
    if not path:
        raise UsageError(f"{what}: an empty file name")
    d = os.path.dirname(os.path.abspath(path)) or "."
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{what} {path}: is a symbolic link (give the real path)")
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} {path}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{what} {path}: is not a regular file (a device, FIFO or socket)")
    if not os.path.isdir(d):
        raise UsageError(f"{what} {path}: directory {d} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path}: not writable")
    # access() says yes to root everywhere, and to /proc or /sys; only a real file tells
    probe = os.path.join(d, f".hybridsched-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        fd = os.open(probe, _NEW | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot create a file in {d} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def _tmp_name(path: str) -> str:
    d, base = os.path.split(os.path.abspath(path))
    return os.path.join(d, f".{base}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


@contextlib.contextmanager
def replacing(path: str, mode: int = 0o666) -> Iterator[io.BufferedWriter]:
    """A binary file that appears at ``path`` (atomically, replacing what is there) only if
    the block completes; on any exit path before that nothing is left behind."""
    tmp = _tmp_name(path)
    fd = os.open(tmp, _NEW | os.O_WRONLY, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if FSYNC:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_stale_temps(path: str, pid: int | None = None) -> list[str]:
    """Remove the temporary files of ``path`` that a SIGKILLed writer left mid-publish (with
    ``pid``: only that writer's). Called with the study's lock held, so no other writer of
    it can be using one."""
    d, base = os.path.split(os.path.abspath(path))
    writer = r"\d+" if pid is None else str(int(pid))
    pattern = re.compile(rf"\.{re.escape(base)}\.{writer}\.[0-9a-f]{{12}}\.tmp")
    removed: list[str] = []
    try:
        names = os.listdir(d)
    except OSError:
        return removed
    for name in names:
        if not pattern.fullmatch(name):
            continue
        full = os.path.join(d, name)
        try:
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(full)
                removed.append(name)
        except OSError:
            pass
    return removed


def publish(path: str, data, safe: str, replacing_old: bool = False,
            then: str = "free space and run it again to a new --out") -> None:
    """Write ``data`` (bytes-like) to ``path`` by rename; DiskFull if space runs out (the
    previous content of ``path`` is then untouched). ``safe``: what the file at ``path``
    holds already ("3 runs", "" for nothing); ``then``: what the user can do next (only
    `run` can continue a study); ``replacing_old``: the file at ``path`` is an older
    study being overwritten, not this one's earlier snapshot."""
    try:
        with replacing(path) as fh:
            fh.write(data)
    except OSError as exc:
        if exc.errno in _FULL:
            if replacing_old:
                raise DiskFull(f"disk full: the new study could not be written; {path} still "
                               "holds the old one, unchanged (free space and run again)") from None
            where = (f"{safe or '0 runs'} are safe in {path}" if safe or os.path.exists(path)
                     else f"nothing could be stored in {path}")
            raise DiskFull(f"disk full: {where} ({then})") from None
        kept = (f"its last snapshot, {safe or '0 runs'}, is still there"
                if os.path.exists(path) and not replacing_old else "nothing of this run is stored")
        raise OutputLost(f"{path}: can no longer be written ({exc.strerror or exc}: its folder "
                         f"removed or made read-only?); {kept}") from None


def write_text(path: str, write: Callable[[io.TextIOBase], None]) -> None:
    """Write a text file (report CSVs) by rename."""
    with replacing(path) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        write(text)
        text.flush()
        text.detach()


@contextlib.contextmanager
def single_output(path: str, what: str, overwrite: bool,
                  inputs: tuple[str, ...] = ()) -> Iterator[None]:
    """Held while a command writes its one file ``path`` (a trace, a plot, a calibration):
    that path's study lock, so a study being written there is never replaced (nor is this
    file by a study writer meanwhile). Refused before anything is done: an existing file
    without ``overwrite``, or one of the command's ``inputs``."""
    check_output(path, what)
    if os.path.lexists(path):
        if not overwrite:
            raise UsageError(f"{what} {path}: file exists (use --overwrite to replace it)")
        if any(same_file(path, p) for p in inputs):
            raise UsageError(f"{what} {path}: is also the input; not replaced")
    with StudyLock(path):
        yield


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (by their names when either cannot be looked at)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def our_directory(path: str, what: str = "--out-dir") -> str:
    """Create ``path`` as a fresh directory, or reuse it if it is a real directory (not a
    symlink) owned by us; anything else is refused with a UsageError. Missing parents
    are made as ``mkdir -p`` would (they are the user's own path)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except FileExistsError:  # a part of the path is a file
        raise UsageError(f"{what} {path}: a part of the path is a file, not a folder") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from None
    try:
        os.mkdir(path, 0o777)
        return path
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {path}: exists and is not a directory (a symbolic link or "
                         "a file); not written through")
    if st.st_uid != os.geteuid():
        raise UsageError(f"{what} {path}: belongs to another user; not written into")
    return path


# --- one writer per study ---------------------------------------------------------------


# How long a writer waits on a lock whose recorded holder is gone: the flock lives on in the
# holder's forked workers until they die with it (PR_SET_PDEATHSIG, milliseconds). Longer
# only delays the busy message when the lock really is held by a live pid reused since.
STALE_WAIT_S = 2.0


def remove_left_by(lock_path: str, pid: int) -> bool:
    """Remove a study lock its holder ``pid`` left when it died (an MPI rank killed by the
    launcher runs no exit path of its own): only a regular file whose holder line names
    that pid on this host, and only while we hold its flock, so a live writer's lock or
    one taken over meanwhile is never touched; with it go the temporary files that pid
    left mid-publish beside the study. Whether it was removed."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: not a dead writer's
        words = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
        if words[:2] != [str(pid), socket.gethostname()]:
            return False
        if os.stat(lock_path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
            return False
        if lock_path.endswith(LOCK_SUFFIX):  # what it was publishing when it died
            remove_stale_temps(lock_path[:-len(LOCK_SUFFIX)], pid)
        os.unlink(lock_path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class StudyLock:
    """The one-writer lock of a study: ``<study>.lock`` beside it, holding the writer's pid,
    host and pid namespace, with an flock held on it for the writer's life.

    Taken before anything is read for --resume or replaced for --overwrite. The flock, not
    the pid, decides: the kernel drops it when the holder dies however it dies, so a lock
    left by a SIGKILLed writer is taken over (with a one-line notice) and a live writer's
    never is. The pid and host are only for the messages. A context manager.
    """

    def __init__(self, study: str):
        self.study = study
        self.path = study + LOCK_SUFFIX
        self._fd: int | None = None

    def acquire(self) -> "StudyLock":
        while True:
            created = True
            try:
                fd = os.open(self.path, _NEW | os.O_RDWR, 0o644)
            except FileExistsError:
                created = False
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # its holder just released it: try again
                except OSError as exc:
                    raise UsageError(f"{self.path}: cannot use this lock file ({exc.strerror}; "
                                     "a symbolic link?)") from None
            except OSError as exc:
                if exc.errno in _FULL:
                    raise DiskFull(f"disk full: cannot create the lock {self.path}") from None
                raise UsageError(f"{self.path}: cannot create the lock ({exc.strerror})") from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UsageError(f"{self.path}: is not a regular file; not used as a lock")
                self._flock(fd)
                try:
                    same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:  # released and removed between our open and our flock
                    os.close(fd)
                    continue
            except BaseException:
                if self._fd != fd:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise
            if not created and not self._is_lock(fd):
                os.close(fd)
                raise UsageError(f"{self.path}: exists and is not a hybridsched lock (a file of "
                                 "yours?); not touched: move it, or use another --out")
            if not created:
                print(f"hybridsched: taking over the lock {self.path} left by "
                      f"{self._holder(fd)}, which is gone", file=sys.stderr)
            self._fd = fd
            self._write_holder(fd)
            remove_stale_temps(self.study)
            return self

    def _flock(self, fd: int) -> None:
        deadline = time.monotonic() + STALE_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if self._holder_dead(fd) and time.monotonic() < deadline:
                    time.sleep(0.05)  # its forked workers, dying with it, still share the fd
                    continue
                raise StudyBusy(f"{self.study}: is being written by {self._holder(fd)}; "
                                "one writer per study (wait for it, or use another "
                                "--out)") from None

    @staticmethod
    def _info(fd: int) -> list[str]:
        try:
            return os.pread(fd, 256, 0).decode("utf-8", "replace").split()
        except OSError:
            return []

    @staticmethod
    def _is_lock(fd: int) -> bool:
        """What a lock holds: nothing (its writer died before writing) or one line "pid host
        pid-namespace". Anything else (a study named like a lock, a user's file) is never
        taken over: the takeover empties it."""
        try:
            body = os.pread(fd, 257, 0)
        except OSError:
            return False
        return not body or _LOCK_TEXT.fullmatch(body) is not None

    def _holder(self, fd: int) -> str:
        text = self._info(fd)
        try:
            return f"pid {int(text[0])} on {text[1]}"
        except (ValueError, IndexError):
            return "another process"

    def _holder_dead(self, fd: int) -> bool:
        """The recorded holder is a process of this host and pid namespace that is gone."""
        text = self._info(fd)
        try:
            pid, host, ns = int(text[0]), text[1], int(text[2])
        except (ValueError, IndexError):
            return False
        if host != socket.gethostname() or ns != pid_namespace():
            return False
        return not pid_alive(pid)

    def _write_holder(self, fd: int) -> None:
        info = f"{os.getpid()} {socket.gethostname()} {pid_namespace()}\n".encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info, 0)
        except OSError:
            pass  # a full disk: the flock still holds; only the message loses the pid

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still holding the flock, so no one else's lock goes
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "StudyLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
