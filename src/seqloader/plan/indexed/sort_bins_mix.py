"""``sort_bin_shuffle[_x2]`` with a ``mix`` under ``distribution="shard"`` (``SortBinsMix``).

The sub-epoch is the indexed mix's (``IndexedMix``: each (corpus, bucket) stream's part, every
corpus epoch exactly once over the epochs that cover it), as with the fixed orders and a mix
(``seqloader.plan.indexed.mix_cuts``): its slots listed in the corpus' own order, then put in
RETURNN's ``sort_bin_shuffle`` order (global planning's ``order_sequences``: a random
permutation, stably sorted by length, bins of RETURNN's cut emitted in a random order, ``_x2``
shuffled within) with numpy draws keyed by the seed (``fixed_random_seed``: that seed), the full
epoch after ``:K`` grouping and the part, and cut greedily (global planning's ``Batcher``). The
bins are the sub-epoch's (global planning orders the full epoch's selection and slices it).
Every rank lists the sub-epoch's slots and orders them: O(slots) memory and O(slots log slots)
time per rank per sub-epoch, as the fixed orders with a mix list theirs.

A source's own sort key (``order_lengths``) is what the slots are sorted by, as global planning
sorts by it, and the mix streams over its index (one bucket per key value).

Chunked (``ChunkedSortBinsMix``): the same slots in the same order (the mix streams over the
length classes, the buckets the unchunked plan's index has: one per admitted length; with a
source's own sort key, that key's index), each
expanded into its chunks and the chunks cut greedily by their windows (``chunked_mix_cut``, as
the fixed orders' chunked mix): global planning's chunked batches of that slot order.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.mix_chunks_rule import ChunkedRuleMix
from seqloader.plan.indexed.mix_cuts import listed_part
from seqloader.plan.indexed.mix_kind import (
    Cut,
    MixChunks,
    MixKind,
    mix_filter,
    shard_mix,
)
from seqloader.plan.indexed.mix_random_filter import OneBucketShardMix
from seqloader.plan.indexed.mix_sorted_filter import ChunkedValueMix, ValueShardMix
from seqloader.plan.indexed.sort_bins import SORT_BIN_KINDS
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import Corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.seeding import PURPOSE_FIXED_ORDER, PURPOSE_INDEXED_ORDER, rng_for

if TYPE_CHECKING:
    from seqloader.plan.indexed.corpus import AdmittedCorpus

#: the orderings whose mix streams over one bucket of the admitted sequences (unchunked)
ONE_BUCKET = ("random", "default", "reverse")


class SortBinsMix(ValueShardMix):
    """``ShardMix`` whose ``random_cut`` lists a sub-epoch's slots in the ``sort_bin_shuffle``
    order (the module doc), sorted by ``length_key``'s lengths; ``args``: ``ShardMix``'s.

    >>> from seqloader.plan.indexed.fixed import cut_batcher
    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> from seqloader.plan.cost import BatchCost
    >>> from seqloader.plan.limits import BatchLimits
    >>> from seqloader.plan.mix import Corpora
    >>> lengths = np.array([6, 2, 5, 1, 3, 4])
    >>> options = PlanOptions(ordering="sort_bin_shuffle:3", mix={"a": 1, "b": 2})
    >>> mix = SortBinsMix(options, "data", 0, {"a": 1, "b": 2}, Corpora(("a", "b"), np.array([0, 2, 6])),
    ...                   build_bucket_index(lengths, np.array([2, 3, 4, 5, 6])), lengths)
    >>> frames = BatchLimits.of(3, None, None, BatchCost(), ["data"], "data")
    >>> table, draw = mix.random_cut(EpochIndex(1, 1), 1, cut_batcher(frames), {"data": lengths})
    >>> len(draw.seqs), sorted(lengths[draw.seqs[:4]].tolist()) == lengths[draw.seqs[:4]].tolist()
    (10, True)
    """

    def __init__(self, options: PlanOptions, length_key: str, *args: Any) -> None:
        super().__init__(*args)
        self.options, self.length_key = options, length_key

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        """Sub-epoch ``ep``'s slots in the ``sort_bin_shuffle`` order (``epoch_wise_filter``:
        the kept ones), cut greedily."""
        rng, ordering = order_rng(self.options, ep), self.options.parsed_ordering
        return self.listed_cut(ep, parts, ordering, batcher, lengths, rng)


class ChunkedSortBinsMix(ChunkedValueMix):
    """Chunked: the slots ``SortBinsMix`` lists, in its order, each expanded into its chunks and
    the chunks cut by their windows (the module doc); ``args``: ``ChunkedShardMix``'s, its index
    the length classes (one bucket per value: a filtered sub-epoch kept by the rule,
    ``ChunkedValueMix``)."""

    def __init__(self, options: PlanOptions, *args: Any) -> None:
        super().__init__(*args)
        self.options = options

    def ordered_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """The sub-epoch's slots (one per (sequence, corpus epoch)) in the ``sort_bin_shuffle``
        order, as ``SortBinsMix`` lists them (``listed_slots``: the kept ones where
        ``epoch_wise_filter`` applies)."""
        ordering, lengths = self.options.parsed_ordering, np.asarray(self._lengths)
        return listed_part(self, ep, parts, ordering, lengths, order_rng(self.options, ep))

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        """The listed slots' chunks, cut at once."""
        return self.listed_chunk_cut(ep, parts, batcher)


