"""``sort_bin_shuffle[_x2]`` through the real loader with the default planning (``auto``,
resolved to indexed: ``seqloader.plan.indexed.sort_bins``): the resume harness of
``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W'``) with the exactly-once audit
on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from test_resume import check_chain, corpus, loader_factory


@settings(max_examples=4, deadline=None)
@given(
    n=st.integers(5, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["sort_bin_shuffle:.5", "sort_bin_shuffle_x2:3:2"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 3), min_size=2, max_size=2),
    cut=st.integers(0, 8),
)
def test_resume_chains_deliver_the_uninterrupted_run(n, seed, ordering, uneven, worlds, cut):
    """Every sequence once per epoch across a chain of fresh loaders, steps without gaps, the
    same world size the very same batches; the audit checks each epoch."""
    make = loader_factory(
        corpus(n, seed),
        ordering=ordering,
        uneven=uneven,
        max_seqs=3,
        max_frames=40,
        partition_epoch=2,
        audit=True,
    )
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
    check_chain(make, worlds, [cut], 3)
