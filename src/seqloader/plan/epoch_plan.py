"""``EpochPlan``: one (sub-)epoch's batches for every rank, as callers outside ``plan/`` read them.

Three kinds implement it, none a subclass of another: ``GlobalPlan`` (a list of every rank's batches), ``IndexedPlan`` (a
batch table whose members are drawn where a rank needs them) and ``RankwisePlan`` (each rank's
share computed alone: indexed ``files``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.cost import PlannedImbalance, step_imbalance


class EpochPlan(Protocol):
    """One (sub-)epoch's batches for every rank, as callers read them: batch ``k`` of step ``s``
    belongs to rank ``k % world_size``; a rank's batches are ``rank_share(rank)``."""

    @property
    def world_size(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    @property
    def steps(self) -> int: ...

    @property
    def repeats(self) -> int: ...

    @property
    def batches(self) -> BatchList: ...

    def rank_share(self, rank: int, start_step: int = 0) -> BatchList: ...

    def consumed_seqs(self, steps: int) -> int: ...

    def real_total(self) -> int: ...

    def resume_fields(self, steps: int) -> dict[str, str]:
        """What a state saved after ``steps`` steps of this plan carries besides its position,
        so that a resume reuses it (``Planner.carry``): ``{}`` but for indexed ``files``."""
        ...

    def step_imbalance(
        self, from_step: int, costs: np.ndarray, bucket_costs: np.ndarray | None = None
    ) -> PlannedImbalance:
        """The planned step imbalance from ``from_step`` on (``seqloader.plan.cost``), each plan
        kind as it can compute it: ``costs``: cost units per sequence; ``bucket_costs``: a
        bucket table's planned cost per unit of each bucket (indexed planning's
        ``bucket_costs``), or None where the buckets plan no cost (the exact figure from
        ``costs``)."""
        ...


def list_imbalance(
    plan: EpochPlan, first_step: int, costs: np.ndarray, per_slot: bool = False
) -> float:
    """``step_imbalance`` of ``plan``'s batch list from ``first_step`` on (O(n): the list is
    materialised): ``costs`` per sequence, or (``per_slot``) per slot of ``plan.batches`` (a
    chunk costs its window)."""
    b, first = plan.batches, first_step * plan.world_size
    start = b.bounds[min(first, len(b))]
    seqs = b.seqs[start:]
    if per_slot:
        seqs, costs = np.arange(len(seqs)), costs[start:]
    return step_imbalance(seqs, b.bounds[first:] - start, plan.world_size, costs)


def interleave(parts: list[BatchList]) -> BatchList:
    """One batch list from per-rank lists of equal length: global batch ``k * W + r`` is rank
    r's batch k."""
    world_size, steps = len(parts), len(parts[0])
    chunked, mixed = parts[0].chunks is not None, parts[0].uses is not None
    varied = parts[0].variants is not None
    merged = BatchList(  # rank 0's steps, then rank 1's, ...
        np.concatenate([p.seqs for p in parts]),
        np.concatenate([[0], np.cumsum(np.concatenate([p.sizes for p in parts]))]).astype(np.int64),
        np.concatenate([p.real for p in parts]),
        uses=np.concatenate([p.uses for p in parts]) if mixed else None,
        chunks=np.concatenate([p.chunks for p in parts]) if chunked else None,
        variants=np.concatenate([p.variants for p in parts]) if varied else None,
    )
    order = np.arange(steps * world_size)
    rank_of, step_of = order % world_size, order // world_size
    return merged.take(rank_of * steps + step_of)
