"""Unmixed named corpora under indexed planning: the report's planned sequences per
corpus come, under ``shard``, from the admitted mask (one sub-epoch per epoch) or from the
sub-epoch's slices drawn in chunks, under ``files`` from the files' admitted counts, never from the
sub-epoch's whole order; equal to counting that order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader.plan.indexed.planner as indexed
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 300),
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from([None, 150]),
    st.sampled_from(["laplace", "buckets:3"]),
    st.booleans(),
)
def test_corpus_counts_equal_counting_the_order(
    n, seed, n_corpora, partition_epoch, max_seq_length, ordering, small_chunks
) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 200, size=n)
    cuts = np.sort(rng.integers(0, n + 1, size=n_corpora - 1))
    corpora = Corpora(tuple(f"c{i}" for i in range(n_corpora)), np.r_[0, cuts, n])
    options = PlanOptions(
        ordering=ordering,
        max_frames=400,
        max_seq_length=max_seq_length,
        partition_epoch=partition_epoch,
        planning="indexed",
        seed=seed % 7,
    )
    planner = IndexedPlanner({"data": lengths}, options, corpora=corpora)
    chunk = indexed._CHUNK
    try:
        if small_chunks:
            indexed._CHUNK = 3
        for epoch in range(1, partition_epoch + 2):
            want = corpora.counts(planner.sub_epoch_order(epoch))
            got = [slots for _, slots, _ in planner.corpus_plan(epoch)]
            assert got == want.tolist()
    finally:
        indexed._CHUNK = chunk


def test_one_sub_epoch_counts_without_drawing(monkeypatch) -> None:
    lengths = np.arange(1, 101)
    corpora = Corpora(("a", "b"), np.array([0, 30, 100]))
    options = PlanOptions(ordering="laplace", max_frames=400, max_seq_length=80, planning="indexed")
    planner = IndexedPlanner({"data": lengths}, options, corpora=corpora)

    def refuse(*args, **kwargs):
        raise AssertionError("the sub-epoch was drawn")

    monkeypatch.setattr(planner, "draw", refuse)
    monkeypatch.setattr(planner, "sub_epoch_order", refuse)
    assert [(name, slots) for name, slots, _ in planner.corpus_plan(1)] == [("a", 30), ("b", 50)]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 300),
    st.integers(0, 2**32 - 1),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from([None, 150]),
    st.sampled_from(["laplace", "buckets:3"]),
    st.integers(1, 40),
)
def test_files_corpus_counts_equal_counting_the_drawn_order(
    n, seed, n_corpora, partition_epoch, max_seq_length, ordering, n_files
) -> None:
    """``distribution="files"``: per-file admitted counts summed per corpus (files across a corpus
    bound counted over the mask) equal counting the sub-epoch's drawn order; nothing drawn."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 200, size=n)
    cuts = np.sort(rng.integers(0, n + 1, size=n_corpora - 1))
    corpora = Corpora(tuple(f"c{i}" for i in range(n_corpora)), np.r_[0, cuts, n])
    files = np.unique(np.r_[0, rng.integers(0, n + 1, size=n_files), n]).astype(np.int64)
    if len(files) < 2:
        files = np.array([0, 0], dtype=np.int64)
    options = PlanOptions(
        ordering=ordering,
        max_frames=400,
        max_seq_length=max_seq_length,
        partition_epoch=partition_epoch,
        distribution="files",
        planning="indexed",
        seed=seed % 7,
    )
    planner = IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)
    for epoch in range(1, partition_epoch + 2):
        try:
            want = corpora.counts(planner.sub_epoch_order(epoch))
        except OptionError:  # fewer files with sequences than sub-epochs: refused
            return
        members = planner.distribution.members_of
        planner.distribution.members_of = _refused  # type: ignore[method-assign]
        try:
            got = [slots for _, slots, _ in planner.corpus_plan(epoch)]
        finally:
            planner.distribution.members_of = members  # type: ignore[method-assign]
        assert got == want.tolist()


def _refused(*args, **kwargs):
    raise AssertionError("members drawn for the corpus counts")
