"""Orderings: permutations with RETURNN's structure, RETURNN's exact algorithm given the same random
draws (checked against RETURNN's own ``Dataset.get_seq_order_for_epoch`` when it is installed), and
plans that are identical in another process."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import Ordering, Planner, PlanOptions
from seqloader.plan.epochs import part_bounds
from seqloader.plan.ordering import argsort_by, order_sequences

ORDERINGS = [
    "default",
    "reverse",
    "random",
    "sorted",
    "sorted_reverse",
    "laplace",
    "laplace:1",
    "laplace:4",
    "laplace:.7",
    "laplace:.1000",
    "sort_bin_shuffle",
    "sort_bin_shuffle:3",
    "sort_bin_shuffle:.9",
    "sort_bin_shuffle_x2:.9",
    "sort_bin_shuffle_x2:700",
]

lengths_st = st.lists(st.integers(0, 3000), min_size=0, max_size=400).map(
    lambda x: np.array(x, dtype=np.int64)
)


def bins_of(n: int, bins: int) -> list[slice]:
    """RETURNN's cut of ``n`` positions into ``bins`` parts."""
    return [slice(i * n // bins, (i + 1) * n // bins) for i in range(bins)]


@settings(max_examples=60, deadline=None)
@given(lengths_st, st.sampled_from(ORDERINGS), st.integers(0, 2**32 - 1))
def test_every_ordering_is_a_permutation_with_its_structure(
    lengths: np.ndarray, text: str, seed: int
) -> None:
    ordering = Ordering.parse(text)
    order = order_sequences(lengths, ordering, np.random.default_rng(seed))
    n = len(lengths)
    assert order.dtype == np.int64
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    ordered = lengths[order]
    kind = ordering.kind
    if kind == "default":
        np.testing.assert_array_equal(order, np.arange(n))
    elif kind == "reverse":
        np.testing.assert_array_equal(order, np.arange(n)[::-1])
    elif kind == "sorted":
        assert (np.diff(ordered) >= 0).all()
        np.testing.assert_array_equal(order, np.argsort(lengths, kind="stable"))  # ties by index
    elif kind == "sorted_reverse":
        assert (np.diff(ordered) <= 0).all()
        np.testing.assert_array_equal(order, np.argsort(-lengths, kind="stable"))
    elif kind == "laplace":
        # bins alternate ascending / descending
        for i, part in enumerate(bins_of(n, ordering.num_bins(n))):
            steps = np.diff(ordered[part])
            assert (steps >= 0).all() if i % 2 == 0 else (steps <= 0).all()
    elif kind == "sort_bin_shuffle" and n:
        # whole bins of the length-sorted list, each still sorted: fewer descents than bins
        assert np.count_nonzero(np.diff(ordered) < 0) < ordering.num_bins(n)
    # sort_bin_shuffle_x2 (random within bins) is checked against RETURNN's algorithm below


class _SharedDraws:
    """Stands in for ``numpy.random.RandomState`` inside RETURNN: the same draws as the Generator
    our ordering gets, so both algorithms see one random stream."""

    seed = 0

    def __init__(self, _returnn_seed: int) -> None:
        self._g = np.random.default_rng(_SharedDraws.seed)

    def permutation(self, n: int) -> np.ndarray:
        return self._g.permutation(n)

    def shuffle(self, x: object) -> None:
        self._g.shuffle(x)


@settings(max_examples=60, deadline=None)
@given(lengths_st.filter(len), st.sampled_from(ORDERINGS), st.integers(0, 2**32 - 1))
def test_orderings_are_returnns_algorithm(lengths: np.ndarray, text: str, seed: int) -> None:
    basic = pytest.importorskip("returnn.datasets.basic")
    _SharedDraws.seed = seed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(np.random, "RandomState", _SharedDraws)
        dataset = basic.Dataset(seq_ordering=text)
        expected = dataset.get_seq_order_for_epoch(1, len(lengths), lambda i: int(lengths[i]))
    got = order_sequences(lengths, Ordering.parse(text), np.random.default_rng(seed))
    np.testing.assert_array_equal(got, np.asarray(expected))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 6),
    st.sampled_from(["default", "reverse", "sorted", "sorted_reverse"]),
)
def test_partition_epoch_cuts_like_returnn(n: int, partition_epoch: int, ordering: str) -> None:
    """Deterministic orderings give RETURNN's exact sub-epochs (epoch 1..2P, two full epochs)."""
    basic = pytest.importorskip("returnn.datasets.basic")
    lengths = np.random.default_rng(n).integers(1, 30, size=n)
    planner = Planner(
        {"data": lengths}, PlanOptions(ordering=ordering, partition_epoch=partition_epoch)
    )
    dataset = basic.Dataset(seq_ordering=ordering, partition_epoch=partition_epoch)
    for epoch in range(1, 2 * partition_epoch + 1):
        expected = dataset.get_seq_order_for_epoch(epoch, n, lambda i: int(lengths[i]))
        np.testing.assert_array_equal(planner.sub_epoch_order(epoch), np.asarray(expected))


