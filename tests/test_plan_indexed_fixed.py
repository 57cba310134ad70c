"""``planning="indexed"`` with the fixed orderings ``default``, ``reverse``, ``sorted`` and
``sorted_reverse`` (``seqloader.plan.indexed.fixed``; hypothesis, pure numpy).

Their batches are global planning's, batch for batch (the same greedy cuts of the same order,
every limit: ``max_seqs``, per-key ``max_frames``, ``packed``/``quadratic:Q`` costs,
``max_packed_frames``, length filters; every sub-epoch part), so padding and steps are 1.0x
global planning's; sharding, ``uneven`` and resume are indexed planning's, and every contract
holds (``check_plan_contracts``: exactly once in plan order, equal steps, a rank's share alone,
determinism, ``simulate`` over workers, resume chains ``W -> W' -> W''``). The cuts are built once
(streamed in blocks: any block size gives the same bounds) and kept with the node's index.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.fixed import FIXED_KINDS, FixedOrder, fixed_cuts
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.planner import IndexedPlanner, index_key
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import node_bucket_index
from test_plan_indexed import indexed_digest

LIMITS = [
    {"max_frames": 3000},
    {"max_frames": {"*": 2500, "classes": 120}},
    {"max_frames": 40_000, "batch_cost": "quadratic:60"},
    {"max_frames": 900, "batch_cost": "packed"},
    {"max_frames": 3000, "max_packed_frames": 1200},
    {"max_frames": None},
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    high = draw(st.sampled_from([3, 40, 290]))
    data = rng.integers(0 if draw(st.booleans()) else 1, high + 1, size=n).astype(np.int64)
    options = {
        "ordering": draw(st.sampled_from(FIXED_KINDS)),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 20))),
        **draw(st.sampled_from(LIMITS)),
        "max_seq_length": draw(st.sampled_from([None, 250, {"classes": 25}])),
        "min_seq_length": draw(st.sampled_from([0, 1, {"data": 2}])),
        "partition_epoch": draw(st.integers(1, 3)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "distribution": draw(st.sampled_from(["shard", "shard", "random_seed_offset"])),
        "seed": draw(st.integers(0, 5)),
    }
    return {
        "lengths": {"data": data, "classes": rng.integers(0, 30, size=n).astype(np.int64)},
        "options": options,
        "worlds": draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)),
        "cuts": draw(st.lists(st.floats(0, 1), min_size=2, max_size=2)),
    }


def indexed(case: dict) -> IndexedPlanner:
    return IndexedPlanner(case["lengths"], PlanOptions(**case["options"], planning="indexed"))


def greedy(case: dict) -> Planner:
    return Planner(case["lengths"], PlanOptions(**case["options"]))


# 60 examples (was 120) draw every ordering, distribution, batch_cost, limit and uneven the 120 drew
@settings(max_examples=60, deadline=None)
@given(cases())
def test_batches_are_global_plannings_and_every_contract_holds(case: dict) -> None:
    """On one rank every sub-epoch's batches are global planning's exactly (same sequences, same
    bounds); on any world size the contracts hold, the units in plan order across resumes."""
    planner, reference = indexed(case), greedy(case)
    parts = planner.options.partition_epoch
    for epoch in range(1, 2 * parts + 1):
        got, want = planner.global_plan(epoch, 1).batches, reference.global_plan(epoch, 1).batches
        np.testing.assert_array_equal(got.seqs, want.seqs)
        np.testing.assert_array_equal(got.bounds, want.bounds)
        assert planner.order_size(epoch) == reference.order_size(epoch)
    assert planner.filtered(1) == reference.filtered(1)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True)


@settings(max_examples=60, deadline=None)
@given(cases(), st.integers(1, 40))
def test_cuts_streamed_in_blocks_are_the_same_bounds(case: dict, block: int) -> None:
    """Greedy batching restarts exactly at a batch boundary: cutting the order a block of any
    size at a time (a batch wider than the block widens it) gives the one-pass bounds."""
    planner = indexed(case)
    order = FixedOrder(planner.index, planner.options.parsed_ordering.kind)
    parts = planner.options.partition_epoch
    lengths = {**case["lengths"], "data": planner.lengths}
    cuts, starts = fixed_cuts(order, parts, planner._limits, lengths, block)
    np.testing.assert_array_equal(cuts, planner.index.cuts)
    np.testing.assert_array_equal(starts, planner.index.cut_starts)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_a_node_index_carries_the_cuts_and_plans_alike(case: dict) -> None:
    """The node's index (what a node stores and maps: its columns) holds the order and the
    cuts; a planner given it computes nothing of size n and plans the same batches."""
    options = PlanOptions(**case["options"], planning="indexed")
    index = node_bucket_index(case["lengths"], options)
    assert index.cuts is not None and index.cut_starts is not None
    mapped = BucketIndex.from_columns(index.columns())
    planner = IndexedPlanner(case["lengths"], options, index=mapped)
    fresh = indexed(case)
    for epoch in range(1, options.partition_epoch + 1):
        for world in case["worlds"]:
            a, b = planner.global_plan(epoch, world), fresh.global_plan(epoch, world)
            for rank in range(world):
                np.testing.assert_array_equal(a.rank_share(rank).seqs, b.rank_share(rank).seqs)


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(0, 300))
def test_each_corpus_counted_as_its_sub_epoch_holds_it(case: dict, bound: int) -> None:
    """``corpus_plan`` (the report's per-corpus slots) from the order's positions, without the
    plan: each corpus' sequences in the sub-epoch's order."""
    n = len(case["lengths"]["data"])
    corpora = Corpora(("a", "b"), np.array([0, min(bound, n), n]))
    options = PlanOptions(**case["options"], planning="indexed")
    planner = IndexedPlanner(case["lengths"], options, corpora=corpora)
    for epoch in range(1, options.partition_epoch + 1):
        seqs = planner.sub_epoch_order(epoch)
        want = [int((seqs < corpora.bounds[1]).sum()), int((seqs >= corpora.bounds[1]).sum())]
        assert [count for _, count, _ in planner.corpus_plan(epoch)] == want


def test_the_index_key_names_the_order_and_its_parts() -> None:
    """Cuts depend on the ordering and ``partition_epoch``: another of either is another node
    file, and a given index built for another one is refused by name."""
    lengths = {"data": np.random.default_rng(3).integers(1, 90, 500)}
    base = {"max_frames": 400, "planning": "indexed"}
    keys = {
        index_key(PlanOptions(**base, ordering=o, partition_epoch=p))
        for o in FIXED_KINDS
        for p in (1, 2)
    }
    assert len(keys) == 2 * len(FIXED_KINDS)
    laplace = PlanOptions(**base, ordering="laplace")
    assert "fixed" not in index_key(laplace)  # laplace's node files keep their names
    other = node_bucket_index(lengths, PlanOptions(**base, ordering="sorted", partition_epoch=2))
    with pytest.raises(OptionError, match=r"bucket index given .* Fix: rebuild it"):
        IndexedPlanner(lengths, PlanOptions(**base, ordering="sorted"), index=other)


@settings(max_examples=4, deadline=None)
@given(cases(), st.sampled_from(["sorted", "sorted_reverse"]), st.integers(1, 6))
def test_a_sources_own_sort_key_orders_as_global_planning_does(
    case: dict, ordering: str, spread: int
) -> None:
    """A source's ``order_lengths`` (RETURNN sorts OggZip corpora by ``int(duration * 100)``,
    LibriSpeech by transcription length) is what global planning sorts by: the node's sorted
    index is built on it (one bucket per key value), the cuts by the length key, so every
    sub-epoch's batches are global planning's exactly; every contract holds. Another sort key
    is another plan (fingerprint) and another node file."""
    n = len(case["lengths"]["data"])
    by = np.random.default_rng(spread).integers(0, spread * 3, n)
    options = {**case["options"], "ordering": ordering}
    plain = PlanOptions(**options)
    given = PlanInputs(case["lengths"], replace(plain, planning="indexed"), order_lengths=by)
    planner, reference = IndexedPlanner(given), Planner(replace(given, options=plain))
    for epoch in range(1, plain.partition_epoch + 1):
        got, want = planner.global_plan(epoch, 1).batches, reference.global_plan(epoch, 1).batches
        np.testing.assert_array_equal(got.seqs, want.seqs)
        np.testing.assert_array_equal(got.bounds, want.bounds)
    plain_key = IndexedPlanner(replace(given, order_lengths=None))
    assert planner.fingerprint("s") != plain_key.fingerprint("s")
    mapped = BucketIndex.from_columns(node_bucket_index(given).columns())
    np.testing.assert_array_equal(mapped.members, planner.index.members)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: IndexedPlanner(given), case["worlds"], cut, ordered=True)


FIXED_CASES: dict[str, dict] = {
    "sorted W3 split": {
        "options": {"ordering": "sorted", "max_seqs": 6, "max_frames": 1500, "seed": 1},
        "world": 3,
        "elastic": (4, 5),
    },
    "sorted_reverse partition 2 W4 pad": {
        "options": {"ordering": "sorted_reverse", "max_frames": 2000, "partition_epoch": 2,
                    "uneven": "pad"},
        "world": 4,
    },
    "default W5 drop, packed": {
        "options": {"ordering": "default", "max_frames": 900, "batch_cost": "packed",
                    "uneven": "drop"},
        "world": 5,
    },
    "reverse W2 split, filters, quadratic": {
        "options": {"ordering": "reverse", "max_frames": 40_000, "batch_cost": "quadratic:80",
                    "max_seq_length": 350, "min_seq_length": 5},
        "world": 2,
        "elastic": (3, 3),
        "elastic_again": (2, 1),
    },
    "sorted_reverse own sort key W3 split": {
        "options": {"ordering": "sorted_reverse", "max_frames": 1500, "seed": 2},
        "own_sort_key": True,
        "world": 3,
        "elastic": (3, 4),
    },
}  # fmt: skip
FIXED_GOLDEN = {
    "sorted W3 split": "45c5234868b486b6ad7734b0dbc7259499500bc0ad3c19122a9f7c880c0a6602",
    "sorted_reverse partition 2 W4 pad": (
        "c69c50474226c0bb39d955eafb381a2ac0e142db2d48759fe001596fccd3c18e"
    ),
    "default W5 drop, packed": "0affe7ec0e0b2b462d9ac01e1fe0bc42ad0ce30dc54b9be0a73398d3051f3f5d",
    "reverse W2 split, filters, quadratic": (
        "1817d85cf3accf180d07d9b723c47db1098002bd408665a9c16ad4976388075b"
    ),
    "sorted_reverse own sort key W3 split": (
        "36940c971cba0fe587188b227c6f6c08a7c82cc9e68170eb26ae9a599cc921c0"
    ),
}


def test_fixed_golden_plans_are_pinned() -> None:
    """Added with the fixed orderings (refused before under indexed planning: no plan of the
    current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in FIXED_CASES.items()}
    assert got == FIXED_GOLDEN, f"record: {got}"
