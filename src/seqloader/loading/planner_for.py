"""``planner_for``: the one way a source and plan options become a planner, so that the loader,
``seqloader check`` and ``seqloader stats`` plan the same epochs from the same inputs (the
source's declared abilities, ``plan_inputs``; for indexed planning the node's bucket index,
memory-mapped and built once per node, ``shared_bucket_index``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from seqloader.loading.bucket_store import NodeStore, shared_bucket_index
from seqloader.loading.plan_inputs import PlanInputs, plan_inputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import BucketIndex, Planner, make_planner
from seqloader.sources.base import Source


def planner_for(
    source: Source,
    options: PlanOptions,
    lengths: Mapping[str, np.ndarray] | None = None,
    stores: list[NodeStore] | None = None,
) -> Planner:
    """The planner of ``source`` under ``options`` (``lengths``: the source's per key, when the
    caller has them already; ``stores``: collects the node stores used or built).

    >>> src = sl.MemorySource({"data": [np.ones((n, 1)) for n in (3, 5, 2)]})
    >>> planner_for(src, sl.PlanOptions(max_seqs=2)).global_plan(1, world_size=1).steps
    2
    """
    if lengths is None:
        lengths = {k: source.lengths(k) for k in source.keys}
    inputs = plan_inputs(source)
    index = node_index(source, options, lengths, stores, inputs)
    return make_planner(lengths, options, source.tags, repr(source), **inputs.kwargs(), index=index)


def node_index(
    source: Source,
    options: PlanOptions,
    lengths: Mapping[str, np.ndarray],
    stores: list[NodeStore] | None = None,
    inputs: PlanInputs | None = None,
) -> BucketIndex | None:
    """The node's bucket index of ``source`` under ``options`` (indexed planning: built once per
    node and memory-mapped, ``shared_bucket_index``; None otherwise), as ``planner_for`` and
    ``sl.prepare`` ask for it (``inputs``: the source's ``plan_inputs``, when already read)."""
    inputs = plan_inputs(source) if inputs is None else inputs
    return shared_bucket_index(
        lengths,
        options,
        source.fingerprint,
        inputs.files,
        inputs.excluded,
        origin=repr(source),
        stores=stores,
    )
