"""How the greedy planner shares a (sub-)epoch among ranks: one object per distribution, each with
one signature, ``segment(epoch, world_size, at)`` -> (all ranks' plan of the segment, units
consumed before it), where ``at`` is a start position or a segment history (``At``).

- ``Shard`` (``distribution="shard"``): one order for all ranks, its batches dealt round-robin
  (``distribute_shard``); resumes at a sequence position ``start`` of the order.
- ``SeedOffset`` (``"random_seed_offset"``): every rank orders and batches all data with its
  own seed; the shortest rank ends the epoch (``distribute_per_rank``). Starts only at 0.
- ``Files`` (``"files"``): whole files per rank, balanced by frames; an elastic resume replays
  the segment ``history`` (``(world_size, steps)`` of each earlier segment), never a start.
- ``Pools``: per-sub-epoch file pools sharded over ranks (RETURNN's ``distrib_shard_files``):
  each rank batches its own pool; on one rank, or unsharded, the base distribution plans the
  pool's order (as streaming's ``relaxed`` partitioning calls ``orig`` for its base case).

``distribution_of(planner)`` picks one from ``DISTRIBUTIONS`` (the registry by option name), so
``Planner.global_plan`` and ``Planner.files_segment`` hold no branch per distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.batches import BatchList
from seqloader.plan.epoch_plan import interleave
from seqloader.plan.epochs import START, At, EpochIndex, refuse_history, replay_history
from seqloader.plan.files import (
    EpochFiles,
    check_file_count,
    epoch_files,
    equalise,
    file_counts,
    file_frames,
    refuse_files_start,
    split_units,
    units_of,
)
from seqloader.plan.greedy.distribute import GlobalPlan, distribute_per_rank, distribute_shard
from seqloader.plan.greedy.units import PlannedSequences
from seqloader.plan.inputs import PlannedInputs
from seqloader.plan.lpt import assign_lpt
from seqloader.plan.seeding import PURPOSE_FILES, PURPOSE_FILES_ORDER, rng_for

#: a segment of an epoch: (all ranks' plan, units consumed by the segments before it)
Segment = tuple[GlobalPlan, int]


class Batching(PlannedInputs, Protocol):
    """What a distribution asks of the planner: its inputs, and the batches of one order."""

    def shard_batches(self, epoch: int, start: int, order_world_size: int) -> BatchList:
        """The batches of the one order of ``epoch`` from sequence position ``start``."""
        ...

    def own_batches(self, epoch: int, rank: int) -> BatchList:
        """The batches of rank ``rank``'s own order of ``epoch``."""
        ...

    def pool_batches(self, epoch: int, world_size: int, rank: int) -> BatchList:
        """The batches of rank ``rank``'s own file pool of ``epoch``."""
        ...

    def per_rank_pools(self, world_size: int) -> bool: ...

    def rank_batches(
        self, seqs: np.ndarray, rng: np.random.Generator, left: np.ndarray | None = None
    ) -> BatchList:
        """One rank's sequences ordered by ``rng`` and batched (``left``: chunks not consumed)."""
        ...

    def noted(self, plan: GlobalPlan, epoch: int) -> GlobalPlan: ...

    @property
    def units(self) -> PlannedSequences:
        """What the batch lists hold (sequences or chunks), and what delivering them leaves."""
        ...


class Distribution(Protocol):
    """One way of sharing an epoch among ranks (the module doc lists them)."""

    name: str

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        """The plan of ``epoch``'s segment that starts ``at``."""
        ...

    def check_world(self, world_size: int) -> None:
        """Refuse, before any epoch, a world size the data cannot serve."""
        ...


class _OnPlanner:
    """A distribution of ``planner``'s batches."""

    def __init__(self, planner: Batching) -> None:
        self.planner = planner


class Shard(_OnPlanner):
    """``distribution="shard"``: one order, its batches dealt round-robin."""

    name = "shard"

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        refuse_history(self.name, at.history)
        p = self.planner
        batches = p.shard_batches(epoch, at.start, at.order_world_size or world_size)
        return p.noted(distribute_shard(batches, world_size, p.options.uneven), epoch), 0

    def check_world(self, world_size: int) -> None:
        """Any world size: a short epoch is padded, split or dropped (``uneven``)."""


class SeedOffset(_OnPlanner):
    """``distribution="random_seed_offset"``: each rank its own order of all data."""

    name = "random_seed_offset"

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        refuse_history(self.name, at.history)
        if at.start:
            raise OptionError("random_seed_offset plans cannot start mid-order")
        p = self.planner
        per_rank = [p.own_batches(epoch, r) for r in range(world_size)]
        return p.noted(distribute_per_rank(per_rank), epoch), 0

    def check_world(self, world_size: int) -> None:
        """Any world size: every rank plans all data."""


class Pools:
    """Per-sub-epoch file pools: sharded over more than one rank, each rank batches its own
    pool and the shortest ends the epoch; otherwise ``base`` plans the pool's order."""

    name = "pools"

    def __init__(self, planner: Batching, base: Distribution) -> None:
        self.planner, self.base = planner, base

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        p = self.planner
        self.check_world(world_size)
        if not p.per_rank_pools(world_size):
            return self.base.segment(epoch, world_size, at)
        refuse_history(self.name, at.history)
        if at.start:
            raise OptionError("file pools sharded over ranks cannot start mid-order")
        per_rank = [p.pool_batches(epoch, world_size, r) for r in range(world_size)]
        return distribute_per_rank(per_rank), 0

    def check_world(self, world_size: int) -> None:
        """Pools sharded over the ranks need a file per bin of every rank, and the source's
        consent (``FilePools.refuse_sharding``)."""
        self.base.check_world(world_size)
        p, pools = self.planner, self.planner.pools
        if pools is None or not p.per_rank_pools(world_size):
            return
        origin = p.origin or "the source"
        if pools.refuse_sharding:
            raise OptionError(f"{origin}: {pools.refuse_sharding}")
        try:
            pools.check_bins(p.options.partition_epoch, world_size)
        except OptionError as e:
            raise OptionError(f"{origin}: {e}") from e


