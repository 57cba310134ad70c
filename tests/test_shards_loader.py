"""The contracts over shard corpora (``ShardSource``), through ``SeqLoader``: exactly once over
shards x ranks x workers, equal steps, the same batches for any ``num_workers`` (fork and spawn),
exact and elastic resume (2 -> 3 -> 1 ranks), ``distribution="files"`` giving ranks whole shards,
buckets and ``mix=`` over shard corpora. The corpora are index corpora (sequence i's frames hold i)
written as Lhotse Shar numpy features, so every row is checked against the sequence it claims."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record
from shard_corpora import index_shar
from test_resume import check_chain, loader_factory, run_all

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

ROOT = Path(tempfile.mkdtemp(prefix="seqloader-shard-contracts-"))


@cache
def shards(n: int, seed: int = 0, shard_size: int = 5, offset: int = 0) -> sl.ShardSource:
    return index_shar(ROOT, n, seed, shard_size, offset)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 3),
    shard_size=st.integers(1, 7),
    ordering=st.sampled_from(["default", "random", "laplace:.4", "buckets:3"]),
    files=st.booleans(),
    worlds=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 12), min_size=2, max_size=2),
    partition_epoch=st.integers(1, 2),
)
def test_contracts_over_shards(n, seed, shard_size, ordering, files, worlds, cuts, partition_epoch):
    """Random shard corpora, plans, world sizes and resume points: every sequence once per epoch
    on all ranks together, equal steps, and resuming (elastic too) continues the same plan."""
    source = shards(n, seed, shard_size)
    num_shards = len(source.file_layout()) - 1
    options: dict = {"ordering": ordering, "max_seqs": 3, "partition_epoch": partition_epoch}
    if files:
        if ordering.startswith("buckets"):
            options["ordering"] = "laplace:.4"
        assume(num_shards >= partition_epoch * max(worlds))
        options["distribution"] = "files"
    make = loader_factory(source, **options)
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1)


def test_files_distribution_gives_ranks_whole_shards() -> None:
    source = shards(60, 1, 6)  # 10 shards
    layout = source.file_layout()
    world = 3
    for epoch in (1, 2):
        seen, steps = [], set()
        for rank in range(world):
            with sl.SeqLoader(
                source, rank=rank, world_size=world, distribution="files", max_seqs=4
            ) as loader:
                batches = list(loader.epoch(epoch))
            steps.add(len(batches))
            real = [int(i) for b in batches for i, m in zip(b.seq_indices, b.mask) if m]
            own = {int(f) for f in (layout.searchsorted(real, side="right") - 1)}
            seen.append(own)
            for f in own:  # whole shards: all of a shard's sequences go to one rank
                assert set(range(layout[f], layout[f + 1])) <= set(real)
        assert len(steps) == 1
        assert set().union(*seen) == set(range(10)) and sum(map(len, seen)) == 10


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_change_nothing(context) -> None:
    """C3 over shards: DataLoader workers give the main process' batches, tensor bytes included:
    2 forked workers splitting the work on each rank, or one spawned worker on the last rank (it
    gets the source by pickle: the index is mapped again by path; each spawned worker imports
    torch anew, and the forked run already covers every rank)."""
    source = shards(40, 2, 4)
    plan = {"ordering": "laplace:.4", "max_seqs": 3, "distribution": "files"}

    def run(rank: int, **workers) -> list:
        with sl.SeqLoader(source, rank=rank, world_size=2, **plan, **workers) as loader:
            return [batch_record(b) for e in (1, 2) for b in loader.epoch(e)]

    for rank in range(2) if context == "fork" else [1]:
        workers = 2 if context == "fork" else 1
        assert run(rank, num_workers=workers, multiprocessing_context=context) == run(
            rank, num_workers=0
        )


def test_elastic_resume_2_3_1_over_shards() -> None:
    for distribution in ("shard", "files"):
        make = loader_factory(
            shards(53, 3, 4), ordering="laplace:.5", max_seqs=4, distribution=distribution
        )
        check_chain(make, [2, 3, 1], [3, 2], 2)


def test_buckets_and_mix_over_shard_corpora() -> None:
    a, b = shards(30, 0, 4), shards(24, 1, 5, offset=30)
    corpora = sl.ConcatSource({"a": a, "b": b})
    mixed = loader_factory(corpora, mix={"a": 1.5, "b": 0.5}, ordering="laplace:.4", max_seqs=3)
    check_chain(mixed, [2, 3, 1], [2, 3], 2)
    buckets = loader_factory(corpora, ordering="buckets:3", max_frames=40)
    check_chain(buckets, [2, 1], [3], 2)
    reference = run_all(buckets, 2, 1)
    assert reference  # the bucketed plan over shards delivers batches
