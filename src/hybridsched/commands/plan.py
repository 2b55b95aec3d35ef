"""`hybridsched plan`: a policy's hand-out as CSV (the engine is core.policies.plan)."""
from __future__ import annotations

from ..core.policies import plan


def main(args) -> int:
    params = {k: v for k, v in (("fiss_stages", args.fiss_stages), ("viss_param", args.viss_param),
                                ("pls_swr", args.pls_swr)) if v is not None}
    rows = plan(args.policy, args.tasks, args.workers, args.chunk, params or None)
    print("\n".join(["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]))
    return 0
