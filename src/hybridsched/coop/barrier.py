"""A barrier for the T workers of one job, in shared memory (so forked workers share it),
with the waiting policies real runtimes use:

``block``       sleep in the kernel (futex) until the last arrival wakes everyone;
``spin``        busy-wait until everyone has arrived (an OpenMP barrier with
                OMP_WAIT_POLICY=active);
``spin-block``  spin for a while, then sleep: libgomp's default (GOMP_SPINCOUNT). libgomp
                throttles the spin only when *its own* process has more threads than CPUs,
                so co-located jobs with N threads each all spin at full count.

Under cooperative scheduling (a :class:`worker.Worker` given) a waiter spins only while
every partner still missing holds a token — it is running and will arrive soon; otherwise
it hands its token on and *parks* in the barrier's own waiter list (nOS-V's per-primitive
waiter lists): it sleeps on its arbiter wake word, and the last arrival queues every parked
waiter for a token on its behalf. So opening the barrier wakes nobody who has no CPU to run
on; a parked waiter is woken once, by the token. That is the rule that keeps spinning
barriers from burning the CPU a missing partner needs, and keeps a release from preempting
the partner that released it. While nobody waits for a token a parker keeps its own (the
arbiter's lazy park), so an uncontended barrier costs no lock at all. Park and open are
lock-free against each other (publish, fence, re-check; see ``_wait_coop``), and a parker
re-reads the arrivals after publishing, so two last arrivals that missed each other's store
cannot both park.

Arrival is one store per worker into its own slot (no atomic read-modify-write needed);
the waiter that sees every slot at the epoch releases the others with one store and a
futex wake. Two late arrivals may each miss the other's store (store buffers): a sleeping
waiter therefore re-checks the slots every :data:`RECHECK_S`, so such a race costs at most
that long and never deadlocks.
"""
from __future__ import annotations

from time import perf_counter

import numba
import numpy as np

from ..oslayer.atomics import exchange
from ..oslayer import futex
from ..oslayer.shm import SharedArrays
from . import handoff
from .handoff import all_at as _all_at

# Microsecond helpers of the waiting paths (numpy's mask-and-reduce costs ~5 µs a call, and
# a spinning or parking waiter makes several per step); they hold the GIL like the rules.
_jit = numba.njit(nogil=False, cache=True)


@_jit
def _publish(words, i, value):
    exchange(words, i, value)  # a store and a full fence


POLICIES = ("block", "spin", "spin-block")

# libgomp spins GOMP_SPINCOUNT = 300 000 iterations of a load and a pause before sleeping;
# at a few nanoseconds an iteration on current x86 that is about a millisecond, which is
# what the spin phase of `spin-block` lasts here (a Python spin iteration is ~100x slower,
# so counting iterations would spin for a tenth of a second instead).
SPIN_BLOCK_S = 0.001
# A sleeping waiter re-checks the arrivals this often (see the module docstring): the worst
# extra latency of the rare store-buffer race, against a wake-up per period per sleeper.
RECHECK_S = 0.002
_SPIN_BLOCK_NS = int(SPIN_BLOCK_S * 1e9)


class TeamBarrier:
    """Shared state of one job's barrier; create before forking, use from any worker."""

    def __init__(self, workers: int):
        self.n = workers
        # arrive: epoch each worker reached; release: the epoch everyone may leave (a futex
        # word); slot: each worker's arbiter slot (-1 without coop); parked: the epoch a
        # coop worker parked at (0: not parked; set by the parker, cleared by whoever
        # claims it, both atomically)
        self._shared = SharedArrays([("arrive", np.int64, workers), ("release", np.int32, 1),
                                     ("slot", np.int32, workers), ("spin_s", np.float64, workers),
                                     ("parked", np.int64, workers)])
        sh = self._shared
        self.arrive, self.release, self.slot = sh.arrive, sh.release, sh.slot
        self.spin_s, self.parked = sh.spin_s, sh.parked
        self.slot[:] = -1
        self._release_addr = futex.address(self.release, 0)  # fixed: the mapping never moves
        self._spun = np.zeros(1, np.int64)  # the compiled coop wait's spin time, per process
        _all_at(self.arrive, 1)  # compiled here, before the workers fork
        _publish(self.release, 0, 0)

    def close(self) -> None:
        # this object's views go first, so that the mapping can be unmapped now
        for name in ("arrive", "release", "slot", "spin_s", "parked"):
            setattr(self, name, None)
        self._shared.close()

    def _all_arrived(self, epoch: int) -> bool:
        return _all_at(self.arrive, epoch)

    def _open(self, epoch: int, worker=None) -> None:
        if worker is None:
            _publish(self.release, 0, epoch)
            futex.wake(self._release_addr, 1 << 30)
        else:  # coop waiters never sleep on the release word: they park
            handoff.open_coop(worker.arbiter.regions, self.release, self.parked, self.slot, epoch)

    def _sleep(self, epoch: int) -> None:
        addr = self._release_addr
        while self.release[0] < epoch:
            seen = int(self.release[0])
            if self._all_arrived(epoch):
                self._open(epoch)
                return
            futex.wait(addr, seen, RECHECK_S)

    def wait(self, t: int, epoch: int, policy: str, worker=None) -> None:
        """Worker t arrives at barrier ``epoch`` (1, 2, ...) and leaves when all have.
        Time spent spinning (not sleeping) is added to ``spin_s[t]``."""
        self.arrive[t] = epoch
        if self._all_arrived(epoch):
            self._open(epoch, worker)
            return
        if worker is not None:
            self.spin_s[t] += self._wait_coop(t, epoch, policy, worker)
            return
        if policy == "block":
            self._sleep(epoch)
            return
        t0 = perf_counter()
        deadline = t0 + SPIN_BLOCK_S if policy == "spin-block" else float("inf")
        while self.release[0] < epoch:
            if self._all_arrived(epoch):
                self._open(epoch)
                break
            if perf_counter() >= deadline:
                break
        self.spin_s[t] += perf_counter() - t0
        self._sleep(epoch)

    def _wait_coop(self, t: int, epoch: int, policy: str, worker) -> float:
        """The coop rule (compiled: handoff.wait_coop); returns the time spent spinning.

        Parking is lock-free against the opener: the parker publishes ``parked[t]`` and
        then reads ``release`` and the arrivals; an opener publishes ``release`` and then
        claims the parked. Both are fenced, so at least one sees the other; the claim is a
        compare-exchange, so exactly one of them (the opener, or the parker itself when
        the opener missed it) resumes the parker."""
        spun = self._spun
        r = handoff.wait_coop(worker.arbiter.regions, self.arrive, self.release, self.parked,
                              self.slot, t, worker.slot, epoch, handoff.POLICY_CODES[policy],
                              _SPIN_BLOCK_NS, worker.poll_ns, spun)
        if r != handoff.OPENED:  # parked: the token is ours again (or the wait goes on)
            worker.resumed(r)
        return int(spun[0]) / 1e9
