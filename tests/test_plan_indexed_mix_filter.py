"""``epoch_wise_filter`` with a ``mix`` under indexed planning (``laplace``, ``buckets:N``,
the fixed orders, ``random``, ``sort_bin_shuffle``, these chunked too; ``distribution="shard"`` or ``"random_seed_offset"``; hypothesis;
pure numpy): in the epochs of a filter's range each sub-epoch's
``(sequence, corpus epoch)`` slots are filtered once, as one set (RETURNN's ``max_mean_len``
selection by (length, sequence, corpus epoch)), for every rank and world size; a filtered slot's
corpus epoch is not made up later, and what is left out is counted per epoch.

Checked: no batch holds a slot the filter leaves out of its sub-epoch (fillers included); the
sub-epoch plans exactly the kept set, computed here from the unfiltered planner's slots with the
filter both plannings share (``admission.mean_filtered``); the report counts what it left out;
every contract holds (``check_plan_contracts``: the mix's exactly-once less the filtered slots,
equal steps, resume chains W -> W' -> W'', determinism); the mix check still finds a slot used
twice, lost, or filtered; ``random_seed_offset``: every rank's order is the one kept set, each
corpus epoch once per rank less the filtered slots. The other mixes stay refused by name."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.admission import epoch_filters, mean_filtered, mean_len_keep
from seqloader.plan.indexed.histogram import build_bucket_index
from seqloader.plan.indexed.mix_filter import MixKept
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest
from test_plan_indexed_files_filter import check_filtered

ORDERINGS = [
    "laplace:.6",
    "buckets:3",
    "default",
    "sorted_reverse",
    "random",
    "random:2",
    "sort_bin_shuffle:.4",
    "sort_bin_shuffle_x2:.4",
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(12, 140))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([30, 120])) + 1, size=n).astype(np.int64)
    cut = draw(st.integers(4, n - 4))
    first = draw(st.integers(1, 2))
    options = {
        "ordering": (ordering := draw(st.sampled_from(ORDERINGS))),
        "chunking": None if ordering[0] in "lb" else draw(st.sampled_from([None, "20:10"])),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 9))),
        "max_frames": draw(st.sampled_from([None, 400])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 5)),
        "distribution": draw(st.sampled_from(["shard", "random_seed_offset"])),
        "mix": {"a": draw(st.sampled_from([0.5, 1, 1.5])), "b": draw(st.sampled_from([1, 2.5]))},
        "epoch_wise_filter": {
            (first, draw(st.sampled_from([first, 3, None]))): {
                "max_mean_len": draw(st.sampled_from([5, 12.5, 40]))
            }
        },
    }
    worlds = draw(st.sampled_from([[2], [3, 2], [2, 4, 3]]))
    corpora = Corpora(("a", "b"), np.array([0, cut, n]))
    return {"lengths": {"data": data}, "options": options, "corpora": corpora, "worlds": worlds}


def planner_of(case: dict, filtered: bool = True) -> IndexedPlanner:
    options = dict(case["options"])
    if not filtered:
        options.pop("epoch_wise_filter")
    return IndexedPlanner(case["lengths"], PlanOptions(**options), corpora=case["corpora"])


def pairs(seqs: np.ndarray, uses: np.ndarray) -> np.ndarray:
    return np.asarray(uses, dtype=np.int64) * 1_000_000 + np.asarray(seqs, dtype=np.int64)


def kept_set(case: dict, plain: IndexedPlanner, epoch: int) -> tuple[np.ndarray, int]:
    """(the slots sub-epoch ``epoch`` keeps as pairs, sorted; how many the filter left out),
    from the unfiltered planner's slots: ordered by (sequence, corpus epoch), so the filter's
    (length, index) order is (length, sequence, corpus epoch)."""
    seqs, uses = plain.sub_epoch_slots(epoch)
    assert uses is not None
    order = np.lexsort((uses, seqs))
    seqs, uses = seqs[order], uses[order]
    spec = PlanOptions(**case["options"]).epoch_wise_filter
    by = case["lengths"]["data"][seqs]
    kept, reasons = mean_filtered(spec, epoch, np.arange(len(seqs)), by)  # type: ignore[arg-type]
    return np.sort(pairs(seqs[kept], uses[kept])), sum(reasons.values())


@settings(max_examples=12, deadline=None)
@given(cases())
def test_mix_filter_keeps_one_set_per_sub_epoch_and_every_contract(case: dict) -> None:
    check_mix_filter(case)


def check_mix_filter(case: dict) -> None:
    """The module doc's checks on one case (its kept sets from the unfiltered planner's slots,
    two full epochs)."""
    plain = planner_of(case, filtered=False)
    parts = case["options"]["partition_epoch"]
    epochs = range(1, 2 * parts + 1)  # two full epochs: the streams move on past filtered slots
    expected = {e: kept_set(case, plain, e) for e in epochs}

    def planned(planner: IndexedPlanner, epoch: int, world: int) -> np.ndarray:
        seqs, uses = planner.sub_epoch_slots(epoch)
        return np.sort(pairs(seqs, uses))  # type: ignore[arg-type]

    factory = partial(planner_of, case)
    members = lambda batches: pairs(batches.seqs, batches.uses)  # noqa: E731
    checked = check_filtered(factory, case["worlds"], expected, members, planned)
    planner = factory()
    for epoch in epochs if case["worlds"][0] not in checked.refused else ():
        kept = expected[epoch][0]
        here = [n for _, n, _ in planner.corpus_plan(epoch)]
        assert sum(here) == len(kept)
    if case["options"]["distribution"] == "random_seed_offset":  # each rank its copy of the set
        each_rank_once_per_corpus_epoch(planner, expected, case["worlds"][0])


def each_rank_once_per_corpus_epoch(
    planner: IndexedPlanner, expected: dict[int, tuple[np.ndarray, int]], world: int
) -> None:
    """``random_seed_offset``: every rank's order of a sub-epoch is the one kept set, and over
    each full epoch the mix's own check (filtered slots left out) holds on every rank."""
    mix, parts = planner.mix, planner.options.partition_epoch
    assert mix is not None
    for f in range(max(expected) // parts):
        for rank in range(world):
            listed = [planner.sub_epoch_slots(f * parts + p + 1, rank) for p in range(parts)]
            for p, (seqs, uses) in enumerate(listed):
                kept = expected[f * parts + p + 1][0]
                np.testing.assert_array_equal(np.sort(pairs(seqs, uses)), kept)  # type: ignore[arg-type]
            seqs = np.concatenate([s for s, _ in listed])
            uses = np.concatenate([u for _, u in listed if u is not None])
            check = mix.check([f], seqs, uses)
            assert check.ok, check.problems


def _case() -> tuple[IndexedPlanner, np.ndarray, np.ndarray]:
    """A filtered sharded mix (rate 1.5 and 0.5) and full epoch 1's kept slots."""
    lengths = (np.arange(90, dtype=np.int64) * 37 + 5) % 60 + 1
    options = PlanOptions(
        ordering="laplace:.5", max_frames=400, partition_epoch=2, mix={"a": 1.5, "b": 0.5},
        epoch_wise_filter={(1, 2): {"max_mean_len": 20}},
    )  # fmt: skip
    planner = IndexedPlanner(
        {"data": lengths}, options, corpora=Corpora(("a", "b"), np.array([0, 50, 90]))
    )
    slots = [planner.sub_epoch_slots(e) for e in (1, 2)]
    seqs = np.concatenate([s for s, _ in slots])
    uses = np.concatenate([u for _, u in slots if u is not None])
    return planner, seqs, uses


def test_the_mix_check_accepts_filtered_slots_and_finds_a_slot_twice_lost_or_filtered() -> None:
    planner, seqs, uses = _case()
    mix = planner.mix
    assert mix is not None and mix.check([0], seqs, uses).problems == []
    gone_s, gone_u = mix.left_out(0, 2)  # type: ignore[attr-defined]
    assert len(gone_s) == sum(sum(planner.filtered(e).values()) for e in (1, 2)) > 0
    assert mix.check([0], seqs[1:], uses[1:]).problems  # lost
    assert mix.check([0], np.r_[seqs, seqs[:1]], np.r_[uses, uses[:1]]).problems  # twice
    swapped_s, swapped_u = np.r_[seqs[1:], gone_s[:1]], np.r_[uses[1:], gone_u[:1]]
    assert mix.check([0], swapped_s, swapped_u).problems  # a filtered slot instead of a kept one


@pytest.mark.parametrize(
    "more, named",
    [
        (
            {"ordering": "laplace:.4", "chunking": "20:10", "planning": "global"},
            "planning='global'",
        ),
        ({"ordering": "laplace:.4", "planning": "global"}, "planning='global'"),
    ],
)
def test_the_mixes_not_planned_are_refused_by_name(more: dict, named: str) -> None:
    wise = {(1, 1): {"max_mean_len": 5}}
    with pytest.raises(OptionError, match=f"epoch_wise_filter with mix: .*{named}"):
        PlanOptions(mix={"a": 1}, epoch_wise_filter=wise, **more)
    for distribution, chunking in itertools.product(
        ("shard", "random_seed_offset", "files"), (None, "20:10")
    ):
        planned = PlanOptions(
            mix={"a": 1},
            epoch_wise_filter=wise,
            ordering="buckets:3",
            distribution=distribution,
            chunking=chunking,
        )
        assert planned.resolved_planning == "indexed"


#: option sets both plannings refused before this planning: recorded when first planned
NEWLY_PLANNED_CASES: dict[str, dict] = {
    "mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": {
        "options": {"ordering": "laplace:.10", "max_frames": 2000, "partition_epoch": 2,
                    "mix": {"a": 0.5, "b": 1.5, "c": 1},
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}, "seed": 1},
        "world": 3,
        "elastic": (2, 2),
        "elastic_again": (1, 4),
    },
    "mix buckets:3 W4 pad, epoch_wise_filter elastic -> W3": {
        "options": {"ordering": "buckets:3", "max_frames": 1800, "uneven": "pad",
                    "mix": {"a": 1, "b": "1/3", "c": 2},
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 120}}, "seed": 2},
        "world": 4,
        "elastic": (2, 3),
    },
    "mix laplace:.10 random_seed_offset partition 2 W3, epoch_wise_filter": {
        "options": {"ordering": "laplace:.10", "max_frames": 2000, "partition_epoch": 2,
                    "distribution": "random_seed_offset", "mix": {"a": 1.5, "b": 0.5, "c": 1},
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 140}}, "seed": 3},
        "world": 3,
    },
    "mix sorted W3 drop, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "sorted", "max_frames": 2000, "uneven": "drop",
                    "mix": {"a": 0.5, "b": 1.5, "c": 1},
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 90}}},
        "world": 3,
        "elastic": (2, 2),
    },
    "mix random partition 2 W2 split, epoch_wise_filter elastic -> W3": {
        "options": {"ordering": "random", "max_frames": 1500, "partition_epoch": 2,
                    "mix": {"a": 1, "b": 2, "c": "1/3"},
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 110}}, "seed": 5},
        "world": 2,
        "elastic": (2, 3),
    },
    "mix sort_bin_shuffle_x2:.12 W3 pad, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "sort_bin_shuffle_x2:.12", "max_frames": 1500, "uneven": "pad",
                    "mix": {"a": 1.5, "b": 1, "c": 0.5},
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 100}}, "seed": 6},
        "world": 3,
        "elastic": (2, 2),
    },
    "chunked 80:40 mix random W3 split, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "random", "chunking": "80:40", "seed": 7, "max_frames": 1500,
                    "mix": {"a": 0.5, "b": 1, "c": 2}, "epoch_wise_filter": {(1, 1): {
                        "max_mean_len": 120}}},
        "world": 3, "elastic": (2, 2),
    },
}  # fmt: skip
NEWLY_PLANNED_GOLDEN = {
    "mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": (
        "9cb0a6658ef9d58f9abe84c5e1b9d8135495c9895f33d0bb467179642d96c683"
    ),
    "mix buckets:3 W4 pad, epoch_wise_filter elastic -> W3": (
        "504346388c0303693c5f9a4b05595e0cb0267f6f054b47502b4dfe58e4d7c34d"
    ),
    "mix laplace:.10 random_seed_offset partition 2 W3, epoch_wise_filter": (
        "7e4d495efcc2a14e7f5fd9969869f08d53dac7a616a3c70e5ba4921bd9f64d5f"
    ),
    "mix sorted W3 drop, epoch_wise_filter elastic -> W2": (
        "f8fa85d06fb0d7948bba33d3acd441e1b7ee70bcc9da153ac7e6fb9892cb3da3"
    ),
    "mix random partition 2 W2 split, epoch_wise_filter elastic -> W3": (
        "dc2e1be7948e5f94f3315d4ca8c2bd79a19a24d8d685c46e46ee71209d49c9b2"
    ),
    "mix sort_bin_shuffle_x2:.12 W3 pad, epoch_wise_filter elastic -> W2": (
        "07b92dd68b6e58f66743412525ee3fa0555180cb6b89a272d41b97212cd61e13"
    ),
    "chunked 80:40 mix random W3 split, epoch_wise_filter elastic -> W2": (
        "28f4fbff160d708901404a0e0c4b5c3151e7b0ce39510d6c4841613a1c2122e6"
    ),
}


