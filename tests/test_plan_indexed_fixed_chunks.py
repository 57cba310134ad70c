"""``planning="indexed"`` with chunking and the fixed orderings ``default``, ``reverse``,
``sorted`` and ``sorted_reverse``, and ``random`` (``seqloader.plan.indexed.fixed_chunks``;
hypothesis, pure numpy).

The batches are global planning's, batch for batch and chunk for chunk (the sub-epoch part of the
sequence order, each sequence's chunks in order, greedy cuts over the windows; per-key sizes,
``min_chunk_size``, per-key limits), so padding and steps are 1.0x global planning's; sharding,
``uneven`` and resume are indexed planning's, and every contract holds (``check_plan_contracts``).
The cuts are made once (in blocks of sequences: any block size gives the same cuts) and kept with
the node's index. ``random``: each epoch's keyed order, cut by every rank alike: global planning's
greedy chunk batches of that order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.admission import epoch_filters, mean_len_selection
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.fixed import FIXED_KINDS
from seqloader.plan.indexed.fixed_chunks import AdmittedSelect, chunked_cuts
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.planners import node_bucket_index
from test_plan_indexed import indexed_digest

CHUNKINGS = [
    {"chunking": {"data": (40, 20)}},
    {"chunking": {"data": (30, 30)}, "min_chunk_size": 8},
    {"chunking": {"data": (40, 20), "classes": (4, 2)}},  # both keys, the same count
]
LIMITS = [
    {"max_frames": 200},
    {"max_frames": {"*": 160, "classes": 30}},
    {"max_frames": 4000, "batch_cost": "quadratic:30"},
    {"max_frames": 120, "batch_cost": "packed"},
    {"max_frames": None, "max_seqs": 5},
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([30, 150])) + 1, size=n).astype(np.int64)
    chunking = draw(st.sampled_from(CHUNKINGS))
    classes = rng.integers(0, 12, size=n).astype(np.int64)
    if "classes" in str(chunking):  # 10x slower rate: the same chunks
        data -= data % 10
        classes = data // 10
    options = {
        "ordering": draw(st.sampled_from(FIXED_KINDS)),
        "max_seqs": draw(st.sampled_from([None, 4])),
        **draw(st.sampled_from(LIMITS)),
        **chunking,
        "max_seq_length": draw(st.sampled_from([None, 120])),
        "partition_epoch": draw(st.integers(1, 3)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "distribution": draw(st.sampled_from(["shard", "shard", "random_seed_offset"])),
    }
    return {
        "lengths": {"data": data, "classes": classes},
        "options": options,
        "worlds": draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)),
        "cuts": draw(st.lists(st.floats(0, 1), min_size=2, max_size=2)),
    }


def indexed(case: dict) -> IndexedPlanner:
    return IndexedPlanner(case["lengths"], PlanOptions(**case["options"], planning="indexed"))


@settings(max_examples=10, deadline=None)
@given(cases())
def test_chunk_batches_are_global_plannings_and_every_contract_holds(case: dict) -> None:
    """On one rank every sub-epoch's batches are global planning's exactly (sequences, chunks,
    bounds); on any world size the contracts hold, the chunks in plan order across resumes."""
    planner = indexed(case)
    reference = Planner(case["lengths"], PlanOptions(**case["options"]))
    for epoch in range(1, planner.options.partition_epoch + 1):
        got, want = planner.global_plan(epoch, 1).batches, reference.global_plan(epoch, 1).batches
        for a, b in ((got.seqs, want.seqs), (got.chunks, want.chunks), (got.bounds, want.bounds)):
            np.testing.assert_array_equal(a, b)
        assert planner.order_size(epoch) == reference.order_size(epoch)
    assert planner.filtered(1) == reference.filtered(1)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True, workers=())


@settings(max_examples=6, deadline=None)
@given(cases(), st.sampled_from(["random", "random:2"]))
def test_random_chunk_batches_are_greedy_cuts_of_its_order(case: dict, ordering: str) -> None:
    """``random``: each sub-epoch is global planning's chunk batches (``units.batches``: each
    sequence's chunks in turn, greedy over the windows) of the keyed order's part, the parts of a
    full epoch every admitted chunk once; every contract holds."""
    case["options"]["ordering"] = ordering
    shard = {**case, "options": {**case["options"], "distribution": "shard"}}
    planner = indexed(shard)  # random_seed_offset: these batches, in each rank's own order
    reference = Planner(case["lengths"], PlanOptions(**shard["options"]))
    for epoch in range(1, planner.options.partition_epoch + 1):
        got = planner.global_plan(epoch, 1).batches
        assert got.chunks is not None
        starts = np.flatnonzero(got.chunks == 0)  # every sequence starts at its chunk 0
        want = reference.units.batches(got.seqs[starts], 0, epoch)
        for a, b in ((got.seqs, want.seqs), (got.chunks, want.chunks), (got.bounds, want.bounds)):
            np.testing.assert_array_equal(a, b)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True, workers=())


@settings(max_examples=10, deadline=None)
@given(cases(), st.integers(1, 9))
def test_cuts_in_blocks_and_a_node_index_plan_alike(case: dict, block: int) -> None:
    """Cutting a block of sequences at a time (any size; a batch wider than the block widens
    it, one that starts inside a sequence restarts at its chunk) gives the one-pass cuts; a
    planner given the node's index (its columns, as a node maps them) plans the same shares."""
    options = PlanOptions(**case["options"], planning="indexed")
    planner = indexed(case)
    index, corpus = planner.index, planner.corpus
    assert planner.units is not None
    got = chunked_cuts(
        corpus.fixed_order(index),
        int(index.starts[-1]),
        options.partition_epoch,
        corpus.limits,
        corpus.fixed_chunking(),
        planner.units.stride,
        block,
    )
    for a, b in zip(got, (index.cuts, index.cut_firsts, index.cut_starts), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))
    node = BucketIndex.from_columns(node_bucket_index(case["lengths"], options).columns())
    mapped = IndexedPlanner(case["lengths"], options, index=node)
    world = case["worlds"][-1]
    for epoch in range(1, options.partition_epoch + 1):
        a, b = mapped.global_plan(epoch, world), planner.global_plan(epoch, world)
        for rank in range(world):
            x, y = a.rank_share(rank), b.rank_share(rank)
            np.testing.assert_array_equal(x.seqs, y.seqs)
            np.testing.assert_array_equal(x.chunks, y.chunks)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.booleans(), max_size=50), st.integers(1, 8))
