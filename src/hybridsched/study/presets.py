"""The presets' names, what `run --preset` offers (:func:`.spec.preset` makes each): apart
from the study they describe, so that the command line is parsed without importing what a
study runs (numba, the registry)."""
from __future__ import annotations

PRESETS = ("smoke", "default", "scaled", "paper")
