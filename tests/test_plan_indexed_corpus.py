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


@settings(max_examples=80, deadline=None)
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
