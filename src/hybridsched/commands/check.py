"""`hybridsched check`: what could make timings on this machine untrustworthy."""
from __future__ import annotations

import json
from dataclasses import asdict

from ..errors import UsageError
from ..machine.probes import facts, findings
from ..store import INT32_MAX
from ..study.spec import default_spec


def main(args) -> int:
    spec = default_spec()
    L = args.frames or max(spec.frames)
    H, W = args.height or spec.height, args.width or spec.width
    for opt, v in (("--frames", L), ("--height", H), ("--width", W)):
        if v > INT32_MAX:  # what `run` refuses: the study file's fields
            raise UsageError(f"{opt} {v}: at most {INT32_MAX} in a study file")
    f = facts(planned_bytes=2 * L * H * W)  # original + work copy (workload.check_sizes)
    rows = findings(f)
    if args.json:
        print(json.dumps({"facts": asdict(f), "shared": f.shared,
                          "findings": [dict(what=a, value=b, verdict=c) for a, b, c in rows]}))
        return 0
    width = max(len(a) for a, _, _ in rows)
    print(f"hybridsched check (planned tensor {L}×{H}×{W}, two copies):")
    for a, b, c in rows:
        print(f"  {c:<7} {a:<{width}}  {b}")
    warn = sum(c == "WARN" for _, _, c in rows)
    print(f"{warn} warning(s); 'unknown' means this machine does not expose the fact "
          "(common in VMs and containers)")
    return 0


