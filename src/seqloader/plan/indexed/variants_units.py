"""The planner's units with length variants: the bucket lists hold ``sequence * F + variant``
codes, sorted and costed at the variant's length. ``laplace``/``buckets:N``: the class draw
(``seqloader.plan.indexed.variants``); the fixed orders ``default``/``reverse`` and ``random``,
whose greedy cuts are made per epoch anyway: global planning's per-sequence draw
(``variant_of``), each epoch's part cut on the drawn lengths (``DrawnUnits.greedy_cut``); the
sorting orders: an order of codes (``seqloader.plan.indexed.variants_sorted``) cut on each code's
length (``SortedUnits.greedy_cut``). So the planner asks every kind of units for its cut alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.cost import BatchCost
from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.indexed.units import (
    CutAsk,
    CutPlanner,
    EpochCut,
    Lengths,
    Order,
    PlannedSequences,
)
from seqloader.plan.indexed.variants import VariantClasses, VariantCodes, VariantLengths
from seqloader.plan.indexed.variants_filter import listed_cut
from seqloader.plan.indexed.variants_limits import bucket_key_longest, coded_keys
from seqloader.plan.indexed.variants_sorted import sorted_cut
from seqloader.plan.limits import Batcher
from seqloader.plan.variants import variant_of

if TYPE_CHECKING:
    from seqloader.plan.indexed.corpus import AdmittedCorpus


class VariantCodedUnits(PlannedSequences):
    """What units coded ``sequence * F + variant`` answer alike, whichever draw made the codes:
    a unit's sequence, and a slot's cost at its planned variant's length (``table`` ``[F, n]``)."""

    table: np.ndarray
    codes: VariantCodes

    def sequences(self, units: np.ndarray) -> np.ndarray:
        return self.codes.split(units)[0]

    def slot_costs(self, batches: BatchList, costs: np.ndarray, cost: BatchCost) -> np.ndarray:
        """Each slot's cost at its planned variant's length (``batches.variants``)."""
        if batches.variants is None:
            return costs[batches.seqs]
        return np.asarray(cost.units(np.asarray(self.table[batches.variants, batches.seqs])))


class VariantUnits(VariantCodedUnits):
    """Units with length variants: the lists hold ``sequence * F + variant`` codes; what
    ``SortedWindows`` sorts by is the variant's length."""

    def __init__(
        self, classes: VariantClasses, lengths: np.ndarray, others: Mapping[str, np.ndarray]
    ) -> None:
        index: BucketIndex = classes.index
        super().__init__(np.asarray(index.members), np.asarray(index.starts), lengths)
        self.classes = classes
        #: what ``epoch_wise_filter`` keeps the shortest by: the source's (longest variant's)
        self.filter_lengths = lengths
        self.table = classes.table
        self.lengths = VariantLengths(classes.table)  # type: ignore[assignment]
        self.codes = VariantCodes(classes.count)
        #: the other varying keys' lengths per variant ``[F, n]`` (per-key limits)
        self.others = others

    def key_longest(self, class_longest: np.ndarray, key: str) -> np.ndarray:
        """Another key's longest per epoch bucket, at the variants the bucket holds
        (``bucket_key_longest``; ``class_longest``: the source's per class)."""
        return bucket_key_longest(self.classes, self.others.get(key), class_longest)

    def cut(self, planner: CutPlanner, ask: CutAsk) -> EpochCut:
        """Epoch selections and ``epoch_wise_filter`` on the sub-epoch's units by their
        sequences (``seqloader.plan.indexed.variants_filter``: the drawn-length buckets are not
        ordered by the filter's key, so the lists are listed)."""
        return listed_cut(planner, ask, self.sequences, self.filter_lengths)


class DrawnLengths:
    """The length key's lengths in one full epoch under global planning's per-sequence draw
    (``variant_of``): ``lengths[seqs]`` is each sequence's drawn variant's length, computed for
    the sequences asked alone (what a greedy cut reads a block at a time)."""

    def __init__(self, table: np.ndarray, seed: int, full_epoch: int) -> None:
        self.table, self.seed, self.full_epoch = table, seed, full_epoch

    def __getitem__(self, seqs: np.ndarray) -> np.ndarray:
        seqs = np.asarray(seqs, dtype=np.int64)
        v = variant_of(self.seed, self.full_epoch, seqs, len(self.table))
        return np.asarray(self.table[v, seqs], dtype=np.int64)

    def __len__(self) -> int:
        return int(np.shape(self.table)[1])


