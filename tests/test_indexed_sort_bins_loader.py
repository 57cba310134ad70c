"""``sort_bin_shuffle[_x2]`` through the real loader with the default planning (``auto``,
resolved to indexed: ``seqloader.plan.indexed.sort_bins``): the resume harness of
``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W'``) with the exactly-once audit
on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import ResumeError
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


def test_a_global_state_is_refused_by_name_under_auto() -> None:
    """``sort_bin_shuffle`` moved from global to indexed planning under ``auto``: a state saved by
    global planning names the planning and the fix; with the fix it loads."""
    source = sl.MemorySource(
        {"data": [np.zeros((n, 1), np.float32) for n in (5, 3, 8, 2, 7, 4, 6, 1)]}
    )
    options = {"ordering": "sort_bin_shuffle:.3", "max_seqs": 2}
    state = sl.SeqLoader(source, **options, planning="global").state_dict()
    auto = sl.SeqLoader(source, **options)
    assert auto.planner.options.planning == "indexed"
    with pytest.raises(ResumeError, match="Fix: pass planning='global' to resume it"):
        auto.load_state_dict(state)
    sl.SeqLoader(source, **options, planning="global").load_state_dict(state)
