"""Shared fixtures. Every test is checked for leaks: no child process, zombie or
shared-memory segment of ours may outlive it."""
from __future__ import annotations

import glob
import os
import signal
import time

import psutil
import pytest
from hypothesis import settings

# hypothesis's per-example deadline (200 ms) is a timing assertion: on a loaded machine an
# example of a pure rule exceeded it. The suite's tests assert states, never speeds.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

import mpiimpls
from hybridsched import kernels
from hybridsched.oslayer.shm import live_segments, our_shm_entries


@pytest.fixture(scope="session", autouse=True)
def _compiled():
    kernels.prepare()  # compile once, before any test forks


def pytest_generate_tests(metafunc):
    """A test that takes the `mpi` fixture runs once per MPI implementation (MPICH, Open
    MPI), skipped with the reason where one is not installed."""
    if "mpi" in metafunc.fixturenames:
        params = [pytest.param(f, id=f.impl.name,
                               marks=[pytest.mark.skip(reason=f.missing)] if f.missing else [])
                  for f in mpiimpls.available()]
        metafunc.parametrize("mpi", params, indirect=True)


@pytest.hookimpl(tryfirst=True)  # before `-m mpi` selects
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "mpi" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mpi)
    _default_hostile_only(config, items)


def _default_hostile_only(config, items) -> None:
    """The hostile user's cases (tests/hostile/) beyond the few marked default run only when
    asked for: by a `-m` expression that names `hostile`, or by their node id on the command
    line. A plain `python -m pytest` (CI's line) stays within its time."""
    if "hostile" in (config.getoption("markexpr") or ""):
        return
    named = []
    for arg in config.args:
        if "::" in arg:
            path, rest = arg.split("::", 1)
            named.append(os.path.relpath(os.path.abspath(path), config.rootpath) + "::" + rest)
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker("hostile")
        asked = any(item.nodeid == n or item.nodeid.startswith(n + "[") for n in named)
        (drop if mark is not None and not mark.kwargs.get("default") and not asked
         else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def mpi(request):
    """Start MPI jobs of one implementation (tests/mpiimpls.py); what the MPI library left
    of them in /dev/shm and the temporary directory (a killed rank's, an aborted job's) is
    removed when the test ends."""
    launcher = mpiimpls.Launcher(request.param)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def seg(tmp_path):
    """A private path for a coop arbiter's segment; neither it, nor its lock file, nor an
    unfinished copy of it may be left behind."""
    path = str(tmp_path / "coop-seg")
    yield path
    left = sorted(n for n in os.listdir(tmp_path) if n.startswith("coop-seg"))
    assert not left, f"segment left behind: {left}"


@pytest.fixture(scope="session")
def shim_lib(tmp_path_factory):
    """The cooperative shim, built once per session into a private cache and named by
    HYBRIDSCHED_COOP_SHIM for everything the tests start; skipped without a C compiler."""
    from hybridsched.coop import shimbuild

    if shimbuild.compiler() is None:
        pytest.skip("no C compiler (cc): the cooperative shim cannot be built here")
    path = shimbuild.shim_library(cache=str(tmp_path_factory.mktemp("shim-cache")))
    old = os.environ.get(shimbuild.SHIM_ENV)
    os.environ[shimbuild.SHIM_ENV] = path
    yield path
    if old is None:
        os.environ.pop(shimbuild.SHIM_ENV, None)
    else:
        os.environ[shimbuild.SHIM_ENV] = old


@pytest.fixture(scope="session", autouse=True)
def _interruptible():
    """A shell starts a background job (`.ci/run &`, nohup) with SIGINT ignored, and an
    ignored signal stays ignored across fork and exec: the Ctrl-C tests' children would
    never see theirs. A handler in this process is reset to the default in every child
    it execs, so the children behave as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session", autouse=True)
def _own_coop_segment():
    """The suite's cooperative runs use an arbiter segment of their own, inherited by every
    command it starts: another suite, or the user's own cooperative jobs on this machine,
    can neither take its tokens nor leave a segment that its leak checks would count."""
    from hybridsched.coop.paths import SEGMENT_ENV

    old = os.environ.get(SEGMENT_ENV)
    path = f"/dev/shm/hybridsched-coop.{os.getuid()}.tests-{os.getpid()}"
    os.environ[SEGMENT_ENV] = path
    yield
    if old is None:
        os.environ.pop(SEGMENT_ENV, None)
    else:
        os.environ[SEGMENT_ENV] = old
    assert not os.path.exists(path) and not os.path.exists(path + ".lock"), \
        f"the suite left its arbiter segment {path}"


@pytest.fixture(scope="session", autouse=True)
def _no_load_probe():
    """`run` warns when the machine looks shared; on a shared test machine that would put a
    load-dependent line on the stderr of every run a test checks. tests/machine/test_machine_check.py
    unsets this to test the warning itself."""
    from hybridsched.machine.probes import NO_PROBE_ENV

    old = os.environ.get(NO_PROBE_ENV)
    os.environ[NO_PROBE_ENV] = "1"
    yield
    if old is None:
        os.environ.pop(NO_PROBE_ENV, None)
    else:
        os.environ[NO_PROBE_ENV] = old


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _coop_segment_left() -> list[str]:
    """The suite's coop segment (and lock file) when no live process maps it: left behind
    by the last participant (one still mapped belongs to a job that is still ending)."""
    from hybridsched.coop.paths import SEGMENT_ENV

    path = os.environ.get(SEGMENT_ENV, "")
    if not path or not os.path.exists(path):
        return []
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as fh:
                if path in fh.read():
                    return []
        except OSError:
            continue
    return [p for p in (path, path + ".lock") if os.path.exists(p)]


def _mine(entries) -> set[str]:
    """The /dev/shm entries that this test process could have leaked: made by us, by a
    descendant, or by a process that is gone. Segments of live processes outside our tree
    belong to other sessions working on the same machine and must not fail our tests."""
    me = os.getpid()
    out = set()
    for name in entries:
        try:
            pid = int(name.split(".")[1])
            proc = psutil.Process(pid)
            if pid != me and me not in {p.pid for p in proc.parents()}:
                continue  # alive and not ours
        except (IndexError, ValueError, psutil.Error):
            pass  # unparsable name or creator gone: count it
        out.add(name)
    return out


@pytest.fixture(autouse=True)
def no_leaks(request):
    """Fail a test that leaves a child process, a zombie or a /dev/shm segment behind (the
    suite's coop segment included)."""
    before_children = {p.pid for p in _children()}
    before_shm = set(our_shm_entries())
    before_affinity = os.sched_getaffinity(0)
    yield
    assert os.sched_getaffinity(0) == before_affinity, "the test left the main thread pinned"
    if request.node.get_closest_marker("mpi"):
        deadline = time.monotonic() + 10  # mpiexec's proxies take a moment to go
    else:
        deadline = time.monotonic() + 3
    while True:
        extra = [p for p in _children() if p.pid not in before_children]
        shm = sorted(_mine(set(our_shm_entries()) - before_shm))
        coop = _coop_segment_left()
        if (not extra and not shm and not coop) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    live = live_segments()
    assert not extra, f"leaked processes: {[(p.pid, p.status()) for p in extra if p.is_running()]}"
    assert not shm, f"leaked shared-memory segments: {shm}"
    assert not coop, f"the coop segment was left behind: {coop}"
    assert not live, f"segments still registered as live: {live}"


@pytest.fixture
def no_thread_left():
    """Fail a test that leaves a thread of its own running (the user-mode schedulers)."""
    import threading

    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 3
    while True:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not extra, f"threads left behind: {[t.name for t in extra[:5]]}"


@pytest.fixture
def h5_opens(monkeypatch) -> list[str]:
    """The paths of every HDF5 file opened from now on in this process, in order (a test
    of how often a reader opens a study)."""
    import h5py

    opened: list[str] = []

    class Counted(h5py.File):
        def __init__(self, name, *args, **kwargs):
            opened.append(os.fspath(name))
            super().__init__(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", Counted)
    return opened


@pytest.fixture
def tmp_h5(tmp_path):
    return str(tmp_path / "study.h5")


_session_shm: set[str] = set()


def pytest_sessionstart(session):
    _session_shm.update(our_shm_entries())


def pytest_sessionfinish(session, exitstatus):
    # ours and our subprocesses' (hybridsched run, mpiexec ranks), not other sessions'
    left = sorted(_mine(set(our_shm_entries()) - _session_shm) | set(our_shm_entries(os.getpid())))
    if left:
        print(f"\nhybridsched: shared-memory segments left by the test process: {left}")
        session.exitstatus = 1
