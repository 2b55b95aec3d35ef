"""The sweep's progress bar: configuration, repetition, runs done and ETA on stderr.

Runs differ in cost by orders of magnitude (serial at L=10000 against k=24 at L=1000), so
the bar advances by each run's *estimated work* (frames x rows x columns / min(k, N)) and
tqdm's rate, hence its ETA, is in work per second rather than runs per second. The bar is
silent when the stream is not a terminal (logs, pipes, batch jobs).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..oslayer.closing import Closing
from ..records import RunConfig

if TYPE_CHECKING:  # loaded only for a terminal (start-up)
    from tqdm import tqdm as _Bar


def run_cost(cfg: RunConfig, n: int) -> int:
    """Expected relative duration of a run: its work spread over the usable cores (an int,
    so the bar's sums are exact and it ends at exactly 100 %)."""
    return max(1, cfg.frames * cfg.height * cfg.width // max(1, min(cfg.k, n)))


def describe(cfg: RunConfig, reps: int) -> str:
    chunk = f" c={cfg.chunk}" if cfg.chunk else ""
    aff = "" if cfg.affinity else " no-aff"
    return f"{cfg.scheduler} k={cfg.k} L={cfg.frames}{chunk}{aff} rep {cfg.rep + 1}/{reps}"


class _Silent:
    """The bar where nobody watches: what the loop calls, doing nothing."""

    def set_description_str(self, *a, **k) -> None:
        pass

    def update(self, *a) -> None:
        pass

    def close(self) -> None:
        pass


class Progress(Closing):
    """A context manager around tqdm; ``start(cfg)`` before a run, ``done(cfg)`` after."""

    def __init__(self, configs: list[RunConfig], n: int, reps: int, done_already: int = 0,
                 done_cost: int = 0, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.n, self.reps = n, reps
        self.total_runs = len(configs) + done_already
        self.runs = done_already
        total = sum(run_cost(c, n) for c in configs) + done_cost
        isatty = getattr(self.stream, "isatty", None)
        # the bar draws on stderr but is for a user watching a terminal: off when either
        # stream is redirected (a log file, a pipe) unless the caller chose the stream
        self.enabled = bool(isatty and isatty()) and (stream is not None or sys.stdout.isatty())
        self.bar: _Silent | _Bar = _Silent()
        if self.enabled:  # tqdm is loaded only for a terminal
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done_cost, file=self.stream, dynamic_ncols=True,
                            bar_format="{desc} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]")

    def start(self, cfg: RunConfig) -> None:
        self.bar.set_description_str(f"run {self.runs + 1}/{self.total_runs}: "
                                     f"{describe(cfg, self.reps)}", refresh=True)

    def done(self, cfg: RunConfig) -> None:
        self.runs += 1
        self.bar.update(run_cost(cfg, self.n))

    def close(self) -> None:
        self.bar.close()
