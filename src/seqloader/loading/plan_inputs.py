"""What planning reads from a source, gathered in one place so that the loader and the command
line (``check``, ``stats``, ``prepare``) plan the same epochs: its lengths and tags and the
abilities a source may declare (RETURNN's order hints, named corpora, files, per-sub-epoch file
pools, epoch selections, the source's own orders, length variants), as one
``seqloader.plan.PlanInputs``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np

from seqloader.loading.corpora import corpora_of
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.orders import HasEpochOrders
from seqloader.plan.planners import resolve_planning
from seqloader.plan.pools import HasFilePools
from seqloader.plan.selections import HasEpochSelections
from seqloader.plan.variants import LengthVariants
from seqloader.sources.base import PlanHints, Source, declares, file_layout, length_variants


def plan_inputs(
    source: Source, options: PlanOptions, lengths: Mapping[str, np.ndarray] | None = None
) -> PlanInputs:
    """Everything ``source`` gives planning under ``options`` (``lengths``: the source's per key,
    when the caller has them already; no bucket index: ``planner_for`` adds the node's), with
    ``planning="auto"`` resolved (``resolve_planning``: the node's index is built only for
    indexed planning).

    >>> src = sl.MemorySource({"data": [np.ones(3), np.ones(2)]})
    >>> inputs = plan_inputs(src, sl.PlanOptions())
    >>> inputs.lengths["data"].tolist(), inputs.pools is None
    ([3, 2], True)
    """
    if lengths is None:
        lengths = {k: source.lengths(k) for k in source.keys}
    hints = cast(PlanHints, source) if declares(source, PlanHints) else None
    given = PlanInputs(
        lengths,
        options,
        source.tags,
        repr(source),
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
    return resolve_planning(given)


def variants_of(source: Source) -> LengthVariants | None:
    """The source's length variants (``HasLengthVariants``) for planning, else None."""
    declared = length_variants(source)
    return None if declared is None else LengthVariants(declared[1], tuple(declared[0]))
