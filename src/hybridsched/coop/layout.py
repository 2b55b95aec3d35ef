"""The arbiter segment's layout: worker states, the record types of its regions and where
each region lies. The one definition of it: the numba rules are compiled against it, the
state reads it, and the cooperative shim's C header is generated from it
(:func:`c_header`, at the shim's build), so the C rules read the same bytes."""
from __future__ import annotations

import signal
from typing import Mapping

import numpy as np

from ..oslayer.shmlock import DIED_AT, LOCK_BYTES

# worker states; LAZY: parked (asleep in a primitive) but still holding its token, because
# nobody waited when it parked; any worker that queues later revokes it (see rules)
FREE, RUNNING, WAITING, BLOCKED, LAZY = 0, 1, 2, 3, 4
# A worker's wake word: 0 while it sleeps for a token, 1 once granted; REVOKED when a
# reclaim took the token of a Python worker stopped holding it (a shim thread is nudged
# instead): its waits then queue again rather than read BLOCKED as "parked at a barrier,
# whose opener queues me" (a worker granted while stopped would wait for ever).
REVOKED = 2
STATE_NAMES = {FREE: "free", RUNNING: "running", WAITING: "waiting", BLOCKED: "blocked",
               LAZY: "parked holding its token"}

MAGIC = b"HSCOOP01"
# 2: the header's high-water mark ``hi`` (the compiled rules scan slots below it only),
# ``reclaim_ns`` (when the dead were last looked for) and the LAZY state;
# 3: the ``lock`` region (a robust process-shared mutex, see oslayer/native.py) instead of an flock,
# and each worker's thread id (``tid``: the granter pins the thread it wakes);
# 4: for unmodified commands under the cooperative shim: a job found by its ``key`` (one
# per command, whatever it forks), each job's counters (threads, intercepted calls, grants,
# hand-offs, trapped system calls, rotation signals, tokens revoked from sleepers), and a
# worker's ``thread`` flag: its liveness is its thread's, not its process's (a shim thread
# that exits holding a token is reclaimed while its process lives on);
# 5: each worker's ``entries``, the times its thread entered the shim's wrappers (written
# by that thread only, wrapping; only its changes mean anything): a holder whose count
# stands still while its own job's threads wait is spinning for them (shim/early.c);
# 6: no new field, new rules: a token given up goes first to a thread whose process holds
# another (PREF_SPAN); shims and workers of 5 would hand tokens on by the old rules in the
# same segment (the hostile review), so they are refused instead;
# 7: each job's ``unmanaged`` count, threads of the job that found every worker slot taken
# and ran outside the arbiter (in a padding slot: the same size)
VERSION = 7

# A token given up goes to its job's longest waiter, unless a shim thread of a process that
# holds another token queued at most PREF_SPAN tickets (the header's ``seq``, node-wide)
# after it: the threads of one process that spin for each other (OpenBLAS's inside one
# product, calling nothing) then run together instead of each holding a token in its turn
# while its partner waits (numpy in 3 forked processes, J = 1, 12 % faster with it; the
# shim's gang look does the rest: shim/runtime.c). The bound keeps the waiter it passes over
# from waiting for ever behind a process whose threads keep queueing: larger forms gangs in
# more cases, smaller is nearer FIFO. Rules and shim share it (coop/rules.py, shim/rules.c).
PREF_SPAN = 16

# The rotation request to a shim thread (sud.c's hs_nudge_signal): from its job's watchdog
# (SI_TKILL), or queued with its job's key as the cookie (a sibling's early look; a
# reclaim that took a stopped thread's token). A real-time signal far from SIGRTMIN, from
# which programs number their own.
NUDGE_SIGNAL = signal.SIGRTMAX - 7

HEADER_DTYPE = np.dtype([
    ("magic", "S8"), ("version", "i4"), ("ncpu", "i4"), ("max_jobs", "i4"),
    ("max_workers", "i4"), ("quantum_ns", "i8"), ("rr", "i4"), ("waiting", "i4"),
    ("seq", "i8"), ("grants", "i8"), ("rotations", "i8"), ("reclaimed", "i8"),
    ("hi", "i4"), ("_pad", "i4"), ("reclaim_ns", "i8"),
])
CPU_DTYPE = np.dtype([("cpu", "i4"), ("holder", "i4"), ("job", "i4"), ("_pad", "i4"),
                      ("since_ns", "i8")])
# the counters are the shim's (a job of Python workers leaves them at 0); each job's row on
# two cache lines of its own, so one job's counting does not slow another's
JOB_COUNTERS = ("threads", "calls", "grants", "handoffs", "traps", "nudges", "revoked",
                "unmanaged")
JOB_DTYPE = np.dtype([("used", "i4"), ("pid", "i4"), ("key", "i8")]
                     + [(c, "i8") for c in JOB_COUNTERS] + [("_pad", "i8", (6,))])
WORKER_DTYPE = np.dtype([("used", "i4"), ("pid", "i4"), ("job", "i4"), ("state", "i4"),
                         ("cpu", "i4"), ("last_cpu", "i4"), ("seq", "i8"), ("held_ns", "i8"),
                         ("acquired_ns", "i8"), ("tid", "i4"), ("pinned", "i4"),
                         ("thread", "i4"), ("entries", "i4")])


