"""The planned step imbalance (``EpochReport.step_imbalance``) of indexed plans, without every
rank's batch list in memory.

``step_imbalance`` (``seqloader.plan.cost``) is the mean over steps of the slowest rank's batch
cost over the mean one. With global planning it is read off the plan's batch list. An indexed
plan's list is virtual (``IndexedPlan.batches`` draws every member of every rank: at 10^8
sequences gigabytes and minutes, on every rank), so:

- ``shard`` (``table_imbalance``): a batch's cost is its size times the cost of its bucket's
  longest length, the cost histogram batching packs the batch to (``k_b`` sequences fit
  ``max_frames`` at that length; ``laplace``: its run's longest bucket, ``BatchTable.top``),
  read off the batch table: constant over runs of the table, so
  a step's figure comes from the runs it overlaps (no member drawn, O(segments + steps)). It is
  the imbalance of the *planned* costs, an upper bound per batch: differences between batches of
  one bucket (their longest member may be shorter than the bucket's) are not seen.
- ``files`` (``files_imbalance``): the same planned cost, every rank's from counts: its batches'
  sizes from the segment's layout (``Segment.layout``, split pieces, one-sequence fillers), each
  times the cost of its unit's longest length (its last bucket's cost; ``cut_runs`` sizes the
  run's batches for its buckets' smallest size). No member is drawn:
  O(batches + W * steps), folded rank by rank into a per-step max and sum.
- ``rankwise_imbalance``: every rank's share drawn in turn and its batches' padded costs from the
  real lengths folded the same way: global planning's exact figure, O(n) time (tests, and plans
  without ``planned_costs``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.batching import padded_frames
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.indexed.batch_table import BatchTable
from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.options import PlanOptions


class Slots(Protocol):
    """The batches of a shard plan's last round (``seqloader.plan.indexed.plan.Slots``)."""

    g: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


class TablePlan(Protocol):
    """What ``table_imbalance`` reads of a shard plan (``IndexedPlan``, which calls it: a
    protocol, not an import, keeps the module graph free of loops)."""

    world_size: int
    table: BatchTable | BoundsTable
    start: int
    full_rounds: int
    tail_start: int

    @property
    def tail(self) -> Slots: ...


class CountedPlan(EpochPlan, Protocol):
    """What ``files_imbalance`` reads of a files plan (``RankwisePlan``)."""

    planned_costs: Callable[[int, np.ndarray], np.ndarray] | None


class Indexed(Protocol):
    """What ``bucket_costs`` reads of an indexed planner."""

    @property
    def options(self) -> PlanOptions: ...

    @property
    def longest(self) -> np.ndarray: ...


class StepRatios:
    """Running sum of the per-step ratio max / mean cost over ranks (1.0 where the mean is 0)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.steps = 0

    def add(self, per: np.ndarray) -> None:
        """Costs of some steps' batches, ``[steps, world_size]``."""
        per = per.astype(np.float64)
        self.add_folded(per.max(axis=1), per.mean(axis=1))

    def add_folded(self, most: np.ndarray, mean: np.ndarray) -> None:
        """Some steps' largest and mean batch cost over ranks, ``[steps]`` each."""
        ratio = np.divide(most, mean, out=np.ones_like(mean), where=mean > 0)
        self.total += float(ratio.sum())
        self.steps += len(ratio)

    def mean(self) -> float:
        return self.total / self.steps if self.steps else 1.0


def bucket_costs(planner: Indexed) -> np.ndarray:
    """Per bucket, the cost units of its longest admitted length (chunking: window) -> int64
    ``[N]``: what each unit of a batch of the bucket is planned to cost."""
    return planner.options.cost.units(np.asarray(planner.longest))


