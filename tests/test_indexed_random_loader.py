"""``planning="indexed"`` with ``ordering="random"``/``"random:K"`` through the real loader: the
resume harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W' -> W''``),
every rank cutting the same keyed order, and ``random:K`` keeping its order K epochs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from test_indexed_options_loader import check_own_orders
from test_resume import check_chain, corpus, loader_factory, real_by_epoch, run_all

PLAN = {"max_seqs": 3, "max_frames": 40, "planning": "indexed"}


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["random", "random:2"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    limits=st.sampled_from([{}, {"min_seq_length": 3}, {"batch_cost": "packed"}]),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_resume_chains_deliver_the_uninterrupted_run(
    n, seed, ordering, uneven, partition_epoch, limits, worlds, cuts
) -> None:
    options = {**PLAN, **limits, "ordering": ordering, "partition_epoch": partition_epoch}
    make = loader_factory(corpus(n, seed), **options, uneven=uneven)
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1)


def test_random_k_delivers_one_order_k_epochs_and_another_after() -> None:
    """One rank: ``random:2`` delivers epochs 1 and 2 in one order, epoch 3 in another, each
    epoch every sequence once."""
    make = loader_factory(corpus(40, seed=2), **PLAN, ordering="random:2")
    by_epoch = real_by_epoch(run_all(make, 1, 3))
    assert by_epoch[1] == by_epoch[2] != by_epoch[3]
    assert sorted(by_epoch[1]) == sorted(by_epoch[3]) == list(range(40))


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["random", "random:2"]),
    partition_epoch=st.integers(1, 2),
    world=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_random_seed_offset_delivers_each_ranks_own_order_and_resumes(
    n, seed, ordering, partition_epoch, world, cuts
) -> None:
    """``random_seed_offset``: each rank delivers its own batch order of the one keyed order's
    cuts (audited), and saves and loads on the same world size deliver the uninterrupted run."""
    make = loader_factory(
        corpus(n, seed),
        **PLAN,
        ordering=ordering,
        partition_epoch=partition_epoch,
        distribution="random_seed_offset",
        audit=True,
    )
    check_own_orders(make, world, cuts, partition_epoch + 1)
