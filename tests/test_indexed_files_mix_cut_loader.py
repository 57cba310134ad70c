"""A mix over files with a fixed or random ordering through the real loader, with the default
planning (``auto``, resolved to indexed: ``seqloader.plan.indexed.files_mix_cut``): the resume
harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W'``) with the
exactly-once audit on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from test_indexed_files_mix_loader import files_mix_corpora
from test_resume import check_chain, loader_factory


@settings(max_examples=3, deadline=None)
@given(
    n=st.integers(12, 30),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["default", "sorted_reverse", "random:2"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 2), min_size=2, max_size=2),
    cut=st.integers(0, 6),
)
def test_resume_chains_deliver_each_slot_once(n, seed, ordering, uneven, worlds, cut) -> None:
    """Every slot once per epoch across a chain of fresh loaders (elastic ``W -> W'``), steps
    without gaps, the same world size the very same batches; the audit checks each epoch."""
    make = loader_factory(
        files_mix_corpora(n, seed),
        distribution="files",
        mix={"a": 1.5, "b": 0.5},
        max_seqs=3,
        max_frames=40,
        ordering=ordering,
        uneven=uneven,
        partition_epoch=2,
        audit=True,
    )
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
    try:
        make(0, max(worlds)).planner.check_world(max(worlds))
    except sl.OptionError:
        return  # too few files for these world sizes (the planner's own refusal, tested apart)
    check_chain(make, worlds, [cut], 3)


@settings(max_examples=3, deadline=None)
@given(
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["sorted", "random", "sort_bin_shuffle:.3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    cuts=st.lists(st.integers(0, 8), min_size=2, max_size=2),
)
def test_chunked_chains_deliver_each_chunk_of_each_slot_once(seed, ordering, uneven, cuts) -> None:
    """Chunked (each rank's pieces' slots expanded into their chunks): every chunk of every slot
    once per epoch through ``W -> W' -> W''`` with the audit on (a sequence in two corpus epochs
    holds two slots, continued each on its own after a resume), the same batches as the
    uninterrupted run where the world size stays."""
    make = loader_factory(
        files_mix_corpora(30, seed), distribution="files", mix={"a": 1.5, "b": 0.5},
        max_seqs=3, max_frames=40, ordering=ordering, uneven=uneven, partition_epoch=2,
        chunking="4:2", min_chunk_size=1, audit=True,
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
        assert loader.planner.chunks is not None
    try:
        make(0, 3).planner.check_world(3)
    except sl.OptionError:
        return  # too few files for these world sizes (the planner's own refusal, tested apart)
    check_chain(make, [2, 3, 1], cuts, 3)