def test_newly_planned_golden_plans_are_pinned() -> None:
    """Recorded when these sets were first planned (``seqloader-plan-indexed/10``); bump
    ``INDEXED_ALGORITHM`` and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in NEWLY_PLANNED_CASES.items()}
    assert got == NEWLY_PLANNED_GOLDEN, f"record: {got}"


@pytest.mark.parametrize("ordering", ["default", "random", "sort_bin_shuffle:.4"])
def test_a_chunked_mix_with_the_length_key_unchunked_filters_by_its_lengths(ordering: str) -> None:
    """The length key unchunked: the mix's index holds (length, chunk count) class values
    (``length * per + chunks``); the filter keeps the shortest by the length key, not by them.
    Sub-epoch 2's slots, lengths 5 and 3, have a mean of 4 <= 5: both kept."""
    options = PlanOptions(
        ordering=ordering, chunking={"classes": (4, 2)}, length_key="data", mix={"a": 0.5},
        epoch_wise_filter={(1, 3): {"max_mean_len": 5}},
    )  # fmt: skip
    lengths = {"data": np.array([7, 6, 5, 3]), "classes": np.array([4, 1, 1, 1])}
    planner = IndexedPlanner(lengths, options, corpora=Corpora(("a",), np.array([0, 4])))
    plain = IndexedPlanner(
        lengths, dataclasses.replace(options, epoch_wise_filter=None), corpora=planner.corpora
    )
    for epoch in (1, 2, 3):
        seqs, _ = plain.sub_epoch_slots(epoch)
        kept, reasons = mean_filtered(
            options.epoch_wise_filter, epoch, np.sort(seqs), lengths["data"]
        )
        assert sorted(planner.sub_epoch_slots(epoch)[0].tolist()) == kept.tolist()
        assert planner.filtered(epoch) == reasons


