"""The node's bucket index is built by the admitted corpus alone (``AdmittedCorpus``,
``node_bucket_index``), not by a planner, and a planner given it plans what a planner that builds
its own plans (hypothesis, pure numpy): every ordering kind, ``files``, chunking, length filters,
``fixed_random_subset``, sub-epochs. What the node refuses, the planner refuses with the same
words.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.corpus import AdmittedCorpus
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import node_bucket_index


@st.composite
def inputs(draw: st.DrawFn) -> PlanInputs:
    n = draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, draw(st.sampled_from([8, 60, 140])) + 1, size=n).astype(np.int32)
    ordering = draw(st.sampled_from(["laplace", "laplace:.3", "buckets:3", "sorted", "default"]))
    free = ordering.startswith(("laplace", "buckets"))  # the fixed orders: shard alone
    chunked = free and draw(st.booleans())
    fixed_free = ["files"] if free else []
    options = {
        "ordering": ordering,
        "max_frames": draw(st.sampled_from([150, 400])),
        "max_seqs": draw(st.sampled_from([None, 6])),
        "max_seq_length": draw(st.sampled_from([None, 100])),
        "min_seq_length": draw(st.sampled_from([0, 3])),
        "partition_epoch": draw(st.integers(1, 2)),
        "distribution": draw(st.sampled_from(["shard", "random_seed_offset", *fixed_free])),
        "chunking": "30:20" if chunked else None,
        "seed": draw(st.integers(0, 3)),
        "planning": "indexed",
    }
    if free and options["distribution"] != "files":  # the subset re-orders the corpus
        options["fixed_random_subset"] = draw(st.sampled_from([None, 0.7]))
    files = None
    if options["distribution"] == "files":
        cuts = rng.integers(0, n + 1, draw(st.integers(3, 12)))
        files = np.unique(np.concatenate([[0, n], cuts])).astype(np.int64)
    return PlanInputs.of({"data": lengths}, PlanOptions(**options), files=files)


def _refusal(build: object) -> str | None:
    try:
        build()  # type: ignore[operator]
    except (OptionError, SequenceTooLongError) as e:  # bad options; a sequence fits no batch
        return f"{type(e).__name__}: {e}"
    return None


# 40 examples (was 80) draw every ordering, distribution, chunking and filter the 80 drew
@settings(max_examples=40, deadline=None)
@given(inputs())
def test_the_node_index_is_the_planners_and_plans_alike(i: PlanInputs) -> None:
    """``node_bucket_index`` (no planner built) gives the planner's own index, column for
    column; a planner given it (as a node maps it, ``from_columns``) has the same admission and
    fingerprint and the same shares on 1 and 3 ranks, epochs 1 and 2."""
    from dataclasses import replace

    refused = _refusal(lambda: IndexedPlanner(i))
    event(
        "refused"
        if refused
        else f"planned: {i.options.distribution}, chunked: {i.options.chunking is not None}"
    )
    if refused is not None:  # refused by the corpus: the node refuses it with the same words
        assert _refusal(lambda: node_bucket_index(i)) == refused
        return
    own = IndexedPlanner(i)
    index = node_bucket_index(i)
    want, got = own.index.columns(), index.columns()
    assert sorted(want) == sorted(got)
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]), name)
    mapped = IndexedPlanner(replace(i, index=BucketIndex.from_columns(got)))
    assert mapped.fingerprint("src") == own.fingerprint("src")
    assert mapped.admission.filtered == own.admission.filtered
    assert mapped.admission.filtered_examples == own.admission.filtered_examples
    assert mapped.admission.admitted.tolist() == own.admission.admitted.tolist()
    for world in (1, 3):
        try:
            own.check_world(world)
        except OptionError:  # files: fewer files than ranks, refused alike
            with pytest.raises(OptionError):
                mapped.check_world(world)
            continue
        for epoch in (1, 2):
            a, b = own.global_plan(epoch, world), mapped.global_plan(epoch, world)
            assert a.steps == b.steps
            for rank in range(world):
                x, y = a.rank_share(rank), b.rank_share(rank)
                np.testing.assert_array_equal(x.seqs, y.seqs)
                np.testing.assert_array_equal(x.bounds, y.bounds)


def test_the_corpus_builds_no_planner_and_counts_what_it_filters() -> None:
    """The corpus alone: its admission counts each reason, its index holds the admitted."""
    lengths = np.array([5, 300, 8, 2, 7, 1, 0])
    options = PlanOptions(max_frames=50, max_seq_length=100, planning="indexed")
    corpus = AdmittedCorpus(PlanInputs.of({"data": lengths}, options))
    assert corpus.admission.filtered_total == 1
    assert corpus.num_admitted == int(corpus.index.counts.sum()) == 6
    assert sorted(np.asarray(corpus.index.members).tolist()) == [0, 2, 3, 4, 5, 6]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 90),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 40, {"data": 40, "x": 30}]),
    st.sampled_from([0, 5, {"x": 4}]),
    st.booleans(),
    st.sampled_from([1, 7, 64]),
)
def test_admit_counts_are_admit_masks_counts_a_block_at_a_time(
    n: int, seed: int, longest: object, shortest: object, excluding: bool, block: int
) -> None:
    """``admit_counts`` (what a rank planning from a node's index counts, no mask of ``n``)
    gives ``admit_mask``'s counts and examples, in its order, whatever the block size: per-key
    limits and ``excluded`` too (each sequence counted under its first reason)."""
    from unittest import mock

    from seqloader.plan import epochs

    rng = np.random.default_rng(seed)
    lengths = {k: rng.integers(0, 50, size=n) for k in ("data", "x")}
    excluded = {"listed": rng.random(n) < 0.2} if excluding else None
    options = PlanOptions(max_seq_length=longest, min_seq_length=shortest)
    mask, want, examples = epochs.admit_mask(lengths, "data", options, excluded)
    with mock.patch.object(epochs, "_COUNT_BLOCK", block):
        got = epochs.admit_counts(lengths, "data", options, excluded)
    assert got == (want, examples)
    assert list(got[0]) == list(want)  # the report lists the reasons in the same order
    kept = n if mask is None else int(mask.sum())
    assert n - sum(got[0].values()) == kept


_FILTERED_SETS = [
    {},
    {"ordering": "laplace:.10"},
    {"ordering": "buckets:3", "partition_epoch": 2},
    {"ordering": "random"},
    {"ordering": "sorted"},
    {"ordering": "sort_bin_shuffle"},
    {"ordering": "reverse"},
    {"distribution": "random_seed_offset"},
    {"ordering": "random", "epoch_wise_filter": {(1, 1): {"max_mean_len": 100}}},
    {"batch_cost": "packed"},
    # over files and with a mix: a rank reads its own files' (a mix's pieces') admission
    {"ordering": "laplace:.10", "distribution": "files"},
    {"ordering": "buckets:3", "distribution": "files", "partition_epoch": 2},
    {"ordering": "laplace:.10", "distribution": "files", "mix": {"a": 0.5, "b": 2}},
    {"ordering": "buckets:3", "mix": {"a": 0.5, "b": 2}},
]


@pytest.mark.parametrize(
    "extra", _FILTERED_SETS, ids=lambda e: ",".join(map(str, e.values())) or "default"
)
def test_a_filtered_rank_plans_from_the_nodes_index_without_the_mask(
    extra: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank given the node's index (``max_seq_length`` / ``min_seq_length``) counts what
    was filtered without the admission mask of every sequence (``admit_mask``, O(n) per rank:
    a spy sees no call while it constructs, plans every rank of two epochs and reports the
    counts), plans what a planner building its own index plans, and counts alike; the mask is
    made once, where per-sequence admission is read (``admission.admitted``). Over files and
    with a mix a rank reads the admission of its own files' (pieces') sequences alone
    (``AdmittedCorpus.admits``)."""
    from seqloader.plan.indexed import corpus as corpus_module

    rng = np.random.default_rng(7)
    lengths = {"data": rng.integers(1, 300, size=3000).astype(np.int32)}
    options = PlanOptions(
        max_frames=3000,
        max_seqs=40,
        max_seq_length=250,
        min_seq_length=10,
        **{"planning": "indexed", **extra},
    )
    files = np.arange(0, 3001, 100) if options.distribution == "files" else None
    corpora = Corpora(("a", "b"), np.array([0, 1200, 3000])) if options.mix else None
    layout = {"files": files, "corpora": corpora}
    own = IndexedPlanner(lengths, options, **layout)
    index = BucketIndex.from_columns(node_bucket_index(lengths, options, **layout).columns())
    calls: list[int] = []
    full = corpus_module.admit_mask
    monkeypatch.setattr(corpus_module, "admit_mask", lambda *a: (calls.append(1), full(*a))[1])
    mapped = IndexedPlanner(lengths, options, index=index, **layout)
    for epoch in (1, 2):
        a, b = own.global_plan(epoch, 3), mapped.global_plan(epoch, 3)
        for rank in range(3):
            x, y = a.rank_share(rank), b.rank_share(rank)
            np.testing.assert_array_equal(x.seqs, y.seqs)
            np.testing.assert_array_equal(x.bounds, y.bounds)
        assert mapped.filtered(epoch) == own.filtered(epoch)
    assert calls == []
    assert mapped.admission.filtered == own.admission.filtered
    assert mapped.admission.filtered_examples == own.admission.filtered_examples
    assert sum(own.admission.filtered.values()) > 0
    assert calls == []
    assert mapped.admission.admitted.tolist() == own.admission.admitted.tolist()
    assert mapped.admitted_mask is not None
    assert calls == [1]
