"""``ordering="random"`` (and ``random:K``) under indexed planning.

Its batches keep their meaning: greedy cuts of one random order of the admitted sequences, what
global planning's ``Batcher`` cuts on that order. The order is the indexed planner's keyed
permutation of the epoch (``seqloader.plan.indexed.bijection``, keyed by the seed and the full
epoch after ``:K`` grouping): any position's sequence is computable alone. The cuts change every
epoch, so they are not stored with the node's index: each rank cuts its sub-epoch part itself, in
blocks of positions (``seqloader.plan.indexed.fixed.cut_positions``, as the fixed orders' node
build), and every rank computes the same cut list, so sharding, ``uneven``, resume and elastic
resume are those of the fixed orders (``BoundsTable`` and ``FixedDraw``).

Under ``random_seed_offset`` every rank goes over the whole sub-epoch with draws of its own. A
rank's own random order would cut its own number of batches (equal steps would then need every
rank's cuts on every rank: O(world_size x n) each), so every rank cuts the one keyed order (the
``shard`` plan's batches, the same count on every rank: equal steps, nothing dropped) and visits
those batches in an order of its own (``RankBatchOrder``: a keyed permutation of the batches by
the rank). A rank's order is thus a random order of every sequence; the ranks share which
sequences are batched together, not when.

The cost is plain: a greedy cut of a random order depends on every length before it, so this is
the one indexed ordering whose time is O(n) per rank per sub-epoch part (memory: a block of
positions and the part's batch bounds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.indexed.bijection import Bijection
from seqloader.plan.indexed.fixed import BoundsTable

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


class RankBatchOrder(BoundsTable):
    """The batch table of one rank under ``random_seed_offset``: the part's greedy batches
    (``bounds``, shared by every rank) in the rank's own keyed order (``words``): plan batch
    ``g`` is shared batch ``b(g)`` (``locate``, which ``FixedDraw`` reads the slots of). The
    positions (``seqs_before``, ``batch_at``) count the rank's own order: O(batches) once.

    >>> table = RankBatchOrder(np.array([0, 2, 5, 6]), (1, 2))
    >>> sorted(table.locate(np.arange(3))[0].tolist()), table.num_seqs, table.seqs_before(3)
    ([0, 1, 2], 6, 6)
    """

    def __init__(self, bounds: np.ndarray, words: Sequence[int]) -> None:
        shared = np.asarray(bounds, dtype=np.int64)
        self._perm = Bijection(len(shared) - 1, words)
        order = self._perm(np.arange(len(shared) - 1)).astype(np.int64)
        own = np.zeros(len(shared), dtype=np.int64)
        np.cumsum(shared[order + 1] - shared[order], out=own[1:])
        super().__init__(own)  # the rank's own positions: seqs_before, batch_at
        self.sizes = self.counts = BoundsTable(shared).sizes  # by shared batch ("bucket")

    def locate(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shared batch, 0) of the rank's plan batches ``g``."""
        g = np.asarray(g, dtype=np.int64)
        return self._perm(g).astype(np.int64), np.zeros(len(g), dtype=np.int64)

    def batch_sizes(self, g: np.ndarray) -> np.ndarray:
        return self.sizes[self.locate(g)[0]]
