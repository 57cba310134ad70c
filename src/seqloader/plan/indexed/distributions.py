"""How indexed planning shares a sub-epoch among ranks: one object per distribution, each with one
signature, ``segment(epoch, world_size, at)`` -> (all ranks' plan of the segment, units consumed
before it), where ``at`` is a start position or a segment history (``seqloader.plan.epochs.At``),
as the greedy planner's (``seqloader.plan.greedy.distributions``; streaming's partition registry
is the model).

- ``Shard`` (``distribution="shard"``): one batch table for all ranks, batch ``k`` to rank
  ``k % W`` (``IndexedPlan``: a rank draws only its own batches); resumes at a sequence position.
- ``SeedOffset`` (``"random_seed_offset"``): each rank plans the whole sub-epoch alone with its
  own draws (its order rank); every rank holds the same sequences per bucket, hence the same
  batch count. Starts only at 0.
- ``Files`` (``"files"``): whole files per rank from the per-(file, bucket) counts
  (``seqloader.plan.indexed.files_distribution``); resumes elastically from its segment history.
  With a fixed or random ordering, ``CutFiles`` (``seqloader.plan.indexed.files_cut``): global
  planning's greedy cuts of each rank's order; with a mix too, ``MixCutFiles`` over the mix's
  file pieces (``seqloader.plan.indexed.files_mix_cut``; chunked: the slots' chunks).

Each also answers what else differs between them: the key words of an order rank's draws
(``head``), the world sizes it serves (``check_world``), the size and order of a sub-epoch
(``order_size``, ``sub_epoch_order``, ``sub_epoch_units``), one rank's own order
(``rank_order``), the mix over its units (``make_mix``), the sub-epoch's sequences per corpus
(``corpus_counts``) and, for the audit, a files plan's drawn history (``files_plan``,
``sub_epoch_files``: the others refuse). ``distribution_of(planner)`` picks one from ``DISTRIBUTIONS``, so
``IndexedPlanner`` holds no branch per distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.batches import BatchList
from seqloader.plan.chunks import Units as ChunkUnits
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import START, At, refuse_history
from seqloader.plan.indexed.batch_table import BatchTable
from seqloader.plan.indexed.files_cut import CutFiles, files_cut
from seqloader.plan.indexed.files_distribution import Files, FilesPlanner
from seqloader.plan.indexed.files_mix_cut import MixCutFiles
from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.indexed.mix_kind import MixKind
from seqloader.plan.indexed.plan import Codes, Draw, IndexedPlan, RankwisePlan
from seqloader.plan.indexed.sort_bins_mix import sharded_mix
from seqloader.plan.mix import Corpora
from seqloader.plan.seeding import PURPOSE_INDEXED_RANK

#: a segment of an epoch: (all ranks' plan, units consumed by the segments before it)
Segment = tuple[EpochPlan, int]


class IndexedPlanner(FilesPlanner, Protocol):
    """What a distribution asks of the indexed planner: the sub-epoch's batch table and draw
    (``Shard``, ``SeedOffset``) or its files' index (``Files``)."""

    def table(self, epoch: int, group: int, order_rank: int = 0) -> BatchTable | BoundsTable: ...

    def draw(self, epoch: int, windows: bool = True, order_rank: int = 0) -> Draw: ...

    def sub_epoch_size(self, epoch: int) -> int: ...

    def table_corpus_counts(self, epoch: int) -> np.ndarray: ...

    @property
    def variant_codes(self) -> Codes | None:
        """Length variants: how the draw's units split into (sequence, variant)."""
        ...


