"""``--scheduler auto-sim``: pick the technique by simulating the portfolio (SimAS's idea,
Mohammed & Ciorba), on the loop's own iteration times.

Before the first timed repetition, untimed, the loop's profile (the dynamic,1 profiling run
the profiled techniques use) gives each iteration's time; every technique of the portfolio
is simulated on them with the loop's k workers (core.virtual: the same dispensers, a claim
costing the profile's overhead h), and the predicted fastest runs from the first timed
repetition on. When a measured time drifts more than :data:`DRIFT` from its prediction,
the costs are rescaled by the measured / predicted ratio and the portfolio simulated again
before the next repetition. Each run stores the technique and its predicted time.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Callable

import numpy as np

from ..dispatch import Dispenser
from ..virtual import Engine, Placement, virtual_clock

# A measured time further than this from its prediction sends the portfolio back to the
# simulator: tighter re-simulates on noise alone (2-5 % from run to run here), looser keeps
# a wrong pick for long when the machine's load changes.
DRIFT = 0.10


class Predictor:
    """One loop's predictions: the portfolio simulated on its iteration costs."""

    def __init__(self, arms: tuple[str, ...], lookup: Callable):
        self.arms, self.lookup = tuple(arms), lookup
        self.predicted: dict[str, float] = {}
        self.costs: np.ndarray | None = None
        self.stale = True
        self.simulations = 0

    def ready(self, costs: np.ndarray, workers: int, chunk: int, h: float, profile) -> None:
        """Simulate the portfolio unless a fresh prediction exists (untimed)."""
        if self.costs is None:
            self.costs = np.asarray(costs, float)
        if not self.stale:
            return
        self.predicted = {a: self._simulate(a, workers, chunk, h, profile) for a in self.arms}
        self.stale = False
        self.simulations += 1

    def _simulate(self, arm: str, workers: int, chunk: int, h: float, profile) -> float:
        info = self.lookup(arm)
        n = len(self.costs)
        cum = np.concatenate([[0.0], np.cumsum(self.costs)])
        # a stand-in job: the arm's loop state (AWF's weights) must not be the real loop's
        job = SimpleNamespace(scheduler=f"auto-sim:{arm}", work=np.broadcast_to(
            np.zeros(1, np.uint8), (n, 1, 1)), k=workers, kernel="auto-sim", chunk=chunk,
            affinity=True, cpus=list(range(workers)), pipe_batch=1, inflight=1, portfolio="",
            params={"profile": profile} if info.profiled else {}, extra={})
        disp = info.dispenser(n, workers, info.resolve_chunk(chunk, n), None, job=job)
        eng = Engine(cum, workers, Placement(workers), h)
        virtual_clock(disp, eng.clock)
        return eng.run(disp).makespan

    def choose(self) -> str:
        return min(self.arms, key=lambda a: self.predicted.get(a, math.inf))

    def observe(self, arm: str, seconds: float) -> None:
        """A measured time: far from its prediction, rescale the costs and simulate again."""
        pred = self.predicted.get(arm)
        if pred and seconds > 0 and abs(seconds / pred - 1.0) > DRIFT and self.costs is not None:
            self.costs = self.costs * (seconds / pred)
            self.stale = True


_predictors: dict[tuple, Predictor] = {}


def predictor_for(key: tuple, arms: tuple[str, ...], lookup: Callable) -> Predictor:
    p = _predictors.get(key)
    if p is None or p.arms != tuple(arms):
        p = _predictors[key] = Predictor(arms, lookup)
    return p


def reset_state() -> None:
    _predictors.clear()


class AutoSimDispenser(Dispenser):
    """Runs the technique the loop's predictor picked; its T goes back to the predictor."""

    def __init__(self, predictor: Predictor, make: Callable[[str], Dispenser], arm=None):
        super().__init__()
        self.predictor = predictor
        self.choice = predictor.choose()
        self.predicted = predictor.predicted.get(self.choice, math.nan)
        self._make = make
        self._inner: Dispenser | None = None
        self.arm = arm(self.choice) if arm is not None else None
        self._recorded = False

    @property
    def inner(self) -> Dispenser:
        if self._inner is None:
            self._inner = self._make(self.choice)
        return self._inner

    def claim(self, w):
        return None if self.stopped else self.inner.claim(w)

    @property
    def feedback(self) -> bool:
        return self.inner.feedback

    def done(self, w, count, seconds):
        self.inner.done(w, count, seconds)

    def executed(self, seconds: float) -> None:
        if not self._recorded and not self.stopped:
            self._recorded = True
            self.predictor.observe(self.choice, seconds)

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
        return (f"auto-sim chose {self.choice} (predicted {self.predicted * 1e3:.3f} ms)"
                + (f"; {inner}" if inner else ""))