def own_key_kept(
    planner: IndexedPlanner, plain: IndexedPlanner, epoch: int, key: np.ndarray
) -> set:
    """The filter's meaning on the unfiltered sub-epoch's (sequence, corpus epoch) slots, by
    ``key`` (the source's own sort key, else the length key), as unmixed plans and the files mix
    filter: each ``max_mean_len`` in turn keeps the shortest by (key, sequence, corpus epoch)."""
    seqs, uses = plain.sub_epoch_slots(epoch)
    uses = np.zeros(len(seqs), np.int64) if uses is None else np.asarray(uses, np.int64)
    for mean in epoch_filters(planner.options.epoch_wise_filter, epoch):
        ties = np.argsort(np.lexsort((uses, seqs)))
        keep = mean_len_keep(key[seqs], ties, mean)
        seqs, uses = seqs[keep], uses[keep]
    return set(zip(seqs.tolist(), uses.tolist()))


def planned_kept(planner: IndexedPlanner, epoch: int) -> set:
    seqs, uses = planner.sub_epoch_slots(epoch)
    uses = np.zeros(len(seqs), np.int64) if uses is None else np.asarray(uses, np.int64)
    return set(zip(seqs.tolist(), uses.tolist()))


@pytest.mark.parametrize("ordering", ["default", "reverse", "random"])
@pytest.mark.parametrize("chunking", [None, "20:10"])
def test_a_shard_mix_filters_by_the_sources_own_sort_key(
    ordering: str, chunking: str | None
) -> None:
    """A source's own sort key (``order_lengths``) runs against its lengths: the filter keeps
    the shortest by the own key (as unmixed plans and the files mix do), not by the lengths.
    Lengths 1..6 ascending, key descending: max_mean_len 2 keeps sequences 3, 4, 5 (keys 3, 2,
    1) by the key; by the lengths it kept 0, 1, 2."""
    options = PlanOptions(
        ordering=ordering, chunking=chunking, mix={"a": 1}, seed=3,
        epoch_wise_filter={(1, 1): {"max_mean_len": 2}},
    )  # fmt: skip
    lengths, key = {"data": np.arange(1, 7)}, np.arange(6, 0, -1)
    corpora = Corpora(("a",), np.array([0, 6]))
    planner = IndexedPlanner(lengths, options, corpora=corpora, order_lengths=key)
    assert planned_kept(planner, 1) == {(3, 0), (4, 0), (5, 0)}
    unmixed = dataclasses.replace(options, mix=None)
    seqs, _ = IndexedPlanner(lengths, unmixed, order_lengths=key).sub_epoch_slots(1)
    assert sorted(seqs.tolist()) == [3, 4, 5]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(8, 60),
    seed=st.integers(0, 2**32 - 1),
    ordering=st.sampled_from(["default", "reverse", "random", "sorted", "sort_bin_shuffle:.4"]),
    chunking=st.sampled_from([None, "20:10"]),
    own=st.booleans(),
    mean=st.sampled_from([5, 12.5, 20]),
    parts=st.integers(1, 2),
    distribution=st.sampled_from(["shard", "random_seed_offset"]),
)
def test_a_shard_mix_keeps_the_set_the_filter_means(
    n: int, seed: int, ordering: str, chunking: str | None, own: bool, mean: float, parts: int,
    distribution: str,
) -> None:  # fmt: skip
    """The shard mix's kept slots are the filter's meaning on its unfiltered slots by the
    source's own sort key where it gives one (else the length key), every ordering."""
    rng = np.random.default_rng(seed)
    lengths = {"data": rng.integers(1, 31, size=n).astype(np.int64)}
    key = rng.integers(1, 31, size=n).astype(np.int64) if own else None
    cut = int(rng.integers(2, n - 2))
    options = PlanOptions(
        ordering=ordering, chunking=chunking, mix={"a": 1.5, "b": 0.5}, seed=seed % 7,
        partition_epoch=parts, distribution=distribution,
        epoch_wise_filter={(1, 2): {"max_mean_len": mean}},
    )  # fmt: skip
    corpora = Corpora(("a", "b"), np.array([0, cut, n]))
    planner = IndexedPlanner(lengths, options, corpora=corpora, order_lengths=key)
    plain = IndexedPlanner(
        lengths, dataclasses.replace(options, epoch_wise_filter=None), corpora=corpora,
        order_lengths=key,
    )  # fmt: skip
    by = lengths["data"] if key is None else key
    for epoch in (1, 2):
        assert planned_kept(planner, epoch) == own_key_kept(planner, plain, epoch, by)


