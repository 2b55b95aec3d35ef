"""The shim's build (cached by its source, made atomically, by the compiler the user
names) and its refusals, each in one line naming the reason and the alternative."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from hybridsched.coop import refusal, shimbuild
from hybridsched.errors import ShimUnavailable
from shimprogs import build


def test_the_build_is_cached_by_its_source_and_made_atomically(tmp_path, shim_lib, monkeypatch):
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    cache = str(tmp_path / "c")
    first = shimbuild.shim_library(cache=cache)
    assert shimbuild.shim_library(cache=cache) == first
    assert os.listdir(cache) == [os.path.basename(first)]  # no temporary left
    files = shimbuild.sources()
    files["rules.c"] += "\n/* changed */\n"
    assert shimbuild.build_key(files, shimbuild.compiler()) not in first


def test_the_compiler_is_asked_its_version_once_per_process(shim_lib, monkeypatch):
    calls = []
    real = subprocess.run
    monkeypatch.setattr(shimbuild.subprocess, "run",
                        lambda argv, **kw: calls.append(argv) or real(argv, **kw))
    shimbuild._version.cache_clear()
    files, cc = shimbuild.sources(), shimbuild.compiler()
    assert shimbuild.build_key(files, cc) == shimbuild.build_key(files, cc)
    assert [a for a in calls if "--version" in a] == [[*cc, "--version"]]


def test_a_cache_folder_others_may_write_is_refused(tmp_path, shim_lib, monkeypatch):
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    cache = tmp_path / "open"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    with pytest.raises(ShimUnavailable, match="not a private folder"):
        shimbuild.shim_library(cache=str(cache))


@pytest.mark.parametrize("given, words", [("/etc/passwd", "not a build of the coop shim"),
                                          ("libm.so.6", "No such file"),
                                          ("{tmp}", "a directory"),
                                          ("{libm}", "not a build of the coop shim")])
def test_a_given_library_that_is_not_the_shim_is_refused(tmp_path, shim_lib, monkeypatch,
                                                        given, words):
    """HYBRIDSCHED_COOP_SHIM naming another library (or any file) ran the command
    unmanaged, every counter 0, with only the loader's complaint."""
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6")
                 if os.path.exists(p)), "/etc/hostname")
    monkeypatch.setenv(shimbuild.SHIM_ENV, given.format(tmp=tmp_path, libm=libm))
    with pytest.raises(ShimUnavailable, match=words):
        shimbuild.shim_library()
    monkeypatch.setenv(shimbuild.SHIM_ENV, shim_lib)
    assert shimbuild.shim_library() == shim_lib


def test_a_given_build_of_an_older_shim_is_refused_before_anything_starts(tmp_path, shim_lib,
                                                                        monkeypatch):
    """A build without the watchdog's looks (watch.c) passed the check and was refused only
    once a job had started, by the watchdog's ctypes lookup (the review)."""
    old = tmp_path / "old.so"
    old.write_bytes(b"\x7fELF" + b"\0" * 60 + shimbuild._SHIM_MARK)
    monkeypatch.setenv(shimbuild.SHIM_ENV, str(old))
    with pytest.raises(ShimUnavailable, match="an older hybridsched"):
        shimbuild.shim_library()


def test_programs_the_shim_cannot_enter_are_refused_in_one_line(tmp_path, shim_lib):
    static = build("thread_exit", tmp_path, "-static")
    script = tmp_path / "run.sh"
    script.write_text(f"#!{static}\n")
    script.chmod(0o755)
    data = tmp_path / "data"
    data.write_text("x")
    data.chmod(0o755)
    crlf = tmp_path / "crlf.sh"  # the kernel looks for `/bin/sh\r` (the third review)
    crlf.write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    crlf.chmod(0o755)
    fifo = tmp_path / "fifo"  # executable: its read for the check waited for ever (the review)
    os.mkfifo(fifo)
    fifo.chmod(0o755)
    lost = tmp_path / "lost.sh"  # the refusal named the interpreter only (the review)
    lost.write_text("#!/no/such/interpreter\necho hi\n")
    lost.chmod(0o755)
    for argv, words in (([static], "statically linked"), ([str(script)], "statically linked"),
                        ([str(lost)], f"{lost}: its #! interpreter /no/such/interpreter: no such"),
                        ([str(data)], "neither a program"), (["no-such-command-x"], "no such command"),
                        ([str(tmp_path)], "not an executable"), ([str(fifo)], "not an executable"),
                        ([str(crlf)], "ends in a carriage return")):
        why = refusal.shim_refusal(argv)
        assert why and "\n" not in why and words in why, (argv, why)
    assert refusal.shim_refusal(["sh"]) is None and refusal.shim_refusal(["/usr/bin/env"]) is None
    assert "--policy env or gang" in refusal.shim_refusal([static])


