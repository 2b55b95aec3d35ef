"""`hybridsched plan`: a policy's hand-out as CSV (the engine is core.policies.plan)."""
from __future__ import annotations

from ..core.policies import PLANS, plan
from ..errors import TechniqueError, UsageError
from ..study.options import technique_params


def main(args) -> int:
    sched, _, tech = args.policy.partition(":")
    if tech in PLANS and sched:  # `run -s pipe-MtoM:fac2`'s form: "cannot import pipe-MtoM"
        raise UsageError(f"--policy {args.policy!r}: plan takes the technique alone: --policy {tech}")
    try:
        rows = plan(args.policy, args.tasks, args.workers, args.chunk,
                    technique_params(args) or None)
    except TechniqueError as exc:  # plan runs nothing: the policy given is what is bad
        raise UsageError(str(exc)) from None
    print("\n".join(["worker,first,count"] + [f"{r.worker},{r.first},{r.count}" for r in rows]))
    return 0
