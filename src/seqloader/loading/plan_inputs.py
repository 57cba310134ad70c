"""What planning reads from a source besides its lengths and tags, gathered in one place so that
the loader and the command line (``check``, ``stats``) plan the same epochs: the abilities a source
may declare (RETURNN's order hints, named corpora, files, per-sub-epoch file pools, epoch
selections, the source's own orders)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from seqloader.loading.corpora import corpora_of
from seqloader.plan.mix import Corpora
from seqloader.plan.orders import EpochOrders, HasEpochOrders
from seqloader.plan.pools import FilePools, HasFilePools
from seqloader.plan.selections import EpochSelection, HasEpochSelections
from seqloader.plan.variants import LengthVariants
from seqloader.sources.base import PlanHints, Source, declares, file_layout, length_variants


@dataclass(frozen=True)
class PlanInputs:
    """The planner's keyword arguments a source provides (``Planner`` says what each means)."""

    order_lengths: np.ndarray | None = None
    excluded: Mapping[str, np.ndarray] | None = None
    corpora: Corpora | None = None
    files: np.ndarray | None = None
    pools: FilePools | None = None
    selections: tuple[EpochSelection, ...] = ()
    orders: EpochOrders | None = None
    variants: LengthVariants | None = None

    def kwargs(self) -> dict[str, Any]:
        """As keyword arguments of ``make_planner`` / ``Planner``."""
        return {
            "order_lengths": self.order_lengths,
            "excluded": self.excluded,
            "corpora": self.corpora,
            "files": self.files,
            "pools": self.pools,
            "selections": self.selections,
            "orders": self.orders,
            "variants": self.variants,
        }


def plan_inputs(source: Source) -> PlanInputs:
    """Everything ``source`` declares for planning.

    >>> src = sl.MemorySource({"data": [np.ones(3), np.ones(2)]})
    >>> plan_inputs(src).pools is None
    True
    """
    hints = cast(PlanHints, source) if declares(source, PlanHints) else None
    return PlanInputs(
        order_lengths=None if hints is None else hints.order_lengths(),
        excluded=None if hints is None else hints.excluded(),
        corpora=corpora_of(source),
        files=file_layout(source),
        pools=cast(HasFilePools, source).file_pools() if declares(source, HasFilePools) else None,
        selections=cast(HasEpochSelections, source).epoch_selections()
        if declares(source, HasEpochSelections)
        else (),
        orders=cast(HasEpochOrders, source).epoch_orders()
        if declares(source, HasEpochOrders)
        else None,
        variants=variants_of(source),
    )


def variants_of(source: Source) -> LengthVariants | None:
    """The source's length variants (``HasLengthVariants``) for planning, else None."""
    declared = length_variants(source)
    return None if declared is None else LengthVariants(declared[1], tuple(declared[0]))
