"""Admission beyond length filters, against RETURNN's own code: the fixed random subset
(OggZip's seeded shuffle), ``fixed_random_seed`` (one order every epoch) and
``epoch_wise_filter`` (``EpochWiseFilter``'s ``max_mean_len``), each counted like every filter.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.admission import cut_class, mean_len_selection, subset_order

basic = pytest.importorskip("returnn.datasets.basic")
meta = pytest.importorskip("returnn.datasets.meta")

lengths_st = st.lists(st.integers(0, 400), min_size=1, max_size=120).map(
    lambda v: np.asarray(v, dtype=np.int64)
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=8).filter(lambda c: sum(c) > 0), st.data())
def test_cut_class_is_the_class_of_the_first_sequence_left_out(counts: list, data) -> None:
    """``cut_class`` (the three filters' "which length class the cut falls in"): with the
    sequences laid out class by class, the ``low``-th (from 0) is the first one left out; its
    class is the one the cut falls in, and the ones before it of that class are kept."""
    low = data.draw(st.integers(0, sum(counts) - 1))
    class_of = np.repeat(np.arange(len(counts)), counts)  # each sequence's class, in order
    g, inside = cut_class(np.asarray(counts, dtype=np.int64), low)
    assert g == class_of[low]
    assert inside == int(np.count_nonzero(class_of[:low] == g))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 300), st.one_of(st.integers(1, 400), st.floats(0.01, 0.99)), st.integers(0, 99)
)
def test_fixed_random_subset_is_returnns_shuffle(n: int, subset: int | float, seed: int) -> None:
    data = list(range(n))  # RETURNN (OggZipDataset): shuffle its entry list, keep the first N
    np.random.RandomState(seed).shuffle(data)
    count = int(n * subset) if isinstance(subset, float) else subset
    if count == 0:
        return  # RETURNN asserts a non-empty subset
    assert subset_order(n, subset, seed).tolist() == data[:count]
    lengths = np.arange(n, dtype=np.int64) % 17
    planner = Planner(
        {"data": lengths},
        PlanOptions(fixed_random_subset=subset, fixed_random_subset_seed=seed),
    )
    # the subset in its shuffled order is the stored order: "default" walks it
    assert planner.sub_epoch_order(1).tolist() == data[:count]
    left = n - min(count, n)
    assert planner.admission.filtered.get("not in fixed_random_subset", 0) == left


@settings(max_examples=40, deadline=None)
@given(lengths_st, st.sampled_from(["random", "laplace:.5", "sort_bin_shuffle:3"]),
       st.integers(1, 3), st.integers(0, 1000), st.integers(1, 7))  # fmt: skip
def test_fixed_random_seed_is_returnns_and_the_same_every_epoch(
    lengths: np.ndarray, ordering: str, partition: int, fixed: int, epoch: int
) -> None:
    dataset = basic.Dataset(
        seq_ordering=ordering, partition_epoch=partition, fixed_random_seed=fixed
    )
    expected = dataset.get_seq_order_for_epoch(epoch, len(lengths), lambda i: int(lengths[i]))
    options = PlanOptions(
        ordering=ordering, partition_epoch=partition, seeding="returnn", fixed_random_seed=fixed
    )
    planner = Planner({"data": lengths}, options)
    np.testing.assert_array_equal(planner.sub_epoch_order(epoch), np.asarray(expected))
    native = Planner({"data": lengths}, PlanOptions(ordering=ordering, fixed_random_seed=fixed))
    np.testing.assert_array_equal(native.sub_epoch_order(1), native.sub_epoch_order(epoch))


@settings(max_examples=80, deadline=None)
@given(lengths_st, st.floats(1, 300))
def test_max_mean_len_keeps_returnns_selection(lengths: np.ndarray, max_mean: float) -> None:
    order = np.random.default_rng(len(lengths)).permutation(len(lengths))
    want = meta.EpochWiseFilter.filter_epoch(
        {"max_mean_len": max_mean}, list(order), lambda i: int(lengths[i]), ""
    )
    keep = mean_len_selection(order, lengths, max_mean)
    assert order[keep].tolist() == [int(i) for i in want]


@settings(max_examples=40, deadline=None)
@given(lengths_st, st.integers(1, 3), st.integers(1, 6), st.sampled_from(["returnn", "seqloader"]))
def test_epoch_wise_filter_per_sub_epoch_as_returnn(
    lengths: np.ndarray, partition: int, epoch: int, seeding: str
) -> None:
    """RETURNN (OggZip, MetaDataset): the sub-epoch's order, then the filter of the epochs whose
    range holds it; counted in that epoch's report."""
    ranges = {(1, 2): {"max_mean_len": 40}, (2, 4): {"max_mean_len": 90}}
    options = PlanOptions(
        ordering="laplace:.6",
        partition_epoch=partition,
        seeding=seeding,  # type: ignore[arg-type]
        epoch_wise_filter=ranges,
    )
    planner = Planner({"data": lengths}, options)
    plain = Planner({"data": lengths}, PlanOptions(ordering="laplace:.6", partition_epoch=partition,
                                                  seeding=seeding))  # type: ignore[arg-type]  # fmt: skip
    before = plain.sub_epoch_order(epoch)
    if not len(before):  # RETURNN's filter fails on an empty sub-epoch; ours keeps it empty
        assert not len(planner.sub_epoch_order(epoch))
        return
    want = meta.EpochWiseFilter(ranges).filter(epoch, list(before), lambda i: int(lengths[i]))
    got = planner.sub_epoch_order(epoch)
    assert got.tolist() == [int(i) for i in want]
    counted = sum(v for k, v in planner.filtered(epoch).items() if k.startswith("epoch_wise"))
    assert counted == len(before) - len(got)
    if len(got):  # the plan holds exactly the kept ones
        plan = planner.global_plan(epoch, 2)
        assert sorted(plan.batches.seqs[plan.batches.real].tolist()) == sorted(got.tolist())


def test_epoch_wise_filter_refuses_unknown_options() -> None:
    with pytest.raises(OptionError, match="subdirs"):
        PlanOptions(epoch_wise_filter={(1, 3): {"subdirs": ["a"]}})
    with pytest.raises(OptionError, match="max_mean_len"):
        PlanOptions(epoch_wise_filter={(1, 3): {"max_mean_len": -1}})
    with pytest.raises(OptionError, match="epoch_wise_filter"):
        PlanOptions(epoch_wise_filter={(3, 1): {"max_mean_len": 5}})


def test_a_subset_as_large_as_the_corpus_is_all_of_it_in_its_shuffled_order() -> None:
    lengths = np.array([5, 1, 4, 1, 3, 9, 2, 6], dtype=np.int64)
    data = list(range(len(lengths)))
    np.random.RandomState(42).shuffle(data)
    for subset in (len(lengths), 100):
        planner = Planner(
            {"data": lengths}, PlanOptions(ordering="sorted", fixed_random_subset=subset)
        )
        want = sorted(data, key=lambda i: lengths[i])  # stable: ties in the subset's order
        assert planner.sub_epoch_order(1).tolist() == want
        assert not planner.admission.filtered