class Files:
    """``distribution="files"``: whole files per rank (``seqloader.plan.files``)."""

    name = "files"

    def __init__(self, planner: Batching) -> None:
        assert planner.files is not None, "Files needs the source's file layout"
        self.planner, self.files = planner, planner.files
        adm = planner.admission.admitted
        self.file_frames = file_frames(self.files, adm, planner.lengths)  # [F]
        self.file_counts = file_counts(self.files, adm)  # [F]
        mask = planner.admitted_mask  # bool [n] (None: all admitted)
        self.admitted = np.ones(len(planner.lengths), bool) if mask is None else mask
        self._epoch_files: dict[int, EpochFiles] = {}  # seed epoch -> its files (the last one)

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        refuse_files_start(at.start)
        plan, done = self.plan(epoch, world_size, at.history)
        return plan, len(done)

    def check_world(self, world_size: int) -> None:
        """Refuse fewer files than ``partition_epoch * world_size`` (``check_file_count``)."""
        p = self.planner
        check_file_count(self.file_counts, p.options.partition_epoch, world_size, p.origin)

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        """(units, file of each unit int64 ``[u]``) of ``epoch``: per file of the sub-epoch (in
        the epoch's shuffled file order), its admitted sequences."""
        o = self.planner.options
        ep = EpochIndex(epoch, o.partition_epoch)
        seed_epoch = o.parsed_ordering.seed_epoch(ep.full_epoch)
        files = self._epoch_files.get(seed_epoch)
        if files is None:
            rng = rng_for(o.seed, PURPOSE_FILES, seed_epoch)
            files = epoch_files(self.file_frames, self.file_counts, o.partition_epoch, rng)
            self._epoch_files = {seed_epoch: files}  # keep one: a plan is made once per epoch
        return units_of(self.files, files.part(ep.part), self.admitted)

    def plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[GlobalPlan, np.ndarray]:
        """(the plan of the current segment, the units consumed before it int64 ``[c]``:
        sequence indices, or chunk numbers ``ChunkTable.unit_ids`` when chunking). Segment i
        re-plans what the segments before it left for its world size, and its first ``steps``
        steps were consumed."""
        p = self.planner
        units, unit_files = self.sub_epoch_files(epoch)
        if not history:
            self.check_world(world_size)
        remaining = np.zeros(len(p.lengths), dtype=bool)  # [n] sequences with units left
        remaining[units.seqs] = True
        left = p.units.left_of(units.seqs)  # chunking: the chunks not consumed yet, else None
        consumed = []

        def segment(i: int, w: int) -> GlobalPlan:
            return self._segment(epoch, w, i, units, unit_files, remaining, left)

        for seg, w, steps in replay_history(epoch, history, segment):
            consumed.append(p.units.consume(seg.batches.first(steps * w), remaining, left))
        plan = self._segment(epoch, world_size, len(history), units, unit_files, remaining, left)
        done = np.concatenate(consumed) if consumed else np.zeros(0, dtype=np.int64)
        return plan, done

    def _segment(
        self,
        epoch: int,
        world_size: int,
        segment: int,
        units: BatchList,
        unit_files: np.ndarray,
        remaining: np.ndarray,
        chunks_left: np.ndarray | None = None,
    ) -> GlobalPlan:
        """One segment: the ``remaining`` sequences of the sub-epoch's units, per rank whole
        files (balanced by frames), ordered, batched, steps equalised. ``chunks_left``: the
        chunks not consumed by earlier segments (bool ``[chunks]``)."""
        p = self.planner
        keep = units.seqs[remaining[units.seqs]]  # [m] unconsumed, unit after unit
        left = np.zeros(len(p.lengths), dtype=bool)
        left[keep] = True
        rest, rest_files = units_of(self.files, unit_files, left)
        rest, rest_files = split_units(rest, rest_files, world_size)
        frames = p.lengths[rest.seqs]
        weights = np.add.reduceat(frames, rest.bounds[:-1]) if len(rest) else frames[:0]
        rank_of = assign_lpt(weights, world_size)  # [u]
        ep = EpochIndex(epoch, p.options.partition_epoch)
        seed_epoch = p.options.parsed_ordering.seed_epoch(ep.full_epoch)
        grouped = rest.take(np.argsort(rank_of, kind="stable"))  # rank 0's units, rank 1's, ...
        ends = grouped.bounds[np.cumsum(np.bincount(rank_of, minlength=world_size))]  # [W]
        per_rank = []
        for r in range(world_size):
            seqs = grouped.seqs[(int(ends[r - 1]) if r else 0) : int(ends[r])]  # its units
            rng = rng_for(p.options.seed, PURPOSE_FILES_ORDER, seed_epoch, ep.part, segment, r)
            per_rank.append(p.rank_batches(seqs, rng, chunks_left if segment else None))
        batches, dropped = equalise(per_rank, p.options.uneven)
        return GlobalPlan(interleave(batches), world_size, dropped=dropped)


#: the distributions by ``PlanOptions.distribution``
DISTRIBUTIONS: dict[str, Callable[[Batching], Distribution]] = {
    "shard": Shard,
    "random_seed_offset": SeedOffset,
    "files": Files,
}


def distribution_of(planner: Batching) -> Distribution:
    """The distribution ``planner``'s options ask for (file pools around the base one)."""
    base = DISTRIBUTIONS[planner.options.distribution](planner)
    return base if planner.pools is None else Pools(planner, base)
