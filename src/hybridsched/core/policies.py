"""Chunking policies as pure functions: which frames go next, and how many.

Nothing here touches threads, processes or clocks; the backends (threads, forks, pipes,
MPI) call these functions to decide the hand-out and only move chunks to workers.
The rules follow the OpenMP runtimes (static, dynamic, guided), the paper's chunk and
chunk-steal policies (§2.2), AIMD (§2.3, Eqs. 1-2) and the adaptive chunk scheduler
(§2.4, Eq. 3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import HandOutError, UsageError

Chunk = tuple[int, int]  # (first frame, count)

# --- static -----------------------------------------------------------------------------


def static_blocks(n: int, k: int) -> list[list[Chunk]]:
    """OpenMP schedule(static) without chunk: one contiguous block per worker, the
    remainder n mod k going one each to the lowest-numbered workers."""
    q, r = divmod(n, k)
    out: list[list[Chunk]] = []
    first = 0
    for w in range(k):
        count = q + (1 if w < r else 0)
        out.append([(first, count)] if count else [])
        first += count
    return out


def static_chunks(n: int, k: int, c: int) -> list[list[Chunk]]:
    """OpenMP schedule(static, c): chunk j = [j*c, (j+1)*c) to worker j mod k."""
    out: list[list[Chunk]] = [[] for _ in range(k)]
    for j, first in enumerate(range(0, n, c)):
        out[j % k].append((first, min(c, n - first)))
    return out


def static_assignment(n: int, k: int, c: int = 0) -> list[list[Chunk]]:
    """Per-worker chunk lists for static scheduling; ``c = 0`` means blocks."""
    return static_blocks(n, k) if c <= 0 else static_chunks(n, k, c)


def round_robin_frames(n: int, k: int) -> list[list[Chunk]]:
    """The bounded prolific assignment (§2.1.1): frame i to worker i mod k."""
    return static_chunks(n, k, 1)


# --- first-come-first-served sizes ------------------------------------------------------


def dynamic_size(remaining: int, k: int, c: int) -> int:
    """OpenMP schedule(dynamic, c): always c (the last chunk may be shorter)."""
    return min(c, remaining)


def guided_size(remaining: int, k: int, c: int) -> int:
    """OpenMP schedule(guided, c): min(remaining, max(c, ceil(remaining / k)))."""
    return min(remaining, max(c, -(-remaining // k)))


def adaptive_size(remaining: int, k: int, speed_factor: float) -> int:
    """Eq. 3: chunk = base_chunk * speed_factor with base_chunk = remaining / k,
    clamped to 1 <= chunk <= remaining (§2.4)."""
    return max(1, min(remaining, int(remaining / k * speed_factor)))


# The two readings of §2.4's "average time per slice". The paper's text: it "stores the total
# time per thread ... and the total number of chunks finished per thread", so thread_avg is
# time per finished chunk and global_avg the mean of thread_avg over the threads with
# history (`adaptive`). Chunks shrink as the work runs out, so per chunk the thread that drew
# the first, largest chunk looks slowest; per frame (a 2-D slice of the tensor) measures
# speed rather than chunk size (`adaptive-frame`, a named variant, never the default).
PER_CHUNK = "chunk"
PER_FRAME = "frame"
READINGS = (PER_CHUNK, PER_FRAME)


def thread_average(time_s: float, chunks: int, frames: int, reading: str = PER_CHUNK) -> float | None:
    """A thread's mean time per unit of work under ``reading``; None without history."""
    units = chunks if reading == PER_CHUNK else frames
    if units <= 0 or time_s <= 0.0:
        return None
    return time_s / units


def global_average(times: Sequence[float], chunks: Sequence[int], frames: Sequence[int],
                   reading: str = PER_CHUNK) -> float | None:
    """§2.4's global_avg over the threads with history: the mean of their thread_avg (the
    paper's reading); per frame, all their time over all their frames."""
    if reading == PER_CHUNK:
        avgs = [a for a in (thread_average(t, c, f, reading) for t, c, f in zip(times, chunks, frames))
                if a is not None]
        return sum(avgs) / len(avgs) if avgs else None
    tot_f = sum(f for t, f in zip(times, frames) if t > 0)
    tot_t = sum(t for t, f in zip(times, frames) if f > 0)
    return tot_t / tot_f if tot_f and tot_t > 0 else None


def speed_factor(thread_avg: float | None, global_avg: float | None) -> float:
    """§2.4: speed_factor = global_avg / thread_avg; 1.0 while the thread (or everybody)
    has no history yet."""
    if thread_avg is None or not global_avg:
        return 1.0
    return global_avg / thread_avg


