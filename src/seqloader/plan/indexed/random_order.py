"""``ordering="random"`` (and ``random:K``) under indexed planning.

Its batches keep their meaning: greedy cuts of one random order of the admitted sequences, what
global planning's ``Batcher`` cuts on that order. The order is the indexed planner's keyed
permutation of the epoch (``seqloader.plan.indexed.bijection``, keyed by the seed and the full
epoch after ``:K`` grouping): any position's sequence is computable alone. The cuts change every
epoch, so they are not stored with the node's index: each rank cuts its sub-epoch part itself, in
blocks of positions (``seqloader.plan.indexed.fixed.cut_positions``, as the fixed orders' node
build), and every rank computes the same cut list, so sharding, ``uneven``, resume and elastic
resume are those of the fixed orders (``BoundsTable`` and ``FixedDraw``). ``random_seed_offset``
is refused (``PlanOptions``): a rank's own random order cuts its own number of batches.

The cost is plain: a greedy cut of a random order depends on every length before it, so this is
the one indexed ordering whose time is O(n) per rank per sub-epoch part (memory: a block of
positions and the part's batch bounds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.indexed.bijection import Bijection

#: positions cut at once by a rank (memory: a few int64/uint64 arrays of this size; the node's
#: one-time cuts of the fixed orders use larger blocks)
RANDOM_BLOCK = 1 << 16


class RandomOrder:
    """The full epoch's random order, position by position: position ``p`` holds admitted
    sequence ``members[b(p)]`` (``b``: the keyed bijection of ``words``; the index: one bucket of
    the admitted sequences ascending). Nothing of size ``n`` is made.

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> index = build_bucket_index(np.array([5, 3, 5, 1]), np.zeros(0, np.int64))
    >>> order = RandomOrder(index, (1, 2))
    >>> sorted(order(np.arange(4)).tolist()), order.size
    ([0, 1, 2, 3], 4)
    """

    def __init__(self, index: BucketIndex, words: Sequence[int]) -> None:
        self.index = index
        self.size = int(index.starts[-1])
        self._bijection = Bijection(self.size, words)

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        """Sequence indices at positions ``pos`` of the full epoch's order -> int64."""
        at = self._bijection(np.asarray(pos, dtype=np.int64)).astype(np.int64)
        return np.asarray(self.index.members[at], dtype=np.int64)
