"""``planning="indexed"`` with ``ordering="random"`` / ``"random:K"``
(``seqloader.plan.indexed.random_order``; hypothesis, pure numpy).

The batches are greedy cuts of one random order of the admitted sequences, what global
planning's ``Batcher`` cuts on that order; the order is the indexed planner's keyed permutation
of the full epoch (seed, full epoch after ``:K`` grouping), its sub-epoch parts those of global
planning (``part_bounds``); under ``random_seed_offset`` every rank visits those batches in an
order of its own (``RankBatchOrder``: the same batch count on every rank). Every contract
holds (``check_plan_contracts``: exactly once in plan order, equal steps, a rank's share alone,
determinism, ``simulate`` over workers, resume chains ``W -> W' -> W''``).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.batches import BatchList
from seqloader.plan.epochs import EpochIndex, batch_limits, part_bounds
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.bijection import Bijection
from seqloader.plan.indexed.fixed import cut_batcher, cut_positions
from seqloader.plan.indexed.planner import IndexedPlanner, index_key
from seqloader.plan.limits import Batcher
from seqloader.plan.seeding import PURPOSE_FIXED_ORDER, PURPOSE_INDEXED_ORDER
from test_plan_indexed import indexed_digest
from test_plan_indexed_fixed import cases as fixed_cases


def as_random(case: dict, ordering: str, fixed_seed: int | None) -> dict:
    """A fixed-order case (``test_plan_indexed_fixed.cases``: corpora, limits, filters, parts,
    ``uneven``, worlds, cuts) as a ``random`` one, sharded (``as_seed_offset``: every rank its
    own batch order)."""
    options = {**case["options"], "ordering": ordering, "distribution": "shard"}
    return {**case, "options": {**options, "fixed_random_seed": fixed_seed}}


def cases() -> st.SearchStrategy[dict]:
    orderings = st.sampled_from(["random", "random:2", "random:3"])
    fixed_seeds = st.sampled_from([None, None, None, 4])
    return st.builds(as_random, fixed_cases(), orderings, fixed_seeds)


def indexed(case: dict) -> IndexedPlanner:
    return IndexedPlanner(case["lengths"], PlanOptions(**case["options"], planning="indexed"))


def greedy(case: dict) -> Planner:
    return Planner(case["lengths"], PlanOptions(**case["options"]))


def keyed_cuts(case: dict, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference, built apart from the planner: the admitted sequences (global planning's
    admission) in the keyed permutation of the full epoch, the sub-epoch's part of it, and the
    greedy ``Batcher``'s bounds of that part -> (sequences, bounds)."""
    options = PlanOptions(**case["options"])
    admitted = greedy(case).admission.admitted  # ascending
    ep = EpochIndex(epoch, options.partition_epoch)
    if options.fixed_random_seed is not None:
        head: tuple[int, ...] = (options.fixed_random_seed, PURPOSE_FIXED_ORDER)
        seed_epoch = 0
    else:
        head, seed_epoch = (options.seed,), options.parsed_ordering.seed_epoch(ep.full_epoch)
    m = len(admitted)
    perm = Bijection(m, (*head, PURPOSE_INDEXED_ORDER, seed_epoch))(np.arange(m))
    lo, hi = part_bounds(m, options.partition_epoch, ep.part)
    order = admitted[perm.astype(np.int64)][lo:hi]
    limits = batch_limits(options, list(case["lengths"]), "data")
    return order, Batcher(limits, case["lengths"]).bounds(order)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_batches_are_greedy_cuts_of_the_keyed_order_and_every_contract_holds(case: dict) -> None:
    """On one rank each sub-epoch's batches are the greedy ``Batcher``'s cuts of the keyed
    order's part (same sequences, same bounds);
    global planning admits and filters the same sequences; the contracts hold on any world."""
    planner, reference = indexed(case), greedy(case)
    parts = planner.options.partition_epoch
    for epoch in range(1, 2 * parts + 1):
        got = planner.global_plan(epoch, 1).batches
        seqs, bounds = keyed_cuts(case, epoch)
        np.testing.assert_array_equal(got.seqs, seqs)
        np.testing.assert_array_equal(got.bounds, bounds)
        assert planner.order_size(epoch) == reference.order_size(epoch)
    assert planner.filtered(1) == reference.filtered(1)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True)


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 6))
def test_a_ranks_batches_are_batches_of_the_one_cut_list(case: dict, world: int) -> None:
    """Every rank computes the same global cut list and keeps its own batches: each real batch
    of a rank's share (``shard``, ``uneven`` pad/drop: no batch split) is one batch of the
    greedy cuts of the keyed order, and the ranks' batches together are each used once."""
    if case["options"]["uneven"] == "split":
        case["options"]["uneven"] = "pad"
    planner = indexed(case)
    for epoch in range(1, planner.options.partition_epoch + 1):
        seqs, bounds = keyed_cuts(case, epoch)
        want = [tuple(seqs[a:b].tolist()) for a, b in pairwise(bounds)]
        plan = planner.global_plan(epoch, world)
        got: list[tuple[int, ...]] = []
        for rank in range(world):
            share = plan.rank_share(rank)
            for a, b in pairwise(share.bounds.tolist()):
                real = share.seqs[a:b][share.real[a:b]]
                if len(real):
                    got.append(tuple(real.tolist()))
        assert set(got) <= set(want)
        assert len(got) == len(set(got))
        if case["options"]["uneven"] == "pad":
            assert sorted(got) == sorted(want)


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(1, 40))
def test_cutting_in_blocks_of_any_size_gives_the_same_bounds(case: dict, block: int) -> None:
    """Greedy batching restarts exactly at a batch boundary: any block size, any part."""
    options = PlanOptions(**case["options"])
    seqs, bounds = keyed_cuts(case, 1)
    limits = batch_limits(options, list(case["lengths"]), "data")
    got = cut_positions(
        lambda p: seqs[p], 0, len(seqs), cut_batcher(limits), case["lengths"], block
    )
    np.testing.assert_array_equal(got, bounds)


