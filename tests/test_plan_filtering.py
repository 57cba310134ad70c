"""Admission (C6, nothing silent): ``max_seq_length`` / ``min_seq_length`` filter exactly the
sequences they name and count them; a sequence that fits no batch is an error naming it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import Planner, PlanOptions


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3000), min_size=1, max_size=300),
    st.one_of(st.none(), st.integers(1, 3000)),
    st.integers(0, 50),
    st.sampled_from(["default", "random", "laplace:.10"]),
)
def test_filters_remove_exactly_what_they_name(
    lengths: list[int], max_len: int | None, min_len: int, ordering: str
) -> None:
    data = np.array(lengths)
    options = PlanOptions(
        ordering=ordering, max_seq_length=max_len, min_seq_length=min_len, max_seqs=7
    )
    planner = Planner({"data": data}, options)
    too_long = data > max_len if max_len is not None else np.zeros(len(data), bool)
    too_short = (data < min_len) & ~too_long  # counted under the first reason that hits
    np.testing.assert_array_equal(
        planner.admission.admitted, np.flatnonzero(~too_long & ~too_short)
    )
    expected = {}
    if too_long.any():
        expected[f"data longer than max_seq_length={max_len}"] = int(too_long.sum())
    if too_short.any():
        expected[f"data shorter than min_seq_length={min_len}"] = int(too_short.sum())
    assert planner.admission.filtered == expected
    assert planner.admission.filtered_total == len(data) - planner.num_admitted
    for reason, examples in planner.admission.filtered_examples.items():
        mask = too_long if "longer" in reason else too_short
        assert examples == np.flatnonzero(mask)[:5].tolist()
    # filtered sequences appear in no plan, admitted ones exactly once
    plan = planner.global_plan(1, 3)
    np.testing.assert_array_equal(
        np.sort(plan.batches.seqs[plan.batches.real]), planner.admission.admitted
    )


def test_per_key_limits_filter_on_their_own_key() -> None:
    lengths = {"data": np.array([10, 500, 20, 30]), "classes": np.array([3, 4, 90, 5])}
    options = PlanOptions(max_seq_length={"data": 100, "classes": 50})
    planner = Planner(lengths, options)
    assert planner.admission.admitted.tolist() == [0, 3]
    assert planner.admission.filtered == {
        "classes longer than max_seq_length=50": 1,
        "data longer than max_seq_length=100": 1,
    }
    with pytest.raises(OptionError, match="'labels' is not in the data"):
        Planner(lengths, PlanOptions(max_seq_length={"labels": 5}))


def test_length_key_decides_what_batches_and_filters_measure() -> None:
    lengths = {"audio": np.array([100, 200, 300]), "text": np.array([9, 1, 5])}
    planner = Planner(lengths, PlanOptions(length_key="text", max_seq_length=6))
    assert planner.length_key == "text"
    assert planner.admission.admitted.tolist() == [1, 2]
    assert Planner(lengths, PlanOptions()).length_key == "audio"  # no "data": the first key
    with pytest.raises(OptionError, match="length_key: got 'feats'"):
        Planner(lengths, PlanOptions(length_key="feats"))


def test_a_sequence_longer_than_max_frames_is_an_error_naming_it() -> None:
    tags = ["utt-a", "utt-b", "utt-long", "utt-c", "utt-longer"]
    data = np.array([100, 200, 5000, 300, 9000])
    with pytest.raises(SequenceTooLongError) as info:
        Planner({"data": data}, PlanOptions(max_frames=4000), tags=tags, origin="train.hdf")
    message = str(info.value)
    for part in ("sequence 2", "'utt-long'", "train.hdf", "5000 frames", "max_frames=4000"):
        assert part in message
    assert "max_seq_length=4000" in message  # the option that fixes it
    assert "2 sequence(s)" in message
    # with the filter the same data plans fine, and the two are counted
    planner = Planner({"data": data}, PlanOptions(max_frames=4000, max_seq_length=4000), tags=tags)
    assert planner.admission.filtered_total == 2
    assert planner.admission.admitted.tolist() == [0, 1, 3]


def test_an_all_filtered_corpus_plans_empty_epochs() -> None:
    planner = Planner({"data": np.array([50, 60])}, PlanOptions(max_seq_length=10))
    plan = planner.global_plan(1, 4)
    assert planner.num_admitted == 0
    assert plan.steps == 0 and len(plan.batches) == 0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 400), min_size=1, max_size=40),
    st.integers(20, 400),
    st.sampled_from([5, 10, 100]),
    st.sampled_from([{"max_packed_frames": 10**6}, {"chunking": "1000:500"}]),
)
def test_a_quadratic_cost_names_the_longest_length_that_fits(
    lengths: list[int], max_frames: int, q: int, more: dict
) -> None:
    """Under ``batch_cost="quadratic:Q"`` with a limit beside it (a per-key check), a sequence
    that costs more than ``max_frames`` alone is refused naming the longest length that fits:
    ``max_seq_length`` of that length filters exactly those and the rest plans."""
    data = np.array(lengths)
    cost = f"quadratic:{q}"
    options = {"max_frames": max_frames, "batch_cost": cost, "planning": "global", **more}
    fits = np.flatnonzero(data * q + data * data <= max_frames * q)
    if len(fits) == len(data):
        Planner({"data": data}, PlanOptions(**options))
        return
    with pytest.raises(SequenceTooLongError) as e:
        Planner({"data": data}, PlanOptions(**options))
    longest = (math.isqrt(q * q + 4 * max_frames * q) - q) // 2
    while (longest + 1) * (q + longest + 1) <= max_frames * q:
        longest += 1
    assert f"max_seq_length={{'data': {longest}}}" in str(e.value)
    assert f"costing more than max_frames['data']={max_frames} (batch_cost={cost})" in str(e.value)
    Planner({"data": data}, PlanOptions(**options, max_seq_length=longest))
