"""``planning="indexed"`` with the fixed orderings (``default``, ``reverse``, ``sorted``,
``sorted_reverse``) through the real loader: the resume harness of ``test_resume`` (save -> JSON
-> fresh loaders, elastic ``W -> W' -> W''``), the same batches as global planning's on one rank,
and real DataLoader workers delivering the batches of the run without them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.plan.indexed.fixed import FIXED_KINDS
from test_resume import check_chain, corpus, loader_factory, run_all

PLAN = {"max_seqs": 3, "max_frames": 40}


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(FIXED_KINDS),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    limits=st.sampled_from([{}, {"min_seq_length": 3}, {"batch_cost": "packed"}]),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_resume_chains_deliver_global_plannings_batches(
    n, seed, ordering, uneven, partition_epoch, limits, worlds, cuts
) -> None:
    options = {**PLAN, **limits, "ordering": ordering, "partition_epoch": partition_epoch}
    make = loader_factory(corpus(n, seed), **options, uneven=uneven, planning="indexed")
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1)
    greedy = run_all(loader_factory(corpus(n, seed), **options), 1, partition_epoch + 1)
    indexed = run_all(make, 1, partition_epoch + 1)
    assert indexed == greedy  # one rank: global planning's batches, in its order


@pytest.mark.slow
def test_same_batches_with_dataloader_workers() -> None:
    """C3: worker processes deliver the batches of the run without workers, resumed too."""
    options = {**PLAN, "ordering": "sorted_reverse", "partition_epoch": 2, "planning": "indexed"}
    reference = run_all(loader_factory(corpus(47, seed=4), **options), 2, 3)
    make = loader_factory(corpus(47, seed=4), **options, num_workers=2)
    check_chain(make, [2, 2], [4], 3, reference=reference)
    check_chain(make, [2, 1], [5], 3, reference=reference)


def test_fixed_orders_map_their_cuts_from_the_nodes_file(tmp_path, monkeypatch) -> None:
    """Above ``MIN_SEQUENCES`` the order and its cuts come from one node file per ordering and
    ``partition_epoch`` (built by the first loader, mapped by the next, not written again) and
    plan what an in-memory index plans."""
    from seqloader.loading import bucket_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    folder = tmp_path / "seqloader" / "buckets"
    src = corpus(60, 2)
    options = {**PLAN, "ordering": "sorted", "planning": "indexed"}
    first = sl.SeqLoader(src, rank=1, world_size=2, **options)
    (file,) = folder.glob("*.seqcols")
    mtime = file.stat().st_mtime_ns
    second = sl.SeqLoader(src, rank=0, world_size=2, **options)
    assert file.stat().st_mtime_ns == mtime  # mapped, not built again
    assert not second.planner.index.cuts.flags.writeable  # a view of the mapped file
    sl.SeqLoader(src, rank=0, world_size=2, **{**options, "partition_epoch": 2})
    sl.SeqLoader(src, rank=0, world_size=2, **{**options, "ordering": "sorted_reverse"})
    assert len(list(folder.glob("*.seqcols"))) == 3  # another part count or order: its own
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10**9)
    in_memory = sl.SeqLoader(src, rank=1, world_size=2, **options)
    mapped, held = first.plan(1), in_memory.plan(1)
    assert len(mapped) == len(held) > 0
    assert all(np.array_equal(a, b) for a, b in zip(mapped, held, strict=True))


@pytest.mark.parametrize(
    "options",
    [
        {"ordering": "sorted", "partition_epoch": 2, "min_chunk_size": 2},
        {"ordering": "random", "partition_epoch": 2},
    ],
    ids=str,
)
def test_chunked_resume_chain_with_the_audit(options: dict) -> None:
    """Chunked fixed and random orders through the loader: each delivered row audited against
    its planned chunk and window, saved through JSON and resumed ``W -> W' -> W''``; the fixed
    orders' batches are global planning's on one rank."""
    plan = {**PLAN, **options, "chunking": "3:2", "audit": True}
    make = loader_factory(corpus(40, 3), **plan, planning="indexed")
    last = plan.get("partition_epoch", 1) + 1
    check_chain(make, [2, 3, 1], [3, 2], last)
    if options["ordering"] != "random":
        assert run_all(make, 1, last) == run_all(loader_factory(corpus(40, 3), **plan), 1, last)
