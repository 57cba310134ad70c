"""``planning="indexed"`` with ``ordering="sort_bin_shuffle[:N][:K]"`` and ``"sort_bin_shuffle_x2"``
(``seqloader.plan.indexed.sort_bins``; hypothesis, pure numpy): RETURNN's order (random ties,
sorted, bins emitted in a random order, ``_x2`` shuffled within) drawn position by position,
greedy cuts of each sub-epoch part; every contract (``check_plan_contracts``: exactly once in plan
order, equal steps, a rank's share alone, determinism, resume chains ``W -> W' -> W''``); a state
of global planning refused by name under ``auto``; the golden plans pinned.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.epochs import EpochIndex, batch_limits, part_bounds
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.planner import IndexedPlanner, index_key
from seqloader.plan.indexed.sort_bins import SortBinsOrder
from seqloader.plan.indexed.sort_bins_mix import ChunkedSortBinsMix, SortBinsMix
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import Corpora
from seqloader.plan.options import Ordering
from seqloader.plan.planners import resolve_planning
from test_plan_indexed import indexed_digest

ORDERINGS = ["sort_bin_shuffle", "sort_bin_shuffle:.4", "sort_bin_shuffle_x2:3",
             "sort_bin_shuffle_x2:.5:2", "sort_bin_shuffle:40"]  # fmt: skip


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([4, 30])) + 1, size=n).astype(np.int64)
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "max_seqs": draw(st.sampled_from([None, 3])),
        "max_frames": draw(st.sampled_from([None, 40])),
        "min_seq_length": draw(st.sampled_from([0, 2])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "distribution": draw(st.sampled_from(["shard", "shard", "random_seed_offset"])),
        "epoch_wise_filter": draw(st.sampled_from([None, None, {(1, 1): {"max_mean_len": 9}}])),
        "seed": draw(st.integers(0, 3)),
        "chunking": draw(st.sampled_from([None, None, "6:4"])),
    }
    return {
        "lengths": {"data": data},
        "options": options,
        "worlds": draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)),
        "cuts": draw(st.lists(st.floats(0, 1), min_size=2, max_size=2)),
    }


def indexed(case: dict) -> IndexedPlanner:
    return IndexedPlanner(case["lengths"], PlanOptions(**case["options"]))


@settings(max_examples=15, deadline=None)
@given(cases())
def test_batches_are_greedy_cuts_of_the_order_and_every_contract_holds(case: dict) -> None:
    """``auto`` resolves to indexed; on one rank each sub-epoch's batches are the greedy
    ``Batcher``'s cuts of its part of the full epoch's order (after ``epoch_wise_filter``, as
    global planning filters); global planning admits and filters as many; the contracts hold."""
    options = PlanOptions(**case["options"])
    assert options.resolved_planning == "indexed"
    planner, reference = indexed(case), Planner(case["lengths"], options)
    assert isinstance(planner, IndexedPlanner)
    parts = options.partition_epoch
    limits = batch_limits(options, ["data"], "data")
    for epoch in range(1, parts + 1):
        if options.chunking is not None:  # units are chunks: their count follows the draw
            continue
        assert planner.order_size(epoch) == reference.order_size(epoch)
        if options.distribution != "shard":  # each rank its own order of the shared batches
            continue
        got = planner.global_plan(epoch, 1).batches
        order = planner.sub_epoch_order(epoch)
        np.testing.assert_array_equal(got.seqs, order)
        np.testing.assert_array_equal(got.bounds, Batcher(limits, case["lengths"]).bounds(order))
    assert planner.filtered(1).keys() == reference.filtered(1).keys()
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True, workers=())


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 12), max_size=60),
    st.sampled_from(ORDERINGS),
    st.integers(0, 5),
)
def test_the_order_is_returnns_sort_bin_shuffle(lengths: list[int], text: str, key: int) -> None:
    """The full epoch's order is a permutation of the admitted sequences made of RETURNN's bins
    (``[i*m//bins, (i+1)*m//bins)`` of the length-sorted order) one after another, each bin's
    lengths those of its slice of the sorted lengths, sorted within (``_x2``: any order)."""
    data = np.array(lengths, dtype=np.int64)
    planner = IndexedPlanner({"data": data}, PlanOptions(ordering=text))
    ordering = Ordering.parse(text)
    order = SortBinsOrder(planner.index, ordering, (key, 7))
    m = len(data)
    seqs = order(np.arange(m))
    assert_returnns_bins(data, seqs, ordering)
    assert order(np.arange(m)).tolist() == seqs.tolist()  # a pure function of its key
    # what a cut reads: the lengths at each position (``_x2``: one-length bins not shuffled)
    at = order.length_positions(np.arange(m))
    assert order.sorted_lengths(at).tolist() == data[seqs].tolist()


def assert_returnns_bins(by: np.ndarray, seqs: np.ndarray, ordering: Ordering) -> None:
    """``seqs`` is a permutation of ``by``'s sequences made of RETURNN's bins of the order
    sorted by ``by``, one after another, sorted within (``_x2``: any order); bins whose keys
    are alike are tried each (a search over the bins that fit at each position)."""
    m = len(by)
    assert sorted(seqs.tolist()) == list(range(m))
    bins = ordering.num_bins(m)
    slices = [np.sort(by)[i * m // bins : (i + 1) * m // bins] for i in range(bins)]
    got = by[seqs]
    within = not ordering.kind.endswith("_x2")

    def fits(at: int, left: frozenset[int]) -> bool:
        if at == m:
            return True
        for i in sorted(left):
            part = got[at : at + len(slices[i])]
            if not np.array_equal(np.sort(part), slices[i]):
                continue
            if within and not np.all(np.diff(part) >= 0):
                continue
            if fits(at + len(slices[i]), left - {i}):
                return True
        return False

    assert fits(0, frozenset(i for i, s in enumerate(slices) if len(s))), "not RETURNN's bins"


@settings(max_examples=3, deadline=None)
@given(cases(), st.integers(1, 6))
def test_a_sources_own_sort_key_makes_the_bins(case: dict, spread: int) -> None:
    """A source's ``order_lengths`` (RETURNN's ``int(duration * 100)``): the bins are those of
    the order sorted by it (as global planning sorts), the batches greedy cuts of that order by
    the length key; ``auto`` resolves to indexed; the contracts hold. Chunked, it is refused by
    name before; now planned (``tests/test_plan_indexed_own_sort_key.py``)."""
    n = len(case["lengths"]["data"])
    by = np.random.default_rng(spread).integers(0, spread * 3, n)
    fixed = {"chunking": None, "epoch_wise_filter": None, "partition_epoch": 1}
    options = PlanOptions(**{**case["options"], **fixed})
    given = PlanInputs(case["lengths"], options, order_lengths=by)
    assert resolve_planning(given).options.planning == "indexed"
    planner = IndexedPlanner(given)
    if options.distribution == "shard":  # random_seed_offset: each rank its own batch order
        order = planner.sub_epoch_order(1)
        admitted = np.flatnonzero(case["lengths"]["data"] >= options.min_seq_length)
        seqs = np.searchsorted(admitted, order)
        assert_returnns_bins(by[admitted], seqs, options.parsed_ordering)
        got = planner.global_plan(1, 1).batches
        np.testing.assert_array_equal(got.seqs, order)
        limits = batch_limits(options, ["data"], "data")
        np.testing.assert_array_equal(got.bounds, Batcher(limits, case["lengths"]).bounds(order))
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(
        lambda: IndexedPlanner(given), case["worlds"], cut, ordered=True, workers=()
    )
    chunked = replace(given, options=replace(options, chunking="6:4"))
    assert resolve_planning(chunked).options.planning == "indexed"


def test_padding_and_steps_match_global_plannings() -> None:
    """The same kind of order as global planning's (its bins, lengths sorted within): steps and
    padded frames within 2% of global planning's on a few thousand sequences (the benchmark
    measures 10^6: docs/planning.md)."""
    data = np.random.default_rng(3).lognormal(5, 0.6, 4_000).astype(np.int64) + 1
    for text in ("sort_bin_shuffle:.100", "sort_bin_shuffle_x2:.100"):
        options = PlanOptions(ordering=text, max_frames=3_000)
        plans = [p({"data": data}, options).global_plan(1, 4) for p in (IndexedPlanner, Planner)]
        steps = [p.steps for p in plans]
        padded = [
            sum(int(data[b.seqs[x:y]].max()) * (y - x) for x, y in pairwise(b.bounds.tolist()))
            for b in (p.batches for p in plans)
        ]
        assert abs(steps[0] / steps[1] - 1) <= 0.02 and abs(padded[0] / padded[1] - 1) <= 0.02


def test_index_and_refusals() -> None:
    """The node's index is the sequences by length (one key for both kinds, none shared with
    laplace's or sorted's); a source's own sort key is planned, with a mix too; chunking, a
    mix or both are planned."""
    base = {"max_frames": 100}
    keys = {index_key(PlanOptions(**base, ordering=o)) for o in ORDERINGS}
    assert len(keys) == 1
    others = ("laplace:.4", "sorted", "random")
    assert keys.isdisjoint(index_key(PlanOptions(**base, ordering=o)) for o in others)
    lengths = {"data": np.array([5, 3, 8, 2])}
    own_key = PlanInputs(
        lengths, PlanOptions(ordering="sort_bin_shuffle"), order_lengths=np.arange(4)
    )
    assert resolve_planning(own_key).options.planning == "indexed"
    mixed = replace(own_key, options=replace(own_key.options, mix={"a": 1.0}))
    assert resolve_planning(mixed).options.planning == "indexed"  # sorted by the key too
    for extra in ({"mix": {"a": 1.0}}, {"chunking": "4:2"}, {"mix": {"a": 1.0}, "chunking": 4}):
        assert PlanOptions(ordering="sort_bin_shuffle", **extra).resolved_planning == "indexed"


#: a mix's draws: the corpus lengths' seed, the ordering, more options, the world sizes
MIXED = (
    st.integers(0, 2**32 - 1),
    st.sampled_from(["sort_bin_shuffle:.5", "sort_bin_shuffle_x2:4:2"]),
    st.sampled_from([{}, {"partition_epoch": 2, "uneven": "pad"}, {"uneven": "drop"}]),
    st.lists(st.integers(1, 4), min_size=2, max_size=3),
)


@settings(max_examples=6, deadline=None)
@given(*MIXED)
def test_a_sharded_mix_keeps_every_contract(seed: int, text: str, extra: dict, worlds) -> None:
    """With a mix under ``shard`` (``SortBinsMix``): a sub-epoch's slots in the order, sorted
    within each bin but the ``_x2`` ones; every contract of ``check_plan_contracts`` over one
    full epoch, the mix's own check included (every corpus epoch once)."""
    data = np.random.default_rng(seed).integers(1, 30, 37)
    corpora = Corpora(("a", "b"), np.array([0, 15, 37]))
    options = PlanOptions(ordering=text, max_frames=60, mix={"a": 0.5, "b": 1.5}, **extra)
    assert options.resolved_planning == "indexed"

    def make() -> IndexedPlanner:
        return IndexedPlanner({"data": data}, options, corpora=corpora)

    assert isinstance(make().mix, SortBinsMix)
    epochs = range(1, options.partition_epoch + 1)
    check_plan_contracts(make, worlds, [0.5] * (len(worlds) - 1), epochs, workers=())


