"""A fixed technique: guided self-scheduling with a divisor of four.

    hybridsched plan --policy quarter:Quarter --tasks 100 --workers 4
    hybridsched run -s quarter:Quarter,guided -k 2 -L 200 --reps 3   (from this folder)

``deterministic = True`` promises that chunk() reads neither ``worker`` nor anything learned
at run time, so hybridsched may compute the whole hand-out ahead: ``plan`` prints it, a
thread run with a numba kernel claims it in compiled code, and ``--split`` spreads it over
MPI ranks. ``--param divisor=8`` changes the divisor.
"""
import hybridsched


class Quarter(hybridsched.Technique):
    """Guided with a divisor of four: each claim takes remaining / (4 k) tasks."""

    name = "quarter"
    deterministic = True

    def chunk(self, remaining: int, request: int, worker: int) -> int:
        divisor = int(self.params.get("divisor", 4))
        return max(self.min_chunk, -(-remaining // (divisor * self.workers)))
