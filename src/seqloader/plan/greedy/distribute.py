"""Distribution of one (sub-)epoch's batches over ``world_size`` ranks.

The result is a *global* list whose length is ``steps * world_size``; batch ``k`` belongs to rank
``k % world_size``. Every rank computes the same global list locally, so ranks agree on the number of
steps without any collective (contract C2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.epoch_plan import interleave, list_imbalance
from seqloader.plan.options import Uneven


@dataclass(frozen=True)
class GlobalPlan:
    """One (sub-)epoch for all ranks.

    ``dropped``: real sequences left out by ``uneven="drop"`` or by the shortest rank under
    ``random_seed_offset``; ``repeats``: filler slots (``real`` False).
    """

    batches: BatchList
    world_size: int
    dropped: int = 0

    @property
    def steps(self) -> int:
        return len(self.batches) // self.world_size

    @property
    def repeats(self) -> int:
        return int(len(self.batches.real) - np.count_nonzero(self.batches.real))

    def consumed_seqs(self, steps: int) -> int:
        """Real sequences of the first ``steps`` steps, all ranks together."""
        return self.batches.real_count(steps * self.world_size)

    def resume_fields(self, steps: int) -> dict[str, str]:
        """Nothing carried besides the position (only indexed ``files`` plans carry some)."""
        return {}

    def real_total(self) -> int:
        """Real sequences of the whole plan."""
        return self.batches.real_count()

    def rank_share(self, rank: int, start_step: int = 0) -> BatchList:
        """Rank ``rank``'s batches from ``start_step`` on."""
        ids = np.arange(start_step * self.world_size + rank, len(self.batches), self.world_size)
        return self.batches.take(ids)

    def step_imbalance(
        self, from_step: int, costs: np.ndarray, bucket_costs: np.ndarray | None = None
    ) -> PlannedImbalance:
        """Read off the batch list (O(n): computed off the training loop); no bucket costs."""
        return PlannedImbalance(partial(list_imbalance, self, from_step, costs))


def distribute_shard(batches: BatchList, world_size: int, uneven: Uneven) -> GlobalPlan:
    """Share one batch list among ranks, handling a last round that is not full."""
    n_batches = len(batches)
    if n_batches % world_size == 0:
        return GlobalPlan(batches, world_size)
    if uneven == "drop":
        keep = (n_batches // world_size) * world_size
        kept = batches.first(keep)
        dropped = batches.real_count() - kept.real_count()
        return GlobalPlan(kept, world_size, dropped=dropped)
    steps = -(-n_batches // world_size)
    slots = steps * world_size
    if uneven == "pad":
        # repeat early batches, as DistributedSampler does, but marked as repeats
        extra = batches.take(np.arange(slots - n_batches) % n_batches)
        extra = extra.with_real(np.zeros_like(extra.real))
        return GlobalPlan(batches.concat(extra), world_size)
    return GlobalPlan(_split_tail(batches, steps, world_size), world_size)


def _split_tail(batches: BatchList, steps: int, world_size: int) -> BatchList:
    """``uneven="split"``: re-split the last round's sequences so it fills all ranks.

    The tail (the last partial round, extended by whole earlier rounds while it holds fewer
    sequences than its slots) is split by halving its largest batch until it has exactly its slot
    count; halves of a valid batch are valid, order is kept, and every sequence stays exactly once.
    Only if the whole (sub-)epoch has fewer sequences than ``steps * world_size`` are filler repeats
    appended (marked ``real=False``).
    """
    tail_start, tail_slots = _tail_rounds(batches, steps, world_size)
    head = batches.first(tail_start)
    tail_bounds = batches.bounds[tail_start:] - batches.bounds[tail_start]  # [t+1]
    tail_seqs = batches.seqs[batches.bounds[tail_start] :]
    tail_uses = None if batches.uses is None else batches.uses[batches.bounds[tail_start] :]
    cut = batches.bounds[tail_start]
    tail_chunks = None if batches.chunks is None else batches.chunks[cut:]
    target = min(tail_slots, len(tail_seqs))
    bounds = tail_bounds
    while len(bounds) - 1 < target:
        s = np.diff(bounds)
        k = len(s) - 1 - int(np.argmax(s[::-1]))  # largest batch, the latest on ties
        bounds = np.insert(bounds, k + 1, bounds[k] + s[k] // 2 + s[k] % 2)
    tail = BatchList.from_bounds(tail_seqs, bounds, tail_uses, tail_chunks)
    if target < tail_slots:  # infeasible: fewer sequences than slots -> marked repeats
        n_fill = tail_slots - target
        pick = np.arange(n_fill) % max(len(tail_seqs), 1)  # [n_fill]
        fill = BatchList(
            tail_seqs[pick],
            np.arange(n_fill + 1, dtype=np.int64),
            np.zeros(n_fill, bool),
            None if tail_uses is None else tail_uses[pick],
            None if tail_chunks is None else tail_chunks[pick],
        )
        tail = tail.concat(fill)
    elif bool(batches.real[cut:].all()):  # only the tail's bounds change: no copy of the slots
        joined = np.concatenate([batches.bounds[:tail_start], bounds + cut]).astype(np.int64)
        return BatchList(batches.seqs, joined, batches.real, batches.uses, batches.chunks)
    return head.concat(tail)


def _tail_rounds(batches: BatchList, steps: int, world_size: int) -> tuple[int, int]:
    """(first batch, slot count) of the tail: the last round, extended back by whole rounds until
    it holds at least as many sequences as slots (or reaches the start)."""
    back = np.arange(steps, dtype=np.int64)  # [steps] rounds taken back
    first = (steps - 1 - back) * world_size  # [steps] first batch of each candidate tail
    enough = batches.bounds[-1] - batches.bounds[first] >= (back + 1) * world_size  # [steps]
    r = int(np.argmax(enough)) if enough.any() else steps - 1
    return int(first[r]), (r + 1) * world_size


def distribute_per_rank(per_rank: list[BatchList]) -> GlobalPlan:
    """``random_seed_offset``: every rank has its own batch list over all data. Equal steps: all
    ranks keep as many batches as the shortest one; the surplus is counted as dropped."""
    world_size = len(per_rank)
    steps = min(len(b) for b in per_rank)
    dropped = sum(b.real_count() - b.real_count(steps) for b in per_rank)
    return GlobalPlan(interleave([b.first(steps) for b in per_rank]), world_size, dropped=dropped)