_LISTING = MixKept.keeps


def listing_callers(
    monkeypatch: pytest.MonkeyPatch, options: PlanOptions, index: object = None
) -> set[str]:
    """Who asks the listing path's ``MixKept.keeps`` (the left-out slots listed and matched
    against the order; a kept set with a rule overrides it) while epochs 1-2 are planned."""
    seen: set[str] = set()

    def spy(kept: MixKept, seqs: np.ndarray, uses: np.ndarray) -> np.ndarray:
        frame = sys._getframe(2)  # past ``kept_slots``
        seen.add(f"{type(frame.f_locals['self']).__name__}.{frame.f_code.co_name}")
        return _LISTING(kept, seqs, uses)

    monkeypatch.setattr(MixKept, "keeps", spy)
    lengths = np.array([1, 9, 4, 4, 7, 2, 9, 3, 5, 8, 2, 6, 4, 9, 1, 5, 2])
    planner = IndexedPlanner({"data": lengths}, options, index=index,
                             corpora=Corpora(("a", "b"), np.array([0, 6, 17])))  # fmt: skip
    for epoch in (1, 2):
        planner.global_plan(epoch, 2)
        planner.filtered(epoch)
    return seen


LISTED_KINDS = ["random", "default", "reverse", "sorted", "sorted_reverse", "sort_bin_shuffle:.4",
                "sort_bin_shuffle_x2:.4"]  # fmt: skip