class DrawnDraw:
    """A greedy cut's ``Draw`` whose slots are coded ``sequence * F + variant`` with the
    variant of global planning's per-sequence draw (``variant_of``), so the plan's batch list
    carries each slot's variant (``VariantCodes``) as the class draw's does."""

    def __init__(self, draw: Draw, seed: int, full_epoch: int, count: int) -> None:
        self.draw, self.seed, self.full_epoch, self.count = draw, seed, full_epoch, count

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        seqs, uses = self.draw.slots(bucket, pos)
        seqs = np.asarray(seqs, dtype=np.int64)
        v = variant_of(self.seed, self.full_epoch, seqs, self.count)
        return seqs * self.count + v, uses


class DrawnUnits(VariantCodedUnits):
    """The fixed orders' and ``random``'s units with length variants: the index's sequences,
    drawn as ``sequence * F + variant`` codes (``DrawnDraw``), costed at the variant's length;
    ``key`` the length key the variants vary, ``seed`` the draw's."""

    def __init__(
        self,
        members: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        table: np.ndarray,
        key: str,
        seed: int,
        others: Mapping[str, np.ndarray],
    ) -> None:
        super().__init__(members, starts, lengths)
        self.table, self.key, self.seed = table, key, seed
        self.codes = VariantCodes(len(table))
        #: the other varying keys' lengths per variant ``[F, n]`` (per-key limits)
        self.others = others

    def greedy_cut(
        self, order: Order, lo: int, hi: int, batcher: Batcher, lengths: Lengths, full: int = 0
    ) -> tuple[BoundsTable, Draw]:
        """Cut on full epoch ``full``'s drawn lengths (``DrawnLengths``), the draw's slots coded
        with their variants (``DrawnDraw``)."""
        drawn = {
            k: DrawnLengths(t, self.seed, full)
            for k, t in {**self.others, self.key: self.table}.items()
        }
        table, draw = super().greedy_cut(order, lo, hi, batcher, {**lengths, **drawn})  # type: ignore[dict-item]
        return table, DrawnDraw(draw, self.seed, full, len(self.table))


class SortedUnits(DrawnUnits):
    """The sorting orders' units with length variants: their order yields the codes already
    (``seqloader.plan.indexed.variants_sorted``), so a cut reads each code's variant's length
    (``sorted_cut``) and the draw's slots are those codes."""

    def greedy_cut(
        self, order: Order, lo: int, hi: int, batcher: Batcher, lengths: Lengths, full: int = 0
    ) -> tuple[BoundsTable, Draw]:
        coded: np.ndarray = VariantLengths(self.table)  # type: ignore[assignment]
        plain = super(DrawnUnits, self).greedy_cut  # the sequences' cut: the codes as they are
        every = lengths  # limits on other keys: each read by code, at the code's variant
        if len(batcher.keys) > 1:
            every = coded_keys(lengths, self.others, len(self.table))
        return sorted_cut(plain, order, lo, hi, batcher, {**every, self.key: coded})


def variant_units(corpus: AdmittedCorpus) -> VariantCodedUnits | None:
    """The units of an admitted corpus with length variants (None without): the class draw's
    (``VariantUnits``), the sorting orders' (``SortedUnits``) or the per-sequence draw's
    (``DrawnUnits``)."""
    others = corpus.other_variants
    if corpus.variants is not None:
        return VariantUnits(corpus.variants, corpus.lengths, others)
    if corpus.drawn is None:
        return None
    kind = SortedUnits if corpus.sorted_variants is not None else DrawnUnits
    members, starts, seed = corpus.index.members, corpus.index.starts, corpus.options.seed
    return kind(members, starts, corpus.lengths, corpus.drawn, corpus.length_key, seed, others)