def test_admitted_select_is_the_admitted_sequences_ascending(mask: list[bool], block: int) -> None:
    keep = np.array(mask, dtype=bool)
    select = AdmittedSelect(keep, len(keep), block)
    want = np.flatnonzero(keep)
    assert len(select) == len(want)
    at = np.arange(len(want))[::-1]
    np.testing.assert_array_equal(select[at], want[at])


@settings(max_examples=8, deadline=None)
@given(cases(), st.sampled_from([*FIXED_KINDS, "random"]), st.sampled_from([7, 0.6]))
def test_a_fixed_random_subset_is_returnns_and_ordered_as_global_planning(
    case: dict, ordering: str, subset: int | float
) -> None:
    """``fixed_random_subset`` keeps RETURNN's subset (global planning's admitted sequences and
    filtered counts); the fixed orders start from its shuffled order as global planning does
    (the same batches, chunked too; ``random``: a keyed order of the subset), and every contract
    holds."""
    options = {**case["options"], "ordering": ordering, "fixed_random_subset": subset}
    if subset == 7:  # unchunked: whole sequences that fit every limit
        options = {k: v for k, v in options.items() if k not in ("chunking", "min_chunk_size")}
        options["max_seq_length"] = 100
    case = {**case, "options": options}
    planner = indexed(case)
    reference = Planner(case["lengths"], PlanOptions(**options))
    assert planner.filtered(1) == reference.filtered(1)
    np.testing.assert_array_equal(planner.admission.admitted, reference.admission.admitted)
    for epoch in range(1, planner.options.partition_epoch + 1):
        got, want = planner.global_plan(epoch, 1).batches, reference.global_plan(epoch, 1).batches
        if ordering != "random" and options["distribution"] == "shard":
            np.testing.assert_array_equal(got.seqs, want.seqs)
            np.testing.assert_array_equal(got.bounds, want.bounds)
            if got.chunks is not None:
                np.testing.assert_array_equal(got.chunks, want.chunks)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True, workers=())