def test_a_program_cut_short_is_refused_in_one_line(tmp_path, shim_lib):
    """An interrupted copy of a program: its headers end before the program-header table
    (a struct.error traceback before) or inside its loader's name ("uses the loader ,")."""
    whole = open(shutil.which("true"), "rb").read()
    for size in (100, 400):
        cut = tmp_path / f"cut{size}"
        cut.write_bytes(whole[:size])
        cut.chmod(0o755)
        why = refusal.shim_refusal([str(cut)])
        assert why and "\n" not in why and "cut short" in why, (size, why)


@pytest.mark.parametrize("line", ["/usr/bin/env -S sh -e", "/usr/bin/env -Ssh", "/usr/bin/env A=1 sh",
                                  "/usr/bin/env -u HOME -i -- sh", "/usr/bin/env --split-string=sh -e"])
def test_env_options_on_a_scripts_line_are_skipped_to_its_interpreter(tmp_path, shim_lib, line):
    """`#!/usr/bin/env -S python3 -u` was refused as "coop: -S: no such command"."""
    script = tmp_path / "run"
    script.write_text(f"#!{line}\necho hi\n")
    script.chmod(0o755)
    assert refusal.shim_refusal([str(script)]) is None
    static = build("thread_exit", tmp_path, "-static")
    script.write_text(f"#!/usr/bin/env -S {static} -x\n")
    assert "statically linked" in refusal.shim_refusal([str(script)])


def test_no_compiler_or_no_syscall_user_dispatch_is_refused_with_the_alternative(
        monkeypatch, shim_lib, tmp_path):
    monkeypatch.setattr(refusal, "sud_available", lambda: False)
    why = refusal.shim_refusal(["sh"])
    assert "Syscall User Dispatch" in why and why.endswith(shimbuild.NO_SHIM)
    monkeypatch.undo()
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("CC", "no-such-compiler-x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no build cached there
    why = refusal.shim_refusal(["sh"], alternative="use something else")
    assert "C compiler" in why and why.endswith("use something else")
    with pytest.raises(ShimUnavailable, match="C compiler"):
        shimbuild.shim_library()


def test_a_cached_build_serves_where_no_compiler_is_on_path(tmp_path, shim_lib, monkeypatch):
    """A build made with cc, looked up again with no compiler on PATH (a job's environment
    without it): it was refused as "needs a C compiler, which this machine lacks" (the
    review), the cache's name holding the compiler's version."""
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = shimbuild.shim_library()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    assert shimbuild.compiler() is None
    assert shimbuild.available() and refusal.shim_refusal(["/bin/sh"]) is None
    assert shimbuild.shim_library() == built
    # a newer file of that name that is no build (cut short) is passed over
    junk = built.replace(built.rsplit("-", 2)[1], "ffffffff")
    open(junk, "wb").close()
    os.utime(junk, (os.stat(built).st_mtime + 60,) * 2)
    assert shimbuild.shim_library() == built
    monkeypatch.setenv("CC", "ccache cc")  # a command with arguments: named as such
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "none"))
    assert "CC='ccache cc' names no program" in refusal.shim_refusal(["/bin/sh"])


def test_cc_with_options_builds_its_own_shim(tmp_path, shim_lib, monkeypatch):
    """CC as make takes it, a command with options (`gcc -O1`): it was refused as naming
    no program (the review); its build is kept apart from plain cc's."""
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "cc -O1")
    assert shimbuild.compiler()[1:] == ("-O1",)
    with_options = shimbuild.shim_library()
    assert shimbuild._is_build(with_options)
    monkeypatch.setenv("CC", "cc")
    assert shimbuild.shim_library() != with_options