def test_random_k_keeps_an_order_k_epochs_and_the_seed_moves_it() -> None:
    """``random:K``: full epochs ``0..K-1`` share one order, the next K the next; another seed
    is another order; one rank's plan differs from global planning's only in the order drawn
    (the same admitted sequences)."""
    lengths = {"data": np.random.default_rng(5).integers(1, 200, 600)}
    base = {"max_frames": 2000, "planning": "indexed"}
    planner = IndexedPlanner(lengths, PlanOptions(**base, ordering="random:2"))
    orders = [planner.sub_epoch_order(e).tolist() for e in (1, 2, 3, 4)]
    assert orders[0] == orders[1] and orders[2] == orders[3] and orders[0] != orders[2]
    assert sorted(orders[0]) == list(range(600))
    other = IndexedPlanner(lengths, PlanOptions(**base, ordering="random:2", seed=7))
    assert other.sub_epoch_order(1).tolist() != orders[0]


def test_the_index_is_the_admitted_sequences_and_keyed_apart_from_laplaces() -> None:
    """``random``'s node index is one bucket of the admitted sequences (no cuts: they change
    every epoch), under its own key; ``random:K`` and the seed share it."""
    lengths = {"data": np.random.default_rng(3).integers(1, 90, 500)}
    base = {"max_frames": 400, "planning": "indexed"}
    planner = IndexedPlanner(lengths, PlanOptions(**base, ordering="random", min_seq_length=5))
    index = planner.index
    assert len(index.edges) == 0 and index.cuts is None
    np.testing.assert_array_equal(index.members, np.flatnonzero(lengths["data"] >= 5))
    keys = {index_key(PlanOptions(**base, ordering=o)) for o in ("random", "random:3", "laplace")}
    assert len(keys) == 2
    assert index_key(PlanOptions(**base, ordering="random", seed=9)) == index_key(
        PlanOptions(**base, ordering="random")
    )


def as_seed_offset(case: dict) -> dict:
    """``case`` under ``distribution="random_seed_offset"``."""
    return {**case, "options": {**case["options"], "distribution": "random_seed_offset"}}


def batch_sets(batches: BatchList) -> list[tuple[int, ...]]:
    return [tuple(batches.seqs[a:b].tolist()) for a, b in pairwise(batches.bounds.tolist())]


@settings(max_examples=40, deadline=None)
@given(cases().map(as_seed_offset))
def test_random_seed_offset_gives_every_rank_the_cuts_in_its_own_batch_order(case: dict) -> None:
    """``random_seed_offset``: each rank goes over every admitted sequence once per full epoch
    (its sub-epochs the keyed order's parts), its batches exactly the greedy cuts of the one
    keyed order (``shard``'s batches on one rank) in an order of its own, so every rank has the
    same steps and nothing is dropped; every contract holds (a world size change mid-epoch is
    refused by name, as for every ``random_seed_offset`` plan)."""
    planner = indexed(case)
    shard = indexed({**case, "options": {**case["options"], "distribution": "shard"}})
    world = case["worlds"][0]
    for epoch in range(1, planner.options.partition_epoch + 1):
        want = batch_sets(shard.global_plan(epoch, 1).batches)
        plan = planner.global_plan(epoch, world)
        assert plan.steps == len(want) and plan.dropped == 0
        for rank in range(world):
            share = plan.rank_share(rank)
            assert share.real.all()
            got = batch_sets(share)
            assert sorted(got) == sorted(want)
            np.testing.assert_array_equal(share.seqs, planner.rank_order(epoch, rank, world))
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut)