FILTERS = [
    {(1, 2): {"max_mean_len": 40}},
    {(2, None): {"max_mean_len": 25}, (1, 3): {"max_mean_len": 60}},
]


@settings(max_examples=9, deadline=None)
@given(cases(), st.sampled_from([*FIXED_KINDS, "random"]), st.sampled_from(FILTERS), st.booleans())
def test_epoch_wise_filter_keeps_returnns_selection_of_each_part(
    case: dict, ordering: str, spec: dict, whole: bool
) -> None:
    """``epoch_wise_filter`` with fixed and random orders: each sub-epoch keeps RETURNN's
    ``mean_len_selection`` of its part, in the part's order (the fixed orders: global planning's
    batches and filtered counts, chunked too; ``random``: the selection of its own unfiltered
    part), counted per epoch; every contract holds."""
    options = {**case["options"], "ordering": ordering, "epoch_wise_filter": spec}
    if whole:  # unchunked: whole sequences that fit every limit
        options = {k: v for k, v in options.items() if k not in ("chunking", "min_chunk_size")}
        options["max_seq_length"] = 100
    case = {**case, "options": options}
    planner = indexed(case)
    parts = planner.options.partition_epoch
    if options["distribution"] == "shard" and ordering != "random":
        reference = Planner(case["lengths"], PlanOptions(**options))
        for epoch in range(1, 2 * parts + 1):
            got = planner.global_plan(epoch, 1).batches
            want = reference.global_plan(epoch, 1).batches
            np.testing.assert_array_equal(got.seqs, want.seqs)
            np.testing.assert_array_equal(got.bounds, want.bounds)
            assert planner.filtered(epoch) == reference.filtered(epoch)
    if ordering == "random" and options.get("chunking") is None:
        plain = indexed({**case, "options": {**options, "epoch_wise_filter": None}})
        for epoch in range(1, parts + 1):
            part = plain.sub_epoch_order(epoch)
            for mean in epoch_filters(planner.options.epoch_wise_filter, epoch):
                part = part[mean_len_selection(part, case["lengths"]["data"], mean)]
            np.testing.assert_array_equal(planner.sub_epoch_order(epoch), part)
    cut = case["cuts"][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: indexed(case), case["worlds"], cut, ordered=True, workers=())


