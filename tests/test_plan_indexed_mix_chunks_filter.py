"""``epoch_wise_filter`` with a chunked mix under ``laplace``/``buckets:N``
(``seqloader.plan.indexed.mix_chunks_filter``; hypothesis, pure numpy): each sub-epoch's
``(sequence, corpus epoch)`` slots are filtered once, as one set (RETURNN's ``max_mean_len``
selection by (length, sequence, corpus epoch)), for every rank and world size, and every chunk of
a kept slot is planned; a filtered slot is lost for the sub-epoch and counted.

Checked (``partition_epoch`` 1-3, 1-4 ranks, ``shard`` and ``random_seed_offset``, the length key
chunked or whole): no batch holds a chunk of a slot the filter leaves out; the sub-epoch's slots
are the kept set, computed from the unfiltered planner's slots with the filter both plannings
share; the report counts what it left out; every contract holds (``check_plan_contracts``: each
chunk of each kept slot once, equal steps, resume chains W -> W' -> W'', determinism);
``random_seed_offset``: every rank's copy is the one kept set. Golden digests pin the plans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import PlanOptions
from seqloader.plan.indexed.mix_chunks import ChunkedBucketMix
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest
from test_plan_indexed_mix_filter import cases, check_mix_filter, planner_of

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates


@st.composite
def chunked_cases(draw: st.DrawFn) -> dict:
    """The unchunked mix filter's cases, chunked with ``laplace``/``buckets:N``, 1-3 sub-epochs
    and chains of 1-4 ranks; the length key chunked or whole (another key chunked)."""
    case = draw(cases())
    options = case["options"]
    options["ordering"] = draw(
        st.sampled_from(["laplace:.4", "laplace:2", "buckets:2", "buckets:3"])
    )
    options["partition_epoch"] = draw(st.integers(1, 3))
    options["chunking"] = draw(st.sampled_from(["20:10", "12:12"]))
    if draw(st.booleans()):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        n = len(case["lengths"]["data"])  # a few lengths, each over classes of 1 to 5 chunks
        case["lengths"] = {"data": rng.integers(1, 16, n), "classes": rng.integers(1, 12, n)}
        mean = draw(st.sampled_from([4, 6.5]))  # cut inside a length held by several classes
        options["epoch_wise_filter"] = {
            k: {"max_mean_len": mean} for k in options["epoch_wise_filter"]
        }
        options.update(chunking={"classes": (4, 2)}, length_key="data")
    case["worlds"] = draw(st.sampled_from([[1, 2], [2], [3, 2], [4, 1, 3], [2, 4, 3]]))
    return case


@settings(max_examples=6, deadline=None)
@given(chunked_cases())
def test_chunked_bucket_mix_filter_keeps_one_set_per_sub_epoch_and_every_contract(
    case: dict,
) -> None:
    plain = planner_of(case, filtered=False)
    assert plain.options.resolved_planning == "indexed"
    assert isinstance(plain.mix, ChunkedBucketMix)
    check_mix_filter(case)


def test_a_cut_inside_one_length_keeps_its_lowest_slots_over_its_classes() -> None:
    """The length key whole: the classes of one length (one per chunk count) keep, together,
    the lowest (sequence, corpus epoch) of that length, not one class's slots first."""
    data = np.array([2, 2, 9, 9, 9, 9, 30, 30])
    classes = np.array([1, 1, 8, 2, 8, 2, 4, 4])  # length 9: two classes (4 and 1 chunks)
    options = PlanOptions(
        ordering="buckets:2", chunking={"classes": (2, 2)}, length_key="data",
        mix={"a": 1, "b": 1}, epoch_wise_filter={(1, 1): {"max_mean_len": 6}},
    )  # fmt: skip
    corpora = Corpora(("a", "b"), np.array([0, 4, 8]))
    planner = IndexedPlanner({"data": data, "classes": classes}, options, corpora=corpora)
    seqs, _ = planner.sub_epoch_slots(1)
    # RETURNN's search keeps 5 (the first count whose mean, 6.2, is over 6): of length 9 the
    # lowest three, 2, 3 and 4, though the class of 1 chunk (3 and 5) comes first
    assert sorted(seqs.tolist()) == [0, 1, 2, 3, 4]
    assert planner.filtered(1) == {"epoch_wise_filter max_mean_len=6 (epoch 1)": 3}


#: option sets refused before (a chunked laplace/buckets:N mix with the filter): recorded when
#: first planned, under ``seqloader-plan-indexed/11``; plans that move need a version bump
NEWLY_PLANNED_CASES: dict[str, dict] = {
    "chunked 80:40 mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": {
        "options": {"ordering": "laplace:.10", "chunking": "80:40", "max_frames": 1500,
                    "partition_epoch": 2, "mix": {"a": 0.5, "b": 1.5, "c": 1}, "seed": 1,
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}},
        "world": 3, "elastic": (2, 2), "elastic_again": (1, 4),
    },
    "chunked 60:60 mix buckets:3 W4 pad, epoch_wise_filter elastic -> W3": {
        "options": {"ordering": "buckets:3", "chunking": "60:60", "max_frames": 1800,
                    "uneven": "pad", "mix": {"a": 1, "b": "1/3", "c": 2}, "seed": 2,
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 120}}},
        "world": 4, "elastic": (2, 3),
    },
    "classes 20:10 mix laplace:.10 random_seed_offset partition 3 W2, epoch_wise_filter": {
        "options": {"ordering": "laplace:.10", "length_key": "data",
                    "chunking": {"classes": (20, 10)}, "max_frames": 2000, "partition_epoch": 3,
                    "distribution": "random_seed_offset", "mix": {"a": 1.5, "b": 0.5, "c": 1},
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 140}}, "seed": 3},
        "classes": True, "world": 2,
    },
}  # fmt: skip
NEWLY_PLANNED_GOLDEN = {
    "chunked 80:40 mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": (
        "0a1f8ae17b98826becc4423accce3470a33ea67a8ef1a26eea45d1f90cc2eea3"
    ),
    "chunked 60:60 mix buckets:3 W4 pad, epoch_wise_filter elastic -> W3": (
        "17e3e9d8f9c48d7360413553185b2bbf64a12fc49b88fd654503fe5c51a6d95b"
    ),
    "classes 20:10 mix laplace:.10 random_seed_offset partition 3 W2, epoch_wise_filter": (
        "30326ca9928bcec3078b3b4c36efc3ba607c9d8680c01128885cb0b0a1972649"
    ),
}


def test_newly_planned_golden_plans_are_pinned() -> None:
    got = {name: indexed_digest(case) for name, case in NEWLY_PLANNED_CASES.items()}
    assert got == NEWLY_PLANNED_GOLDEN, f"record: {got}"
