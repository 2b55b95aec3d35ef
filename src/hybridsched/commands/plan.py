"""`hybridsched plan`: a policy's hand-out as CSV (the engine is core.policies.plan)."""
from __future__ import annotations

from ..core.policies import plan
from ..study.options import technique_params


def main(args) -> int:
    rows = plan(args.policy, args.tasks, args.workers, args.chunk, technique_params(args) or None)
    print("\n".join(["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]))
    return 0