class Distribution(Protocol):
    """One way of sharing a sub-epoch among ranks (the module doc lists them)."""

    name: str
    #: every rank orders the sub-epoch with its own draws (an order rank per rank)
    own_orders: bool

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        """The plan of ``epoch``'s segment that starts ``at``."""
        ...

    def check_world(self, world_size: int) -> None:
        """Refuse, before any epoch, a world size the data cannot serve."""
        ...

    def head(self, head: tuple[int, ...], order_rank: int) -> tuple[int, ...]:
        """The first key words of ``order_rank``'s draws, after the planner's ``head``."""
        ...

    def order_size(self, epoch: int, world_size: int) -> int:
        """Units (sequences; chunked: chunks) of ``epoch`` over all ranks."""
        ...

    def sub_epoch_order(self, epoch: int, order_rank: int, world_size: int) -> np.ndarray:
        """The sub-epoch's sequences in plan order (O(n): for checks and tests)."""
        ...

    def sub_epoch_units(self, epoch: int, order_rank: int, world_size: int) -> ChunkUnits:
        """Chunking: the sub-epoch's chunks in plan order (O(n): for checks)."""
        ...

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        """The order rank ``rank`` plans alone (its own draws)."""
        ...

    def make_mix(self, corpora: Corpora) -> MixKind:
        """The mix over this distribution's units (``mix=``)."""
        ...

    def corpus_counts(self, epoch: int) -> np.ndarray:
        """Unmixed: ``epoch``'s sequences per corpus -> int64 ``[C]``, without its order."""
        ...

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        """``files``: (the segment's plan, the units consumed before it, drawn: O(n))."""
        ...

    def carry(self, state: Mapping[str, object]) -> None:
        """Keep what a loaded state carries for the segments it matches (``files``)."""
        ...

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        """``files``: (units, file of each unit) of ``epoch`` (O(n))."""
        ...


class _Table:
    """The distributions planned from the planner's batch table and draw (not ``files``):
    ``group`` is the world size a sub-epoch's table is made for."""

    name = ""
    own_orders = False

    def __init__(self, planner: IndexedPlanner) -> None:
        self.planner = planner

    def group(self, world_size: int) -> int:
        return world_size

    def check_world(self, world_size: int) -> None:
        """Any world size: a short epoch is padded, split or dropped (``uneven``)."""

    def carry(self, state: Mapping[str, object]) -> None:
        """Nothing carried: a table's plans replay from counts in milliseconds."""

    def head(self, head: tuple[int, ...], order_rank: int) -> tuple[int, ...]:
        return head

    def order_size(self, epoch: int, world_size: int) -> int:
        return self.planner.sub_epoch_size(epoch)

    def _order(self, epoch: int, order_rank: int, world_size: int) -> IndexedPlan:
        """The sub-epoch as one rank's plan of every batch, in plan order."""
        p = self.planner
        table = p.table(epoch, self.group(world_size), order_rank)
        return IndexedPlan(
            table, p.draw(epoch, True, order_rank), 1, 0, "pad", p.units, p.variant_codes
        )

    def sub_epoch_order(self, epoch: int, order_rank: int, world_size: int) -> np.ndarray:
        return self._order(epoch, order_rank, world_size).batches.seqs

    def sub_epoch_units(self, epoch: int, order_rank: int, world_size: int) -> ChunkUnits:
        b = self._order(epoch, order_rank, world_size).batches
        chunks = b.chunks if b.chunks is not None else np.zeros(len(b.seqs), dtype=np.int64)
        return ChunkUnits(b.seqs, chunks, {})

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        raise OptionError(
            "planning='indexed' orders a rank alone only under random_seed_offset (no file pools)"
        )

    def make_mix(self, corpora: Corpora) -> MixKind:
        """Per (corpus, bucket) streams (``IndexedMix``), with the fixed and random orders' cuts
        (``ShardMix``; chunked, of the slots' chunks: ``shard_mix``; ``sort_bin_shuffle``:
        ``SortBinsMix``)."""
        p = self.planner
        assert p.options.mix is not None
        return sharded_mix(p.options.seed, p.options.mix, corpora, p.corpus)

    def corpus_counts(self, epoch: int) -> np.ndarray:
        return self.planner.table_corpus_counts(epoch)

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        raise _not_files(self.name)

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        raise _not_files(self.name)


