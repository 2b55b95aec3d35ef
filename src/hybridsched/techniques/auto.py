"""``--scheduler auto``: pick the technique online, across the repetitions of one loop.

Method: UCB1 (Auer et al., 2002) over a portfolio larger than LB4OMP's 12-entry auto
portfolio. Each execution of the loop plays one arm (a technique). Every arm is played
once in portfolio order, then the arm with the largest value + c sqrt(2 ln n / n_arm),
where an arm's value is (the best time of any arm) / (this arm's best time), in (0, 1].
Why a bandit rather than LB4OMP's exhaustive search (try each once, keep the best): one
disturbed repetition would crown or bury a technique for good; UCB keeps re-checking
the ones played least at a rate that falls as log n, and its regret grows only
logarithmically. Why each arm's best time rather than its mean: other load only ever
slows a run down, so the minimum is the robust estimate of what a technique costs (the
pipe backend's --chunk auto keeps each size's best for the same reason); in simulation
(14 arms within 30 %, 2 % jitter, one run in ten twice as slow) the mean let an outlier
keep the bandit off the best arm three times as often. It needs no model of the workload
(SimAS's simulation would) and no ordering of the portfolio (binary/expert search would).

The bandit only sees times; the dispenser measures them itself (from its creation to the
report of the last frame done), so it needs nothing from the backend but ``done``.
"""
from __future__ import annotations

import math
import threading
from time import perf_counter
from typing import Callable

from ..dispatch import Dispenser

# LB4OMP's portfolio (static, SS, TSS, GSS, fac2a, static_steal, awf_b..e, af_a) with its
# two GSS variants as our one guided, plus fac2, tfss and pls: 14 techniques.
PORTFOLIO = ("static", "dynamic", "trapezoidal", "guided", "fac2a", "static_steal", "awf_b",
             "awf_c", "awf_d", "awf_e", "af_a", "fac2", "tfss", "pls")

# UCB's exploration weight on values in (0, 1]. Techniques often differ by a few percent,
# so the classic c = 1 would keep trying clearly worse ones for hundreds of repetitions;
# smaller settles sooner but re-checks an arm whose only run was disturbed later. 0.05
# settled within 5 % of the best in 97 % of simulated loops of 30 to 120 repetitions.
UCB_C = 0.05


class Bandit:
    """UCB1 over ``arms``; ``choose()`` then ``record(arm, seconds)`` per execution."""

    def __init__(self, arms=PORTFOLIO, c: float = UCB_C):
        self.arms, self.c = tuple(arms), c
        self.plays = {a: 0 for a in self.arms}
        self.times: dict[str, list[float]] = {a: [] for a in self.arms}
        self.history: list[tuple[str, float]] = []

    def choose(self) -> str:
        for a in self.arms:
            if self.plays[a] == 0:
                return a
        best = min(min(t) for t in self.times.values() if t)
        n = len(self.history)

        def score(a):
            value = best / min(self.times[a])
            return value + self.c * math.sqrt(2 * math.log(n) / self.plays[a])
        return max(self.arms, key=score)

    def record(self, arm: str, seconds: float) -> None:
        self.plays[arm] += 1
        self.times[arm].append(max(seconds, 1e-12))
        self.history.append((arm, seconds))

    def leader(self) -> str | None:
        """The arm played most (the settled choice); None before any play."""
        return max(self.arms, key=lambda a: self.plays[a]) if self.history else None


_bandits: dict[tuple, Bandit] = {}


def bandit_for(key: tuple) -> Bandit:
    b = _bandits.get(key)
    if b is None:
        b = _bandits[key] = Bandit()
    return b


def reset_state() -> None:
    _bandits.clear()


class AutoDispenser(Dispenser):
    """Runs the technique the loop's bandit chooses and times the execution for it."""

    feedback = True

    def __init__(self, bandit: Bandit, make: Callable[[str], Dispenser], n: int,
                 clock: Callable[[], float] = perf_counter):
        super().__init__()
        self.bandit, self.n, self.clock = bandit, n, clock
        self.choice = bandit.choose()
        self.inner = make(self.choice)
        self._done = 0
        self._recorded = False
        self._t0 = clock()
        self._lock = threading.Lock()

    def claim(self, w):
        return None if self.stopped else self.inner.claim(w)

    def done(self, w, count, seconds):
        if self.inner.feedback:
            self.inner.done(w, count, seconds)
        with self._lock:
            self._done += count
            finished = self._done >= self.n and not self.stopped and not self._recorded
            self._recorded = self._recorded or finished
        if finished:
            self.bandit.record(self.choice, self.clock() - self._t0)

    def stop(self):
        super().stop()
        self.inner.stop()

    def remaining(self) -> int:
        return 0 if self.stopped else self.inner.remaining()

    def technique(self) -> str:
        return self.choice

    def notes(self):
        inner = self.inner.notes()
        return f"auto chose {self.choice}" + (f"; {inner}" if inner else "")
