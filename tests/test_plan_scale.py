"""A 200k-sequence plan (the scale of a real corpus, checked with vectorised assertions): arrays,
not Python lists, and the contracts hold. No timing here; docs/performance.md records measurements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import Planner, PlanOptions, edges
from seqloader.plan.batching import padded_frames
from seqloader.plan.cost import BatchCost
from seqloader.plan.ordering import argsort_by

N = 200_000


@pytest.mark.parametrize(
    ("ordering", "uneven", "partition_epoch"),
    [("laplace:.1000", "split", 1), ("sort_bin_shuffle_x2:.1000", "pad", 3), ("random", "drop", 2)],
)
def test_large_plan_keeps_the_contracts(ordering: str, uneven: str, partition_epoch: int) -> None:
    lengths = np.random.default_rng(0).integers(50, 2000, size=N)
    options = PlanOptions(
        ordering=ordering,
        max_seqs=200,
        max_frames=20_000,
        uneven=uneven,
        partition_epoch=partition_epoch,
    )
    planner = Planner({"data": lengths}, options)
    world = 8
    counts = np.zeros(N, dtype=np.int64)
    dropped = 0
    for epoch in range(1, partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        b = plan.batches
        assert b.seqs.dtype == np.int64 and b.bounds.dtype == np.int64
        assert len(b) == plan.steps * world  # equal steps
        assert {len(plan.rank_share(r)) for r in range(world)} == {plan.steps}
        sizes = b.sizes
        assert sizes.min() >= 1 and sizes.max() <= 200
        assert padded_frames(planner.lengths[b.seqs], b.bounds).max() <= 20_000
        counts += np.bincount(b.seqs[b.real], minlength=N)
        dropped += plan.dropped
    if uneven == "drop":
        assert counts.max() == 1 and counts.sum() + dropped == N
    else:
        assert (counts == 1).all()  # C1 over the full epoch


def test_large_rank_share_is_a_vectorised_view_of_the_global_plan() -> None:
    lengths = np.random.default_rng(1).integers(1, 3000, size=N)
    plan = Planner(
        {"data": lengths}, PlanOptions(ordering="laplace:.1000", max_seqs=200, max_frames=20_000)
    ).global_plan(1, 8)
    shares = [plan.rank_share(r) for r in range(8)]
    joined = np.concatenate([s.seqs for s in shares])
    np.testing.assert_array_equal(np.sort(joined), np.arange(N))
    rank3 = shares[3]
    k = len(rank3) // 2
    np.testing.assert_array_equal(rank3.batch(k)[0], plan.batches.batch(k * 8 + 3)[0])
    later = plan.rank_share(3, start_step=k)
    np.testing.assert_array_equal(later.seqs, rank3.seqs[rank3.bounds[k] :])


# ---- the linear-time paths give the very answers of the sorts they replace ----


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    spread=st.sampled_from([1, 3, 300, 70_000, 2**20, 2**40]),
    majors=st.sampled_from([None, 1, 7, 300, 5000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_argsort_by_is_the_stable_sort_by_major_then_minor(
    n: int, spread: int, majors: int | None, seed: int
) -> None:
    """Narrow keys (16 / 32 bits: radix or timsort) and wide ones (packed with the position) give
    np.lexsort's stable order, whatever the dtypes."""
    rng = np.random.default_rng(seed)
    minor = rng.integers(-spread, spread, n)
    major = None if majors is None else rng.integers(0, majors, n).astype(np.uint16)
    got = argsort_by(minor.astype(np.int32) if spread < 2**31 else minor, major)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.lexsort((minor,) if major is None else (minor, major)))


def edges_by_sorting(lengths: np.ndarray, costs: np.ndarray, n_buckets: int) -> np.ndarray:
    """The definition: cut the lengths sorted ascending at equal shares of their total cost."""
    if len(lengths) == 0 or n_buckets <= 1:
        return np.zeros(0, dtype=np.int64)
    by_len = np.argsort(lengths, kind="stable")
    sorted_len, cum = lengths[by_len], np.cumsum(costs[by_len])
    targets = (int(cum[-1]) * np.arange(1, n_buckets)) // n_buckets
    idx = np.minimum(np.searchsorted(cum, targets, side="right"), len(cum) - 1)
    edges = np.unique(sorted_len[idx])
    return edges[edges > sorted_len[0]]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 400),
    longest=st.sampled_from([1, 2, 5, 50, 3000, 2**30]),
    empties=st.booleans(),
    quadratic=st.sampled_from([None, 1, 1500]),
    n_buckets=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_bucket_edges_equal_the_sorted_definition(
    n: int, longest: int, empties: bool, quadratic: int | None, n_buckets: int, seed: int
) -> None:
    """Short lengths take the histogram path, very long ones the sort: both are the definition."""
    lengths = np.random.default_rng(seed).integers(0, longest + 1, n)
    if empties:
        lengths[: n // 2] = 0
    costs = BatchCost(quadratic).units(lengths)
    got = edges.bucket_edges(lengths.astype(np.int32), costs, n_buckets)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, edges_by_sorting(lengths, costs, n_buckets))
