"""`hybridsched list`: the schedulers with one-line descriptions, and the techniques that
installed packages contribute (entry-point group ``hybridsched.techniques``)."""
from __future__ import annotations

from ..core.registry import SCHEDULERS, names
from ..core.usertech import GROUP, entry_points


def main(args) -> int:
    width = max(len(n) for n in SCHEDULERS)
    for n in names():
        info = SCHEDULERS[n]
        tag = ("(yours) " if info.user else "" if info.paper else "(chooser) " if info.chooses
               else "(LB4OMP) " if info.technique else "(variant) ")
        print(f"{n:<{width}}  {info.family:<7} {tag}{info.description}")
    installed = entry_points()
    if installed:
        print(f"\ninstalled techniques ({GROUP} entry points; -s NAME, pipe-MtoM:NAME):")
        for name, ep in sorted(installed.items()):
            dist = f" [{ep.dist.name}]" if getattr(ep, "dist", None) is not None else ""
            had = SCHEDULERS.get(name)
            # -s NAME finds the built-in first: say so, and how to reach this one
            shadowed = (f"  (shadowed by the built-in {name}: -s {name} runs the built-in; "
                        f"use -s {ep.value})") if had is not None and had.user is None else ""
            print(f"{name:<{width}}  {ep.value}{dist}{shadowed}")
    return 0
