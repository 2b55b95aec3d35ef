"""`hybridsched list`: the schedulers with one-line descriptions."""
from __future__ import annotations

from ..core.registry import SCHEDULERS, names


def main(args) -> int:
    width = max(len(n) for n in SCHEDULERS)
    for n in names():
        info = SCHEDULERS[n]
        tag = "" if info.paper else "(LB4OMP) " if info.technique else "(variant) "
        print(f"{n:<{width}}  {info.family:<7} {tag}{info.description}")
    return 0
