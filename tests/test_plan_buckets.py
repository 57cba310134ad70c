"""``buckets:N`` and ``batch_cost``: bucket edges, the cost model, synced steps, shuffling and the
quality figures the ordering exists for (plan only; the contracts are in the property tests)."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.batching import padded_frames
from seqloader.plan.cost import BatchCost, step_imbalance
from seqloader.plan.edges import bucket_edges, bucket_of
from seqloader.plan.greedy.buckets import balanced_bounds, merge_small_buckets
from seqloader.plan.options import batch_cost_option


def lognormal(n: int = 6000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(np.log(600), 0.4, n)), 50, 2000).astype(np.int64)


def test_bucket_edges_hold_about_equal_total_cost() -> None:
    lengths = lognormal()
    for cost in (BatchCost(), BatchCost(300)):
        costs = cost.units(lengths)
        edges = bucket_edges(lengths, costs, 10)
        assert len(edges) == 9 and np.all(np.diff(edges) > 0)
        totals = np.bincount(bucket_of(lengths, edges), weights=costs, minlength=10)
        # equal lengths share a bucket: each edge can miss its target by one length's total
        tie = np.bincount(lengths, weights=costs).max()
        assert np.abs(totals - costs.sum() / 10).max() <= 2 * tie


def test_equal_lengths_share_a_bucket_so_few_lengths_give_fewer_buckets() -> None:
    lengths = np.repeat([5, 9, 30], 100)
    edges = bucket_edges(lengths, lengths, 12)
    assert set(bucket_of(lengths, edges).tolist()) == set(range(len(edges) + 1))
    assert len(edges) <= 2
    assert len(bucket_edges(lengths, lengths, 1)) == 0


def test_small_buckets_merge_until_each_fills_two_runs() -> None:
    """A bucket too small for a run would go to the pool whole (sorted: the same every epoch), so
    neighbours merge until each holds ``min_weight``; the last, too small one joins its neighbour."""
    weight = np.ones(12, dtype=np.int64)
    bucket = np.array([0, 0, 0, 1, 2, 2, 2, 2, 3, 5, 5, 5])
    np.testing.assert_array_equal(merge_small_buckets(bucket, weight, 6, 4), [0, 0, 1, 2, 2, 2])
    np.testing.assert_array_equal(merge_small_buckets(bucket, weight, 6, 1), [0, 1, 2, 3, 4, 4])
    np.testing.assert_array_equal(merge_small_buckets(bucket, weight, 6, 100), [0] * 6)
    # a corpus too small for 30 buckets on 8 ranks still gets a different batch order every epoch
    lengths = lognormal(2000)
    planner = Planner({"data": lengths}, PlanOptions(ordering="buckets:30", max_frames=20_000))
    first = planner.arrangement(1, 0, 8)
    assert 1 <= first.merged.max() < 29 and not first.pooled.all()
    assert not np.array_equal(first.order, planner.arrangement(2, 0, 8).order)


def test_quadratic_cost_units_and_the_longest_fitting_length() -> None:
    cost = batch_cost_option("quadratic:100")
    assert str(cost) == "quadratic:100"
    np.testing.assert_array_equal(cost.units(np.array([0, 10, 100])), [0, 1100, 20000])
    assert cost.budget(1000) == 100_000
    for q in (1, 7, 100, 2000):
        for max_frames in (1, 2, 50, 999, 20_000):
            c = BatchCost(q)
            longest = c.longest_fitting(max_frames)
            assert longest * q + longest**2 <= max_frames * q
            assert (longest + 1) * q + (longest + 1) ** 2 > max_frames * q
    assert batch_cost_option("frames").longest_fitting(77) == 77


def test_quadratic_cost_gives_long_sequences_smaller_batches() -> None:
    """max_frames=1000, Q=100: a batch of length-100 sequences costs 200 per row (5 rows); length
    10 costs 11 per row (90 rows, where padded frames alone would allow 100)."""
    lengths = np.array([100] * 12 + [10] * 200)
    options = PlanOptions(max_frames=1000, batch_cost="quadratic:100")
    sizes = Planner({"data": lengths}, options).global_plan(1, 1).batches.sizes.tolist()
    assert sizes == [5, 5, 5, 90, 90, 17]  # the third: 2 long rows and 3 short ones padded
    frames = Planner({"data": lengths}, PlanOptions(max_frames=1000)).global_plan(1, 1)
    assert frames.batches.sizes.tolist() == [10, 10, 100, 92]


def test_too_costly_sequence_is_named_with_the_length_that_fits() -> None:
    lengths = np.array([10, 60, 20])
    with pytest.raises(SequenceTooLongError, match=r"sequence 1 .*quadratic:100.*=36 "):
        Planner({"data": lengths}, PlanOptions(max_frames=50, batch_cost="quadratic:100"))
    fine = PlanOptions(max_frames=50, batch_cost="quadratic:100", max_seq_length=36)
    assert Planner({"data": lengths}, fine).admission.filtered_total == 1


@pytest.mark.parametrize("bad", ["quadratic", "quadratic:0", "quadratic:-3", "cubic:4", 3, None])
def test_bad_batch_cost_is_refused(bad: object) -> None:
    with pytest.raises(OptionError, match="batch_cost: got"):
        PlanOptions(batch_cost=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["buckets", "buckets:.30", "buckets:0"])
def test_buckets_needs_a_bucket_count(bad: str) -> None:
    with pytest.raises(OptionError, match="ordering: got"):
        PlanOptions(ordering=bad)


def test_options_round_trip_and_the_default_cost_keeps_old_fingerprints() -> None:
    assert "batch_cost" not in PlanOptions().to_dict()
    o = PlanOptions(ordering="buckets:2:3", batch_cost="quadratic:40")
    assert o.to_dict()["ordering"] == "buckets:2:3"
    assert PlanOptions(**o.to_dict()) == o


def test_steps_are_synced_buckets_with_little_padding_and_imbalance() -> None:
    """The figures the ordering exists for, at 8 ranks: each step's 8 batches are one run (one
    bucket, or the pool of leftovers); padding and step-cost imbalance far below random's."""
    lengths = lognormal()
    options = PlanOptions(ordering="buckets:20", max_frames=20_000)
    planner = Planner({"data": lengths}, options)
    plan = planner.global_plan(1, 8)
    arranged = planner.arrangement(1, 0, 8)
    runs = arranged.batch_runs().reshape(plan.steps, 8)
    assert (runs == runs[:, :1]).all()
    buckets = arranged.merged[bucket_of(lengths, planner.bucket_edges)]
    pure = 0
    for step in range(plan.steps):
        seqs = plan.batches.seqs[plan.batches.bounds[step * 8] : plan.batches.bounds[step * 8 + 8]]
        pure += len(set(buckets[seqs].tolist())) == 1
    assert pure >= plan.steps - 12  # pool steps: at most ~N/2 rounds of leftovers

    def figures(o: str) -> tuple[float, float]:
        p = Planner({"data": lengths}, PlanOptions(ordering=o, max_frames=20_000))
        g = p.global_plan(1, 8).batches
        padded = padded_frames(lengths[g.seqs], g.bounds).sum()
        return padded / lengths.sum() - 1, step_imbalance(g.seqs, g.bounds, 8, p.costs)

    pad, imbalance = figures("buckets:20")
    random_pad, random_imbalance = figures("random")
    assert pad < 0.02 < 0.5 < random_pad
    assert imbalance < 1.03 < random_imbalance