def _not_files(name: str) -> OptionError:
    return OptionError(
        f"distribution={name!r} plans no files; the files of a sub-epoch exist only under "
        "distribution='files' (Fix: set distribution='files' and give the source's file layout)"
    )


class Shard(_Table):
    """``distribution="shard"``: one batch table, its batches dealt round-robin."""

    name = "shard"

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        refuse_history(self.name, at.history)
        p = self.planner
        table = p.table(epoch, at.order_world_size or world_size)
        first = table.batch_at(int(at.start))
        plan = IndexedPlan(
            table, p.draw(epoch), world_size, first, p.options.uneven, p.units, p.variant_codes
        )
        return plan, 0


class SeedOffset(_Table):
    """``distribution="random_seed_offset"``: rank ``r`` plans the whole sub-epoch alone with its
    own draws (order rank ``r``). Every rank holds the same sequences per bucket, hence the same
    batch count: equal steps, nothing dropped (``epoch_wise_filter`` with sub-epochs: every
    rank's sub-epoch is one shared set, filtered alike, in the rank's own order; ``random``: the
    one keyed order's greedy batches, in the rank's own batch order, ``RankBatchOrder``; with a
    mix each slot replaced by the rank's own among those alike for the cut, ``mix_rank_slots``)."""

    name = "random_seed_offset"
    own_orders = True

    def group(self, world_size: int) -> int:
        return 1  # runs of one batch: each rank's table is its own

    def head(self, head: tuple[int, ...], order_rank: int) -> tuple[int, ...]:
        return (*head, PURPOSE_INDEXED_RANK, order_rank)

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        return self.sub_epoch_order(epoch, rank, world_size)

    def segment(self, epoch: int, world_size: int, at: At = START) -> Segment:
        refuse_history(self.name, at.history)
        if at.start:
            raise OptionError("random_seed_offset plans cannot start mid-order")
        p = self.planner
        first = p.table(epoch, 1, 0)
        steps, per_rank = first.num_batches, first.num_seqs

        def share(rank: int) -> IndexedPlan:
            table = p.table(epoch, 1, rank)
            return IndexedPlan(
                table, p.draw(epoch, True, rank), 1, 0, p.options.uneven, p.units, p.variant_codes
            )

        def consumed(steps: int) -> int:
            ordering = p.options.parsed_ordering
            if not (ordering.is_buckets or ordering.kind == "random"):  # the same table
                return world_size * first.seqs_before(steps)
            tables = (p.table(epoch, 1, r) for r in range(world_size))  # runs, batches: own
            return sum(t.seqs_before(steps) for t in tables)

        def planned_costs(rank: int, bucket_costs: np.ndarray) -> np.ndarray:
            table = p.table(epoch, 1, rank)
            g = np.arange(table.num_batches, dtype=np.int64)
            costs = np.asarray(bucket_costs)  # laplace: per run, its longest bucket's
            if isinstance(table, BatchTable):
                costs = table.unit_costs(costs)
            return table.batch_sizes(g) * costs[table.locate(g)[0]]

        plan = RankwisePlan(
            lambda rank: share(rank).batches,
            world_size,
            steps,
            per_rank * world_size,
            0,
            consumed,
            planned_costs,
            chunked=p.units is not None,
            mixed=p.mix is not None,
            varied=p.variant_codes is not None,
        )
        return plan, 0


#: the distributions by ``PlanOptions.distribution``
DISTRIBUTIONS: dict[str, Callable[[IndexedPlanner], Distribution]] = {
    "shard": Shard,
    "random_seed_offset": SeedOffset,
    "files": Files,
}


def distribution_of(planner: IndexedPlanner) -> Distribution:
    """The distribution ``planner``'s options ask for (``files`` with a fixed or random ordering:
    greedy cuts of each rank's order, ``CutFiles``)."""
    if files_cut(planner.options):
        kind = CutFiles if planner.options.mix is None else MixCutFiles
        return kind(planner)
    return DISTRIBUTIONS[planner.options.distribution](planner)
