"""LB4OMP's techniques whose hand-out depends only on (N, P, chunk parameter): pure rules.

Each rule is a class built once per loop from (n, p, chunk, params) -- as LB4OMP's
``__kmp_dispatch_init_algorithm`` computes its per-loop constants -- whose ``size(i,
remaining)`` gives the size of the i-th chunk handed out (i counts requests over all
workers, as LB4OMP's shared ``counter``; ``batch = i // P``). The rounding follows LB4OMP's
runtime (kmp_dispatch.cpp): which values it keeps in integer fields, where it takes ceil
or floor. Where LB4OMP would divide by zero or hand out an empty chunk (and so leave
iterations undone) we say so and do the sane thing instead.

The sequence of a rule is then :func:`hand_out` (prefix sums of the sizes, the last chunk
cut at N): what a compiled dispatcher can precompute as a bounds array.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# Environment parameters of LB4OMP, with its defaults (None = the default that depends on P).
PARAM_DEFAULTS = {
    "fiss_stages": None,  # KMP_FISS_STAGES: FISS's number of stages; LB4OMP default P - 1
    "viss_param": None,   # KMP_VISS_PARAM: VISS's divisor of N/P; LB4OMP default P
    "pls_swr": 0.5,       # KMP_PLS_SWR: PLS's static workload ratio; LB4OMP default 0.5
    "rnd_start": 1,       # KMP_RND_START: smallest RND chunk; LB4OMP default 1
    "seed": 0,            # RND's stream (LB4OMP seeds rand_r with time x thread id)
}


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a counter-based random number, so RND's i-th chunk is a pure
    function of i (compilable, reproducible) instead of a clock-seeded rand_r."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


@dataclass
class Rule:
    """A first-come-first-served rule: chunk i's size from (i, frames remaining)."""

    n: int
    p: int
    chunk: int
    params: dict = field(default_factory=dict)
    by_index: bool = True  # size depends on i alone (a bounds array can be precomputed)

    def __post_init__(self) -> None:
        self.p = max(1, self.p)
        self.min_chunk = max(1, self.chunk)
        self.setup()

    def setup(self) -> None:
        pass

    def param(self, name: str, default):
        v = self.params.get(name)
        return default if v is None else v

    def size(self, i: int, remaining: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError


class Whole(Rule):
    """One worker: LB4OMP hands out [0, N) as a single chunk whatever the technique (its
    one-thread path); libgomp's dynamic, guided and chunk keep their own hand-out."""

    def size(self, i, remaining):
        return remaining


class Trapezoidal(Rule):
    """TSS (Tzen & Ni): first chunk F = N/(2P), last L = chunk, decreasing by a constant
    step; LB4OMP/LLVM's integer arithmetic on the start of chunk i."""

    def setup(self):
        n, p = self.n, self.p
        self.F = max(1, n // (2 * p))
        self.L = min(max(1, self.chunk), self.F)
        self.steps = max(2, (2 * n + self.F + self.L - 1) // (self.F + self.L))
        self.delta = (self.F - self.L) // (self.steps - 1)

    def start(self, i: int) -> int:
        return (i * (2 * self.F - (i - 1) * self.delta)) // 2

    def size(self, i, remaining):
        if i >= self.steps:
            # LLVM stops at its step count; its rounding never leaves frames for later
            # steps (checked over a grid in the tests), but never hand out nothing
            return self.L
        return max(1, self.start(i + 1) - self.start(i))


class Fac2(Rule):
    """FAC2 (factoring with x = 2): batch b of P chunks of ceil(0.5^(b+1) N/P), at least
    the chunk parameter. fac2b is the same hand-out computed with fetch-and-add instead of
    compare-and-swap in LB4OMP."""

    def size(self, i, remaining):
        b = i // self.p
        return max(self.min_chunk, math.ceil(0.5 ** (b + 1) * (self.n / self.p)))


class Fac2a(Rule):
    """FAC2a: the batch chunk halved with a ceiling at every batch, from ceil(N/(2P))
    (LB4OMP's loop version: rounding accumulates differently from fac2's formula)."""

    def setup(self):
        self._chunks = [min(self.n, math.ceil(0.5 * self.n / self.p))]

    def batch_chunk(self, b: int) -> int:
        while len(self._chunks) <= b:
            self._chunks.append(math.ceil(self._chunks[-1] * 0.5))
        return self._chunks[b]

    def size(self, i, remaining):
        return max(self.min_chunk, self.batch_chunk(i // self.p))


class Tfss(Rule):
    """TFSS (trapezoid factoring): TSS's trapezoid handed out in batches of P, each chunk
    of a batch the mean of the P trapezoid chunks it stands for. LB4OMP keeps the step
    delta in an integer field, so it is truncated; we do the same."""

    def setup(self):
        n, p = self.n, self.p
        self.F = math.ceil(n / (2 * p))
        steps = math.ceil(2.0 * n / (self.F + 1))
        # LB4OMP divides by steps - 1, which is 0 for N = 1: no decrease then
        self.delta = int((self.F - 1) / (steps - 1)) if steps > 1 else 0
        self.last_step = steps - 1

    def size(self, i, remaining):
        b, p, d = i // self.p, self.p, self.delta
        first = self.F - b * p * d
        if first < 0:
            first = self.F - self.last_step * d
        total = sum(first - j * d for j in range(p))
        return max(self.min_chunk, total // p)  # C integer division of a signed sum


class Fiss(Rule):
    """FISS (fixed increase): batch b gets C0 + b * delta with C0 = floor(N/((S+2)P)),
    delta = floor(2N(1 - S/(S+2)) / (P S (S-1))), S = stages (KMP_FISS_STAGES)."""

    def setup(self):
        n, p = self.n, self.p
        s = int(self.param("fiss_stages", p - 1))
        x = 2.0 + s
        self.c0 = max(self.min_chunk, math.floor(n / (x * p)))
        denom = p * s * (s - 1)
        # LB4OMP divides by zero for S <= 1 (P <= 2 by default): no increase then
        self.delta = max(0, math.floor(2 * n * (1 - s / x) / denom)) if denom > 0 else 0

    def size(self, i, remaining):
        return max(1, self.c0 + (i // self.p) * self.delta)


class Viss(Rule):
    """VISS (variable increase): K = N // (V P) (V = KMP_VISS_PARAM), batch b > 0 gets
    floor(K (1 - 0.5^(b+1)) / 0.5). LB4OMP ignores the chunk parameter here and, for
    N < V P, hands out empty chunks and ends the loop with every frame undone; we hand
    out at least one frame."""

    def setup(self):
        v = int(self.param("viss_param", self.p))
        self.K = self.n // max(1, v * self.p)

    def size(self, i, remaining):
        b = i // self.p
        c = math.floor(self.K * (1 - 0.5 ** (b + 1)) / 0.5) if b > 0 else self.K
        return max(1, c)


class Mfsc(Rule):
    """mFSC (modified fixed size chunking, no profile): one chunk size
    int(0.55 + ceil(N/P) ln 2 / ln ceil(N/P)), at least the chunk parameter."""

    def setup(self):
        t = (self.n + self.p - 1) // self.p
        # ln 1 = 0: LB4OMP divides by zero when N <= P; one frame per chunk then
        c = int(0.55 + t * math.log(2.0) / math.log(t)) if t > 1 else 1
        self.fixed = max(self.min_chunk, c)

    def size(self, i, remaining):
        return self.fixed


class Pls(Rule):
    """PLS (performance-based loop scheduling): the first P requests get the static part
    ceil(N SWR / P) (SWR = KMP_PLS_SWR), then GSS over the rest:
    ceil((1 - 1/P)^s (N - P static) / P) for step s."""

    def setup(self):
        swr = float(self.param("pls_swr", 0.5))
        self.static = math.ceil(self.n * swr / self.p)
        self.rest = self.n - self.p * self.static
        # SWR = 0: no static part at all, GSS from the first request (P requests of the
        # minimum chunk would be a static part nobody asked for)
        self.phase = self.p if self.static > 0 else 0

    def size(self, i, remaining):
        if i < self.phase:
            return max(self.min_chunk, self.static)
        s = i - self.phase
        c = int(math.ceil((1 - 1.0 / self.p) ** s * self.rest / self.p))
        return max(self.min_chunk, c)


class Rnd(Rule):
    """RND: a uniform chunk size in [KMP_RND_START, chunk] (chunk 0: up to N - 1), from a
    counter-based generator seeded by ``seed`` instead of LB4OMP's clock-seeded rand_r."""

    def setup(self):
        self.lo = max(1, int(self.param("rnd_start", 1)))
        self.hi = max(self.lo, self.chunk if self.chunk > 0 else self.n - 1)
        self.seed = int(self.param("seed", 0))

    def size(self, i, remaining):
        return self.lo + _mix64((self.seed << 32) ^ i) % (self.hi - self.lo + 1)


class Remaining(Rule):
    """Base of the rules sized from the frames remaining (guided-like)."""

    by_index = False

    def __post_init__(self):
        self.by_index = False
        super().__post_init__()


RULES: dict[str, type[Rule]] = {
    "trapezoidal": Trapezoidal, "fac2": Fac2, "fac2a": Fac2a, "fac2b": Fac2, "tfss": Tfss,
    "fiss": Fiss, "viss": Viss, "mfsc": Mfsc, "pls": Pls, "rnd": Rnd,
}


def hand_out(rule: Rule, start: int = 0) -> list[tuple[int, int]]:
    """(first, count) of every chunk of a rule over frames start .. n-1, in hand-out order."""
    out, first, i = [], start, 0
    while first < rule.n:
        c = min(rule.size(i, rule.n - first), rule.n - first)
        out.append((first, c))
        first += c
        i += 1
    return out


def steal_blocks(n: int, p: int, chunk: int) -> tuple[int, list[tuple[int, int]]]:
    """static_steal's initial assignment: ceil(N/chunk) chunk indices in P contiguous
    ranges [lo, hi) of chunk indices (the first N mod P ranges one longer). With fewer
    chunks than workers (one worker included) LB4OMP falls back to balanced static blocks
    and ignores the chunk: the chunk used is then 0, worker w's range is its one block
    index w (:func:`balanced_block`), empty for workers beyond N.
    Returns (the chunk used, the ranges)."""
    c = max(1, chunk)
    ntc = -(-n // c)
    if p <= 1 or ntc < p:
        return 0, [(w, w + 1) if w < n else (w, w) for w in range(max(1, p))]
    q, r = divmod(ntc, p)
    out, lo = [], 0
    for w in range(p):
        hi = lo + q + (1 if w < r else 0)
        out.append((lo, hi))
        lo = hi
    return c, out


def balanced_block(n: int, p: int, w: int) -> tuple[int, int]:
    """(first, count) of worker w's block in OpenMP's balanced static split: the first
    N mod P workers one frame more (N = 37, P = 24: 13 blocks of 2, 11 of 1)."""
    q, r = divmod(n, max(1, p))
    return w * q + min(w, r), q + (1 if w < r else 0)
