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

from ...errors import TechniqueError
from ..dispatch import Dispenser
from ..memory import Memory
from .auto import AutoDispenser
from ..virtual import Engine, Placement, virtual_clock

# A measured time further than this from its prediction sends the portfolio back to the
# simulator: tighter re-simulates on noise alone (2-5 % from run to run here), looser keeps
# a wrong pick for long when the machine's load changes.
DRIFT = 0.10


class Predictor:
    """One loop's predictions: the portfolio simulated on its iteration costs."""

    def __init__(self, arms: tuple[str, ...], lookup: Callable, memory: Memory | None = None):
        self.arms, self.lookup = tuple(arms), lookup
        # where the stand-in loops' state lives (AWF's weights): the real loop's memory
        self.memory = Memory() if memory is None else memory
        self.predicted: dict[str, float] = {}
        self.costs: np.ndarray | None = None
        self.stale = True
        self.simulations = 0
        self.dropped: dict[str, str] = {}  # arm -> why it left the portfolio (it failed)

    def ready(self, costs: np.ndarray, workers: int, chunk: int, h: float, profile) -> None:
        """Simulate the portfolio unless a fresh prediction exists (untimed); a technique
        that fails its simulation leaves the portfolio, named."""
        if self.costs is None:
            self.costs = np.asarray(costs, float)
        known = self.costs
        if not self.stale:
            return
        self.predicted = {}
        for a in self.alive:
            try:
                self.predicted[a] = self._simulate(a, known, workers, chunk, h, profile)
            except TechniqueError as exc:
                self.drop(a, str(exc))
        self.stale = False
        self.simulations += 1

    @property
    def alive(self) -> tuple[str, ...]:
        return tuple(a for a in self.arms if a not in self.dropped)

    def drop(self, arm: str, why: str) -> None:
        """``arm``'s technique failed: it is never chosen again."""
        self.dropped.setdefault(arm, why)
        self.predicted.pop(arm, None)

    def _simulate(self, arm: str, costs: np.ndarray, workers: int, chunk: int, h: float,
                  profile) -> float:
        info = self.lookup(arm)
        n = len(costs)
        cum = np.concatenate([[0.0], np.cumsum(costs)])
        # a stand-in job: the arm's loop state (AWF's weights) must not be the real loop's
        job = SimpleNamespace(scheduler=f"auto-sim:{arm}", work=np.broadcast_to(
            np.zeros(1, np.uint8), (n, 1, 1)), k=workers, kernel="auto-sim", chunk=chunk,
            affinity=True, cpus=list(range(workers)), pipe_batch=1, inflight=1, portfolio=(),
            params={"profile": profile} if info.profiled else {}, extra={}, memory=self.memory)
        disp = info.dispenser(n, workers, info.resolve_chunk(chunk, n), None, job=job)
        eng = Engine(cum, workers, Placement(workers), h)
        virtual_clock(disp, eng.clock)
        return eng.run(disp).makespan

    def choose(self) -> str:
        if not self.alive:
            raise TechniqueError("every technique of the portfolio failed: " + "; ".join(
                f"{a}: {why}" for a, why in self.dropped.items()))
        return min(self.alive, key=lambda a: self.predicted.get(a, math.inf))

    def record(self, arm: str, seconds: float) -> None:
        """A measured time: far from its prediction, rescale the costs and simulate again."""
        pred = self.predicted.get(arm)
        if pred and seconds > 0 and abs(seconds / pred - 1.0) > DRIFT and self.costs is not None:
            self.costs = self.costs * (seconds / pred)
            self.stale = True


def predictor_for(memory: Memory, key: tuple, arms: tuple[str, ...], lookup: Callable) -> Predictor:
    """The predictor of one loop (its key) in ``memory``, over ``arms``."""
    p = memory.predictors.get(key)
    if p is None or p.arms != tuple(arms):
        p = memory.predictors[key] = Predictor(arms, lookup, memory)
    return p


class AutoSimDispenser(AutoDispenser):
    """auto's dispenser with the loop's predictor in place of its racer: runs the predicted
    best; the execution's T goes back to the predictor (:meth:`Predictor.record`)."""

    def __init__(self, predictor: Predictor, make: Callable[[str], Dispenser], arm=None):
        super().__init__(predictor, make, 0, arm)
        self.predicted = predictor.predicted.get(self.choice, math.nan)

    def notes(self):
        inner = self._inner.notes() if self._inner is not None else ""
        return (f"auto-sim chose {self.choice} (predicted {self.predicted * 1e3:.3f} ms)"
                + (f"; {inner}" if inner else "") + self.dropped())
