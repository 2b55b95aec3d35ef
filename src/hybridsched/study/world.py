"""The ranks a study runs on: what the study loop needs of them (:class:`World`), and the
one-rank world of P = 1 (:class:`Solo`), which never touches MPI. :mod:`mpi.ranks` gives
the MPI world with the same methods."""
from __future__ import annotations

import socket
from time import perf_counter
from typing import Any, Protocol


class World(Protocol):
    """P ranks; rank 0 writes. Collectives are called by every rank in the same order."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    is_mpi: bool

    def barrier(self) -> None: ...

    def wtime(self) -> float: ...

    def bcast(self, obj: Any) -> Any: ...

    def gather(self, obj: Any) -> list[Any] | None: ...

    def allreduce_sum(self, value: int | float) -> int | float: ...

    def abort(self, code: int = 1) -> None: ...


class Solo:
    """P = 1: the same interface as :class:`World`, with no MPI underneath."""

    rank = 0
    size = 1
    local_rank = 0
    local_size = 1
    is_mpi = False

    def __init__(self) -> None:
        self.host = socket.gethostname()

    def barrier(self) -> None:
        pass

    def wtime(self) -> float:
        return perf_counter()

    def bcast(self, obj: Any) -> Any:
        return obj

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def allreduce_sum(self, value: int | float) -> int | float:
        return value

    def abort(self, code: int = 1) -> None:  # pragma: no cover - never called at P = 1
        raise SystemExit(code)
