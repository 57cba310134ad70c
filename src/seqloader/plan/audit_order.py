"""What an epoch run must deliver, as orders the exactly-once audit checks deliveries against.

The audit (``seqloader.trainer.audit``) gathers what every rank received and compares it with
what the plan says must be delivered. What that is depends on the distribution, which is the
planner's business, so the planner answers it (``Planner.audit_order``):

- ``shard``: one order, the sub-epoch's, all ranks' deliveries merged;
- ``files``: one stream of the sub-epoch's sequences: those consumed before the run (earlier
  segments of the epoch, then this segment's first steps), the rest as planned, then those the
  plan leaves out (a multiset: a mix's sequence used twice is two slots); chunked plans work on
  chunks, each named by its sequence;
- ``random_seed_offset`` and sharded file pools: one order per rank, each checked alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.options import PlanOptions
from seqloader.plan.planned_units import Chunked, units_of


@dataclass(frozen=True)
class AuditRun:
    """Where a run of a plan starts: ``start_steps`` of the segment plan and ``start_offset``
    sequences of the epoch order consumed before it; ``order_world_size`` (``buckets:N`` orders
    depend on it) and ``history`` (``files``: the epoch's earlier segments) as in ``Position``."""

    epoch: int
    start_steps: int
    start_offset: int
    order_world_size: int = 1
    history: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class AuditOrder:
    """``order``: the sequences to deliver in plan order, the first ``start`` consumed before the
    run, ``dropped`` left out by the plan; ``rank``: the rank whose deliveries it is checked
    against (None: every rank's, merged).

    >>> AuditOrder(np.array([3, 1, 2]), start=1, dropped=0).rank is None
    True
    """

    order: np.ndarray
    start: int
    dropped: int
    rank: int | None = None


class Audited(Chunked, Protocol):
    """What ``audit_orders`` reads of a planner."""

    @property
    def options(self) -> PlanOptions: ...

    def per_rank_pools(self, world_size: int) -> bool: ...

    def sub_epoch_order(
        self, epoch: int, order_rank: int = 0, world_size: int = 1
    ) -> np.ndarray: ...

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray: ...

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]: ...

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]: ...


def audit_orders(
    planner: Audited, plan: EpochPlan, run: AuditRun, ranks: Sequence[int]
) -> list[AuditOrder]:
    """The orders a run of ``plan`` (``planner``'s) from ``run`` is checked against, given the
    ranks whose deliveries were gathered (see the module doc)."""
    distribution = planner.options.distribution
    if distribution == "shard" and not planner.per_rank_pools(plan.world_size):
        order = planner.sub_epoch_order(run.epoch, 0, run.order_world_size)
        return [AuditOrder(order, run.start_offset, plan.dropped)]
    if distribution == "files":
        order, start = files_order(planner, plan, run)
        return [AuditOrder(order, start, plan.dropped)]
    orders = []
    for r in ranks:
        share = plan.rank_share(r)
        order = planner.rank_order(run.epoch, r, plan.world_size)
        dropped = len(order) - share.real_count()
        orders.append(AuditOrder(order, share.real_count(run.start_steps), dropped, r))
    return orders


def files_order(planner: Audited, plan: EpochPlan, run: AuditRun) -> tuple[np.ndarray, int]:
    """``distribution="files"``: the sub-epoch's sequences as one stream -> (order, start). What
    must be delivered does not depend on this segment's plan: the sub-epoch less the consumed
    ones. Chunking: worked out on chunks (a sequence's chunks can be consumed in one segment and
    planned in the next), each named by its sequence in the stream."""
    batches, units = plan.batches, units_of(planner)
    whole = units.of_seqs(planner.sub_epoch_files(run.epoch)[0].seqs)  # every unit of the sub-epoch
    _, earlier = planner.files_plan(run.epoch, plan.world_size, run.history)
    cut = int(batches.bounds[run.start_steps * plan.world_size])
    before = np.concatenate([earlier, units.of_slots(batches, 0, cut)])
    planned = units.of_slots(batches, cut)
    rest = multiset_rest(whole, np.concatenate([before, planned]))
    order = units.seqs_of(np.concatenate([before, planned, rest]))  # each unit's sequence
    return order, len(before)


def multiset_rest(whole: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """``whole`` less ``taken`` as multisets, in ``whole``'s order: of each value, as many of its
    first copies as ``taken`` holds are left out. A mix plans a sequence once per corpus epoch,
    so a sequence used twice and consumed once still has one slot to deliver or drop (a set
    difference would lose it, and the audit would expect a slot too few).

    >>> multiset_rest(np.array([4, 1, 4, 2, 1]), np.array([1, 4])).tolist()
    [4, 2, 1]
    """
    if not len(taken):
        return whole
    values, counts = np.unique(taken, return_counts=True)
    by = np.argsort(whole, kind="stable")  # copies of a value in whole's order
    ordered = whole[by]
    copy = np.arange(len(whole)) - np.searchsorted(ordered, ordered, side="left")  # k-th copy
    at = np.minimum(np.searchsorted(values, ordered), max(len(values) - 1, 0))
    left_out = np.where(values[at] == ordered, counts[at], 0)
    keep = np.empty(len(whole), dtype=bool)
    keep[by] = copy >= left_out
    return whole[keep]
