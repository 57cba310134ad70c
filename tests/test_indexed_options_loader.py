"""``planning="indexed"`` with the admission options (``fixed_random_subset``,
``fixed_random_seed``, ``epoch_wise_filter``, per-key length filters) and ``random_seed_offset`` through the real loader: the
resume harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W' -> W''``) and
real DataLoader workers delivering the batches of the run without them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan.selections import EpochSelection
from seqloader.returnn.view import ReturnnView
from test_resume import check_chain, corpus, loader_factory, mixed_corpora, run_all, run_chain

PLAN = {"planning": "indexed", "max_seqs": 3, "max_frames": 40}
ADMISSION = st.sampled_from(
    [
        {"fixed_random_subset": 0.6, "fixed_random_subset_seed": 3},
        {"fixed_random_seed": 4, "min_seq_length": 2},
        {"epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}, "max_seq_length": 18},
        {"epoch_wise_filter": {(2, 3): {"max_mean_len": 9}}, "fixed_random_subset": 30},
    ]
)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    admission=ADMISSION,
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_resume_chains_with_admission_options(
    n, seed, ordering, uneven, partition_epoch, admission, worlds, cuts
) -> None:
    make = loader_factory(
        corpus(n, seed),
        **PLAN,
        **admission,
        ordering=ordering,
        uneven=uneven,
        partition_epoch=partition_epoch,
    )
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1)


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(0, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    partition_epoch=st.integers(1, 2),
    admission=ADMISSION,
    world=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_random_seed_offset_resumes_batch_for_batch(
    n, seed, ordering, partition_epoch, admission, world, cuts
) -> None:
    """``random_seed_offset``: each rank delivers its own order of the sub-epoch (audited), and a
    chain of saves and loads on the same world size delivers the uninterrupted run's batches
    (with ``epoch_wise_filter`` and sub-epochs too: one filtered set, each rank its own order)."""
    make = loader_factory(
        corpus(n, seed),
        **PLAN,
        **admission,
        ordering=ordering,
        partition_epoch=partition_epoch,
        distribution="random_seed_offset",
        audit=True,
    )
    check_own_orders(make, world, cuts, partition_epoch + 1)


def check_own_orders(make, world: int, cuts: list[int], last: int) -> None:
    """``random_seed_offset`` through loaders: each rank delivers its own order of every
    sub-epoch (chunked: its (sequence, chunk) units), and a chain of saves and loads on the same
    world size, stopped after ``cuts`` steps, delivers the uninterrupted run's batches."""
    reference = run_all(make, world, last)
    stages, _ = run_chain(make, [world] * (len(cuts) + 1), cuts, last)
    assert [r for stage in stages for r in stage] == reference
    planner = make(0, world).planner
    for epoch in range(1, last + 1):
        for r in range(world):
            got = [
                u
                for e, _, ranks in reference
                if e == epoch
                for u, m in zip(ranks[r].seqs, ranks[r].mask)
                if m
            ]
            if planner.chunks is None:
                assert got == planner.rank_order(epoch, r, world).tolist()
                continue
            units = planner.sub_epoch_units(epoch, r)
            assert got == list(zip(units.seqs.tolist(), units.chunks.tolist()))


@settings(max_examples=10, deadline=None)
@given(
    n=st.integers(1, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    distribution=st.sampled_from(["shard", "random_seed_offset"]),
    partition_epoch=st.integers(1, 2),
    worlds=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_epoch_selections_through_the_loader(
    n, seed, ordering, distribution, partition_epoch, worlds, cuts
) -> None:
    """A source's epoch selections (RETURNN's ``subdirs``, here on a ``ReturnnView``) through
    fresh loaders and JSON states: the selected epochs deliver only selected sequences, each
    epoch its planned sequences once (``check_chain``); ``random_seed_offset`` resumes on its
    own world size only."""
    keep = np.random.default_rng(seed).random(n) < 0.6
    source = ReturnnView(corpus(n, seed), selections=(EpochSelection(1, 2, keep, "subdirs=['a']"),))
    make = loader_factory(
        source,
        **PLAN,
        ordering=ordering,
        distribution=distribution,
        partition_epoch=partition_epoch,
    )
    reference = run_all(make, worlds[0], 3)
    if distribution == "random_seed_offset":  # each rank all data: the same batches resumed
        stages, _ = run_chain(make, [worlds[0]] * 3, cuts, 3)
        assert [r for stage in stages for r in stage] == reference
    else:
        check_chain(make, worlds, cuts[: len(worlds) - 1], 3, reference=reference)
    seen = [u for e, _, ranks in reference if e <= 2 for b in ranks
            for u, m in zip(b.seqs, b.mask) if m]  # fmt: skip
    assert keep[np.asarray(seen, dtype=np.int64)].all()


@pytest.mark.slow
def test_same_batches_with_dataloader_workers() -> None:
    """C3: worker processes deliver the batches of the run without workers, resumed too."""
    options = {
        **PLAN,
        "ordering": "laplace:.5",
        "partition_epoch": 2,
        "fixed_random_subset": 40,
        "epoch_wise_filter": {(1, 2): {"max_mean_len": 8}},
    }
    reference = run_all(loader_factory(corpus(47, seed=4), **options), 2, 3)
    make = loader_factory(corpus(47, seed=4), **options, num_workers=2)
    check_chain(make, [2, 2], [4], 3, reference=reference)
    check_chain(make, [2, 1], [5], 3, reference=reference)


# a mix with distribution='random_seed_offset' (tests/test_plan_indexed_mix_per_rank.py plans it)
@settings(max_examples=8, deadline=None)
@given(
    n=st.integers(2, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3", "random", "sorted"]),
    world=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_the_loader_resumes_each_ranks_own_mix(n, seed, ordering, world, cuts) -> None:
    """Through loaders (audit on): a chain of saves and loads on the same world size, stopped
    after ``cuts`` steps, delivers the uninterrupted run's batches, every rank its own order."""
    make = loader_factory(
        mixed_corpora(n, seed), mix={"a": 1.5, "b": 0.5}, distribution="random_seed_offset",
        max_seqs=3, max_frames=40, ordering=ordering, audit=True,
    )  # fmt: skip
    assert make(0, world).planner.options.planning == "indexed"
    reference = run_all(make, world, 2)
    stages, _ = run_chain(make, [world] * 3, cuts, 2)
    assert [r for stage in stages for r in stage] == reference