@settings(max_examples=3, deadline=None)
@given(*MIXED)
def test_a_chunked_sharded_mix_cuts_the_unchunked_slots_chunks(
    seed: int, text: str, extra: dict, worlds
) -> None:
    """Chunked (``ChunkedSortBinsMix``; ``auto``: indexed): on one rank each sub-epoch's slots
    are the unchunked plan's, in its order, each slot's chunks consecutive and in order; every
    contract of ``check_plan_contracts`` over one full epoch (every chunk of every slot once)."""
    data = np.random.default_rng(seed).integers(1, 30, 37)
    corpora = Corpora(("a", "b"), np.array([0, 15, 37]))
    plain = {"ordering": text, "max_frames": 60, "mix": {"a": 0.5, "b": 1.5}, **extra}
    options = PlanOptions(**plain, chunking="6:4")
    assert options.resolved_planning == "indexed"

    def make() -> IndexedPlanner:
        return IndexedPlanner({"data": data}, options, corpora=corpora)

    chunked, whole = make(), IndexedPlanner({"data": data}, PlanOptions(**plain), corpora=corpora)
    assert isinstance(chunked.mix, ChunkedSortBinsMix)
    epochs = range(1, options.partition_epoch + 1)
    for epoch in epochs:
        got, want = chunked.global_plan(epoch, 1).batches, whole.global_plan(epoch, 1).batches
        assert got.chunks is not None and got.uses is not None and want.uses is not None
        slots = list(zip(got.seqs.tolist(), got.uses.tolist()))
        starts = [i for i in range(len(slots)) if i == 0 or slots[i] != slots[i - 1]]
        assert [slots[i] for i in starts] == list(zip(want.seqs.tolist(), want.uses.tolist()))
        for a, b in pairwise([*starts, len(slots)]):
            assert got.chunks[a:b].tolist() == list(range(b - a))
    check_plan_contracts(make, worlds, [0.5] * (len(worlds) - 1), epochs, workers=())


