"""What the indexed planner asks a mix over its units (``MixKind``), so that it holds no test of
the mix's kind: ``IndexedMix`` (per (corpus, bucket) streams: the shard distribution) plans from
per-bucket counts and draws, and ``ShardMix`` adds the fixed and random orders' cuts of its slots
(``mix_cuts``, which is built on ``IndexedMix``: hence a class of its own; chunked,
``ChunkedShardMix`` cuts the slots' chunks; ``shard_mix`` picks one); ``FilesMix`` (file
pieces: ``distribution="files"``) lists its slots from the pieces, and leaves the bucket counts,
draws and cuts to the files distribution.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from seqloader.plan.admission import EpochFilter
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.fixed import BoundsTable, ListedOrder
from seqloader.plan.indexed.fixed_chunks import Chunking
from seqloader.plan.indexed.histogram import build_bucket_index
from seqloader.plan.indexed.mix import IndexedMix
from seqloader.plan.indexed.mix_chunks import ChunkedBucketMix
from seqloader.plan.indexed.mix_cuts import (
    MIX_BLOCK,
    ListedUses,
    MixOrder,
    chunked_mix_cut,
    listed_cuts,
    listed_part,
    mix_cuts,
    mix_fixed_cuts,
)
from seqloader.plan.indexed.mix_filter import MixFilter, MixKept
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import Corpora, CorpusProgress, EpochMix
from seqloader.plan.options import Ordering

if TYPE_CHECKING:
    from seqloader.plan.indexed.corpus import AdmittedCorpus

#: a sub-epoch's greedy batch table and its draw
Cut = tuple[BoundsTable, Draw]


class MixKind(EpochMix, Protocol):
    """A mix as ``IndexedPlanner`` asks it (``EpochMix`` and the planner's questions)."""

    def bucket_counts(self, ep: EpochIndex, parts: int) -> np.ndarray | None:
        """Slots per bucket of sub-epoch ``ep`` -> int64 ``[N]``, every (bucket, corpus)
        segment cut on its own; None: the distribution's counts."""
        ...

    def bucket_draw(self, ep: EpochIndex, parts: int) -> Draw | None:
        """The slots of sub-epoch ``ep`` per bucket position; None: the distribution's draw."""
        ...

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(sequence, corpus epoch) of every slot of sub-epoch ``ep`` without planning it (O(n):
        for checks); None: listed from the plan's batches."""
        ...

    def corpus_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, list[CorpusProgress]]:
        """(slots per corpus in sub-epoch ``ep`` (all ranks) -> int64 ``[C]``, every corpus'
        progress at the sub-epoch's end), from the mix's counts."""
        ...

    def filtered_reasons(self, ep: EpochIndex, parts: int) -> dict[str, int]:
        """What ``epoch_wise_filter`` left out of sub-epoch ``ep``'s slots, by reason."""
        ...

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut | None:
        """``random``: sub-epoch ``ep``'s slots in their keyed order, cut greedily; None: not
        the planner's to cut."""
        ...

    def fixed_cut(
        self, ep: EpochIndex, parts: int, ordering: Ordering, batcher: Batcher,
        lengths: Mapping[str, np.ndarray], length_key: str,
    ) -> Cut | None:  # fmt: skip
        """A fixed ordering: sub-epoch ``ep``'s slots listed in the ordering, cut greedily;
        None: not the planner's to cut."""
        ...


