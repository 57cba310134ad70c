"""Per-sub-epoch file pools (``seqloader.plan.pools``, RETURNN's ``DistributeFilesDataset``) as
properties: the size bins and the file shuffle are RETURNN's own (its
``_distribute_evenly_by_size`` and ``RandomState.shuffle`` of the file list, called here), and a
full epoch of pools plans every admitted sequence exactly once, with equal steps on every rank,
deterministically, whatever the world size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.options import PlanOptions
from seqloader.plan.pools import FilePools, distribute_evenly_by_size

distrib_files = pytest.importorskip("returnn.datasets.distrib_files")


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 500), min_size=1, max_size=30),
    bins=st.integers(1, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_bins_and_shuffle_are_returnns(sizes: list[int], bins: int, seed: int) -> None:
    bins = min(bins, len(sizes))
    files = [f"f{i}.hdf" for i in range(len(sizes))]
    shuffled = list(files)
    np.random.RandomState(seed).shuffle(shuffled)  # RETURNN's file shuffle
    expected = distrib_files.DistributeFilesDataset._distribute_evenly_by_size(
        num_bins=bins, file_sizes=dict(zip(files, sizes)), files_order=shuffled
    )
    pools = FilePools(np.arange(len(sizes) + 1), np.array(sizes))
    got = pools.bins(bins, np.random.RandomState(seed))
    assert [[files[i] for i in b] for b in got] == expected
    order = np.arange(len(sizes))
    kept = distribute_evenly_by_size(np.array(sizes), bins, order)  # the given order
    assert [b.tolist() for b in kept] == [
        [int(f[1:-4]) for f in b]
        for b in distrib_files.DistributeFilesDataset._distribute_evenly_by_size(
            num_bins=bins, file_sizes=dict(zip(files, sizes)), files_order=files
        )
    ]


@st.composite
def pooled(draw):
    counts = draw(st.lists(st.integers(0, 12), min_size=2, max_size=14))
    parts = draw(st.integers(1, len(counts)))
    n = sum(counts)
    lengths = np.array(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)), dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    sizes = np.array([c * 100 + 7 for c in counts])
    pools = FilePools(bounds, sizes, shuffle=draw(st.booleans()))
    ordering = draw(st.sampled_from(["random", "laplace:.3", "sorted", "default"]))
    return lengths, pools, parts, ordering, draw(st.integers(0, 1000))


@settings(max_examples=120, deadline=None)
@given(case=pooled(), world_size=st.integers(1, 4), full_epoch=st.integers(0, 3))
def test_a_full_epoch_of_pools_is_every_sequence_once(case, world_size: int, full_epoch: int):
    lengths, pools, parts, ordering, seed = case
    options = PlanOptions(ordering=ordering, max_frames=120, max_seqs=4, max_seq_length=50,
                          partition_epoch=parts, seed=seed, seeding="returnn")  # fmt: skip
    epochs = range(full_epoch * parts + 1, full_epoch * parts + parts + 1)
    checked = check_plan_contracts(
        lambda: Planner({"data": lengths}, options, pools=pools), [world_size], [], epochs
    )
    planner = Planner({"data": lengths}, options, pools=pools)
    seen = []
    for epoch in epochs:
        b = checked.batches[epoch, world_size]
        np.testing.assert_array_equal(np.sort(b.seqs[b.real]), np.sort(planner.pool_order(epoch)))
        seen.append(b.seqs[b.real])
    every = np.concatenate(seen)  # every admitted sequence once
    np.testing.assert_array_equal(np.sort(every), np.flatnonzero(lengths <= 50))


def test_pools_need_returnn_seeding_and_enough_files() -> None:
    lengths = {"data": np.arange(1, 7)}
    pools = FilePools(np.array([0, 2, 4, 6]), np.array([5, 5, 5]))
    with pytest.raises(OptionError, match=r"file pools .*seeding='seqloader'.*seeding='returnn'"):
        Planner(lengths, PlanOptions(ordering="random"), pools=pools)
    with pytest.raises(OptionError, match=r"3 files for partition_epoch 4.*lower partition_epoch"):
        Planner(lengths, PlanOptions(partition_epoch=4, seeding="returnn"), pools=pools)
    sharded = FilePools(pools.bounds, pools.sizes, shard_files=True)
    planner = Planner(lengths, PlanOptions(seeding="returnn"), pools=sharded)
    planner.global_plan(1, 1)
    planner.global_plan(1, 3)  # a file per rank
    with pytest.raises(OptionError, match=r"3 files for partition_epoch 1 x 4 ranks.*Fix"):
        planner.global_plan(1, 4)
    refused = FilePools(pools.bounds, pools.sizes, shard_files=True, refuse_sharding="why; Fix")
    planner = Planner(lengths, PlanOptions(seeding="returnn"), pools=refused)
    planner.global_plan(1, 1)
    with pytest.raises(OptionError, match=r"why; Fix"):
        planner.global_plan(1, 2)


@settings(max_examples=120, deadline=None)
@given(case=pooled(), world_size=st.integers(2, 4), full_epoch=st.integers(0, 3))
def test_sharded_pools_each_rank_its_files_shortest_rank_ends(case, world_size, full_epoch):
    """distrib_shard_files: rank r batches its own pool (RETURNN's bins r*P.. of one file order);
    every rank keeps the shortest rank's batch count; over a full epoch each sequence is used
    at most once, and the admitted ones not used are exactly the plans' counted drops."""
    lengths, pools, parts, ordering, seed = case
    pools = FilePools(pools.bounds, pools.sizes, shuffle=pools.shuffle, shard_files=True)
    if pools.num_files < parts * world_size:
        return
    options = PlanOptions(ordering=ordering, max_frames=120, max_seqs=4, max_seq_length=50,
                          partition_epoch=parts, seed=seed, seeding="returnn")  # fmt: skip
    # each rank a prefix of its own pool's order, at most once over the full epoch, the
    # admitted ones not used exactly the plans' counted drops, deterministic (the contracts)
    epochs = range(full_epoch * parts + 1, full_epoch * parts + parts + 1)
    checked = check_plan_contracts(
        lambda: Planner({"data": lengths}, options, pools=pools), [world_size], [], epochs
    )
    planner = Planner({"data": lengths}, options, pools=pools)
    for epoch in epochs:
        plan = checked.plans[epoch, world_size]
        own = [
            planner.batches(planner.pool_order(epoch, 0, world_size, r)) for r in range(world_size)
        ]
        assert plan.steps == min(len(b) for b in own)  # the shortest rank ends the sub-epoch
        for r in range(world_size):
            np.testing.assert_array_equal(plan.rank_share(r).seqs, own[r].first(plan.steps).seqs)


@settings(max_examples=60, deadline=None)
@given(
    case=pooled(),
    worlds=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    cuts=st.lists(st.floats(0, 1), min_size=3, max_size=3),
    part=st.integers(0, 5),
)
def test_elastic_resume_over_a_pool_is_exactly_once(case, worlds, cuts, part) -> None:
    """A sub-epoch's pool resumed on other world sizes (the resume harness's chain, positions
    through JSON): every sequence of the pool's order exactly once, equal steps per segment."""
    lengths, pools, parts, ordering, seed = case
    options = PlanOptions(ordering=ordering, max_frames=120, max_seqs=4, partition_epoch=parts,
                          seed=seed, seeding="returnn")  # fmt: skip
    epoch = 1 + part % parts
    checked = check_plan_contracts(
        lambda: Planner({"data": lengths}, options, pools=pools),
        worlds,
        cuts[: len(worlds) - 1],
        [epoch],
    )
    planner = Planner({"data": lengths}, options, pools=pools)
    consumed = checked.consumed[epoch].seqs
    assert sorted(consumed.tolist()) == sorted(planner.pool_order(epoch).tolist())