def layout(ncpu: int, max_jobs: int, max_workers: int) -> list[tuple[str, np.dtype, int]]:
    """(name, dtype, count) of each region, in order; ``wake`` holds the futex words,
    ``lock`` the mutex that guards every change."""
    return [("header", HEADER_DTYPE, 1), ("cpus", CPU_DTYPE, ncpu), ("jobs", JOB_DTYPE, max_jobs),
            ("workers", WORKER_DTYPE, max_workers), ("wake", np.dtype(np.int32), max_workers),
            ("lock", np.dtype(np.uint8), LOCK_BYTES)]


def nbytes(ncpu: int, max_jobs: int, max_workers: int) -> int:
    return sum(_aligned(dt.itemsize * n) for _, dt, n in layout(ncpu, max_jobs, max_workers))


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64  # every region on its own cache line


def views(buf, ncpu: int, max_jobs: int, max_workers: int) -> dict[str, np.ndarray]:
    """Numpy views of the regions of ``buf`` (a mapping or bytearray)."""
    out, off = {}, 0
    for name, dt, n in layout(ncpu, max_jobs, max_workers):
        out[name] = np.frombuffer(buf, dt, n, off)
        off += _aligned(dt.itemsize * n)
    return out


def _fields(dt: np.dtype) -> Mapping[str, tuple]:
    """A structured dtype's fields: name -> (dtype, offset[, title]), in declaration order."""
    if dt.fields is None:
        raise TypeError(f"{dt} is not a structured dtype")
    return dt.fields


def word_index(dt: np.dtype, field: str) -> tuple[int, int]:
    """(stride, offset) in int32 words of ``field`` in an array of ``dt``: where the
    lock-free paths find it in an int32 view of the region."""
    off = _fields(dt)[field][1]
    assert dt.itemsize % 4 == 0 and off % 4 == 0
    return dt.itemsize // 4, off // 4


# --- the C side ---------------------------------------------------------------------------

_C_TYPES = {"i4": "int32_t", "i8": "int64_t", "u1": "uint8_t"}


def _c_struct(name: str, dt: np.dtype) -> list[str]:
    out = [f"struct {name} {{"]
    asserts = []
    fields = _fields(dt)
    for field in sorted(fields, key=lambda f: fields[f][1]):
        ft, off = fields[field][:2]
        if ft.kind == "S":
            decl = f"char {field}[{ft.itemsize}]"
        elif ft.subdtype is not None:
            base, shape = ft.subdtype
            decl = f"{_C_TYPES[base.str[1:]]} {field}[{int(np.prod(shape))}]"
        else:
            decl = f"{_C_TYPES[ft.str[1:]]} {field}"
        out.append(f"    {decl};")
        asserts.append(f"_Static_assert(offsetof(struct {name}, {field}) == {off}, "
                       f"\"{name}.{field}: layout.py says {off}\");")
    out.append("};")
    out.append(f"_Static_assert(sizeof(struct {name}) == {dt.itemsize}, "
               f"\"{name}: layout.py says {dt.itemsize} bytes\");")
    return out + asserts


def c_header() -> str:
    """The segment's layout as a C header (generated at the shim's build, never edited):
    the record structs with every offset asserted, the constants, and where each region
    lies for given table sizes."""
    lines = ["/* Generated from hybridsched/coop/layout.py at build time: do not edit. */",
             "#ifndef HS_LAYOUT_H", "#define HS_LAYOUT_H", "#include <stddef.h>",
             "#include <stdint.h>", "",
             f"#define HS_MAGIC \"{MAGIC.decode()}\"", f"#define HS_VERSION {VERSION}",
             f"#define HS_LOCK_BYTES {LOCK_BYTES}", f"#define HS_DIED_AT {DIED_AT}"]
    lines += [f"#define HS_{n.upper()} {v}" for n, v in
              (("free", FREE), ("running", RUNNING), ("waiting", WAITING), ("blocked", BLOCKED),
               ("lazy", LAZY))]
    lines.append(f"#define HS_WAKE_REVOKED {REVOKED}")
    lines.append(f"#define HS_PREF_SPAN {PREF_SPAN}")
    lines.append("")
    for name, dt in (("hs_header", HEADER_DTYPE), ("hs_cpu", CPU_DTYPE), ("hs_job", JOB_DTYPE),
                     ("hs_worker", WORKER_DTYPE)):
        lines += _c_struct(name, dt) + [""]
    regions = layout(1, 1, 1)
    lines.append(f"#define HS_NREGIONS {len(regions)}")
    lines.append("/* the regions' offsets, in layout() order: "
                 + ", ".join(n for n, _, _ in regions) + " */")
    lines.append("static inline size_t hs_region_offsets(int64_t ncpu, int64_t max_jobs, "
                 "int64_t max_workers, size_t off[HS_NREGIONS])\n{")
    lines.append("    size_t at = 0;")
    counts = {"header": "1", "cpus": "ncpu", "jobs": "max_jobs", "workers": "max_workers",
              "wake": "max_workers", "lock": "1"}
    for i, (name, dt, _) in enumerate(regions):
        lines.append(f"    off[{i}] = at; /* {name} */")
        lines.append(f"    at += ((size_t)({dt.itemsize} * {counts[name]}) + 63) / 64 * 64;")
    lines += ["    return at;", "}", "#endif", ""]
    return "\n".join(lines)