SORT_BINS_CASES: dict[str, dict] = {
    "sort_bin_shuffle:.16 W3 split": {
        "options": {"ordering": "sort_bin_shuffle:.16", "max_seqs": 5, "max_frames": 900},
        "world": 3,
        "elastic": (4, 5),
    },
    "sort_bin_shuffle_x2:6:2 partition 2 W2 pad": {
        "options": {"ordering": "sort_bin_shuffle_x2:6:2", "max_frames": 1200,
                    "partition_epoch": 2, "uneven": "pad"},
        "world": 2,
        "elastic": (3, 3),
    },
    "sort_bin_shuffle:.20 random_seed_offset W4": {
        "options": {"ordering": "sort_bin_shuffle:.20", "max_frames": 1500,
                    "distribution": "random_seed_offset"},
        "world": 4,
    },
    "sort_bin_shuffle_x2:.10 files W3 drop": {
        "options": {"ordering": "sort_bin_shuffle_x2:.10", "max_frames": 1500, "uneven": "drop",
                    "distribution": "files"},
        "files": list(range(0, 301, 12)),
        "world": 3,
        "elastic": (2, 2),
    },
    "sort_bin_shuffle_x2:.10 mix W3": {
        "options": {"ordering": "sort_bin_shuffle_x2:.10", "max_frames": 1500,
                    "mix": {"a": 1.5, "c": 0.5}, "partition_epoch": 2},
        "world": 3,
        "elastic": (2, 2),
    },
    "sort_bin_shuffle:.8 files mix W2": {
        "options": {"ordering": "sort_bin_shuffle:.8", "max_frames": 1500,
                    "distribution": "files", "mix": {"a": 1.5, "c": 0.5}},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (2, 3),
    },
    "sort_bin_shuffle:.10 mix chunked W3": {
        "options": {"ordering": "sort_bin_shuffle:.10", "max_frames": 1500,
                    "mix": {"a": 1.5, "c": 0.5}, "chunking": "100:80", "partition_epoch": 2},
        "world": 3,
        "elastic": (2, 2),
    },
    "sort_bin_shuffle_x2:.12 own sort key W2 pad": {
        "options": {"ordering": "sort_bin_shuffle_x2:.12", "max_frames": 1500, "uneven": "pad",
                    "partition_epoch": 2},
        "own_sort_key": True,
        "world": 2,
        "elastic": (2, 3),
    },
}  # fmt: skip
SORT_BINS_GOLDEN = {
    "sort_bin_shuffle:.16 W3 split": (
        "622008992e77ff0d1a98202c7765cc11effd079795cbb2a12ee444aeaf1698ee"
    ),
    "sort_bin_shuffle_x2:6:2 partition 2 W2 pad": (
        "b6cd6e3cba6c10ecef57acb6997576ca6b5f2215dfe3e714e9dd6e8643a7e26c"
    ),
    "sort_bin_shuffle:.20 random_seed_offset W4": (
        "83c5674294e8fe02a56f5d54a62c490916c39d178dbba1838cfe51c96736c937"
    ),
    "sort_bin_shuffle_x2:.10 files W3 drop": (
        "a99a71104ccb8ad3364c7485c34f333086a6ac9d89c42483c76b282e533d84fe"
    ),
    "sort_bin_shuffle_x2:.10 mix W3": (
        "1e0fc02663500eb28dff961b6ce2023834167fa46336a51ac501c62bc60367e5"
    ),
    "sort_bin_shuffle:.8 files mix W2": (
        "0a8c0b04453da42533df5e2095ce6f07fd3e187f0b3eca6870ea3b9d05fe96b2"
    ),
    "sort_bin_shuffle_x2:.12 own sort key W2 pad": (
        "0ec87fbc09b29a6892b9df71fb5c15ead0d4837babfcb95e2c7710ff6fd3ae61"
    ),
    "sort_bin_shuffle:.10 mix chunked W3": (
        "375104d7da6c4f58a1d2a4e6f2da182e79d326da3a5db8527358f669b68225b8"
    ),
}


def test_sort_bins_golden_plans_are_pinned() -> None:
    """Added with sort_bin_shuffle under indexed planning (refused by it before: no plan of the
    current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in SORT_BINS_CASES.items()}
    assert got == SORT_BINS_GOLDEN, f"record: {got}"


def test_sub_epoch_parts_are_global_plannings_parts() -> None:
    """A sub-epoch is its part of the full epoch's order (``part_bounds``), as global planning
    cuts its order; the parts of a full epoch are every admitted sequence once."""
    data = np.random.default_rng(1).integers(1, 50, 101)
    planner = IndexedPlanner({"data": data}, PlanOptions(ordering="sort_bin_shuffle:.10",
                                                         partition_epoch=3))  # fmt: skip
    parts = [planner.sub_epoch_order(e) for e in (1, 2, 3)]
    assert [len(p) for p in parts] == [b - a for a, b in (part_bounds(101, 3, i) for i in range(3))]
    assert sorted(np.concatenate(parts).tolist()) == list(range(101))
    assert EpochIndex(4, 3).full_epoch == 1 and not np.array_equal(
        planner.sub_epoch_order(4), parts[0]
    )