def fcfs_chunks(n: int, size: Callable[[int], int], start: int = 0) -> Iterator[Chunk]:
    """The sequence of chunks a first-come-first-served policy hands out over frames
    ``start .. n-1``, given the chunk size as a function of the remaining frames."""
    first = start
    while first < n:
        count = size(n - first)
        if count < 1:
            raise ValueError("chunk size must be at least 1")
        yield first, count
        first += count


def bounds_of(chunks: Iterable[Chunk]) -> np.ndarray:
    """A hand-out of consecutive chunks (first = the previous chunk's end, from 0) as chunk
    boundaries: int64[m + 1], chunk i = frames ``b[i] .. b[i+1]-1``. Any policy whose i-th
    claim from one counter always gets the same chunk (claims are serialised, so only i
    matters, not the timing) can be run from these by a fetch-and-add on i."""
    out = [0]
    for first, count in chunks:
        if first != out[-1] or count < 1:
            raise ValueError(f"chunk ({first}, {count}) does not continue at frame {out[-1]}")
        out.append(first + count)
    return np.array(out, np.int64)


def fcfs_bounds(n: int, size: Callable[[int], int]) -> np.ndarray:
    """The hand-out of `fcfs_chunks` as chunk boundaries (`bounds_of`)."""
    return bounds_of(fcfs_chunks(n, size))


