"""LB4OMP's techniques that learn from measured chunk times: pure state machines.

No clock and no thread here: the dispenser (:mod:`.dispense`) passes the time of each
request (``now``, seconds) and of each finished chunk (``seconds``); tests drive them with
fake timings. One object serves one execution of the loop; AWF's weights persist across
executions in an :class:`AwfHistory` (the "time steps" of Banicescu's AWF).

Which time a variant learns from follows LB4OMP: ``awf_b``/``awf_c``/``af`` the chunk's
execution time alone, ``awf_d``/``awf_e``/``af_a`` the total time from one request of the
worker to its next (execution plus scheduling overhead).
"""
from __future__ import annotations

import math

from .deterministic import Fac2a
from .profiled import Profile

# AF's sub-chunk divider (LB4OMP __kmp_env_divider): a chunk of at least this many frames
# is run as sub-chunks of 1/divider of it, so its mean/deviation are measured within it.
# More sub-chunks measure finer and cost more dispatches.
AF_DIVIDER = 10
# AF's first chunk per worker, before any measurement (LB4OMP hard-codes 100).
AF_FIRST_CHUNK = 100


class Learner:
    """Base: ``size(w, remaining, now)`` at a request, ``done(w, count, seconds)`` after a
    chunk, ``finish(w, now)`` when worker w finds nothing left."""

    total_time = False  # learn from request-to-request time instead of the chunk's own
    keeps_history = False  # learns across executions of the loop: give it the loop's AwfHistory

    def __init__(self, n: int, p: int, chunk: int, profile: Profile | None = None,
                 params: dict | None = None):
        self.n, self.p, self.min_chunk = n, max(1, p), max(1, chunk)
        self.profile, self.params = profile, params or {}
        self.counter = 0                     # requests so far, all workers (LB4OMP counter)
        self.last_req: list[float | None] = [None] * self.p      # time of each worker's previous request
        self.chunk_s: list[float | None] = [None] * self.p       # each worker's previous chunk's own time
        self.setup()

    def setup(self) -> None:
        pass

    def measured(self, w: int, now: float) -> float | None:
        """At w's request at ``now``: the time this variant learns from for w's previous
        chunk (its own time, or request to request), None before it has one."""
        prev, self.last_req[w] = self.last_req[w], now
        if self.total_time:
            return None if prev is None else now - prev
        return self.chunk_s[w]

    def size(self, w: int, remaining: int, now: float) -> int:  # pragma: no cover
        raise NotImplementedError

    def done(self, w: int, count: int, seconds: float) -> None:
        self.chunk_s[w] = seconds

    def finish(self, w: int, now: float) -> None:
        pass


