"""A technique that learns from record(): factoring weighted by each worker's measured speed.

    hybridsched run -s speedweighted:SpeedWeighted,fac2 -k 2 -L 400 --reps 5

Each claim hands out half of a fair share of what remains (factoring's x = 2), scaled by how
fast the claiming worker has been relative to the others: time per task, measured from the
chunks it finished (record() hears every one). The same object serves every repetition of
one loop configuration, so what it learned in repetition r sizes the chunks of r + 1 (the
idea of adaptive weighted factoring, AWF). Because it overrides record(), hybridsched always
runs it in the Python dispatch loop, which feeds it the times.
"""
import hybridsched


class SpeedWeighted(hybridsched.Technique):
    """Factoring with per-worker weights from measured time per task."""

    name = "speedweighted"

    def start(self) -> None:
        if not hasattr(self, "per_task"):  # kept across repetitions: learned speeds
            self.per_task = {}
        self.seconds, self.tasks_done = {}, {}

    def chunk(self, remaining: int, request: int, worker: int) -> int:
        share = remaining / (2 * self.workers)
        known = [t for t in self.per_task.values() if t > 0]
        mine = self.per_task.get(worker, 0.0)
        if known and mine > 0:
            share *= (sum(known) / len(known)) / mine  # a faster worker takes more
        return max(self.min_chunk, int(share))

    def record(self, worker: int, first: int, count: int, seconds: float) -> None:
        self.seconds[worker] = self.seconds.get(worker, 0.0) + seconds
        self.tasks_done[worker] = self.tasks_done.get(worker, 0) + count
        self.per_task[worker] = self.seconds[worker] / self.tasks_done[worker]
