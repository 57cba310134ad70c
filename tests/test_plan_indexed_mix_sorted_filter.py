"""``epoch_wise_filter`` with a ``mix`` and ``sorted``, ``sorted_reverse`` or
``sort_bin_shuffle`` (one bucket per value, chunked too;
``seqloader.plan.indexed.mix_sorted_filter``; hypothesis, pure numpy): the kept set found from the buckets' counts, the report's counts, the
kept lists and every batch's slots are those of listing the sub-epoch and filtering it
(``mix_filter.mix_kept``, ``MixKept.keeps``, ``listed_cuts``), for one or two filters, many equal
lengths or few. The plans' contracts and golden digests: ``test_plan_indexed_mix_filter.py``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mix_filter_cases import every_listed, filtered_mix
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.fixed import cut_batcher
from seqloader.plan.indexed.mix_chunks_rule import ChunkedRuleMix
from seqloader.plan.indexed.mix_cuts import listed_cuts, listed_part
from seqloader.plan.indexed.mix_filter import mix_kept
from seqloader.plan.indexed.mix_kind import kept_slots
from seqloader.plan.indexed.mix_random_filter import OrderKept
from seqloader.plan.indexed.mix_sorted_filter import BucketKeptSet, ValueShardMix
from seqloader.plan.indexed.sort_bins_mix import order_rng


@settings(max_examples=20, deadline=None)
@given(
    st.integers(10, 160),
    st.sampled_from([4, 40, 3000]),
    st.sampled_from([[9.5], [30, 12], [2000.0], [2.5, 2.2]]),
    st.integers(1, 2),
    st.sampled_from([None, 3]),
    st.sampled_from(["sorted", "sorted_reverse", "sort_bin_shuffle:3", "sort_bin_shuffle_x2:.5"]),
    st.integers(0, 2**32 - 1),
)
def test_the_counted_filter_plans_what_listing_plans(
    n: int, top: int, means: list[float], parts: int, max_seqs: int | None, kind: str, seed: int
) -> None:
    _, lengths, options, planner = filtered_mix(n, top, means, parts, max_seqs, kind, seed)
    mix = planner.mix
    assert isinstance(mix, ValueShardMix)
    batcher, data = cut_batcher(planner._limits), {"data": lengths}
    ordering = options.parsed_ordering
    for epoch in range(1, 2 * parts + 1):
        ep = EpochIndex(epoch, parts)
        draw = mix.draw(ep.full_epoch, ep.part, parts)
        full = draw.cum[:, -1]
        ours = mix.kept(ep, parts)
        ref = mix_kept(options.epoch_wise_filter, ep, full, draw, lengths)  # type: ignore[arg-type]
        assert isinstance(ours, OrderKept) and isinstance(ours.kept_set, BucketKeptSet)
        assert ref is not None
        assert ours.counts.tolist() == ref.counts.tolist() and ours.reasons == ref.reasons
        assert [a.tolist() for a in every_listed(ours.draw, ours.counts)] == [
            a.tolist() for a in every_listed(ref.draw, ref.counts)
        ]
        gone = [np.sort(a.astype(np.int64) * n + s) for s, a in (ours.left_out(), ref.left_out())]
        assert np.array_equal(*gone)
        left = ours.kept_set.corpus_left(mix.corpora)
        assert left.tolist() == np.bincount(mix.corpora.corpus_of(ref.left_out()[0]),
                                            minlength=2).tolist()  # fmt: skip
        drawn = ordering.kind != "sorted" and ordering.kind != "sorted_reverse"
        table, cut_draw = mix.listed_cut(ep, parts, ordering, batcher, data,
                                         order_rng(options, ep) if drawn else None)  # fmt: skip
        order = listed_part(mix, ep, parts, ordering, lengths,
                            order_rng(options, ep) if drawn else None)  # fmt: skip
        ref_table, ref_draw = listed_cuts(*kept_slots(ref, *order), batcher, data)
        assert np.array_equal(table.bounds, ref_table.bounds)
        assert np.array_equal(cut_draw.seqs, ref_draw.seqs)
        assert np.array_equal(cut_draw.uses, ref_draw.uses)


CHUNKED_KINDS = ["random", "default", "reverse", "sorted", "sorted_reverse", "sort_bin_shuffle:3",
                 "sort_bin_shuffle_x2:.5"]  # fmt: skip


@settings(max_examples=12, deadline=None)
@given(
    st.integers(10, 120),
    st.sampled_from([4, 40]),
    st.sampled_from([[9.5], [30, 12], [2.5, 2.2]]),
    st.integers(1, 2),
    st.sampled_from(CHUNKED_KINDS),
    st.integers(0, 2**32 - 1),
)
def test_a_chunked_mix_keeps_what_listing_keeps(
    n: int, top: int, means: list[float], parts: int, kind: str, seed: int
) -> None:
    """Chunked ``random``/``default``/``reverse`` (``mix_chunks_rule``) and ``sorted``,
    ``sorted_reverse``, ``sort_bin_shuffle[_x2]`` (``ChunkedValueMix``: one bucket per value,
    the rule from its counts): the kept slots, in order, the report's counts and left-out
    slots are the listing path's."""
    _, lengths, options, planner = filtered_mix(n, top, means, parts, None, kind, seed,
                                                chunking="6:3")  # fmt: skip
    mix = planner.mix
    assert isinstance(mix, ChunkedRuleMix)
    for epoch in range(1, 2 * parts + 1):
        ep = EpochIndex(epoch, parts)
        draw = mix.draw(ep.full_epoch, ep.part, parts)
        ours = mix.kept(ep, parts)
        ref = mix_kept(options.epoch_wise_filter, ep, draw.cum[:, -1], draw, lengths)  # type: ignore[arg-type]
        assert isinstance(ours, OrderKept) and ours.kept_set is not None and ref is not None
        assert ours.counts.tolist() == ref.counts.tolist() and ours.reasons == ref.reasons
        gone = [np.sort(a.astype(np.int64) * n + s) for s, a in (ours.left_out(), ref.left_out())]
        assert np.array_equal(*gone)
        left = ours.kept_set.corpus_left(mix.corpora)
        assert left.tolist() == mix.corpora.counts(ref.left_out()[0]).tolist()
        got = mix.listed_slots(ep, parts)
        want = kept_slots(ref, *mix.ordered_slots(ep, parts))
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
