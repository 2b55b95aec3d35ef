"""When other processes disturbed a run, and when a machine counts as shared."""
from __future__ import annotations

import numpy as np

# A timed run is disturbed when other processes used more than this share of our CPUs during
# it: /proc/stat's 10 ms ticks put a few percent of noise on one short run; 5 % is well above
# that and well below a real neighbour. The machine counts as shared when more than one run in
# ten was disturbed (dedicated() below, the one rule the report header, claim 4 and README
# state): a median would call a machine dedicated while nearly half its runs had a neighbour,
# and a single stray run (a cron job) should not discard a whole study. A claim row whose own
# runs' median is above it is disturbed too (results.claims.common.Ctx.disturbed).
SHARED_MACHINE = 0.05


def dedicated(foreign: list[float]) -> bool:
    """At most one run in ten saw other processes take more than SHARED_MACHINE."""
    return bool(foreign) and float(np.mean(np.asarray(foreign) > SHARED_MACHINE)) <= 0.1