def test_a_build_no_program_can_load_is_refused_and_not_cached(tmp_path, shim_lib,
                                                              monkeypatch):
    """`CC='cc -fsanitize=address'` built a shim that every command then failed to start
    with (the sanitizer's runtime must come first; the review): refused as it is built."""
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "cc -fsanitize=address")
    with pytest.raises(ShimUnavailable, match="does not load into a program|did not build"):
        shimbuild.shim_library()
    assert not list((tmp_path / "hybridsched").glob("coopshim-*.so"))


def test_cc_with_an_unbalanced_quote_is_said_so(tmp_path, monkeypatch):
    monkeypatch.delenv(shimbuild.SHIM_ENV, raising=False)
    monkeypatch.setenv("CC", 'gcc "')
    assert shimbuild.compiler() is None
    assert "an unbalanced quote" in shimbuild.no_compiler()


def test_a_failed_build_leaves_no_folder_it_made(tmp_path, shim_lib, monkeypatch):
    """A build refused (here by a compiler that always fails) left the cache folders it had
    made behind, empty (the review): bad input leaves nothing. A folder that was there
    stays."""
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "new" / "cache"))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(ShimUnavailable, match="did not build"):
        shimbuild.shim_library()
    assert not (tmp_path / "new").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ShimUnavailable, match="did not build"):
        shimbuild.shim_library()
    assert tmp_path.is_dir() and not (tmp_path / "hybridsched").exists()


def test_a_cache_path_through_a_missing_folder_and_back_keeps_the_users_folder(tmp_path,
                                                                               shim_lib,
                                                                               monkeypatch):
    """XDG_CACHE_HOME=new/../mine, `mine` the user's and empty: a refused build removed
    `mine` and left the `new` it had made for the path (the second review). The path is
    taken as the kernel resolves it."""
    (tmp_path / "mine").mkdir()
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", f"{tmp_path}/new/../mine")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(ShimUnavailable, match="did not build"):
        shimbuild.shim_library()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_an_interrupted_build_leaves_no_folder_it_made(tmp_path, shim_lib, monkeypatch):
    """A Ctrl-C while the compiler runs: the folders made for the build go too (only a
    refusal took them back: the second review)."""
    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "new"))

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(shimbuild, "_compile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        shimbuild.shim_library()
    assert not (tmp_path / "new").exists()


def test_a_compiler_that_cannot_be_run_now_leaves_a_cached_build_to_serve(tmp_path, shim_lib,
                                                                          monkeypatch):
    """`ulimit -n 8`: asking the compiler its version failed for want of descriptors, which
    made a key no build had, so a build was tried and refused as "did not build (Too many
    open files)" (the review). A build of these sources serves then, as where no compiler
    is on PATH; without one, the refusal says what could not be done."""
    import errno
    import platform
    import shutil

    real_run = shimbuild.subprocess.run

    def no_descriptors(argv, *args, **kw):
        if "--version" in argv:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_run(argv, *args, **kw)

    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(shimbuild.subprocess, "run", no_descriptors)
    shimbuild._version.cache_clear()
    try:
        with pytest.raises(ShimUnavailable, match="its version \\(Too many open files\\)"):
            shimbuild.shim_library()
        folder = tmp_path / "hybridsched"
        cached = folder / (f"coopshim-{shimbuild.source_key(shimbuild.sources())}-"
                           f"elsewhere-{platform.machine()}.so")
        folder.mkdir(mode=0o700, exist_ok=True)
        shutil.copy(shim_lib, cached)
        assert shimbuild.shim_library() == str(cached)
    finally:
        shimbuild._version.cache_clear()


def test_a_full_cache_file_system_is_said_in_one_line(tmp_path, shim_lib, monkeypatch):
    """The sources written for the build hit ENOSPC (a full cache file system): a Python
    traceback and status 1 before (the review), now ShimUnavailable's one line, and no
    folder it made is left."""
    import builtins
    import errno

    monkeypatch.delenv(shimbuild.SHIM_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "new" / "cache"))
    real_open = builtins.open

    def full(path, mode="r", *a, **k):
        if "w" in mode and "coopshim-" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(ShimUnavailable, match="could not be built in .*No space left on device"):
        shimbuild.shim_library()
    assert not (tmp_path / "new").exists()