class _Weighted(Learner):
    """FAC2a's batch chunk scaled by the requesting worker's weight."""

    batched = True

    def setup(self):
        self.fac = Fac2a(self.n, self.p, self.min_chunk)
        self.weights = [1.0] * self.p
        self.first = math.ceil(self.n / (2.0 * self.p))  # awf_c/e's first chunk

    def base(self, w: int, remaining: int, i: int, nth: int) -> int:
        if self.batched:
            return self.fac.batch_chunk(i // self.p)
        return self.first if nth == 0 else math.ceil(remaining / (2.0 * self.p))

    def weighted(self, w, remaining, i, nth):
        return max(self.min_chunk, math.ceil(self.weights[w] * self.base(w, remaining, i, nth)))


class Wf(_Weighted):
    """WF (Hummel et al.): fixed weights, here each worker's relative speed measured by
    the profiling run (LB4OMP takes them from KMP_WEIGHTS; 1 each without a profile)."""

    def setup(self):
        super().setup()
        sp = self.profile.speeds if self.profile is not None else ()
        if len(sp) == self.p:
            tot = sum(sp)
            self.weights = [s * self.p / tot for s in sp] if tot > 0 else [1.0] * self.p

    def size(self, w, remaining, now):
        i, self.counter = self.counter, self.counter + 1
        return self.weighted(w, remaining, i, 0)


class AwfHistory:
    """AWF's weights across executions of one loop: time-step-weighted sums of each
    worker's work and time, and the weights they give (Banicescu & Velusamy)."""

    def __init__(self, p: int):
        self.p, self.step = p, 0
        self.work = [0.0] * p
        self.time = [0.0] * p
        self.weights = [1.0] * p

    def update(self, work: list[float], time: list[float]) -> None:
        """Fold one execution (frames and seconds per worker) into the weights."""
        self.step += 1
        for i in range(self.p):
            self.work[i] += self.step * work[i]
            self.time[i] += self.step * time[i]
        rate = [self.time[i] / self.work[i] if self.work[i] > 0 and self.time[i] > 0 else None
                for i in range(self.p)]
        known = [r for r in rate if r is not None]
        if not known:
            return
        awap = sum(known) / len(known)
        raw = [awap / r if r is not None else 1.0 for r in rate]
        trw = sum(raw)
        self.weights = [x * self.p / trw for x in raw]


class Awf(_Weighted):
    """AWF: WF whose weights come from the earlier executions of the same loop."""

    keeps_history = True

    def setup(self):
        super().setup()
        self.history = self.params.get("awf_history") or AwfHistory(self.p)
        self.weights = list(self.history.weights)
        self.work = [0.0] * self.p
        self.start = [None] * self.p
        self.end = [None] * self.p

    def size(self, w, remaining, now):
        if self.start[w] is None:
            self.start[w] = now
        i, self.counter = self.counter, self.counter + 1
        c = self.weighted(w, remaining, i, 0)
        self.work[w] += min(c, remaining)
        return c

    def finish(self, w, now):
        self.end[w] = now
        if all(e is not None for e in self.end):
            times = [(e - s) if s is not None else 0.0 for s, e in zip(self.start, self.end)]
            self.history.update(self.work, times)


class AwfB(_Weighted):
    """AWF-B: weights updated after every chunk from the chunk-index-weighted time per
    frame pi of each worker: w = (mean pi / pi) normalised over the workers with a
    measurement. Batched (FAC2a) chunks; chunk times only."""

    def setup(self):
        super().setup()
        self.nth = [0] * self.p          # chunks taken per worker (LB4OMP chunk_index)
        self.sum_time = [0.0] * self.p
        self.sum_iters = [0.0] * self.p
        self.pi = [0.0] * self.p

    def size(self, w, remaining, now):
        diff = self.measured(w, now)
        if self.sum_iters[w] > 0 and diff is not None:
            self.sum_time[w] += self.nth[w] * max(diff, 1e-9)  # LB4OMP: at least one tick
            self.pi[w] = self.sum_time[w] / self.sum_iters[w]
            others = [x for v, x in enumerate(self.pi) if v != w and x != 0]
            mean = (self.pi[w] + sum(others)) / (1 + len(others))
            raw_sum = sum(mean / x for x in self.pi if x != 0)
            self.weights[w] = (mean / self.pi[w]) * (1 + len(others)) / raw_sum
        i, self.counter = self.counter, self.counter + 1
        c = self.weighted(w, remaining, i, self.nth[w])
        self.nth[w] += 1
        self.sum_iters[w] += self.nth[w] * c
        return c


class AwfC(AwfB):
    """AWF-C: AWF-B with chunks ceil(R / (2P)) per request instead of batches."""

    batched = False


class AwfD(AwfB):
    """AWF-D: AWF-B learning from total (request-to-request) times."""

    total_time = True


class AwfE(AwfC):
    """AWF-E: AWF-C learning from total times."""

    total_time = True


class Af(Learner):
    """AF (Banicescu & Liu): each worker's chunk from every worker's measured mean μ_i and
    deviation σ_i of the time per frame: D = Σ σ_i²/μ_i, T = 1/Σ(1/μ_i),
    chunk = (D + 2TR - sqrt(D² + 4DTR)) / (2 μ_w); run as sub-chunks to measure."""

    def setup(self):
        p = self.p
        self.chunk_rem = [float(AF_FIRST_CHUNK)] * p
        self.sub = [max(1, AF_FIRST_CHUNK // AF_DIVIDER)] * p
        self.last_sub = [0] * p
        self.sum_avg = [0.0] * p
        self.sum2 = [0.0] * p
        self.count = [0] * p
        self.mu = [0.0] * p
        self.sd = [0.0] * p

    def size(self, w, remaining, now):
        diff = self.measured(w, now)
        if self.last_sub[w] > 0 and diff is not None:
            avg = diff / self.last_sub[w]
            self.sum_avg[w] += avg
            self.sum2[w] += avg * avg
        # LB4OMP tests chunk_remaining == 0 exactly; a min chunk above the sub-chunk can
        # overshoot it below zero, and the worker would never re-size: <= 0 instead
        if self.chunk_rem[w] <= 0:
            k = self.count[w]
            mu = self.sum_avg[w] / k if k else 0.0
            var = (self.sum2[w] - k * mu * mu) / (k - 1) if k > 1 else 0.0
            self.mu[w], self.sd[w] = mu, math.sqrt(max(0.0, var))
            cs = self._new_chunk(w, remaining)
            self.chunk_rem[w] = float(cs)
            sub = cs // AF_DIVIDER if cs >= AF_DIVIDER else cs
            self.sub[w] = max(self.min_chunk, sub)
            c = self.sub[w]
        else:
            rest = self.chunk_rem[w] - self.sub[w]
            c = int(self.chunk_rem[w]) if 0 < rest < self.sub[w] else self.sub[w]
        c = max(1, c)
        self.chunk_rem[w] -= c
        self.last_sub[w] = c
        self.count[w] += 1
        return c

    def _new_chunk(self, w: int, remaining: int) -> int:
        mine_mu, mine_sd = self.mu[w], self.sd[w]
        if mine_mu <= 0:  # no usable measurement (a zero-time clock): guided's half share
            return max(1, math.ceil(remaining / (2.0 * self.p)))
        d = t = 0.0
        for i in range(self.p):
            mu, sd = (self.mu[i], self.sd[i]) if self.mu[i] > 0 else (mine_mu, mine_sd)
            d += sd * sd / mu
            t += 1.0 / mu
        t = 1.0 / t
        return max(1, math.ceil((d + 2 * t * remaining - math.sqrt(d * d + 4 * d * t * remaining))
                                / (2.0 * mine_mu)))


class AfA(Af):
    """AF_A: AF learning from total (request-to-request) times."""

    total_time = True


class Bold(Learner):
    """BOLD (Hagerup): chunks from the estimated unfinished work and the workers' speeds,
    with the profile's μ, σ and h. Ported from LB4OMP's algorithm 2 with real-valued
    speeds (LB4OMP keeps the total speed as an integer of iterations per 1e-6 unit) and
    guards where its logarithms or square roots would take a non-positive argument."""

    def setup(self):
        pr = self.profile or Profile(1.0, 0.0)
        self.mu, h = max(pr.mu, 1e-12), max(pr.h, 1e-12)
        self.h = h
        self.a = 2.0 * (pr.sigma / self.mu) ** 2
        self.b = 8.0 * self.a * math.log(8 * self.a) if self.a > 0 else 0.0
        self.ln_b = math.log(self.b) if self.b > 0 else 0.0
        self.c1 = h / (self.mu * math.log(2))
        self.c2 = math.sqrt(2 * math.pi) * self.c1
        self.c3 = math.log(self.c2)
        self.bold_m = float(self.n)
        self.bold_n = float(self.n)
        self.total_speed = 0.0
        self.bold_time = None
        self.my_bold = [0] * self.p
        self.my_speed = [0.0] * self.p
        self.my_time = [None] * self.p

    def size(self, w, remaining, now):
        t = now if self.bold_time is None else self.bold_time
        self.bold_time = now
        if self.my_time[w] is None:
            self.my_time[w] = t
        mb = self.my_bold[w]
        if mb > 0:
            sub = (now - t) * self.total_speed + mb - (now - self.my_time[w]) * mb / (mb * self.mu + self.h)
            self.bold_n -= sub
            self.bold_m -= mb
        self.total_speed -= self.my_speed[w]
        cs = self._chunk(remaining)
        cs = max(self.min_chunk, int(cs))
        self.my_bold[w] = cs
        self.my_speed[w] = cs / (cs * self.mu + self.h)
        self.total_speed += self.my_speed[w]
        self.my_time[w] = now
        return cs

    def _chunk(self, remaining: int) -> float:
        q = remaining / self.p
        if q <= 1:
            return 1.0
        r = max(float(remaining), max(0.0, self.bold_n))
        bold_t = r / self.p
        ln_q = math.log(q)
        v = q / (self.b + q) if self.b + q > 0 else 1.0
        d = remaining / (1 + 1 / ln_q - v)
        if d <= self.c2:
            return bold_t
        s = self.a * (math.log(d) - self.c3) * (1 + self.bold_m / (r * self.p))
        w = (math.log(v * ln_q) + self.ln_b) if self.b > 0 and v * ln_q > 0 else math.log(ln_q)
        under = s * (bold_t + s / 4)
        if under < 0:
            return bold_t
        r1 = bold_t + s / 2 - math.sqrt(under) + max(0.0, self.c1 * w)
        return min(r1, bold_t)


LEARNERS: dict[str, type[Learner]] = {
    "wf": Wf, "awf": Awf, "awf_b": AwfB, "awf_c": AwfC, "awf_d": AwfD, "awf_e": AwfE,
    "af": Af, "af_a": AfA, "bold": Bold,
}