def order_rng(options: PlanOptions, ep: EpochIndex) -> np.random.Generator:
    """The draws of sub-epoch ``ep``'s ``sort_bin_shuffle`` order of a mix's slots, keyed by the
    seed (``fixed_random_seed``: that seed), the full epoch after ``:K`` grouping and the part."""
    fixed = options.fixed_random_seed
    head = (options.seed,) if fixed is None else (fixed, PURPOSE_FIXED_ORDER)
    seed_epoch = 0 if fixed is not None else options.parsed_ordering.seed_epoch(ep.full_epoch)
    return rng_for(*head, PURPOSE_INDEXED_ORDER, seed_epoch, ep.part)


def sharded_mix(
    seed: int, mix: Mapping[str, float | Fraction | str], corpora: Corpora, corpus: AdmittedCorpus
) -> MixKind:
    """The mix of a sharded indexed plan: ``SortBinsMix`` for ``sort_bin_shuffle[_x2]``
    (chunked: ``ChunkedSortBinsMix``), ``OneBucketShardMix`` for ``random``, ``default`` and
    ``reverse`` unchunked (chunked: ``ChunkedRuleMix``) and ``ValueShardMix`` for ``sorted``,
    ``sorted_reverse`` unchunked (chunked: ``ChunkedValueMix``; their filtered sub-epochs kept
    by a rule), else
    ``shard_mix``'s."""
    options = corpus.options
    if options.parsed_ordering.kind in ONE_BUCKET and corpus.units is None:
        streams = (seed, mix, corpora, corpus.index, corpus.order_by, corpus.admits)
        return OneBucketShardMix(*streams, mix_filter(corpus))
    if options.parsed_ordering.kind in ONE_BUCKET:  # chunked: the filter by the rule too
        return shard_mix(seed, mix, corpora, corpus, ChunkedRuleMix)
    sorted_kind = options.parsed_ordering.kind in ("sorted", "sorted_reverse")
    if sorted_kind and corpus.units is None:  # one bucket per value: the filter from counts
        streams = (seed, mix, corpora, corpus.index, corpus.order_by, corpus.admits)
        return ValueShardMix(*streams, mix_filter(corpus))
    if sorted_kind:  # chunked: the same index, the filter from its counts too
        return shard_mix(seed, mix, corpora, corpus, ChunkedValueMix)
    if options.parsed_ordering.kind not in SORT_BIN_KINDS:
        return shard_mix(seed, mix, corpora, corpus)
    # the sorted index (chunked: by length, the length classes) and what it sorts by; with a
    # source's own sort key that key's index (``AdmittedCorpus.order_index``)
    streams = (seed, mix, corpora, corpus.order_index(), corpus.order_by, corpus.admits)
    if corpus.units is None:
        return SortBinsMix(options, corpus.length_key, *streams, mix_filter(corpus))
    chunks = MixChunks(corpus.fixed_chunking(), corpus.units.stride, options.parsed_ordering)
    return ChunkedSortBinsMix(options, chunks, *streams, mix_filter(corpus))