class ShardMix(IndexedMix):
    """``IndexedMix`` as the shard distribution plans it: also the fixed and random orders' cuts
    of a sub-epoch's slots (``mix_cuts``).

    >>> from seqloader.plan.mix import Corpora
    >>> from seqloader.plan.options import Ordering
    >>> from seqloader.plan.indexed.fixed import cut_batcher
    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> from seqloader.plan.limits import BatchLimits
    >>> from seqloader.plan.cost import BatchCost
    >>> lengths = np.array([6, 2, 5, 1, 3])  # corpus a: the first 2, b: the last 3
    >>> mix = ShardMix(1, {"a": 1, "b": 1}, Corpora(("a", "b"), np.array([0, 2, 5])),
    ...                build_bucket_index(lengths, np.zeros(0, np.int64)), lengths)
    >>> frames = BatchLimits.of(2, None, None, BatchCost(), ["data"], "data")
    >>> table, draw = mix.fixed_cut(EpochIndex(1, 1), 1, Ordering("sorted"),
    ...                             cut_batcher(frames), {"data": lengths}, "data")
    >>> draw.seqs.tolist(), table.bounds.tolist()  # shortest first, cut greedily
    ([3, 1, 4, 2, 0], [0, 2, 4, 5])
    """

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        """``random``: the slots' keyed order cut in blocks (``mix_cuts``); filtered
        (``epoch_wise_filter``): the order listed, its kept slots cut."""
        kept = self.kept(ep, parts)
        if kept is None:
            return mix_cuts(self, ep, parts, batcher, lengths)
        draw = self.draw(ep.full_epoch, ep.part, parts)
        size = int(draw.cum[:, -1].sum())
        listed = draw.bucket_slots(0, np.arange(size, dtype=np.int64))
        return listed_cuts(*kept_slots(kept, *listed), batcher, lengths)

    def fixed_cut(
        self, ep: EpochIndex, parts: int, ordering: Ordering, batcher: Batcher,
        lengths: Mapping[str, np.ndarray], length_key: str,
    ) -> Cut:  # fmt: skip
        """A fixed ordering: the slots listed, sorted kinds by what the mix's index sorts by
        (the length key, or a source's own sort key), and cut (``mix_fixed_cuts``); filtered
        (``epoch_wise_filter``): the listed order's kept slots cut."""
        return self.listed_cut(ep, parts, ordering, batcher, lengths)

    def listed_cut(
        self, ep: EpochIndex, parts: int, ordering: Ordering, batcher: Batcher,
        lengths: Mapping[str, np.ndarray], rng: np.random.Generator | None = None,
    ) -> Cut:  # fmt: skip
        """Sub-epoch ``ep``'s slots listed in ``ordering`` (``rng``: its draws), the kept ones
        where ``epoch_wise_filter`` applies, cut greedily."""
        by = np.asarray(self._lengths)
        kept = self.kept(ep, parts)
        if kept is None:
            return mix_fixed_cuts(self, ep, parts, ordering, batcher, lengths, by, rng)
        listed = listed_part(self, ep, parts, ordering, by, rng)
        return listed_cuts(*kept_slots(kept, *listed), batcher, lengths)