def fixed_bounds(n: int, c: int) -> np.ndarray:
    """`fcfs_bounds` for `dynamic_size` (a fixed chunk c), built without a
    Python loop: 200000 one-frame chunks take ~1 ms instead of ~100 ms in the timed run.
    A chunk above n is cut to n; the count of chunks is an integer division, never
    numpy's floating-point length of ``arange(0, n + c, c)`` (wrong near 2**63)."""
    if c < 1:
        raise ValueError("chunk size must be at least 1")
    if n <= 0:
        return np.zeros(1, np.int64)
    c = min(int(c), int(n))
    out = np.arange(-(-n // c) + 1, dtype=np.int64) * c
    out[-1] = n
    return out


def check_bounds(bounds, n: int, who: str) -> np.ndarray:
    """Chunk boundaries checked to cover tasks [0, n) exactly once (from 0 to n, strictly
    rising), before any worker claims from them; HandOutError names ``who`` otherwise."""
    b = np.asarray(bounds)
    if b.ndim != 1 or len(b) == 0 or b.dtype.kind not in "iu":
        raise HandOutError(f"{who}: the hand-out is not a list of chunk boundaries")
    steps = np.diff(b)
    if int(b[0]) != 0 or int(b[-1]) != n or (steps < 1).any():
        bad = int(np.flatnonzero(steps < 1)[0]) if (steps < 1).any() else -1
        where = (f"chunk {bad} has {int(steps[bad])} tasks" if bad >= 0 else
                 f"it runs from {int(b[0])} to {int(b[-1])}")
        raise HandOutError(f"{who}: the hand-out does not cover the {n} tasks exactly once "
                           f"({where})")
    return b


def coverage(first, count, n: int) -> tuple[int, int]:
    """(tasks of [0, n) never covered, tasks covered more than once) by the chunks
    ``first[i] .. first[i] + count[i] - 1``; a task outside [0, n) counts as repeated."""
    f = np.asarray(first, np.int64).ravel()
    c = np.asarray(count, np.int64).ravel()
    order = np.argsort(f, kind="stable")
    f, c = f[order], c[order]
    if len(f) and f[0] == 0 and int(f[-1] + c[-1]) == n and (c >= 1).all() and \
            (f[1:] == f[:-1] + c[:-1]).all():
        return 0, 0  # the usual case: consecutive chunks from 0 to n
    outside = int(np.maximum(0, -f).sum() + np.maximum(0, f + c - n).sum())
    lo, hi = np.clip(f, 0, n), np.clip(f + np.maximum(c, 0), 0, n)
    depth = np.zeros(n + 1, np.int64)
    np.add.at(depth, lo, 1)
    np.add.at(depth, hi, -1)
    depth = np.cumsum(depth[:n])
    return int((depth == 0).sum()), int((depth > 1).sum()) + outside


def check_chunks(chunks: Iterable[Chunk], n: int, who: str) -> None:
    """(first, count) pairs in any order (every worker's list together) checked to cover
    tasks [0, n) exactly once; HandOutError otherwise."""
    pairs = np.array(list(chunks), np.int64).reshape(-1, 2)
    never, twice = coverage(pairs[:, 0], pairs[:, 1], n)
    if never or twice or (pairs[:, 1] < 1).any():
        raise HandOutError(f"{who}: the hand-out does not cover the {n} tasks exactly once "
                           f"({never} never handed out, {twice} more than once)")


def check_trace(trace, n: int, who: str) -> None:
    """The chunks that ran (a trace table's ``first`` and ``count``) checked to be tasks
    [0, n) exactly once, whatever verification says (``--verify none`` checks nothing
    else); HandOutError otherwise."""
    never, twice = coverage(trace["first"], trace["count"], n)
    if never or twice:
        raise HandOutError(f"{who}: the chunks that ran do not cover the {n} tasks exactly "
                           f"once ({never} never ran, {twice} ran more than once)")


# --- chunk stealing ---------------------------------------------------------------------


def steal_victims(w: int, k: int) -> list[int]:
    """Blind round-robin victim order for an idle worker w: w+1, w+2, ... (mod k)."""
    return [(w + i) % k for i in range(1, k)]


# --- AIMD (§2.3) ------------------------------------------------------------------------

AIMD_CHUNK = 4           # frames per chunk in the paper's AIMD implementation (§4)
AIMD_THRESHOLD = 0.95    # overload threshold on the EWMA utilisation (§4)
AIMD_A = 0.7             # Eq. 1 weight of the most persistently busy core
AIMD_BETA = 0.8          # Eq. 2 smoothing weight of the previous EWMA value
AIMD_MIRROR_EVERY = 32   # chunk completions between reads of the utilisation mirror (§4)


def combined_utilisation(mean_per_core: Sequence[float], now_per_core: Sequence[float],
                         a: float = AIMD_A) -> float:
    """Eq. 1: Ug_p = a * max_i(mean U_i) + (1 - a) * min_i(U_i(p))."""
    return a * max(mean_per_core) + (1.0 - a) * min(now_per_core)


def ewma(previous: float | None, ug: float, beta: float = AIMD_BETA) -> float:
    """Eq. 2: U(p) = beta * U(p-1) + (1 - beta) * Ug_p; the first sample initialises it."""
    return ug if previous is None else beta * previous + (1.0 - beta) * ug


def aimd_window(window: int, u: float, limit: int, threshold: float = AIMD_THRESHOLD) -> int:
    """One AIMD step at a chunk completion: slow start (double) while U = 0, halve when
    U exceeds the threshold, otherwise add one; always within [1, limit]."""
    if u == 0.0:
        return min(limit, window * 2)
    if u > threshold:
        return max(1, window // 2)
    return min(limit, window + 1)


# --- presets and plans ------------------------------------------------------------------

PLAN_MAX_TASKS = 10_000_000  # a plan row is ~100 bytes in memory: 1 GB at this bound


def paper_chunk(n: int) -> int:
    """The paper's fixed chunk for the `chunk` scheduler: 10 for L=1000, 100 for L=10000."""
    return max(1, n // 100)


@dataclass(frozen=True)
class PlanRow:
    worker: int  # -1: decided first-come-first-served at run time
    first: int
    count: int


def _plan_static(n: int, k: int, c: int) -> list[PlanRow]:
    rows = [PlanRow(w, f, cnt) for w, chunks in enumerate(static_assignment(n, k, c))
            for f, cnt in chunks]
    return sorted(rows, key=lambda r: r.first)


def _plan_fcfs(size: Callable[[int, int, int], int]):
    def plan(n: int, k: int, c: int) -> list[PlanRow]:
        return [PlanRow(-1, f, cnt) for f, cnt in fcfs_chunks(n, lambda rem: size(rem, k, c))]
    return plan


def _plan_technique(name: str):
    """An LB4OMP deterministic technique's hand-out (techniques/deterministic.py)."""
    def plan(n: int, k: int, c: int, params: dict | None = None) -> list[PlanRow]:
        from . import techniques as tq

        return [PlanRow(-1, f, cnt) for f, cnt in tq.sequence(name, n, k, c, params)]
    return plan


def _plan_steal(n: int, k: int, c: int, params: dict | None = None) -> list[PlanRow]:
    """static_steal's initial per-worker ranges (stealing is decided at run time)."""
    from . import techniques as tq

    size, ranges = tq.steal_blocks(n, k, c)
    if size == 0:  # fewer chunks than workers: balanced static blocks, one per worker
        return [PlanRow(w, *tq.balanced_block(n, k, w)) for w, (lo, hi) in enumerate(ranges)
                if hi > lo]
    return [PlanRow(w, i * size, min(size, n - i * size))
            for w, (lo, hi) in enumerate(ranges) for i in range(lo, hi)]


# policy -> (hand-out, default chunk for n tasks); static's default 0 means blocks, rnd's
# 0 means chunks up to n - 1 (LB4OMP without a chunk)
PLANS: dict[str, tuple[Callable[..., list[PlanRow]], Callable[[int], int]]] = {
    "static": (_plan_static, lambda n: 0),
    "dynamic": (_plan_fcfs(dynamic_size), lambda n: 1),
    "guided": (_plan_fcfs(guided_size), lambda n: 1),
    "chunk": (_plan_fcfs(dynamic_size), paper_chunk),
    # prolific, collective and pipe-1toN: chunk j (default one frame) to worker j mod k
    "round-robin": (_plan_static, lambda n: 1),
    # AIMD's chunks of 4, first come first served (its window gates when, never which)
    "aimd": (_plan_fcfs(dynamic_size), lambda n: AIMD_CHUNK),
}
# which schedulers each plan stands for (the others' hand-outs depend on timing)
PLAN_HELP = {
    "static": "static threads (blocks; --chunk c: chunk j to thread j mod k)",
    "dynamic": "dynamic threads, pipe-1to1 and pipe-MtoM (chunks of 1, first come first served)",
    "guided": "guided threads (chunks shrink with what remains)",
    "chunk": "the chunk scheduler (fixed chunks of L/100)",
    "round-robin": "prolific, collective and pipe-1toN (frame i to worker i mod k)",
    "aimd": "aimd (chunks of 4; its window decides only when a chunk is taken)",
}
TECHNIQUE_PLANS = ("trapezoidal", "fac2", "fac2a", "fac2b", "tfss", "fiss", "viss", "mfsc",
                   "pls", "rnd", "static_steal")
_OWN_PLANS = {"static_steal": _plan_steal}  # not a sequence: ranges per worker


def _technique_plans() -> dict:
    from .techniques import OWN_DEFAULT_CHUNK

    return {t: (_OWN_PLANS.get(t) or _plan_technique(t),
                (lambda n: 0) if t in OWN_DEFAULT_CHUNK else (lambda n: 1))
            for t in TECHNIQUE_PLANS}


PLANS.update(_technique_plans())


def _technique_help() -> dict[str, str]:
    from .techniques import DESCRIPTIONS

    return {t: f"LB4OMP {DESCRIPTIONS[t]}" for t in TECHNIQUE_PLANS}


PLAN_HELP.update(_technique_help())
PLAN_POLICIES = tuple(PLANS)


def whole(value, what: str) -> int:
    """``value`` as an int when it is a whole number (numpy's included, bool not); one
    UsageError line otherwise (an API caller's "10" or 10.5)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{what} must be an integer, got {value!r}")
    return int(value)


def plan(policy, tasks: int, workers: int, chunk: int = 0,
         params: dict | None = None) -> list[PlanRow]:
    """The hand-out of an OpenMP-style policy, one row per chunk in hand-out order.

    ``policy``: a name of `PLAN_POLICIES`, or a deterministic user technique (a
    `hybridsched.Technique` instance or class, or ``"package.module:Class"``)."""
    user = None
    if not isinstance(policy, str) or policy not in PLANS:
        from . import usertech

        # an installed technique's entry-point name, as `run -s NAME` takes it
        user = usertech.from_entry_point(policy) if isinstance(policy, str) and \
            ":" not in policy else None
        if user is None and not (isinstance(policy, str) and ":" in policy) and \
                not _technique_like(policy):
            raise UsageError(f"unknown policy {policy!r}; choose from {', '.join(PLAN_POLICIES)}, "
                             "an installed technique's name, or package.module:Class")
        user = user or usertech.resolve(policy, "--policy")
    n, k, chunk = (whole(v, what) for v, what in ((tasks, "tasks"), (workers, "workers"),
                                                  (chunk, "chunk")))
    if n < 1 or k < 1 or chunk < 0:
        raise UsageError(f"tasks and workers must be at least 1 and chunk at least 0 (0: the "
                         f"policy's own), got tasks {n}, workers {k}, chunk {chunk}")
    if n > PLAN_MAX_TASKS:
        raise UsageError(f"tasks {n} is more than {PLAN_MAX_TASKS:,} (the plan is built in memory)")
    if k > PLAN_MAX_TASKS:
        # static builds one row per worker: a bound on k bounds the plan's memory too
        raise UsageError(f"workers {k} is more than {PLAN_MAX_TASKS:,} (the plan is built in memory)")
    if user is not None:
        return _plan_user(user, n, k, chunk, params)
    hand_out, default = PLANS[policy]
    if policy in TECHNIQUE_PLANS:
        return hand_out(n, k, chunk or default(n), params)
    if params and any(v is not None for v in params.values()):
        raise UsageError(f"--policy {policy} takes no technique parameters")
    return hand_out(n, k, chunk or default(n))


def _technique_like(obj) -> bool:
    from .contract import Technique

    return isinstance(obj, Technique) or (isinstance(obj, type) and issubclass(obj, Technique))


def _plan_user(user, n: int, k: int, chunk: int, params: dict | None) -> list[PlanRow]:
    """A deterministic user technique's hand-out: ``chunk(remaining, i, -1)`` in claim order."""
    from .contract import check_params, configure, hand_out

    params = check_params(params, "plan: params")
    if not user.deterministic:
        raise UsageError(f"--policy {user.ref}: technique {user.name} is not deterministic, "
                         "so its hand-out is decided at run time (set deterministic = True "
                         "if chunk() uses neither worker nor what record() learned)")
    tech = user.new()
    configure(tech, n, k, chunk or 1, dict(params or {}))
    rows, first = [], 0
    for size in hand_out(tech, n).tolist():
        rows.append(PlanRow(-1, first, size))
        first += size
    return rows


def log2_levels(k: int) -> int:
    """Fork levels of a mitosis tree of k processes: ceil(log2 k)."""
    return 0 if k <= 1 else math.ceil(math.log2(k))


# --- process trees and pipe chunk search ------------------------------------------------


def mitosis_children(w: int, k: int) -> list[int]:
    """Workers that worker w forks in a mitosis (binomial) tree of k workers.

    In fork round j every existing worker w < 2**j forks worker w + 2**j, so the tree is
    complete after ``log2_levels(k)`` rounds and worker w is forked in round
    ``w.bit_length()`` by `mitosis_parent` (w)."""
    out = []
    j = w.bit_length()
    while w + (1 << j) < k:
        out.append(w + (1 << j))
        j += 1
    return out


def mitosis_parent(w: int) -> int:
    """The worker that forks worker w (w without its highest bit); -1 for the root 0."""
    return -1 if w == 0 else w - (1 << (w.bit_length() - 1))


AUTO_CHUNK = -1  # RunConfig.chunk value meaning "--chunk auto": search the best chunk


def chunk_candidates(n: int, k: int) -> list[int]:
    """First pass of the ``--chunk auto`` search: powers of two from 1 up to the chunk that
    gives each of k workers one message, ceil(n / k) (larger only idles workers)."""
    top = max(1, -(-n // k))
    if k == 1:
        return [top]  # one worker: nothing to balance, the fewest messages win
    out, c = [], 1
    while c < top:
        out.append(c)
        c *= 2
    out.append(top)
    return out


def chunk_refinements(best: int, n: int, k: int, tried: Sequence[int]) -> list[int]:
    """Second pass: the untried sizes between ``best`` and its power-of-two neighbours
    (best * 3/4 and best * 3/2), within 1 .. ceil(n / k)."""
    top = max(1, -(-n // k))
    near = {max(1, (best * 3) // 4), min(top, (best * 3 + 1) // 2)}
    return sorted(c for c in near if c not in tried)


# The first pass stops after two sizes in a row slower than this factor times the best so
# far: lower saves trials, but noise may then stop it before the true minimum.
AUTO_STOP = 1.5


def search_chunk(n: int, k: int, time_of: Callable[[int], float],
                 recheck: int = 0) -> tuple[int, dict[int, float]]:
    """``--chunk auto``'s search, for the backend and the simulator alike: time
    :func:`chunk_candidates` in order (stopping after two in a row AUTO_STOP times the best),
    then :func:`chunk_refinements` around the best, then the ``recheck`` fastest once more
    (each size keeps its best). Returns (the fastest chunk, seconds per size)."""
    times: dict[int, float] = {}

    def trial(c: int) -> None:
        t = time_of(c)
        times[c] = min(t, times.get(c, t))

    worse = 0
    for c in chunk_candidates(n, k):
        trial(c)
        # time against chunk is roughly U-shaped: stop climbing once it is clearly rising
        worse = worse + 1 if times[c] > AUTO_STOP * min(times.values()) else 0
        if worse == 2:
            break
    for c in chunk_refinements(min(times, key=times.__getitem__), n, k, list(times)):
        trial(c)
    for c in sorted(times, key=times.__getitem__)[:recheck]:  # one noisy trial can mislead
        trial(c)
    return min(times, key=times.__getitem__), times
