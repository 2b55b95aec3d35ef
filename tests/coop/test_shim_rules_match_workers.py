"""The cooperative shim's C rules against the numba rules of the Python workers: one
layout (the C header is generated from layout.py, every offset asserted at compile time)
and one behaviour — the same random sequences of operations on two private segments leave
them equal byte for byte, with the same results, after every step."""
from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.coop import layout, rules
from hybridsched.coop.layout import HEADER_DTYPE, JOB_DTYPE, WORKER_DTYPE, VERSION
from hybridsched.coop.state import ArbiterError, State

Q = 1_000_000  # the quantum, ns
PIDS = (100, 101, 102)  # the jobs' owners (launchers); their workers run as pid + 100 or + 150


class CRules:
    """The shim's rules through ctypes, on the bytes of a private State."""

    def __init__(self, lib: ctypes.CDLL, st: State):
        self.lib, self.st = lib, st
        self._mem = (ctypes.c_char * len(st._buf)).from_buffer(st._buf)
        self.view = ctypes.create_string_buffer(lib.hs_x_view_size())
        size = lib.hs_x_bind(self.view, self._mem, len(st.cpus), len(st.jobs), len(st.workers))
        assert size == len(st._buf)

    def pair(self, fn, w, now):
        out = (ctypes.c_int * 2)()
        fn(self.view, w, ctypes.c_int64(now), out)
        return tuple(out)

    def reclaim(self, now, dead, stopped):
        def pairs(listed):
            return (ctypes.c_int32 * (2 * max(1, len(listed))))(*[x for p in listed for x in p])
        woken = (ctypes.c_int32 * 64)()
        n = self.lib.hs_x_reclaim(self.view, ctypes.c_int64(now), pairs(dead), len(dead),
                                  pairs(stopped), len(stopped), woken, 64)
        return list(woken[:n])


@pytest.fixture(scope="module")
def lib(shim_lib):
    dll = ctypes.CDLL(shim_lib)  # dormant: no segment named in this process's environment
    dll.hs_x_view_size.restype = ctypes.c_size_t
    dll.hs_x_bind.restype = ctypes.c_size_t
    return dll


def pair_of_states(ncpu: int, lib) -> tuple[State, CRules]:
    py = State.private(list(range(ncpu)), Q, max_jobs=4, max_workers=12)
    c = State.private(list(range(ncpu)), Q, max_jobs=4, max_workers=12)
    for s in (py, c):
        for j, pid in enumerate(PIDS):
            s.join_job(pid, key=7000 + j)
    return py, CRules(lib, c)


def where(a: bytes, b: bytes, ncpu: int) -> str:
    """The first field that differs, by name (for the failure's message)."""
    i = next(k for k in range(len(a)) if a[k] != b[k])
    off = 0
    for name, dt, n in layout.layout(ncpu, 4, 12):
        size = (dt.itemsize * n + 63) // 64 * 64
        if i < off + size:
            rec, at = divmod(i - off, dt.itemsize)
            field = next((f for f in (dt.names or ()) if dt.fields[f][1] <= at
                          < dt.fields[f][1] + dt.fields[f][0].itemsize), "")
            return f"{name}[{rec}].{field}"
        off += size
    return f"byte {i}"


def apply(py: State, c: CRules, op: tuple, now: int, lib) -> tuple:
    """One operation on both; (python result, C result)."""
    kind, *args = op
    args_py = (py.header, py.cpus, py.jobs, py.workers, py.wake, int(py.header["hi"][0]))
    if kind == "join":
        job, pid, tid, thread = args
        try:
            w = py.join_worker(job, pid, tid, thread)
        except ArbiterError:  # the job was reclaimed, or the table is full: C says -1
            w = -1
        return w, lib.hs_x_join_worker(c.view, job, pid, tid, thread)
    w = args[0] if args else 0
    if kind == "acquire":
        return tuple(rules.acquire(*args_py, w, now, py.hw, py.ws)), c.pair(lib.hs_x_acquire, w, now)
    if kind == "boundary":
        return tuple(rules.boundary(*args_py, w, now, py.hw, py.ws)), c.pair(lib.hs_x_boundary, w, now)
    if kind == "release":
        return rules.release(*args_py, w, now), lib.hs_x_release(c.view, w, ctypes.c_int64(now))
    if kind == "try":
        return (int(rules.try_acquire(py.header, py.cpus, py.workers, py.wake, w, now)),
                lib.hs_x_try_acquire(c.view, w, ctypes.c_int64(now)))
    if kind == "park":
        return int(py.lazy_park(w)), lib.hs_x_lazy_park(c.view, w)
    if kind == "resume":
        return int(py.lazy_resume(w)), lib.hs_x_lazy_resume(c.view, w)
    if kind == "expired":
        return int(py.expired(w, now)), lib.hs_x_expired(c.view, w, ctypes.c_int64(now))
    if kind == "leave":
        return rules.leave_worker(*args_py, w, now, py.ws), lib.hs_x_leave_worker(c.view, w, ctypes.c_int64(now))
    if kind == "revoke":  # the watchdog's act on a holder asleep in a call nothing sees
        return (rules.revoke_holder(*args_py, w, now, py.ws),
                lib.hs_x_revoke_holder(c.view, w, ctypes.c_int64(now)))
    if kind == "find":
        return py.find_job(args[0]), lib.hs_x_find_job(c.view, ctypes.c_int64(args[0]))
    if kind == "reclaim":
        dead, stopped = set(args[0]), set(args[1])
        got = py.reclaim(lambda pid: (pid, 0) not in dead, now,
                         lambda pid, tid: (pid, tid) not in dead,
                         lambda pid, tid: (pid, tid) in stopped)
        return got, c.reclaim(now, sorted(dead), sorted(stopped))
    raise AssertionError(kind)