def kept_slots(kept: MixKept, seqs: np.ndarray, uses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The listed slots (``seqs``, ``uses``) the filtered sub-epoch ``kept`` keeps, in order
    (``MixKept.keeps``: by the kept set's rule, or where it has none by listing)."""
    keep = kept.keeps(seqs, uses)
    return seqs[keep], uses[keep]


@dataclass(frozen=True)
class MixChunks:
    """How a chunked mix's slots expand (``fixed_chunks.Chunking``, the chunk code ``stride``)
    and the ordering they are listed in."""

    chunking: Chunking
    stride: int
    ordering: Ordering


class ChunkedShardMix(ShardMix):
    """Chunked, with the fixed and random orders: the slots ``ShardMix`` cuts, in the same order,
    each expanded into its chunks and the chunks cut by their windows (``chunked_mix_cut``).
    ``args``: ``IndexedMix``'s, its index the one the unchunked plan's mix streams over
    (``shard_mix``), so a chunked mix selects the sequences the unchunked one does."""

    def __init__(self, chunks: MixChunks, *args: Any) -> None:
        super().__init__(*args)
        self.chunks = chunks

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """The sub-epoch's slots (one per (sequence, corpus epoch), not per chunk) in the
        ordering, as the unchunked plan lists them, the kept ones where ``epoch_wise_filter``
        applies (O(slots): for checks, and the cuts of a filtered epoch)."""
        seqs, uses = self.ordered_slots(ep, parts)
        kept = self.kept(ep, parts)
        return (seqs, uses) if kept is None else kept_slots(kept, seqs, uses)

    def ordered_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """The sub-epoch's slots in the ordering, unfiltered."""
        ordering = self.chunks.ordering
        if ordering.kind != "random":
            return listed_part(self, ep, parts, ordering, np.asarray(self._lengths))
        draw = self.draw(ep.full_epoch, ep.part, parts)
        size = int(draw.cum[:, -1].sum())
        return draw.slots(np.zeros(size, dtype=np.int64), np.arange(size, dtype=np.int64))

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        """``random``: the slots' keyed order, their chunks cut in blocks (filtered: the listed
        order's kept slots, their chunks cut at once)."""
        if self.kept(ep, parts) is not None:
            return self.listed_chunk_cut(ep, parts, batcher)
        draw = self.draw(ep.full_epoch, ep.part, parts)
        order, size, c = MixOrder(draw), int(draw.cum[:, -1].sum()), self.chunks
        return chunked_mix_cut(order, order.uses, size, batcher, c.chunking, c.stride, MIX_BLOCK)

    def fixed_cut(
        self, ep: EpochIndex, parts: int, ordering: Ordering, batcher: Batcher,
        lengths: Mapping[str, np.ndarray], length_key: str,
    ) -> Cut:  # fmt: skip
        """A fixed ordering: the slots listed in the ordering (sorted kinds: by what the
        mix's index sorts by), their chunks cut at once."""
        return self.listed_chunk_cut(ep, parts, batcher)

    def listed_chunk_cut(self, ep: EpochIndex, parts: int, batcher: Batcher) -> Cut:
        """``listed_slots``' chunks, cut at once."""
        seqs, uses = self.listed_slots(ep, parts)
        size, c = len(seqs), self.chunks
        order, used = ListedOrder(seqs), ListedUses(uses)
        return chunked_mix_cut(order, used, size, batcher, c.chunking, c.stride, max(size, 1))


def mix_filter(corpus: AdmittedCorpus, by: np.ndarray | None = None) -> MixFilter | None:
    """``epoch_wise_filter`` on the mix's sub-epoch slots where this mix plans it
    (``laplace``/``buckets:N`` from the kept counts, chunked by length class:
    ``mix_chunks_filter``; the fixed orders, ``random`` and ``sort_bin_shuffle``, chunked too, by
    cutting the listed order's kept slots (chunked: their chunks); ``PlanOptions`` refuses the
    other mixes by name). It keeps the shortest by the source's own sort key where unmixed plans
    filter by it (``filter_key``: every fixed or drawn ordering), else by ``by`` (None: the
    mix's lengths)."""
    o = corpus.options
    if o.epoch_wise_filter is None:
        return None
    if corpus.filter_key is not None:
        by = corpus.filter_key
    return MixFilter(cast(EpochFilter, o.epoch_wise_filter), o.partition_epoch, by)  # normalised


def shard_mix(
    seed: int,
    mix: Mapping[str, float | Fraction | str],
    corpora: Corpora,
    corpus: AdmittedCorpus,
    chunked: type[ChunkedShardMix] | None = None,
) -> MixKind:
    """The mix of a sharded indexed plan over ``corpus``: ``ShardMix`` over the planner's index;
    chunked with ``laplace``/``buckets:N``, ``ChunkedBucketMix`` over the length classes
    (``mix_chunks``); chunked with a fixed or random ordering ``ChunkedShardMix``, streaming over the index the
    unchunked plan's mix streams over (``sorted``/``sorted_reverse``: one bucket per admitted
    length, the chunked plans' length classes; the others one bucket of the admitted sequences,
    built here: O(n) once per planner, as a node stores none for chunked plans)."""
    index, lengths, admits = corpus.index, corpus.class_values, corpus.admits  # no mask made
    if corpus.units is None:  # sorted kinds: by the source's own sort key if it gives one
        return ShardMix(seed, mix, corpora, index, corpus.order_by, admits, mix_filter(corpus))
    if not (corpus.fixed or corpus.random):  # laplace, buckets:N: the slots' chunks bucketed
        wise = mix_filter(corpus)
        return ChunkedBucketMix(corpus.units, seed, mix, corpora, index, lengths, admits, wise)
    if corpus.options.parsed_ordering.kind not in ("sorted", "sorted_reverse"):
        index = build_bucket_index(lengths, np.zeros(0, dtype=np.int64), corpus.mask)
    else:  # the unchunked plan's index: by the source's own sort key if it gives one
        index, lengths = corpus.order_index(), corpus.order_by
    chunks = MixChunks(corpus.fixed_chunking(), corpus.units.stride, corpus.options.parsed_ordering)
    wise = mix_filter(corpus, corpus.order_by)  # the length key (or own key), not class values
    kind = ChunkedShardMix if chunked is None else chunked  # ``chunked``: its own filter
    return kind(chunks, seed, mix, corpora, index, lengths, admits, wise)