def table_imbalance(plan: TablePlan, costs: np.ndarray, first_step: int = 0) -> float:
    """``step_imbalance`` of a ``shard`` indexed plan from ``first_step`` on, every batch costing
    its size times ``costs[bucket]`` (``bucket_costs``; see the module doc). The planned cost is
    constant over runs of the batch table (a segment's full batches, then its bucket's short last
    batch), so a step's max and mean come from the few runs it overlaps: O(segments + steps),
    whatever the number of sequences."""
    w, acc = plan.world_size, StepRatios()
    if not isinstance(plan.table, BatchTable):  # a fixed order's bounds: no bucket costs
        raise TypeError("table_imbalance needs a bucket table (fixed orders: rankwise_imbalance)")
    costs = plan.table.unit_costs(costs)  # laplace: per run of buckets, its longest bucket's
    if first_step < plan.full_rounds:
        starts, cost = _runs(plan.table, costs)  # [R] plan batch where each run starts, its cost
        ends = np.append(starts[1:], plan.table.num_batches)
        a = np.maximum(starts, plan.start + first_step * w) - plan.start
        b = np.minimum(ends, plan.tail_start) - plan.start
        keep = b > a
        a, b, cost = a[keep], b[keep], cost[keep]
        reps = (b - 1) // w - a // w + 1  # [R'] steps each run overlaps
        run = np.repeat(np.arange(len(a)), reps)
        step = (
            np.repeat(a // w, reps) + np.arange(len(run)) - np.repeat(np.cumsum(reps) - reps, reps)
        )
        length = np.minimum(b[run], (step + 1) * w) - np.maximum(a[run], step * w)
        first = np.flatnonzero(np.diff(step, prepend=-1))  # runs come in order: steps ascend
        most = np.maximum.reduceat(cost[run], first).astype(np.float64)
        total = np.add.reduceat(length * cost[run], first).astype(np.float64)
        acc.add_folded(most, total / w)
    tail = plan.tail
    if len(tail.g) and first_step <= plan.full_rounds:  # the last round, re-cut: W batches
        bucket, _ = plan.table.locate(tail.g)
        acc.add(((tail.hi - tail.lo) * costs[bucket]).reshape(1, w))
    return acc.mean()


def _runs(table: BatchTable, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The table's batches as runs of equal planned cost -> (plan batch where each run starts,
    the cost of each of its batches), int64 ``[R]`` in plan order: every segment's batches
    before its bucket's last one (all ``sizes[b]`` long), then that last batch if the segment
    holds it."""
    b, j0, m = table.bucket, table.first, table.count
    last = -(-table.counts[b] // table.sizes[b]) - 1  # [S] index of the bucket's last batch
    begin = table.batch_end - m  # [S]
    has_last = (j0 <= last) & (last < j0 + m)
    full = np.where(has_last, last - j0, m)
    short = table.counts[b] - last * table.sizes[b]
    starts = np.concatenate([begin[full > 0], (begin + full)[has_last]])
    cost = np.concatenate([(table.sizes[b] * costs[b])[full > 0], (short * costs[b])[has_last]])
    order = np.argsort(starts, kind="stable")
    return starts[order], cost[order]


def files_imbalance(plan: CountedPlan, costs: np.ndarray, first_step: int = 0) -> float:
    """``step_imbalance`` of an indexed ``files`` plan from ``first_step`` on, every batch
    costing its size times its group's planned cost (``costs``: ``bucket_costs``), from counts."""
    planned = plan.planned_costs
    assert planned is not None
    return _ranks_imbalance(plan, first_step, lambda rank: planned(rank, costs)[first_step:])


def rankwise_imbalance(
    plan: EpochPlan, costs: np.ndarray | Callable[[BatchList], np.ndarray], first_step: int = 0
) -> float:
    """``step_imbalance`` of a plan from ``first_step`` on, computed one rank's share at a time
    (``costs``: cost units per sequence, or of each slot of a share, e.g. a chunk's window's,
    ``IndexedPlanner.slot_costs``): equal to the figure over the plan's whole batch list."""

    def per_step(rank: int) -> np.ndarray:
        share = plan.rank_share(rank, first_step)
        slot = costs(share) if callable(costs) else costs[share.seqs]
        return padded_frames(np.asarray(slot), share.bounds)

    return _ranks_imbalance(plan, first_step, per_step)


def _ranks_imbalance(
    plan: EpochPlan, first_step: int, per_step: Callable[[int], np.ndarray]
) -> float:
    """The step imbalance from ``first_step`` on of a plan whose rank ``r`` costs ``per_step(r)``
    (``[steps - first_step]``) per step: one rank at a time, never all ranks' batches at once."""
    steps = plan.steps - first_step
    if steps <= 0:
        return 1.0
    most = np.zeros(steps, dtype=np.float64)
    total = np.zeros(steps, dtype=np.float64)
    for rank in range(plan.world_size):
        per = per_step(rank).astype(np.float64)
        np.maximum(most, per, out=most)
        total += per
    acc = StepRatios()
    acc.add_folded(most, total / plan.world_size)
    return acc.mean()