def test_batch_order_changes_with_epoch_and_seed_and_keeps_for_k_epochs() -> None:
    lengths = lognormal(2000)

    def order(ordering: str, epoch: int, seed: int = 1) -> np.ndarray:
        options = PlanOptions(ordering=ordering, max_frames=20_000, seed=seed)
        return Planner({"data": lengths}, options).sub_epoch_order(epoch, world_size=4)

    first = order("buckets:5", 1)
    assert not np.array_equal(first, order("buckets:5", 2))
    assert not np.array_equal(first, order("buckets:5", 1, seed=2))
    np.testing.assert_array_equal(order("buckets:5:3", 1), order("buckets:5:3", 3))
    assert not np.array_equal(order("buckets:5:3", 3), order("buckets:5:3", 4))


def test_balanced_bounds_cut_exactly_k_batches_no_worse_than_greedy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        costs = np.sort(rng.integers(1, 50, size=int(rng.integers(8, 60))))
        k = int(rng.integers(1, 9))
        budget = int(costs.max()) * int(rng.integers(len(costs) // k + 1, len(costs) + 2))
        bounds = balanced_bounds(costs, k, None, budget)
        assert len(bounds) == k + 1 and bounds[0] == 0 and bounds[-1] == len(costs)
        cost = padded_frames(costs, bounds)
        assert (np.diff(bounds) > 0).all() and cost.max() <= budget


def test_step_imbalance_is_the_mean_max_over_mean() -> None:
    costs = np.array([10, 10, 20, 5, 5, 5])
    seqs = np.arange(6)
    bounds = np.array([0, 1, 2, 3, 4, 5, 6])  # steps of 2 ranks: (10, 10), (20, 5), (5, 5)
    assert step_imbalance(seqs, bounds, 2, costs) == pytest.approx((1 + 20 / 12.5 + 1) / 3)
    assert step_imbalance(seqs, bounds, 1, costs) == 1.0
    assert step_imbalance(seqs[:0], bounds[:1], 4, costs) == 1.0


def test_buckets_with_a_mix_is_refused_with_the_reason() -> None:
    """Under global planning (``planning="auto"`` resolves it to indexed, which buckets a mix)."""
    with pytest.raises(OptionError, match="mix: not supported with ordering='buckets:3'"):
        PlanOptions(ordering="buckets:3", mix={"a": 1.0, "b": 0.5}, planning="global")
    assert PlanOptions(ordering="buckets:3", mix={"a": 1.0}).resolved_planning == "indexed"
