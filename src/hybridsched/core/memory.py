"""What a loop learns across its repetitions, in one object with one owner.

auto races the portfolio over repetitions, AWF carries its weights from one execution to
the next, the profiled techniques run their profiling run once per loop, auto-sim keeps
its predictions and ``--chunk auto`` its trial times. Each is kept per loop (keyed by
:func:`core.techniques.dispense.loop_key` or the like) in a :class:`Memory`, which the
backend reads from the job (``Job.memory``). A study's resources own one for the whole
study (``study.resources.Resources``), so its repetitions learn; ``parallel_for`` makes a
new one per call unless the caller passes one on (``memory=``), so two unrelated calls
share nothing; ``simulate`` owns one for the simulated study.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class Memory:
    """Cross-repetition state, per loop. Pass the same instance to ``parallel_for``
    (``memory=``) for its calls to learn from each other; a new one forgets everything."""

    racers: dict = field(default_factory=dict)      # auto: the Racing of each loop
    histories: dict = field(default_factory=dict)   # AWF: the AwfHistory of each loop
    profiles: dict = field(default_factory=dict)    # the Profile of each loop's profiling run
    predictors: dict = field(default_factory=dict)  # auto-sim: the Predictor of each loop
    chunks: dict = field(default_factory=dict)      # --chunk auto: (best, times) per loop

    def clear(self) -> None:
        """Forget every loop's learned state."""
        for f in fields(self):
            getattr(self, f.name).clear()

