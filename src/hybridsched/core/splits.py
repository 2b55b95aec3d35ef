"""How the frames of a loop are split between P ranks (``run --split`` under mpiexec, and
``simulate -P``): static blocks, or a chunk sequence that every rank computes alike and
indexes through a shared ticket counter -- guided's, an LB4OMP technique's, or a user's
deterministic technique's."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np

from . import policies, techniques, usertech
from .contract import configure, hand_out
from .techniques.deterministic import RULES
from ..errors import UsageError

SPLIT_TECHNIQUES = tuple(RULES)  # deterministic: chunk i a function of (L, P, k, i) alone
SPLITS = ("static", "dynamic") + SPLIT_TECHNIQUES


def inter_node_min_chunk(k: int) -> int:
    """Smallest inter-node chunk: k frames, so a claimed chunk can occupy every local
    worker. Smaller chunks balance the ranks more finely but pay one RMA round trip and
    one local scheduler start per chunk; larger ones leave a long tail on one rank."""
    return max(1, k)


# Guided's divisor between ranks, per rank. Plain guided (divisor P) hands the first
# claimer 1/P of the tensor: if that rank is the slow one, the run is as long as static's
# worst case. Dividing by 2P (as factoring does) keeps every chunk at most half a fair
# share, so the others can take back up to half of a slow rank's share, for about twice
# as many claims (still only O(P log(L/P)) RMA operations in all).
DYNAMIC_DIVISOR_PER_RANK = 2


def dynamic_chunks(L: int, P: int, k: int, split: str = "dynamic",
                   params: dict | None = None) -> list[tuple[int, int]]:
    """The chunk sequence over P ranks that the ticket counter indexes: guided's, an
    LB4OMP technique's (``split`` one of SPLIT_TECHNIQUES), or a user technique's (given
    ``params``, the study's --param); checked to cover the L frames exactly once."""
    c = inter_node_min_chunk(k)
    if ":" in split:  # a user's deterministic technique over the P ranks
        tech = split_technique(split).new()
        configure(tech, L, P, c, dict(params or {}))
        sizes = hand_out(tech, L).tolist()
        starts = [0] + list(itertools.accumulate(sizes))[:-1]
        out = list(zip(starts, sizes))
    elif split in SPLIT_TECHNIQUES:
        out = techniques.sequence(split, L, P, c)
    else:
        d = DYNAMIC_DIVISOR_PER_RANK * P
        out = list(policies.fcfs_chunks(L, lambda rem: policies.guided_size(rem, d, c)))
    policies.check_chunks(out, L, f"--split {split}")
    return out


def handout_digest(chunks: list[tuple[int, int]]) -> str:
    """A short fingerprint of a hand-out, for ranks to compare theirs."""
    return hashlib.sha256(np.asarray(chunks, np.int64).tobytes()).hexdigest()[:16]


def split_technique(ref: str):
    """The user technique of ``--split package.module:Class`` (it must be deterministic:
    every rank computes the same chunk sequence)."""
    user = usertech.resolve(ref, "--split")
    if not user.deterministic:
        raise UsageError(f"--split {ref}: technique {user.name} is not deterministic; every "
                         "rank must compute the same chunk sequence (deterministic = True)")
    return user