@settings(deadline=None)  # a busy machine can pause any example past hypothesis' 200 ms
@given(st.integers(0, 10_000), st.integers(1, 50))
def test_part_bounds_tile_the_epoch(n: int, parts: int) -> None:
    cuts = [part_bounds(n, parts, p) for p in range(parts)]
    assert cuts[0][0] == 0 and cuts[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 60),
    st.sampled_from([2, 1000, 2**40, 2**61]),
    st.sampled_from([None, 3, 2**30, 2**61]),
    st.integers(0, 2**32 - 1),
)
def test_argsort_by_is_a_stable_two_key_sort(n: int, span: int, major_span, seed: int) -> None:
    """Every packing path (unique packed keys, stable composite, lexsort) gives lexsort's answer."""
    rng = np.random.default_rng(seed)
    minor = rng.integers(-span, span, size=n)
    major = None if major_span is None else rng.integers(0, major_span, size=n)
    expected = np.argsort(minor, kind="stable") if major is None else np.lexsort((minor, major))
    before = minor.copy()
    np.testing.assert_array_equal(argsort_by(minor, major), expected)
    np.testing.assert_array_equal(minor, before)  # inputs untouched


def plan_digests(cases: list[dict]) -> list[str]:
    """sha256 of each case's global plan arrays (run here and in a fresh interpreter)."""
    out = []
    for case in cases:
        c = dict(case)
        lengths = np.random.default_rng(c.pop("data_seed")).integers(0, 3000, size=c.pop("n"))
        world, epoch = c.pop("world"), c.pop("epoch")
        plan = Planner({"data": lengths}, PlanOptions(**c)).global_plan(epoch, world)
        h = hashlib.sha256()
        for a in (plan.batches.seqs, plan.batches.bounds, plan.batches.real):
            h.update(np.ascontiguousarray(a).tobytes())
        out.append(h.hexdigest())
    return out


def test_plans_are_identical_in_another_process() -> None:
    """C4 across processes (fresh interpreter, other hash seed): same seed + epoch -> same plan."""
    cases = [
        {"n": 3000, "data_seed": 1, "ordering": o, "max_seqs": 40, "max_frames": 30_000,
         "seed": 5, "partition_epoch": p, "uneven": u, "world": w, "epoch": e}
        for o, p, u, w, e in [
            ("random", 1, "split", 3, 1),
            ("laplace:.100", 2, "pad", 8, 3),
            ("sort_bin_shuffle_x2:.64", 3, "drop", 5, 2),
            ("sort_bin_shuffle:.64", 1, "split", 7, 4),
            ("sorted_reverse", 4, "split", 2, 7),
        ]
    ]  # fmt: skip
    cases.append({**cases[0], "distribution": "random_seed_offset"})
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from test_plan_orderings import plan_digests; "
        "print(json.dumps(plan_digests(json.loads(sys.argv[2]))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), json.dumps(cases)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    ours = plan_digests(cases)
    assert json.loads(result.stdout) == ours
    assert len(set(ours)) == len(ours)  # the cases really differ


def test_ordering_names_round_trip() -> None:
    for text in ORDERINGS:
        assert Ordering.parse(str(Ordering.parse(text))) == Ordering.parse(text)
    assert Ordering.parse("laplace:.100").num_bins(150) == 2  # RETURNN: max(n // N, 2)
    assert Ordering.parse("laplace:.100").num_bins(1050) == 10
    assert Ordering.parse("laplace").num_bins(10) == 2
    for text in ("random:3", "laplace:.100:2", "laplace:2:3", "sort_bin_shuffle_x2:4:2"):
        assert str(Ordering.parse(text)) == text
    assert Ordering.parse("laplace:.100:2") == Ordering("laplace", bin_size=100, keep_epochs=2)
    assert str(Ordering.parse("random:1")) == "random"


@pytest.mark.parametrize("ordering", ["random:3", "laplace:.5:3", "sort_bin_shuffle_x2:3:3"])
def test_keep_order_for_k_epochs(ordering: str) -> None:
    """RETURNN's ``:K`` suffix: full epochs 1-3 share one order, 4-6 the next (its grouping,
    ``(epoch - 1) // K``); with partition_epoch the sub-epochs still cut that order."""
    lengths = np.random.default_rng(0).integers(1, 200, size=60)
    keep = Planner({"data": lengths}, PlanOptions(ordering=ordering, seed=3, partition_epoch=2))
    orders = [keep.sub_epoch_order(e) for e in range(1, 15)]  # 7 full epochs of 2 parts
    full = [np.concatenate(orders[i : i + 2]) for i in range(0, 14, 2)]
    for f in full:
        assert sorted(f.tolist()) == list(range(60))  # each full epoch exactly once
    assert all(np.array_equal(full[0], f) for f in full[1:3])
    assert all(np.array_equal(full[3], f) for f in full[4:6])
    assert not np.array_equal(full[0], full[3]) and not np.array_equal(full[3], full[6])
    base = ordering.rsplit(":", 1)[0] if ordering.count(":") == 2 else ordering.split(":")[0]
    plain = Planner({"data": lengths}, PlanOptions(ordering=base, seed=3, partition_epoch=2))
    assert np.array_equal(plain.sub_epoch_order(1), orders[0])  # K groups, same orders as K=1


