"""Fork backend: the bounded prolific and bounded collective schedulers (§2.1.1-2.1.2).

Both hand out frames statically, frame i to worker i mod k
(:func:`policies.round_robin_frames`; with ``--chunk c``, chunk j of c frames to worker
j mod k); they differ in who forks. ``prolific``: the parent
forks all k workers. ``collective``: the parent forks worker 0, and every worker forks its
mitosis-tree children (:func:`policies.mitosis_children`) before working, so the
population exists after ``ceil(log2 k)`` fork rounds; the parent, a child subreaper,
watches and reaps the whole population (pids in shared memory, one process group).

Timing starts before the first fork and ends when the last worker finishes its frames.
A worker that dies fails the run with :class:`errors.WorkerLost`; static assignment has no
one to hand the dead worker's frames to.
"""
from __future__ import annotations

import os
from time import perf_counter

import numpy as np

from ..core import policies as pol
from ..kernels import get_kernel
from ..oslayer.proctree import ProcessTeam
from ..records import Execution
from .base import Job
from .chunkloop import dealt, team_worker


def tree_depths(pids: np.ndarray, ppids: np.ndarray, root_parent: int) -> list[int]:
    """Fork depth of every worker from recorded (pid, ppid): 1 for a child of the parent."""
    parent_of = {int(p): int(pp) for p, pp in zip(pids, ppids)}
    depths = []
    for p in pids:
        d, cur = 0, int(p)
        while cur != root_parent and cur in parent_of and d <= len(pids):
            cur = parent_of[cur]
            d += 1
        depths.append(d if cur == root_parent else -1)
    return depths


def execute_detailed(job: Job) -> tuple[Execution, np.ndarray, np.ndarray]:
    """Run the job; also return the recorded pids and parent pids of the workers."""
    kernel = get_kernel(job.kernel)
    k = job.k
    collective = job.info.collective
    # the paper's assignment is frame i to worker i mod k (chunk 1); --chunk c deals
    # c-frame chunks the same round-robin way
    c = max(1, job.chunk)
    t_begin = perf_counter()  # the hand-out is part of the scheduler, as for threads and pipes
    plan = pol.round_robin_frames(job.frames, k) if c == 1 else pol.static_chunks(job.frames, k, c)
    cap = max(len(p) for p in plan)
    with ProcessTeam(job.scheduler, k, cap, subreaper=collective) as team:
        def body(w: int) -> None:
            if collective:
                for child in pol.mitosis_children(w, k):  # fork first: children start sooner
                    team.spawn(child, body)
            team_worker(team, job, w, kernel, lambda seat: dealt(plan[w]))

        if collective:
            team.spawn(0, body)
        else:
            for w in range(k):
                team.spawn(w, body)
        team.wait()
        stats = team.stats.copy()
        trace = team.trace()
        pids, ppids = team.pids.copy(), team.ppids.copy()
    t_end = float(stats["end"].max())
    notes = ""
    if collective:
        depth = max(tree_depths(pids, ppids, os.getpid()))
        notes = f"fork rounds={pol.log2_levels(k)} tree depth={depth}"
    return Execution(t_begin, t_end, stats, trace, chunk_used=c, notes=notes), pids, ppids


def execute(job: Job) -> Execution:
    return execute_detailed(job)[0]
