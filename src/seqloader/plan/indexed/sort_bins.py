"""``ordering="sort_bin_shuffle[:N][:K]"`` and ``"sort_bin_shuffle_x2..."`` under indexed planning.

The meaning is RETURNN's (``Dataset.get_seq_order_for_epoch``; global planning's
``seqloader.plan.ordering``): the epoch's sequences in a random permutation, stably sorted by
length (so sequences of equal length come in a random order), cut into ``bins`` contiguous bins
(bin ``i``: sorted positions ``[i*m//bins, (i+1)*m//bins)``, ``bins`` RETURNN's ``num_bins``), the
bins emitted in a random order; ``_x2`` also shuffles each bin. Under ``seeding="seqloader"`` the
draws are ours, so they are keyed draws here (``SortBinsOrder``) and any position's sequence is
computable alone from the node's sorted index (one bucket per admitted length, members
ascending, as ``sorted``'s):

- the order of equal lengths: a keyed bijection per length bucket (the random permutation the
  stable sort keeps);
- the bins' emission order: a keyed permutation of the bins (``bins`` int64 held);
- ``_x2``: a keyed bijection per bin (``evaluate_many`` over the bins a block of positions
  touches).

The batches are global planning's kind: greedy cuts (its ``Batcher``) of each sub-epoch part of
the full epoch's order, cut by every rank in blocks as ``random``'s are
(``seqloader.plan.indexed.random_order``): every rank computes the same cut list, draws only its
own batches' members, and sharding, ``uneven``, resume, elastic resume, ``epoch_wise_filter`` and
``random_seed_offset`` (a rank's own order of the shared batches) are ``random``'s. The cost is
``random``'s: a greedy cut depends on every length before it, so a rank's time is O(n / P) per
sub-epoch part (memory: a block of positions, the bins and the part's batch bounds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.indexed.bijection import Bijections, evaluate_many
from seqloader.plan.indexed.plan import _windows_of
from seqloader.plan.indexed.random_order import RandomOrder
from seqloader.plan.options import Ordering
from seqloader.plan.seeding import rng_for

#: RETURNN's orderings this module plans
SORT_BIN_KINDS = ("sort_bin_shuffle", "sort_bin_shuffle_x2")
#: the orderings drawn per epoch and cut greedily by every rank (``random_order``, this module)
DRAWN_KINDS = ("random", *SORT_BIN_KINDS)


def order_index_kind(kind: str) -> str:
    """The fixed ordering whose node index an ordering's order is read from (``fixed_edges``):
    ``random`` the admitted sequences (``default``'s), ``sort_bin_shuffle`` by length
    (``sorted``'s), a fixed ordering its own.

    >>> order_index_kind("random"), order_index_kind("sort_bin_shuffle_x2"), order_index_kind("reverse")
    ('default', 'sorted', 'reverse')
    """
    return {"random": "default", **dict.fromkeys(SORT_BIN_KINDS, "sorted")}.get(kind, kind)


def drawn_order(
    index: BucketIndex,
    planned: RandomIndex,
    ordering: Ordering,
    words: Sequence[int],
    by_length: bool = True,
) -> RandomOrder | SortBinsOrder:
    """The full epoch's keyed order of a drawn ordering (``DRAWN_KINDS``): ``random`` over
    ``planned.random_index(index)`` (the admitted sequences in one bucket), ``sort_bin_shuffle``
    over ``index`` itself (the sequences by length: ``sorted``'s index; chunked, the length
    classes, the same buckets; ``by_length=False``: by a source's own sort key)."""
    if ordering.kind in SORT_BIN_KINDS:
        return SortBinsOrder(index, ordering, words, by_length)
    return RandomOrder(planned.random_index(index), words)


_TIES, _BINS, _WITHIN = 0, 1, 2  # the three kinds of draw under the order's key words


class RandomIndex(Protocol):
    """What ``drawn_order`` asks of the planned units (``indexed.units.PlannedUnits``)."""

    def random_index(self, index: BucketIndex) -> BucketIndex: ...


class SortBinsOrder:
    """The full epoch's ``sort_bin_shuffle[_x2]`` order, position by position, over ``index``
    (the admitted sequences by length, one bucket per length, members ascending; or by a
    source's own sort key, ``by_length=False``), keyed by ``words`` (the module doc). Nothing of
    size ``n`` is made.

    >>> from seqloader.plan.indexed.fixed import fixed_edges
    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.array([5, 3, 8, 3, 1, 9, 4, 7])
    >>> index = build_bucket_index(lengths, fixed_edges(lengths, "sorted"))
    >>> order = SortBinsOrder(index, Ordering.parse("sort_bin_shuffle:4"), (1, 2))
    >>> seqs = order(np.arange(8))
    >>> sorted(seqs.tolist()) == list(range(8))
    True
    >>> sorted(sorted(lengths[seqs[i : i + 2]].tolist()) for i in range(0, 8, 2))  # 4 bins
    [[1, 3], [3, 4], [5, 7], [8, 9]]
    """

    def __init__(
        self, index: BucketIndex, ordering: Ordering, words: Sequence[int], by_length: bool = True
    ) -> None:
        self.index, self.words = index, tuple(words)
        #: the index sorts by the length key (its ``longest`` the lengths a cut reads)
        self.by_length = by_length
        self.size = m = int(index.starts[-1])
        self._starts = np.asarray(index.starts, dtype=np.int64)  # [L + 1] length buckets
        bins = ordering.num_bins(m)
        self._bin_starts = (np.arange(bins + 1, dtype=np.int64) * m) // bins  # sorted positions
        self._emit = rng_for(*self.words, _BINS).permutation(bins).astype(np.int64)
        sizes = np.diff(self._bin_starts)[self._emit]  # [bins] in emission order
        self._out_starts = np.cumsum(sizes) - sizes  # [bins] each emitted bin's first position
        self._within = ordering.kind.endswith("_x2")
        self._mixed: np.ndarray | None = None  # _x2: the bins holding more than one length
        sizes = np.diff(self._starts)
        ties = [(*self.words, _TIES, b) for b in range(len(sizes))]  # one per length bucket
        self._ties = Bijections(sizes.tolist(), ties)  # their round keys derived once

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        """Sequence indices at positions ``pos`` of the full epoch's order -> int64."""
        q = self.sorted_positions(pos)  # the positions in the sorted order
        bucket = np.searchsorted(self._starts, q, side="right") - 1
        u = self._ties(bucket, q - self._starts[bucket]).astype(np.int64)
        return np.asarray(self.index.members[self._starts[bucket] + u], dtype=np.int64)

    def sorted_positions(self, pos: np.ndarray, lengths_only: bool = False) -> np.ndarray:
        """Where positions ``pos`` of the full epoch's order are in the length-sorted order
        (its bins, emitted and, ``_x2``, shuffled) -> int64: what their lengths depend on.
        ``lengths_only``: positions of the same lengths (``length_positions``)."""
        pos = np.asarray(pos, dtype=np.int64)
        if not len(pos):
            return np.zeros(0, dtype=np.int64)
        slot = np.searchsorted(self._out_starts, pos, side="right") - 1  # empty bins: skipped
        b = self._emit[slot]
        t = pos - self._out_starts[slot]
        if self._within and lengths_only:  # a bin of one length: any order has its lengths
            ask = np.flatnonzero(self._mixed_bins()[b])
            if len(ask) < len(pos):
                t[ask] = self._shuffled(slot[ask], t[ask])
                return self._bin_starts[b] + t
        if self._within:  # _x2: a keyed shuffle of each bin
            t = self._shuffled(slot, t)
        return self._bin_starts[b] + t

    def length_positions(self, pos: np.ndarray) -> np.ndarray:
        """Positions in the sorted order whose lengths are those at positions ``pos`` of the
        full epoch's order -> int64 (what a greedy cut reads, ``cut_view``): ``sorted_positions``
        less ``_x2``'s shuffle of the bins that hold one length (most: a length's sequences
        fill several bins), whose positions keep any order's lengths. The same lengths, so the
        same cut; the members (``__call__``) are drawn through the shuffle."""
        return self.sorted_positions(pos, lengths_only=True)

    def _mixed_bins(self) -> np.ndarray:
        """``_x2``: bool ``[bins]``, the bins whose first and last sorted position lie in
        different buckets of the index (a bucket is one length: ``sorted_lengths``; made
        once)."""
        if self._mixed is None:
            firsts, lasts = self._bin_starts[:-1], np.maximum(self._bin_starts[1:] - 1, 0)
            at = np.searchsorted(self._starts, np.stack([firsts, lasts]), side="right")
            self._mixed = at[0] != at[1]
        return self._mixed

    def _shuffled(self, slot: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``_x2``: offsets ``t`` within the emitted bins ``slot`` through their bins' keyed
        shuffles (the bins asked keyed at once) -> int64."""
        groups, which = _windows_of(slot, len(self._emit))
        bins = self._emit[groups]
        sizes = np.diff(self._bin_starts)[bins].tolist()
        keys = [(*self.words, _WITHIN, g) for g in bins.tolist()]
        return evaluate_many(sizes, keys, which, t).astype(np.int64)

    def sorted_lengths(self, q: np.ndarray) -> np.ndarray:
        """The length of the sequences at positions ``q`` of the sorted order (one length per
        bucket of the index) -> int64."""
        bucket = np.searchsorted(self._starts, np.asarray(q, dtype=np.int64), side="right") - 1
        return np.asarray(self.index.longest, dtype=np.int64)[bucket]


class _ByPosition:
    """The length key's lengths by sorted position (``lengths[q]``), for a greedy cut."""

    def __init__(self, order: SortBinsOrder) -> None:
        self.order = order

    def __getitem__(self, q: np.ndarray) -> np.ndarray:
        return self.order.sorted_lengths(q)


def cut_view(
    order: Callable[[np.ndarray], np.ndarray], keys: Sequence[str], lengths: Mapping[str, Any]
) -> tuple[Callable[[np.ndarray], np.ndarray], Mapping[str, Any]]:
    """What a greedy cut of ``order`` reads (positions -> what ``lengths`` is indexed by): a
    ``SortBinsOrder`` cut by the length key alone (``keys``: the batcher's) reads its positions
    in the sorted order and the length there, not its sequences (the cut depends only on the
    lengths: the same bounds, without the ties' draws); any other order (and one sorted by a
    source's own sort key, whose index says no length) as it is."""
    if isinstance(order, SortBinsOrder) and order.by_length and len(keys) == 1:
        return order.length_positions, {keys[0]: _ByPosition(order)}
    return order, lengths