RETURNN_ORDERINGS = [*ORDERINGS, "random:3", "laplace:.7:2", "sort_bin_shuffle_x2:4:3"]


@settings(max_examples=80, deadline=None)
@given(
    lengths_st.filter(len),
    st.sampled_from(RETURNN_ORDERINGS),
    st.integers(1, 4),
    st.integers(0, 2**20),
    st.integers(1, 13),
)
def test_returnn_seeding_is_returnns_own_order(
    lengths: np.ndarray, text: str, partition_epoch: int, offset: int, epoch: int
) -> None:
    """``seeding="returnn"``: RETURNN's own draws (no shared-stream trick): the sub-epoch order
    equals ``Dataset.get_seq_order_for_epoch`` for any epoch, partition and seed offset."""
    basic = pytest.importorskip("returnn.datasets.basic")
    dataset = basic.Dataset(
        seq_ordering=text, partition_epoch=partition_epoch, random_seed_offset=offset
    )
    expected = dataset.get_seq_order_for_epoch(epoch, len(lengths), lambda i: int(lengths[i]))
    options = PlanOptions(
        ordering=text, partition_epoch=partition_epoch, seed=offset, seeding="returnn"
    )
    planner = Planner({"data": lengths}, options)
    np.testing.assert_array_equal(planner.sub_epoch_order(epoch), np.asarray(expected))
    # random_seed_offset distribution: rank r is RETURNN with offset + 16127 r
    rank_dataset = basic.Dataset(seq_ordering=text, partition_epoch=partition_epoch,
                                 random_seed_offset=offset + 2 * 16127)  # fmt: skip
    expected = rank_dataset.get_seq_order_for_epoch(epoch, len(lengths), lambda i: int(lengths[i]))
    np.testing.assert_array_equal(planner.sub_epoch_order(epoch, 2), np.asarray(expected))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(3, 200),  # RETURNN itself fails on fewer sequences than sort_bin_shuffle bins
    st.sampled_from(["random", "laplace:.5", "sort_bin_shuffle:3", "sorted"]),
    st.integers(1, 3),
    st.integers(0, 1000),
    st.integers(1, 6),
)
def test_returnn_seeding_filters_after_ordering_like_returnn(
    n: int, text: str, partition_epoch: int, data_seed: int, epoch: int
) -> None:
    """RETURNN applies ``seq_list_filter_file`` after ordering and cutting the sub-epoch (so the
    random order of the kept sequences is the one of the whole corpus); ``max_seq_length`` is a
    filter of its batching, also after the order. ``excluded`` and the length filters do the same
    under ``seeding="returnn"``; the kept sequences still form each full epoch exactly once."""
    basic = pytest.importorskip("returnn.datasets.basic")
    rng = np.random.default_rng(data_seed)
    lengths = rng.integers(1, 50, size=n)
    listed = rng.random(n) < 0.7
    listed[0] = True  # RETURNN asserts a non-empty sub-epoch after filtering
    tags = [f"seq-{i}" for i in range(n)]

    class Tagged(basic.Dataset):
        def get_all_tags(self):
            return tags

        def get_total_num_seqs(self, *, fast=False):
            return n

    dataset = Tagged(seq_ordering=text, partition_epoch=partition_epoch, random_seed_offset=3)
    dataset.seq_tags_filter = {t for t, keep in zip(tags, listed) if keep}
    options = PlanOptions(
        ordering=text, partition_epoch=partition_epoch, seed=3, seeding="returnn",
        max_seq_length=40,
    )  # fmt: skip
    planner = Planner({"data": lengths}, options, tags, excluded={"not listed": ~listed})
    assert planner.admission.filtered.get("not listed", 0) == int(np.count_nonzero(~listed))
    full = []
    first = (epoch - 1) // partition_epoch * partition_epoch + 1  # the full epoch of `epoch`
    for e in range(first, first + partition_epoch):
        try:
            expected = dataset.get_seq_order_for_epoch(e, n, lambda i: int(lengths[i]))
        except AssertionError:  # RETURNN: a sub-epoch empty after its filter
            expected = []
        expected = [i for i in expected if lengths[i] <= 40]  # its batching's length filter
        got = planner.sub_epoch_order(e)
        np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.int64))
        full.extend(got.tolist())
    assert sorted(full) == np.flatnonzero(listed & (lengths <= 40)).tolist()  # exactly once
