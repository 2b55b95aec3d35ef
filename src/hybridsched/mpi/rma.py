"""An atomic ticket counter in an MPI RMA window hosted by rank 0.

Every rank (rank 0 included: nobody is a master that only hands out work) takes the next
ticket with one MPI_Fetch_and_op(SUM, +1) under a passive-target epoch. The ticket is an
index into a chunk sequence that a pure policy computed beforehand, identically on every
rank, so the window carries one integer and no chunk arithmetic has to be atomic.
"""
from __future__ import annotations

import numpy as np


class TicketCounter:
    """A context manager owning the window; creation, reset and close are collective."""

    def __init__(self, w) -> None:
        MPI = w.MPI
        self._MPI = MPI
        self._w = w
        self._type = MPI.INT64_T
        itemsize = self._type.Get_size()
        self.win = MPI.Win.Allocate(itemsize if w.rank == 0 else 0, itemsize, comm=w.comm)
        self._one = np.ones(1, np.int64)
        self._zero = np.zeros(1, np.int64)
        self._out = np.zeros(1, np.int64)
        # One shared passive-target epoch for the window's whole life: each take() is an
        # atomic op plus a flush, with no lock round trip per ticket.
        self.win.Lock_all()
        self.reset()

    def reset(self) -> None:
        """Set the counter to 0 before a run (collective: everybody waits for it)."""
        if self._w.rank == 0:
            self.win.Fetch_and_op([self._zero, self._type], [self._out, self._type], 0, 0,
                                  self._MPI.REPLACE)
            self.win.Flush(0)
        self._w.barrier()

    def take(self) -> int:
        """The next ticket: 0, 1, 2, ... across all ranks, each handed out exactly once."""
        self.win.Fetch_and_op([self._one, self._type], [self._out, self._type], 0, 0,
                              self._MPI.SUM)
        self.win.Flush(0)
        return int(self._out[0])

    def close(self) -> None:
        win, self.win = self.win, None
        if win is not None:
            win.Unlock_all()
            win.Free()

    def __enter__(self) -> "TicketCounter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        # On an error Free (collective) would wait for ranks that may never come; the job
        # is being aborted (mpi.ranks.abort_on_error) and MPI releases the window with it.