FIXED_CHUNK_CASES: dict[str, dict] = {
    "chunked 100:50 sorted W3 split elastic -> W2": {
        "options": {"ordering": "sorted", "max_frames": 600, "max_seqs": 8,
                    "chunking": "100:50"},
        "world": 3,
        "elastic": (4, 2),
    },
    "chunked 80:40 default partition 2 W4 pad, min_chunk_size, filter": {
        "options": {"ordering": "default", "max_frames": 500, "partition_epoch": 2,
                    "uneven": "pad", "chunking": "80:40", "min_chunk_size": 30,
                    "max_seq_length": 350},
        "world": 4,
    },
    "chunked 60:30 random:2 partition 2 W3 split elastic -> W4": {
        "options": {"ordering": "random:2", "max_frames": 400, "partition_epoch": 2,
                    "chunking": "60:30", "seed": 3},
        "world": 3,
        "elastic": (3, 4),
    },
    "chunked 70:70 random W2 random_seed_offset pad": {
        "options": {"ordering": "random", "max_frames": 500, "max_seqs": 6, "uneven": "pad",
                    "chunking": "70:70", "distribution": "random_seed_offset", "seed": 4},
        "world": 2,
    },
    "sorted_reverse W3 split, fixed_random_subset": {
        "options": {"ordering": "sorted_reverse", "max_frames": 1500, "max_seqs": 5,
                    "fixed_random_subset": 0.6, "partition_epoch": 2},
        "world": 3,
        "elastic": (2, 2),
    },
    "chunked 90:45 random W2 split, fixed_random_subset": {
        "options": {"ordering": "random", "max_frames": 600, "chunking": "90:45",
                    "fixed_random_subset": 200, "seed": 2},
        "world": 2,
    },
    "sorted partition 2 W3 split, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "sorted", "max_frames": 1500, "partition_epoch": 2,
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 120}}},
        "world": 3,
        "elastic": (2, 2),
    },
    "chunked 80:40 random W2 pad, epoch_wise_filter": {
        "options": {"ordering": "random", "max_frames": 600, "chunking": "80:40",
                    "uneven": "pad", "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}},
        "world": 2,
    },
    "chunked 100:50 sorted W3 pad, fixed_random_subset": {
        "options": {"ordering": "sorted", "max_frames": 600, "chunking": "100:50",
                    "uneven": "pad", "fixed_random_subset": 0.7},
        "world": 3,
    },
}  # fmt: skip
FIXED_CHUNK_GOLDEN = {
    "chunked 100:50 sorted W3 split elastic -> W2": (
        "817fda35d439ba1c1eb6ae4208340279902b87b5c0ac96ed91c1fb1f04a493f2"
    ),
    "chunked 80:40 default partition 2 W4 pad, min_chunk_size, filter": (
        "9b2558004072dbf3b3a1c1d889d68f50d06caddf6222a63f96df692ff99a05ed"
    ),
    "chunked 60:30 random:2 partition 2 W3 split elastic -> W4": (
        "0a0fbb6bc87e9f7502b0bd3d459e6ca3852982bb1ad6bc75932472fb36071139"
    ),
    "chunked 70:70 random W2 random_seed_offset pad": (
        "7af656ad9d8fdcb50e129b94fb80180bd29ff0dd43017455db2239d74c1fe5e0"
    ),
    "sorted partition 2 W3 split, epoch_wise_filter elastic -> W2": (
        "6af8587a1f00303e7a748cab9e1bd21209e1c6233958c4d8fa5e237b383780bd"
    ),
    "chunked 80:40 random W2 pad, epoch_wise_filter": (
        "08ec1b89b65d66860bc4b5ad6cb798d9aaca0fe2e9056c3b43aa8b021e0dc6da"
    ),
    "chunked 100:50 sorted W3 pad, fixed_random_subset": (
        "b58cf9c1adf8016b4abb9fb0c7c6e1a119ff532d45a916e58ae75cd010accb76"
    ),
    "sorted_reverse W3 split, fixed_random_subset": (
        "78fd8ad568784e75d0b55f75478e21e15a372eece90dc302179280500c66a661"
    ),
    "chunked 90:45 random W2 split, fixed_random_subset": (
        "90142c9287f04fb7e7702ae7f4cb40d9c9d676329cf8449d1f39e7b5217454bd"
    ),
}


def test_chunked_fixed_golden_plans_are_pinned() -> None:
    """Added with chunked fixed and random orderings, their subsets and filters (refused before under indexed planning: no plan of
    the current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in FIXED_CHUNK_CASES.items()}
    assert got == FIXED_CHUNK_GOLDEN, f"record: {got}"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=40),
    st.booleans(),
)
def test_batch_widths_are_unique_and_maximum_at(pairs: list, ascending: bool) -> None:
    """``_batch_widths`` (runs of ascending batches read without a sort, as a rank's share asks
    them) answers what ``np.unique(return_inverse=True)`` and ``np.maximum.at`` answer, batches
    in any order."""
    from seqloader.plan.indexed.fixed_chunks import _batch_widths

    if ascending:
        pairs = sorted(pairs, key=lambda p: p[0])
    bucket, pos = (np.array(x, np.int64) for x in zip(*pairs, strict=True))
    batches, inverse = np.unique(bucket, return_inverse=True)
    width = np.zeros(len(batches), np.int64)
    np.maximum.at(width, inverse, pos + 1)
    got = _batch_widths(bucket, pos)
    for a, b in zip(got, (batches, inverse, width), strict=True):
        assert a.dtype == np.int64 and a.tolist() == b.tolist()