def test_random_seed_offset_ranks_visit_the_batches_in_their_own_orders() -> None:
    """The ranks' orders differ from each other and from ``shard``'s, move with the epoch and
    the seed, and stay for ``random:K``'s K epochs; a rank's order is computed alone (a fresh
    planner asked for rank 2 only gives the same)."""
    lengths = {"data": np.random.default_rng(3).integers(1, 300, 800)}
    base = {"max_frames": 2000, "planning": "indexed", "distribution": "random_seed_offset"}

    def orders(planner: IndexedPlanner, epoch: int) -> list[list[int]]:
        return [planner.rank_order(epoch, r, 3).tolist() for r in range(3)]

    planner = IndexedPlanner(lengths, PlanOptions(**base, ordering="random:2"))
    one = orders(planner, 1)
    shard = IndexedPlanner(
        lengths, PlanOptions(**{**base, "distribution": "shard"}, ordering="random:2")
    )
    assert len({tuple(o) for o in one}) == 3 and shard.sub_epoch_order(1).tolist() not in one
    assert orders(planner, 2) == one and orders(planner, 3) != one
    assert all(sorted(o) == list(range(800)) for o in one)
    other = IndexedPlanner(lengths, PlanOptions(**base, ordering="random:2", seed=5))
    assert orders(other, 1) != one
    fresh = IndexedPlanner(lengths, PlanOptions(**base, ordering="random:2"))
    assert fresh.rank_order(1, 2, 3).tolist() == one[2]


RANDOM_CASES: dict[str, dict] = {
    "random W3 split": {
        "options": {"ordering": "random", "max_seqs": 6, "max_frames": 1500, "seed": 1},
        "world": 3,
        "elastic": (4, 5),
    },
    "random:2 partition 2 W4 pad": {
        "options": {"ordering": "random:2", "max_frames": 2000, "partition_epoch": 2,
                    "uneven": "pad"},
        "world": 4,
    },
    "random W2 drop, quadratic, filters": {
        "options": {"ordering": "random", "max_frames": 40_000, "batch_cost": "quadratic:80",
                    "max_seq_length": 350, "min_seq_length": 5, "uneven": "drop"},
        "world": 2,
        "elastic": (3, 3),
        "elastic_again": (2, 1),
    },
    "random W3 packed, fixed_random_seed": {
        "options": {"ordering": "random", "max_frames": 900, "batch_cost": "packed",
                    "fixed_random_seed": 2},
        "world": 3,
    },
    "random W3 random_seed_offset": {
        "options": {"ordering": "random", "max_frames": 1500,
                    "distribution": "random_seed_offset"},
        "world": 3,
    },
    "random:2 partition 2 W2 random_seed_offset, filters": {
        "options": {"ordering": "random:2", "max_frames": 2000, "partition_epoch": 2,
                    "max_seq_length": 350, "distribution": "random_seed_offset"},
        "world": 2,
    },
}  # fmt: skip
RANDOM_GOLDEN = {
    "random W3 split": "a562ac7722b6c67694a5945c5f1bc2d10901f167b7a6dc6915c95d1517dcdbb0",
    "random:2 partition 2 W4 pad": (
        "3fa3355ccfecef4e63f33f1ebc6b68f54a1da3df7f8d50c25f6607620d1ccb71"
    ),
    "random W2 drop, quadratic, filters": (
        "3e5fae066e5cf0236090027685d365d2340f286aa134c44d4ef91552420d7e9f"
    ),
    "random W3 packed, fixed_random_seed": (
        "10bbc6bcb55dc5c75df6b22e059165e3fd4782e8b6657731d2d5b91dced21b47"
    ),
    # added with random + random_seed_offset (refused before under indexed planning)
    "random W3 random_seed_offset": (
        "0d0f72c8bc762eae0b23a282af273e624a8f3f9e3b332180324f9179a253e6b8"
    ),
    "random:2 partition 2 W2 random_seed_offset, filters": (
        "6b8c7c75a980fb21f5ecf8795370ea8aa3ece76dfd245b13cca2f7a1234d285a"
    ),
}


def test_random_golden_plans_are_pinned() -> None:
    """Added with ``random`` (refused before under indexed planning: no plan of the current
    ``INDEXED_ALGORITHM`` moved); bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in RANDOM_CASES.items()}
    assert got == RANDOM_GOLDEN, f"record: {got}"
