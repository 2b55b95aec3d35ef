"""``--scheduler auto``: pick the technique online, across the repetitions of one loop.

Method: successive halving (Karnin, Koren and Somekh, ICML 2013; Jamieson and Talwalkar,
2016), a racing method for identifying the best arm, over every technique the package has
(27: the paper's static, dynamic and guided and LB4OMP's 24, against LB4OMP's 12-entry
auto portfolio). Each execution of the loop plays one technique. Round 0 plays each once;
after every round the fastest third survives and each survivor is played until it has
twice the samples of the round before (1, 2, ...; the finalists until FINAL_SAMPLES),
round-robin so a drift of the machine touches every survivor alike; when one is left it
has settled and is played from then on. 27 techniques settle after 27 + 9 + 3 x 6 = 54
executions.

Why this rather than the UCB1 bandit it replaced: techniques are compared only at equal
sample counts, by each one's mean time without its slowest sample (see TRIM_FROM). A bandit
compares a leader with many samples against rivals with one, and the minimum of many
samples is lower than that of one by chance alone: measured here (bench_portfolio, 14
arms, 60 executions), UCB settled 6 to 13 % behind the best fixed technique on five of six workloads, each time on the arm it had
played most. Why not LB4OMP's exhaustive search (each once, keep the best): one disturbed
or lucky execution decides for good. Why not SimAS-style simulation: it needs a model of
the per-chunk overheads per backend, and the race measures them.

The racer only sees times: the backend (threads, compiled or not, and the pipe producer)
reports each execution's T when it ends (:meth:`AutoDispenser.executed`).
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Callable

from ...errors import TechniqueError
from ..dispatch import Dispenser
from ..memory import Memory
from . import NAMES

# The paper's three thread schedulers that are techniques of the field (static, SS, GSS),
# then LB4OMP's 24 in its order (techniques.NAMES); chunk, aimd and adaptive are
# the paper's own and stay out (aimd needs the study's monitor).
PORTFOLIO = ("static", "dynamic", "guided") + tuple(NAMES)

# The fraction of a round's survivors that goes on. 3 spends far fewer executions racing
# 27 techniques than halving by 2 (54 against 27 + 14 + 7 x 2 + 4 x 4 + 2 x 8 = 87)
# at the price of deciding on fewer samples in the first rounds.
KEEP = 3
# From this many samples an arm's slowest is left out of its estimate. Other load only ever
# slows a run down, so one disturbed run should not bury a technique; the minimum (the
# first estimator tried) favoured techniques whose makespan varies from run to run (which
# worker draws the costly tasks under a big first chunk): measured on heavytail it settled
# on one 7 % behind the best by mean, the figure a user sees over many executions.
TRIM_FROM = 3


# Samples each finalist (the last ``keep`` or fewer) has before one is picked. The final
# comparison is the one between techniques a few percent apart, where 4 samples of 2-3 %
# noise each mis-ranked them (measured: settled 5-8 % behind the best on two of six
# workloads); 8 costs 3 x 4 more executions once.
FINAL_SAMPLES = 8


def _next_target(target: int, alive: int, keep: int) -> int:
    return max(2 * target, FINAL_SAMPLES) if alive <= keep else 2 * target


def race_length(arms: int, keep: int = KEEP) -> int:
    """The executions a race over ``arms`` techniques takes before it settles."""
    total, alive, target, had = 0, arms, 1, 0
    while alive > 1:
        total += alive * (target - had)
        alive, had = max(1, math.ceil(alive / keep)), target
        if alive > 1:
            target = _next_target(target, alive, keep)
    return total


class Racing:
    """Successive halving over ``arms``; ``choose()`` then ``record(arm, seconds)`` per
    execution. ``settled`` once one arm is left; ``leader()`` is the arm it settled on (or,
    before that, the fastest so far at the current round's sample count)."""

    def __init__(self, arms=PORTFOLIO, keep: int = KEEP):
        if keep < 2:
            raise ValueError("keep must be at least 2")
        self.arms, self.keep = tuple(arms), keep
        self.alive: tuple[str, ...] = self.arms
        self.target = 1  # samples each survivor has by the end of this round
        self.plays = {a: 0 for a in self.arms}
        self.times: dict[str, list[float]] = {a: [] for a in self.arms}
        self.history: list[tuple[str, float]] = []
        self.dropped: dict[str, str] = {}  # arm -> why it left the race (its technique failed)

    @property
    def settled(self) -> bool:
        return len(self.alive) == 1

    def _score(self, a: str) -> float:
        """The arm's estimated T: the mean of its first ``target`` samples (survivors are
        compared at equal counts) without the slowest once there are three or more."""
        got = sorted(self.times[a][:self.target])
        if not got:
            return math.inf
        kept = got[:-1] if len(got) >= TRIM_FROM else got
        return sum(kept) / len(kept)

    def choose(self) -> str:
        if not self.alive:
            raise TechniqueError("every technique of the portfolio failed: " + "; ".join(
                f"{a}: {why}" for a, why in self.dropped.items()))
        if self.settled:
            return self.alive[0]
        behind = [a for a in self.alive if self.plays[a] < self.target]
        return min(behind, key=lambda a: self.plays[a])  # ties: portfolio order (min is stable)

    def record(self, arm: str, seconds: float) -> None:
        if arm not in self.alive:
            return  # dropped while its execution ran
        self.plays[arm] += 1
        self.times[arm].append(max(seconds, 1e-12))
        self.history.append((arm, seconds))
        self._advance()

    def drop(self, arm: str, why: str) -> None:
        """``arm``'s technique failed (its chunk(), start() or record() misbehaved): it
        leaves the race, and the others go on without it."""
        if arm in self.alive:
            self.dropped[arm] = why
            self.alive = tuple(a for a in self.alive if a != arm)
            self._advance()

    def _advance(self) -> None:
        """End the round once every survivor has its samples: the fastest third go on."""
        if len(self.alive) > 1 and all(self.plays[a] >= self.target for a in self.alive):
            n = max(1, math.ceil(len(self.alive) / self.keep))
            ranked = sorted(self.alive, key=self._score)  # sorted is stable: ties by order
            self.alive = tuple(a for a in self.alive if a in ranked[:n])
            if not self.settled:
                self.target = _next_target(self.target, len(self.alive), self.keep)

    def leader(self) -> str | None:
        """The settled arm, or the fastest at the current sample count; None before any play."""
        if not self.history or not self.alive:
            return None
        return self.alive[0] if self.settled else min(self.alive, key=self._score)


def racer_for(memory: Memory, key: tuple, arms: tuple[str, ...] = PORTFOLIO) -> Racing:
    """The racer of one loop (its key) in ``memory``, over ``arms`` (``--portfolio``;
    default PORTFOLIO)."""
    r = memory.racers.get(key)
    if r is None or r.arms != tuple(arms):
        r = memory.racers[key] = Racing(arms)
    return r


class AutoDispenser(Dispenser):
    """Runs the technique the loop's racer chooses; the backend's T of the execution goes
    to the racer (:meth:`executed`). ``racer``: anything with ``choose()`` and
    ``record(arm, seconds)`` (auto-sim's predictor too)."""

    def __init__(self, racer, make: Callable[[str], Dispenser], n: int, arm=None):
        super().__init__()
        self.racer = racer
        self.choice = racer.choose()
        self._make = make
        self._inner: Dispenser | None = None
        # the chosen technique's registry entry: the thread backend runs its fixed
        # hand-out in compiled dispatch when it has one (backends/compiled.delegated)
        self.arm = arm(self.choice) if arm is not None else None
        self._recorded = False
        self._lock = threading.Lock()

    @property
    def inner(self) -> Dispenser:
        if self._inner is None:  # not built when the compiled loop runs the hand-out
            self._inner = self._make(self.choice)
        return self._inner

    def claim(self, w):
        if self.stopped:
            return None
        with self.failing():
            return self.inner.claim(w)

    @property
    def feedback(self) -> bool:  # chunk reports only where the chosen technique learns
        return self.inner.feedback

    def done(self, w, count, seconds):
        with self.failing():
            self.inner.done(w, count, seconds)

    @contextmanager
    def failing(self):
        """A fault of the chosen technique fails this execution (the run) and drops the
        technique from the race, so the next repetitions race the others."""
        try:
            yield
        except TechniqueError as exc:
            self.failed(exc)
            raise

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.racer.drop(self.choice, str(exc))

    def executed(self, seconds: float) -> None:
        """The execution ended with every frame done after ``seconds`` (the run's T): the
        racer learns it, once."""
        with self._lock:
            if self._recorded or self.stopped:
                return
            self._recorded = True
        self.racer.record(self.choice, seconds)

    def stop(self):
        super().stop()
        if self._inner is not None:
            self._inner.stop()

    def remaining(self) -> int:
        return 0 if self.stopped else self.inner.remaining()

    def technique(self) -> str:
        return self.choice

    def notes(self):
        inner = self._inner.notes() if self._inner is not None else ""
        return f"auto chose {self.choice}" + (f"; {inner}" if inner else "") + self.dropped()

    def dropped(self) -> str:
        """The portfolio's failed techniques, for the run's notes ('' for none)."""
        gone = getattr(self.racer, "dropped", {})
        return f"; dropped from the portfolio: {', '.join(gone)}" if gone else ""
