"""Fixed and random orders over ``distribution="files"`` through the real loader, with the
default planning (``auto``, resolved to indexed: ``seqloader.plan.indexed.files_cut``): the
resume harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W' -> W''``)
with the exactly-once audit on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from test_resume import check_chain, file_bounds, files_corpus, loader_factory


@settings(max_examples=6, deadline=None)
@given(
    n=st.integers(12, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["default", "reverse", "sorted", "sorted_reverse", "random:2"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 10), min_size=2, max_size=2),
)
def test_elastic_resume_chains_deliver_each_sequence_once(
    n, seed, ordering, uneven, worlds, cuts
) -> None:
    """Every sequence once per epoch, equal steps, steps numbered without gaps, the same world
    size the very same batches as the uninterrupted run; the audit checks each epoch."""
    if len(file_bounds(n, seed)) - 1 < 2 * max(worlds):
        return  # fewer files than sub-epochs x ranks: refused (tested in test_files_plan)
    options = {"max_seqs": 3, "max_frames": 40, "partition_epoch": 2, "audit": True}
    make = loader_factory(
        files_corpus(n, seed), **options, ordering=ordering, uneven=uneven, distribution="files"
    )
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
    check_chain(make, worlds, cuts[: len(worlds) - 1], 3)


@settings(max_examples=3, deadline=None)
@given(
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["default", "sorted_reverse", "random"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    cuts=st.lists(st.integers(0, 8), min_size=2, max_size=2),
)
def test_chunked_chains_deliver_each_chunk_once(seed, ordering, uneven, cuts) -> None:
    """Chunked (``files_cut``'s chunk slots): every chunk of every sequence once per epoch
    through ``W -> W' -> W''`` with the audit on, the same batches as the uninterrupted run
    where the world size stays."""
    make = loader_factory(
        files_corpus(30, seed), max_seqs=3, max_frames=40, partition_epoch=2, audit=True,
        ordering=ordering, uneven=uneven, distribution="files", chunking="3:2",
        min_chunk_size=1,
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
        assert loader.planner.chunks is not None
    check_chain(make, [2, 3, 1], cuts, 3)
