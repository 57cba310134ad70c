"""``epoch_wise_filter`` with a ``mix`` over one bucket (``random`` in blocks, ``default`` and
``reverse`` masked by the kept set's rule; ``seqloader.plan.indexed.mix_random_filter``;
hypothesis, pure numpy): with blocks of a few slots, the kept set, the report's counts, the
batches and every batch's slots are those of listing the sub-epoch's order and filtering it as
one bucket (``mix_filter.mix_kept``, ``MixKept.keeps``, ``listed_cuts``), for one or two filters, many
equal lengths or few. The plans' contracts and golden digests:
``test_plan_indexed_mix_filter.py``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mix_filter_cases import every_listed, filtered_mix
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.fixed import cut_batcher
from seqloader.plan.indexed.mix_cuts import listed_cuts, listed_part
from seqloader.plan.indexed.mix_filter import mix_kept
from seqloader.plan.indexed.mix_kind import kept_slots
from seqloader.plan.indexed.mix_random_filter import OneBucketShardMix, kept_cut, order_kept
from seqloader.plan.options import Ordering


def every_slot(table, draw) -> tuple[np.ndarray, np.ndarray]:
    return every_listed(draw, np.diff(np.asarray(table.bounds)))


@settings(max_examples=25, deadline=None)
@given(
    st.integers(10, 160),
    st.sampled_from([4, 40, 3000]),
    st.sampled_from([[9.5], [30, 12], [2000.0]]),
    st.integers(1, 2),
    st.integers(1, 9),
    st.sampled_from([None, 3]),
    st.sampled_from(["random", "default", "reverse"]),
    st.integers(0, 2**32 - 1),
)
def test_the_blocked_filter_plans_what_listing_the_order_plans(
    n: int, top: int, means: list[float], parts: int, block: int, max_seqs: int | None,
    kind: str, seed: int,
) -> None:  # fmt: skip
    rng, lengths, options, planner = filtered_mix(n, top, means, parts, max_seqs, kind, seed)
    mix = planner.mix
    assert isinstance(mix, OneBucketShardMix)
    batcher, data = cut_batcher(planner._limits), {"data": lengths}
    for epoch in range(1, 2 * parts + 1):
        ep = EpochIndex(epoch, parts)
        draw = mix.draw(ep.full_epoch, ep.part, parts)
        size = int(draw.cum[:, -1].sum())
        spec = options.epoch_wise_filter
        ours = order_kept(spec, ep, draw, lengths, block)  # type: ignore[arg-type]
        ref = mix_kept(spec, ep, np.array([size]), draw, lengths)  # type: ignore[arg-type]
        assert ours is not None and ref is not None and ours.kept_set is not None
        assert ours.counts.tolist() == ref.counts.tolist() and ours.reasons == ref.reasons
        gone = [np.sort(a.astype(np.int64) * n + s) for s, a in (ours.left_out(), ref.left_out())]
        assert np.array_equal(*gone)
        left = ours.kept_set.corpus_left(mix.corpora)
        assert left.tolist() == np.bincount(mix.corpora.corpus_of(ref.left_out()[0]),
                                            minlength=2).tolist()  # fmt: skip
        if kind == "random":
            table, cut_draw = kept_cut(ours.kept_set, batcher, data)
            listed = draw.bucket_slots(0, np.arange(size, dtype=np.int64))
        else:  # the planner's cut: the listed order masked by the rule
            mix._kept = (epoch, ours)  # the kept set of this block size
            table, cut_draw = mix.listed_cut(ep, parts, Ordering(kind), batcher, data)
            listed = listed_part(mix, ep, parts, Ordering(kind), lengths)
        ref_table, ref_draw = listed_cuts(*kept_slots(ref, *listed), batcher, data)
        assert np.array_equal(table.bounds, ref_table.bounds)
        for a, b in zip(every_slot(table, cut_draw), every_slot(ref_table, ref_draw), strict=True):
            assert np.array_equal(a, b)
        some = rng.permutation(table.num_batches)[:3]  # a rank's few batches, asked alone
        sizes = np.diff(table.bounds)[some]
        g, pos = np.repeat(some, sizes), np.concatenate([np.arange(s) for s in sizes] or [[]])
        pos = pos.astype(np.int64)
        assert np.array_equal(cut_draw.slots(g, pos)[0], ref_draw.slots(g, pos)[0])
