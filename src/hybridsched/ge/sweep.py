"""A whole `hybridsched ge` sweep: algo x threads x rep x arch, each run written as it
completes, a progress bar as `run`'s (tqdm on stderr, off unless both streams are terminals),
failed runs reported in one line each; an architecture the OS refuses threads to is
skipped at that and larger thread counts while the others go on."""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass

from .runner import GeResult, run_once
from .solvers import SOLVERS

FAULT_ENV = "HYBRIDSCHED_GE_FAULT"  # test only: the user thread (e.g. row3) that raises


@dataclass
class GeSpec:
    archs: list[str]
    algos: list[str]
    n: int
    threads: list[int]
    reps: int
    seed: int = 0

    def __post_init__(self) -> None:
        # a value given twice (--threads 4,4) is one configuration, as for the other options
        self.archs = list(dict.fromkeys(self.archs))
        self.algos = list(dict.fromkeys(self.algos))
        self.threads = list(dict.fromkeys(self.threads))

    def to_dict(self) -> dict:
        return asdict(self)

    def runs(self) -> list[tuple[str, int, int, str]]:
        """(algo, threads, rep, arch), architectures interleaved so that slow drifts of the
        machine's load hit all three alike."""
        return [(algo, t, rep, arch) for algo in self.algos for t in self.threads
                for rep in range(self.reps) for arch in self.archs]


def _cost(algo: str, t: int, n: int) -> int:
    return max(1, n * n * n // 10**6 + SOLVERS[algo].user_threads(t))


class _Bar:
    def __init__(self, total: int, stream=None):
        from tqdm import tqdm

        stream = stream if stream is not None else sys.stderr
        on = bool(getattr(stream, "isatty", None) and stream.isatty() and sys.stdout.isatty())
        self.bar = tqdm(total=total, file=stream, disable=not on, dynamic_ncols=True,
                        bar_format="{desc} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()


def run_sweep(spec: GeSpec, on_record, cpus: list[int] | None = None, err=None) -> int:
    """Run every configuration; ``on_record(GeResult)`` stores it. Returns the number of
    failed or unverified runs."""
    err = err if err is not None else sys.stderr
    fault = os.environ.get(FAULT_ENV, "")
    runs = spec.runs()
    failed = 0
    refused: dict[str, int] = {}  # arch -> smallest thread count the OS refused
    with _Bar(sum(_cost(a, t, spec.n) for a, t, _, _ in runs)) as bar:
        for k, (algo, t, rep, arch) in enumerate(runs):
            bar.bar.set_description_str(f"run {k + 1}/{len(runs)}: {arch} {algo} n={spec.n} "
                                        f"T={t} rep {rep + 1}/{spec.reps}", refresh=True)
            if arch in refused and t >= refused[arch]:
                res = GeResult(arch, algo, spec.n, SOLVERS[algo].user_threads(t), t, 0, rep,
                               spec.seed, error=f"{arch}: skipped, the OS refused "
                               f"{refused[arch]} threads earlier")
            else:
                res = run_once(arch, algo, spec.n, t, rep, spec.seed, cpus, fault)
                if "refused to start" in res.error:
                    refused[arch] = min(t, refused.get(arch, t))
            on_record(res)
            if not res.verified:
                failed += 1
                print(f"hybridsched: {arch} {algo} n={spec.n} T={t} rep {rep}: {res.error}",
                      file=err)
            bar.bar.update(_cost(algo, t, spec.n))
    return failed
