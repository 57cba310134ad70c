"""``planner_for``: the one way a source and plan options become a planner, so that the loader,
``seqloader check`` and ``seqloader stats`` plan the same epochs from the same inputs (the
source's ``plan_inputs``; for indexed planning the node's bucket index, memory-mapped and built
once per node, ``shared_bucket_index``; with length variants their classes likewise,
``shared_variant_classes``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from seqloader.loading.bucket_store import NodeStore, shared_bucket_index
from seqloader.loading.plan_inputs import plan_inputs
from seqloader.loading.variant_store import shared_variant_classes
from seqloader.plan.inputs import PlanInputs
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
    inputs = plan_inputs(source, options, lengths)
    inputs = replace(inputs, index=node_index(source, inputs, stores))
    return make_planner(replace(inputs, variant_classes=node_variants(source, inputs, stores)))


def node_index(
    source: Source, inputs: PlanInputs, stores: list[NodeStore] | None = None
) -> BucketIndex | None:
    """The node's bucket index of ``source`` for ``inputs`` (its ``plan_inputs``; indexed
    planning: built once per node and memory-mapped, ``shared_bucket_index``; None otherwise), as
    ``planner_for`` and ``sl.prepare`` ask for it."""
    data_time = getattr(source, "data_mtime", None)  # recorded where the source knows it
    return shared_bucket_index(inputs, source.fingerprint, stores=stores, data_time=data_time)


def node_variants(
    source: Source, inputs: PlanInputs, stores: list[NodeStore] | None = None
) -> dict[str, np.ndarray] | None:
    """The node's length variants' classes of ``source`` for ``inputs`` (indexed planning with
    variants: built once per node and memory-mapped, ``shared_variant_classes``; None
    otherwise), as ``planner_for`` and ``sl.prepare`` ask for them."""
    data_time = getattr(source, "data_mtime", None)
    return shared_variant_classes(inputs, source.fingerprint, stores, data_time)
