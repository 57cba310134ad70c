"""``random`` and the fixed orders with a ``mix`` (``distribution="shard"``) through the real
loader, with the default planning (``auto``, resolved to indexed: ``seqloader.plan.indexed.mix_cuts``):
the resume harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W' -> W''``)
with the exactly-once audit on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_resume import check_chain, loader_factory, mixed_corpora

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates


@settings(max_examples=6, deadline=None)
@given(
    n=st.integers(6, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["random", "random:2", "default", "reverse", "sorted"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 10), min_size=2, max_size=2),
)
def test_elastic_resume_chains_deliver_every_slot_once(n, seed, ordering, uneven, worlds, cuts):
    """Every slot (sequence, corpus epoch) once per epoch, equal steps, steps numbered without
    gaps, the same world size the very same batches as the uninterrupted run; the audit checks
    each epoch."""
    options = {"max_seqs": 3, "max_frames": 40, "partition_epoch": 2, "audit": True}
    make = loader_factory(
        mixed_corpora(n, seed), **options, mix={"a": 1.5, "b": 0.5}, ordering=ordering,
        uneven=uneven,
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
    check_chain(make, worlds, cuts[: len(worlds) - 1], 3)


@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["random", "default", "sorted_reverse", "laplace:.3", "buckets:2"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    cuts=st.lists(st.integers(0, 8), min_size=2, max_size=2),
)
def test_chunked_chains_deliver_every_chunk_of_every_slot_once(seed, ordering, uneven, cuts):
    """Chunked (``mix_cuts.chunked_mix_cut``; laplace and buckets:N: ``mix_chunks``): every
    chunk of every slot (sequence, corpus epoch) once per epoch through ``W -> W' -> W''`` with the audit on, the same batches as
    the uninterrupted run where the world size stays."""
    make = loader_factory(
        mixed_corpora(24, seed), max_seqs=3, max_frames=40, partition_epoch=2, audit=True,
        mix={"a": 1.5, "b": 0.5}, ordering=ordering, uneven=uneven, chunking="4:3",
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
        assert loader.planner.chunks is not None
    check_chain(make, [2, 3, 1], cuts, 3)
