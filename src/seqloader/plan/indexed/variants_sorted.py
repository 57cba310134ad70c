"""Length variants with the sorting orderings (``sorted``, ``sorted_reverse``,
``sort_bin_shuffle[_x2]``) under indexed planning.

Global planning sorts each full epoch by the drawn lengths: O(n log n) per rank and epoch. Here
the draw is the class draw of ``seqloader.plan.indexed.variants`` with one epoch bucket per
length value (``ValueClasses``: a class is the tuple of its variants' lengths). A full epoch's
laid-out list is then already sorted: bucket after bucket, so length after length, each
bucket's (class, variant) segments in turn, each segment in its class's keyed permutation.
Its per-value counts follow from the class sizes (O(classes)), and any position's unit
(``sequence * F + variant``) is computable alone, so that list is the index the fixed and
``sort_bin_shuffle`` orders read (``epoch_index``): ``sorted`` reads it forwards,
``sorted_reverse`` value after value backwards, ``sort_bin_shuffle`` cuts it into bins (its
ties a keyed permutation per value, as without variants). The batches are greedy cuts of each
sub-epoch part of the full epoch's order, made by every rank in blocks as ``random``'s
(O(n / P) per part; ``sort_bin_shuffle`` reads only lengths for the cut, no member).

The meaning differs from global planning's as ``laplace``'s does (docs/planning.md): each
sequence takes each variant with probability ``1 / F`` per full epoch, balanced within a class,
and equal lengths come in a keyed order rather than by index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.indexed.fixed import BoundsTable, FixedDraw, FixedOrder, cut_positions
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.indexed.random_order import RANDOM_BLOCK
from seqloader.plan.indexed.sort_bins import SORT_BIN_KINDS, SortBinsOrder
from seqloader.plan.indexed.variants import VariantClasses, VariantEpoch
from seqloader.plan.limits import Batcher
from seqloader.plan.options import Ordering, PlanOptions

#: the orderings planned here with length variants
SORTED_VARIANT_KINDS = ("sorted", "sorted_reverse", *SORT_BIN_KINDS)


class ValueClasses(VariantClasses):
    """``VariantClasses`` with one epoch bucket per length value (the sorted orders' buckets).

    >>> table = np.array([[10, 20, 11, 30], [9, 18, 10, 27]])
    >>> vc = ValueClasses(table, None, PlanOptions(ordering="sorted", planning="indexed"), None)
    >>> vc.longest.tolist(), int(vc.epoch(1, 0).counts.sum())
    ([9, 10, 11, 18, 20, 27, 30], 4)
    """

    def _edges(
        self, options: PlanOptions, budget: int | None, values: np.ndarray, counts: np.ndarray
    ) -> np.ndarray:
        return np.asarray(values[1:], dtype=np.int64)


class EpochMembers:
    """A full epoch's laid-out units (``VariantEpoch``) read as an index's members."""

    def __init__(self, epoch: VariantEpoch) -> None:
        self.epoch = epoch

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        return self.epoch[np.atleast_1d(np.asarray(at, dtype=np.int64))]

    def __len__(self) -> int:
        return int(self.epoch.starts[-1])


def epoch_index(classes: ValueClasses, seed: int, full_epoch: int) -> BucketIndex:
    """The full epoch's units sorted by their drawn length: one bucket per length value, the
    members unit codes drawn where asked (``EpochMembers``)."""
    epoch = classes.epoch(seed, full_epoch)
    members: np.ndarray = EpochMembers(epoch)  # type: ignore[assignment]
    return BucketIndex(members, epoch.starts, classes.longest, classes.edges)


def sorted_order(
    classes: ValueClasses, seed: int, full_epoch: int, ordering: Ordering, words: tuple[int, ...]
) -> Callable[[np.ndarray], np.ndarray]:
    """The full epoch's order of unit codes: ``sorted``/``sorted_reverse`` (``FixedOrder``) or
    ``sort_bin_shuffle[_x2]`` keyed by ``words`` (``SortBinsOrder``) over ``epoch_index``.

    >>> table = np.array([[10, 20, 11, 30], [9, 18, 10, 27]])
    >>> vc = ValueClasses(table, None, PlanOptions(ordering="sorted", planning="indexed"), None)
    >>> codes = sorted_order(vc, 1, 0, Ordering.parse("sorted"), (1,))(np.arange(4))
    >>> lengths = table[codes % 2, codes // 2]
    >>> bool((np.diff(lengths) >= 0).all()), sorted((codes // 2).tolist())
    (True, [0, 1, 2, 3])
    """
    index = epoch_index(classes, seed, full_epoch)
    if ordering.kind in SORT_BIN_KINDS:
        return SortBinsOrder(index, ordering, words)
    return FixedOrder(index, ordering.kind)


class _Values:
    """The drawn length at positions of an epoch index's list (one length per bucket): what a
    cut of ``sorted``/``sorted_reverse`` reads instead of the members."""

    def __init__(self, index: BucketIndex) -> None:
        self.starts = np.asarray(index.starts, dtype=np.int64)
        self.longest = np.asarray(index.longest, dtype=np.int64)

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        return self.longest[np.searchsorted(self.starts, at, side="right") - 1]


class _Same:
    """Lengths read as they are (the order already gives lengths)."""

    def __getitem__(self, lengths: np.ndarray) -> np.ndarray:
        return np.asarray(lengths, dtype=np.int64)


def sorted_cut(
    greedy_cut: Callable[..., tuple[BoundsTable, Draw]],
    order: Callable[[np.ndarray], np.ndarray],
    lo: int,
    hi: int,
    batcher: Batcher,
    lengths: Mapping[str, object],
) -> tuple[BoundsTable, Draw]:
    """Greedy batches of positions ``lo .. hi`` of a sorting order: ``sorted``/``sorted_reverse``
    cut by the length key alone read each position's length from its bucket (no member drawn,
    as ``sort_bin_shuffle``'s cut does); otherwise ``greedy_cut`` (the planned units')."""
    keys = tuple(batcher.keys)
    if not isinstance(order, FixedOrder) or len(keys) != 1:
        return greedy_cut(order, lo, hi, batcher, lengths)
    index = order.index
    values: np.ndarray = _Values(index)  # type: ignore[assignment]
    view = FixedOrder(BucketIndex(values, index.starts, index.longest, index.edges), order.kind)
    same: np.ndarray = _Same()  # type: ignore[assignment]
    bounds = cut_positions(view, lo, hi, batcher, {keys[0]: same}, RANDOM_BLOCK)
    return BoundsTable(bounds), FixedDraw(order, bounds, lo)
