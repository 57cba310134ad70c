"""A ``mix`` with ``distribution="random_seed_offset"`` through loaders (torch; the plan's own
properties, pure numpy, are in ``test_plan_indexed_mix_per_rank.py``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from test_resume import loader_factory, mixed_corpora, run_all, run_chain


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
