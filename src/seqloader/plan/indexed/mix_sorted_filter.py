"""``epoch_wise_filter`` with a ``mix`` and ``sorted``, ``sorted_reverse`` or
``sort_bin_shuffle[_x2]`` (unchunked, ``shard`` or ``random_seed_offset``): the kept set as
``mix_random_filter``'s rule, from counts.

The meaning is ``mix_filter``'s (the sub-epoch's slots filtered as one set, the shortest by
(length, sequence, corpus epoch) kept). These orders' index has one bucket per value of what
they sort by (the filter's lengths too), so the sub-epoch's slots per distinct length are its
slots per bucket (``MixDraw.cum``: no listing) and each ``max_mean_len``'s binary search runs on
those counts (``rule_of``, shared with ``random``); only the bucket a filter cuts inside is
listed, for its (sequence, corpus epoch) key. The orders list the sub-epoch's slots anyway (to
sort them); the listing is masked by the rule (``OrderKept.keeps``). Listing the
buckets for their length sums, the cut bucket's lexsort, the left-out slots and matching them
against the listed order (``mix_kept``, ``MixKept.keeps``) are gone. The plans are those of listing
(the same kept set, order and cuts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.filter import FilteredDraw
from seqloader.plan.indexed.fixed import bucket_values
from seqloader.plan.indexed.keep_rule import rule_of
from seqloader.plan.indexed.mix import IndexedMix
from seqloader.plan.indexed.mix_chunks_rule import ChunkedRuleMix
from seqloader.plan.indexed.mix_filter import MixKept
from seqloader.plan.indexed.mix_kind import Cut, ShardMix
from seqloader.plan.indexed.mix_random_filter import KeptSet, OneBucketShardMix, made_by_rule
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import USES_DTYPE, Corpora


@dataclass
class BucketKeptSet(KeptSet):
    """``KeptSet`` of a mix over one bucket per value (``values``): the rule from the
    sub-epoch's slots per bucket; ``cut``: the bucket a filter cut inside (None: none)."""

    values: np.ndarray = field(kw_only=True)
    cut: int | None = field(init=False)

    def __post_init__(self) -> None:
        per = self.draw.cum[:, -1]
        full = np.flatnonzero(per)

        def key_at(g: int, inside: int) -> tuple[int, int]:
            seqs, uses = self._bucket(int(full[g]), placed=True)
            span = int(uses.max(initial=0)) + 1
            keys = seqs * span + uses.astype(np.int64)
            return int(np.partition(keys, inside - 1)[inside - 1]), span

        self.rule, self.dropped, g = rule_of(self.values[full], per[full], self.means, key_at)
        self.cut = None if g is None else int(full[g])

    def _bucket(self, b: int, placed: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Bucket ``b``'s slots: as a set (``placed``) or in the draw's order."""
        pos = np.arange(int(self.draw.cum[b, -1]), dtype=np.int64)
        return self.draw.placed_slots(b, pos) if placed else self.draw.bucket_slots(b, pos)

    def kept_lists(self) -> tuple[np.ndarray, Draw]:
        """(kept slots per bucket, their draw: the cut bucket's kept ones listed in order)."""
        counts = self.draw.cum[:, -1].copy()
        if self.cut is None:
            return counts, self.draw
        seqs, uses = self._bucket(self.cut)
        keep = self.keeps(seqs, uses)
        counts[self.cut], counts[self.cut + 1 :] = int(keep.sum()), 0
        return counts, FilteredDraw(self.draw, {self.cut: seqs[keep]}, {self.cut: uses[keep]})

    def corpus_left(self, corpora: Corpora) -> np.ndarray:
        """Slots per corpus the filters left out: the buckets above the cut from the counts,
        the cut one listed."""
        if self.cut is None:
            return np.zeros(len(corpora.names), dtype=np.int64)
        above = np.diff(self.draw.cum[self.cut + 1 :], axis=1).sum(axis=0).astype(np.int64)
        seqs, uses = self._bucket(self.cut, placed=True)
        return above + corpora.counts(seqs[~self.keeps(seqs, uses)])

    def left_out(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot left out (the cut bucket and those above,
        listed: for checks)."""
        seqs_out, uses_out = [np.zeros(0, np.int64)], [np.zeros(0, USES_DTYPE)]
        per = self.draw.cum[:, -1]
        for b in [] if self.cut is None else range(self.cut, len(per)):
            if per[b]:
                seqs, uses = self._bucket(b, placed=True)
                gone = ~self.keeps(seqs, uses)
                seqs_out.append(seqs[gone])
                uses_out.append(uses[gone].astype(USES_DTYPE))
        return np.concatenate(seqs_out), np.concatenate(uses_out)


class ValueShardMix(OneBucketShardMix):
    """``ShardMix`` over one bucket per value (``sorted``, ``sorted_reverse``; ``SortBinsMix``):
    a filtered sub-epoch's kept set by the rule from the buckets' counts (``value_kept``), its
    listed order masked by it."""

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        return value_kept(self, ep, parts)

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        return ShardMix.random_cut(self, ep, parts, batcher, lengths)


class ChunkedValueMix(ChunkedRuleMix):
    """Chunked ``sorted``, ``sorted_reverse`` (``ChunkedSortBinsMix``: ``sort_bin_shuffle``):
    the mix streams over one bucket per value of what the order sorts by (the unchunked plan's
    index), so a filtered sub-epoch keeps by the rule from the buckets' counts as unchunked
    (``value_kept``), and the listing the chunked cut makes anyway is masked by it
    (``ChunkedRuleMix.listed_slots``): one listing, none matched."""

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        return value_kept(self, ep, parts)


def value_kept(mix: IndexedMix, ep: EpochIndex, parts: int) -> MixKept | None:
    """``IndexedMix.kept`` of a mix over one bucket per value: the rule from the buckets'
    counts (``BucketKeptSet``, kept for the last sub-epoch; an index that is not one bucket per
    value is refused when the planner takes it, ``AdmittedCorpus``)."""
    return mix.kept_once(ep, partial(_made_by_value, mix, ep, parts))


def _made_by_value(mix: IndexedMix, ep: EpochIndex, parts: int) -> MixKept | None:
    """``value_kept``'s kept set, made (not kept)."""
    values = bucket_values(mix.index, np.asarray(mix._lengths))
    assert values is not None, "the index check lets only one bucket per value through"
    return made_by_rule(mix, ep, parts, partial(BucketKeptSet, values=values))
