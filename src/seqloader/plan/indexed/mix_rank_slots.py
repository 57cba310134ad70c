"""``random`` and ``sort_bin_shuffle[_x2]`` with a ``mix`` under ``random_seed_offset``: each
rank batches its own keyed draw of the shared slots (``seqloader-plan-indexed/13``).

The mix's selection is the same ``(sequence, corpus epoch)`` slots on every rank (by design), and
the sub-epoch's keyed order of them is cut greedily once. A rank's own random order would cut its
own number of batches, and equal steps would then need every rank's cut on every rank (W cuts a
rank). Here a rank's own order is the shared order with every slot replaced by another one alike
for the cut: within each class of slots that agree on everything the order and the cut read (the
lengths of every batch key and chunked key, what the ordering sorts by), the rank draws a keyed
permutation (``own_slots``). Its order is a random order of the selection of its own (the shared
one is), its greedy cut has the shared cut's bounds (the cut reads only what the class fixes):
the same batch count and shapes on every rank, each rank's batches its own slots, every slot
once per rank (a permutation), nothing dropped. Ranks also visit their batches in their own
order (``RankBatchOrder``), as before. Slots alone in their class (a length no other slot has)
stay where the shared order put them: with few ties, ranks share more of their batches.

Cost per rank and sub-epoch: the cut's positions listed once and the rank's order of them kept
(O(slots): a code and a corpus epoch a position, as the fixed orders list theirs), a ``lexsort``
by class and a stable ``argsort`` of (class, random bits) keys; made when the rank's draw is
first read (a rank's table alone, which every rank asks of every other for the step counts,
needs none). At 10^6, 1.4-1.7x the CPU time of a rank's plan under ``/12`` (docs/planning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.seeding import rng_for

if TYPE_CHECKING:
    from seqloader.plan.indexed.corpus import AdmittedCorpus

#: positions of a cut listed at once (memory: a few int64 arrays of this size)
LIST_BLOCK = 1 << 18


def own_slots(
    codes: np.ndarray, uses: np.ndarray, columns: Sequence[np.ndarray], rng: np.random.Generator,
    stride: int = 1,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A rank's own slots of a cut listed position by position (``codes``: ``stride`` times the
    sequence plus the chunk, a slot's chunks adjacent; ``uses``: corpus epochs): within each
    class of ``columns`` (per sequence, one value each) the slots permuted by ``rng``'s draws,
    each position keeping its chunk -> (codes, corpus epochs).

    >>> codes, uses = own_slots(np.array([0, 1, 2, 3]), np.zeros(4, np.int64),
    ...                         [np.array([5, 7, 5, 5])], np.random.default_rng(1))
    >>> int(codes[1]), sorted(codes[[0, 2, 3]].tolist())  # sequence 1 alone of length 7
    (1, [0, 2, 3])
    """
    codes = np.asarray(codes, dtype=np.int64)
    if stride == 1:  # unchunked: a position is a slot
        s, u, chunks, start = codes, uses, None, None
    else:
        seqs, chunks = np.divmod(codes, stride)
        start = np.ones(len(seqs), dtype=bool)  # a slot's first position
        start[1:] = (seqs[1:] != seqs[:-1]) | (uses[1:] != uses[:-1])
        first = np.flatnonzero(start)
        s, u = seqs[first], uses[first]
    cols = [np.asarray(c)[s] for c in columns]
    canonical = np.lexsort(cols[::-1])  # by class, then place (stable)
    new = np.zeros(len(s), dtype=bool)  # a class's first slot in that order
    for c in cols:
        ordered = c[canonical]
        new[1:] |= ordered[1:] != ordered[:-1]
    del cols, ordered  # peak memory: a few arrays of the slots at a time
    # by class, then the rank's draws: the class numbers (ascending here) above 32 random bits
    keys = np.cumsum(new, dtype=np.int64)
    del new
    keys <<= 32
    keys |= rng.integers(0, 1 << 32, size=len(s), dtype=np.int64)
    drawn = np.argsort(keys, kind="stable")
    del keys
    take = np.empty(len(s), dtype=np.int64)
    take[canonical] = canonical[drawn]  # slot canonical[i] becomes slot drawn[i]
    del canonical, drawn
    if start is None:
        return s[take], u[take]
    j = take[np.cumsum(start) - 1]
    return s[j] * stride + chunks, u[j]


class RankSlotsDraw:
    """The ``Draw`` of a rank's own batches: the shared cut's (``bounds``, ``draw``), every
    slot replaced by the rank's own (``own()``: ``own_slots`` of the cut's listing, made when
    first read), each batch position its chunk kept."""

    def __init__(
        self, bounds: np.ndarray, own: Callable[[], tuple[np.ndarray, np.ndarray]]
    ) -> None:
        self.bounds, self._own = bounds, own
        self._listed: tuple[np.ndarray, np.ndarray] | None = None

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._listed is None:
            self._listed = self._own()
        at = np.asarray(self.bounds[np.asarray(bucket, dtype=np.int64)], np.int64) + pos
        return self._listed[0][at], self._listed[1][at]


def listed_cut(
    draw: Draw, bounds: np.ndarray, block: int = LIST_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """Every position of a cut (batch bounds ``bounds``, its ``draw``), ``block`` positions at a
    time (a mix's keyed draw evaluates a few arrays per position) -> (codes, corpus epochs)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    size = int(bounds[-1] - bounds[0])
    codes = np.empty(size, dtype=np.int64)
    uses = np.empty(0, dtype=USES_DTYPE)
    for a in range(0, size, block):
        at = np.arange(a, min(size, a + block), dtype=np.int64) + bounds[0]
        g = np.searchsorted(bounds, at, side="right") - 1
        got, used = draw.slots(g, at - bounds[g])
        assert used is not None  # a mix's draw carries corpus epochs
        if not a:
            uses = np.empty(size, dtype=np.asarray(used).dtype)
        codes[a : a + len(at)], uses[a : a + len(at)] = got, used
    return codes, uses


def slot_columns(corpus: AdmittedCorpus) -> list[np.ndarray]:
    """What the cut and the order read of a slot's sequence: every batch key's lengths (chunked:
    the windows' too), what the ordering sorts by, chunked the class value that gives the chunk
    count; each array once."""
    columns = [*corpus.batch_lengths.values(), corpus.order_by]
    if corpus.units is not None:
        columns.append(corpus.class_values)
    return list({id(c): np.asarray(c) for c in columns}.values())


def rank_slots(
    corpus: AdmittedCorpus, table: BoundsTable, draw: Draw, words: tuple[int, ...]
) -> RankSlotsDraw:
    """A rank's own slots' draw of a mix's shared cut (``table``, ``draw``) over ``corpus``: the
    classes by ``slot_columns``, the permutations keyed by ``words`` (the seed and the rank's
    head first)."""
    stride = 1 if corpus.units is None else int(corpus.units.stride)
    columns = slot_columns(corpus)

    def own() -> tuple[np.ndarray, np.ndarray]:
        codes, uses = listed_cut(draw, table.bounds)
        return own_slots(codes, uses, columns, rng_for(*words), stride)

    return RankSlotsDraw(table.bounds, own)