def next_op(rnd: random.Random, py: State, joined: list, threads: float = 0.5) -> tuple:
    """An operation a run makes, chosen by the state so far: joins while the tables are
    young, then token traffic (what a holder does to the holders, what a waiter or a
    blocked worker does to the others), reclaims of dead processes and threads and of the
    tokens of stopped ones, and now
    and then an operation on a slot in the wrong state (refused alike by both)."""
    used = [int(w) for w in np.flatnonzero(py.workers["used"] == 1)]
    if not used or (len(joined) < 8 and rnd.random() < 0.2):
        job = rnd.randrange(len(PIDS))
        pid = PIDS[job] + rnd.choice((100, 100, 150))  # a job of one process or of two
        tid = rnd.randrange(1, 6) * 1000 + pid
        joined.append((pid, tid))
        return ("join", job, pid, tid, int(rnd.random() < threads))
    by = {s: [w for w in used if py.workers["state"][w] == s] for s in range(5)}
    r = rnd.random()
    if r < 0.06:
        dead = rnd.sample(joined, min(len(joined), rnd.randrange(0, 3)))
        if rnd.random() < 0.1:  # a launcher gone too: its job goes once it has no worker
            dead.append((rnd.choice(PIDS), 0))
        # stopped (Ctrl-Z, a debugger): processes or threads, holders or not
        stopped = rnd.sample(joined, min(len(joined), rnd.randrange(0, 3)))
        return ("reclaim", [(p, t if rnd.random() < 0.5 else 0) for p, t in dead],
                [(p, t if rnd.random() < 0.5 else 0) for p, t in stopped])
    if r < 0.09:
        return ("find", rnd.choice((7000, 7001, 7002, 7003, 0, -1)))
    if r < 0.14:
        return (rnd.choice(("acquire", "release", "boundary", "park", "resume", "expired", "try",
                            "leave")), rnd.randrange(12))
    if by[1] and r < 0.55:  # a holder: blocks (lazily or not), hits a boundary, leaves
        return (rnd.choice(("release", "park", "park", "boundary", "boundary", "expired", "leave",
                            "revoke")), rnd.choice(by[1]))
    if by[4] and r < 0.7:  # a parked holder wakes
        return ("resume", rnd.choice(by[4]))
    idle = by[3] + by[4]
    if idle:  # a blocked worker wants to run again
        return (rnd.choice(("acquire", "acquire", "try")), rnd.choice(idle))
    return ("acquire", rnd.choice(used))


def run_sequence(ncpu: int, seed: int, n: int, lib, threads: float = 0.5) -> None:
    rnd = random.Random(seed)
    py, c = pair_of_states(ncpu, lib)
    now, joined = 0, []
    for step in range(n):
        now += rnd.choice((0, 1, Q // 3, Q, 2 * Q))
        op = next_op(rnd, py, joined, threads)
        got_py, got_c = apply(py, c, op, now, lib)
        assert got_py == got_c, f"step {step} {op}: numba {got_py}, C {got_c}"
        a, b = bytes(py._buf), bytes(c.st._buf)
        assert a == b, f"step {step} {op}: the segments differ at {where(a, b, ncpu)}"


def test_the_c_header_is_the_layout(lib):
    assert lib.hs_layout_version() == VERSION
    text = layout.c_header()
    for dt, name in ((HEADER_DTYPE, "hs_header"), (JOB_DTYPE, "hs_job"), (WORKER_DTYPE, "hs_worker")):
        assert f"sizeof(struct {name}) == {dt.itemsize}" in text
        for field in dt.names:
            assert f"offsetof(struct {name}, {field}) == {dt.fields[field][1]}" in text


@pytest.mark.parametrize("ncpu", [1, 2, 3])
def test_long_random_sequences_leave_equal_segments(lib, ncpu):
    for seed in range(6):
        run_sequence(ncpu, seed * 10 + ncpu, 800, lib)


@pytest.mark.parametrize("ncpu", [2, 3, 4])
def test_sequences_of_shim_threads_of_two_processes_per_job_leave_equal_segments(lib, ncpu):
    """Every slot a thread's, a job's threads in one process or two: where a token given up
    goes to a thread whose process holds another (layout.PREF_SPAN) is compared too."""
    for seed in range(6):
        run_sequence(ncpu, 1000 + seed * 10 + ncpu, 800, lib, threads=1.0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), ncpu=st.integers(1, 3), n=st.integers(1, 150))
def test_any_sequence_leaves_equal_segments(lib, seed, ncpu, n):
    run_sequence(ncpu, seed, n, lib)


def test_a_difference_would_be_seen(lib):
    """The comparison can fail: one rule run on the numba side only leaves them apart."""
    py, c = pair_of_states(1, lib)
    w = py.join_worker(0, 100, 1100, True)
    assert lib.hs_x_join_worker(c.view, 0, 100, 1100, 1) == w
    py.acquire(w, 5)
    assert bytes(py._buf) != bytes(c.st._buf)
    assert where(bytes(py._buf), bytes(c.st._buf), 1).startswith(("header", "cpus", "workers", "wake"))
    assert np.array_equal(py.workers["thread"], c.st.workers["thread"])


def test_the_shim_compiles_without_a_warning(shim_lib, tmp_path):
    import subprocess

    from hybridsched.coop import shimbuild

    for name, text in shimbuild.sources().items():
        (tmp_path / name).write_text(text)
    p = subprocess.run([*shimbuild.compiler(), *shimbuild.CFLAGS, "-shared", "-Werror", "-o", "shim.so",
                        *shimbuild.SOURCES, *shimbuild.LIBS], cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr[-2000:]
