"""The one shape of a resource's owner: a context manager whose exit is its ``close()``."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound="Closing")  # typing.Self is Python 3.11's; we support 3.10


class Closing:
    """Base of an owner that releases everything in ``close()`` (idempotent), on every exit
    of a ``with`` block."""

    def close(self) -> None:  # pragma: no cover - every owner defines its own
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
