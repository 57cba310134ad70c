"""The planner's units with length variants (``seqloader.plan.indexed.variants``): the bucket
lists hold ``sequence * F + variant`` codes, sorted and costed at the variant's length."""

from __future__ import annotations

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.cost import BatchCost
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.units import PlannedSequences
from seqloader.plan.indexed.variants import VariantClasses, VariantCodes, VariantLengths


class VariantUnits(PlannedSequences):
    """Units with length variants: the lists hold ``sequence * F + variant`` codes; what
    ``SortedWindows`` sorts by is the variant's length."""

    def __init__(self, classes: VariantClasses, lengths: np.ndarray) -> None:
        index: BucketIndex = classes.index
        super().__init__(np.asarray(index.members), np.asarray(index.starts), lengths)
        self.classes = classes
        self.lengths = VariantLengths(classes.table)  # type: ignore[assignment]
        self.codes = VariantCodes(classes.count)

    def sequences(self, units: np.ndarray) -> np.ndarray:
        return self.codes.split(units)[0]

    def slot_costs(self, batches: BatchList, costs: np.ndarray, cost: BatchCost) -> np.ndarray:
        """Each slot's cost at its planned variant's length (``batches.variants``)."""
        if batches.variants is None:
            return costs[batches.seqs]
        table = self.classes.table
        return np.asarray(cost.units(np.asarray(table[batches.variants, batches.seqs])))