@pytest.mark.parametrize("chunking", [None, "6:3"])
def test_no_filtered_mix_keeps_by_listing(
    monkeypatch: pytest.MonkeyPatch, chunking: str | None
) -> None:
    """Which filtered mixes still keep by listing (``MixKept.keeps``): none of the orderings
    that list their sub-epoch (the kept set's rule). The last that did, ``sorted`` kinds over a
    prebuilt index whose first bucket holds two lengths (``ValueShardMix.listed_cut``,
    ``ChunkedValueMix.listed_slots``: the rule from counts needs one bucket per value), is
    refused by the index check (such an index is not the order's either)."""
    wise = {(1, 2): {"max_mean_len": 4}}
    for kind in LISTED_KINDS:
        options = PlanOptions(ordering=kind, chunking=chunking, mix={"a": 1.5, "b": 0.5},
                              epoch_wise_filter=wise, planning="indexed")  # fmt: skip
        assert listing_callers(monkeypatch, options) == set(), kind
    options = PlanOptions(ordering="sorted", chunking=chunking, mix={"a": 1.5, "b": 0.5},
                          epoch_wise_filter=wise, planning="indexed")  # fmt: skip
    lengths = np.array([1, 9, 4, 4, 7, 2, 9, 3, 5, 8, 2, 6, 4, 9, 1, 5, 2])
    two_in_first = build_bucket_index(lengths, np.unique(lengths)[2:])  # lengths 1 and 2
    with pytest.raises(OptionError, match="does not match its lengths and options"):
        listing_callers(monkeypatch, options, two_in_first)


@pytest.mark.parametrize("chunking", [None, "6:3"])
def test_an_index_whose_first_bucket_holds_two_lengths_between_equal_ends_is_refused(
    chunking: str | None,
) -> None:
    """The index check reads the whole first bucket, not only its first and last member: here
    they are both 2 with a 1 between them, which a sorted order would read by index (not by
    length) and the filter's rule would count as a 2."""
    lengths = np.array([2, 9, 4, 4, 7, 1, 9, 3, 5, 8, 6, 4, 9, 5, 2])
    index = build_bucket_index(lengths, np.unique(lengths)[2:])  # first bucket: 2, 1, 2
    assert np.asarray(lengths[index.members[: index.starts[1]]]).tolist() == [2, 1, 2]
    for kind in ("sorted", "sorted_reverse", "sort_bin_shuffle:.4"):
        options = PlanOptions(ordering=kind, chunking=chunking, mix={"a": 1.5, "b": 0.5},
                              max_frames=40, epoch_wise_filter={(1, 2): {"max_mean_len": 4}},
                              planning="indexed")  # fmt: skip
        with pytest.raises(OptionError, match="does not match its lengths and options"):
            IndexedPlanner({"data": lengths}, options, index=index,
                           corpora=Corpora(("a", "b"), np.array([0, 6, 15])))  # fmt: skip
