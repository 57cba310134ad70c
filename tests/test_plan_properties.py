"""Planning contracts as properties over random corpora (hypothesis; pure numpy, no data read).

For every ordering (``buckets:N`` included), ``uneven`` policy, world size 1..8, ``partition_epoch``
1..4, batch cost (padded frames or quadratic) and random ``max_seqs``/``max_frames``: the shared
contracts of every plan kind (``check_plan_contracts``: equal steps, exactly once, determinism,
resume chains), and what is greedy planning's own: exactly-marked repeats, sub-epoch sizes,
batches within their limits and contiguous in the order, the greedy rule itself (no batch could
have taken the next sequence; for buckets within each run), and buckets' synced steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ORDERINGS
from plan_contracts import check_plan_contracts
from seqloader.plan import BatchList, GlobalPlan, Planner, PlanOptions
from seqloader.plan.batching import greedy_bounds
from seqloader.plan.edges import bucket_of
from seqloader.plan.epochs import part_bounds
from seqloader.plan.options import batch_cost_option

UNEVEN = ["split", "pad", "drop"]
COSTS = ["frames", "quadratic:50", "quadratic:2000"]


@st.composite
def corpora(draw: st.DrawFn, max_n: int = 500) -> np.ndarray:
    """1..max_n lengths in 1..3000, sometimes with empty (length 0) sequences."""
    n = draw(st.integers(1, max_n))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    high = draw(st.sampled_from([5, 100, 3000]))
    lengths = rng.integers(1, high + 1, size=n)
    if draw(st.booleans()):
        lengths[rng.random(n) < draw(st.sampled_from([0.05, 0.5]))] = 0
    return lengths.astype(np.int64)


@st.composite
def plan_cases(draw: st.DrawFn, distribution: str = "shard") -> tuple[Planner, int]:
    """(planner, world size); ``chain_of(case)`` draws a resume chain starting there."""
    lengths = draw(corpora())
    max_frames = draw(st.one_of(st.none(), st.integers(1, 12_000)))
    cost = draw(st.sampled_from(COSTS))
    # a limit below the longest sequence needs the filter (else SequenceTooLongError, tested apart)
    fits = None if max_frames is None else batch_cost_option(cost).longest_fitting(max_frames)
    too_long = fits is not None and fits < lengths.max()
    if fits is not None and fits < 1:  # nothing fits at all: no corpus to plan
        max_frames, fits, too_long = None, None, False
    options = PlanOptions(
        ordering=draw(st.sampled_from(ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 64))),
        max_frames=max_frames,
        max_seq_length=fits if too_long else None,
        batch_cost=cost,
        partition_epoch=draw(st.integers(1, 4)),
        distribution=distribution,
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 1000)),
    )
    return Planner({"data": lengths}, options), draw(st.integers(1, 8))


def real_in_order(plan: GlobalPlan) -> np.ndarray:
    """The real (non-repeat) sequences of the global plan, batch after batch."""
    return plan.batches.seqs[plan.batches.real]


def assert_batches_fit(planner: Planner, batches: BatchList) -> None:
    """Every batch is non-empty and within max_seqs and padded max_frames (in cost units)."""
    o = planner.options
    q = o.cost.quadratic or 1
    for k in range(len(batches)):
        seqs, _ = batches.batch(k)
        assert len(seqs) >= 1
        if o.max_seqs is not None:
            assert len(seqs) <= o.max_seqs
        if o.max_frames is not None:
            longest = int(planner.lengths[seqs].max())
            cost = longest if o.cost.quadratic is None else longest * q + longest**2
            assert len(seqs) * cost <= o.max_frames * q


def factory(planner: Planner, **changes: object) -> Callable[[], Planner]:
    """Fresh planners like ``planner`` (with ``changes`` to its options)."""
    options = PlanOptions(**{**planner.options.to_dict(), **changes})
    return lambda: Planner({"data": planner.lengths.copy()}, options)


chains = st.tuples(
    st.lists(st.integers(1, 8), max_size=2), st.lists(st.floats(0, 1), min_size=2, max_size=2)
)


def assert_greedy(planner: Planner, order: np.ndarray, batches: BatchList) -> None:
    """Batches are contiguous runs covering ``order``, and each (but the last) stopped only
    because the next sequence would break ``max_seqs`` or ``max_frames``."""
    np.testing.assert_array_equal(batches.seqs, order)
    o = planner.options
    for k in range(len(batches) - 1):
        seqs, _ = batches.batch(k)
        nxt = batches.batch(k + 1)[0][0]
        n, costliest = len(seqs) + 1, max(planner.costs[seqs].max(), planner.costs[nxt])
        over_seqs = o.max_seqs is not None and n > o.max_seqs
        over_frames = planner.budget is not None and n * costliest > planner.budget
        assert over_seqs or over_frames


def planned_batches(planner: Planner, epoch: int, world: int) -> tuple[np.ndarray, BatchList]:
    """(sub-epoch order, its batches before distribution), each checked: greedy over the order;
    for ``buckets:N`` greedy within each run of ``world`` same-bucket batches (the last run may
    instead be re-cut into exactly ``world`` balanced batches), every step one run."""
    order = planner.sub_epoch_order(epoch, world_size=world)
    if not planner.options.parsed_ordering.is_buckets:
        batches = planner.batches(order)
        assert_greedy(planner, order, batches)
        return order, batches
    arranged = planner.arrangement(epoch, 0, world)
    np.testing.assert_array_equal(arranged.order, order)
    # the sub-epoch's *set* does not depend on the world size (partition_epoch, resume)
    np.testing.assert_array_equal(np.sort(order), np.sort(planner.sub_epoch_order(epoch)))
    batches = BatchList.from_bounds(order, arranged.bounds)
    assert np.isin(arranged.run_starts, arranged.bounds).all()
    ends = np.append(arranged.run_starts[1:], len(order))
    # the buckets runs are cut in: length buckets, small ones merged with their neighbours
    buckets = arranged.merged[bucket_of(planner.lengths[order], planner.bucket_edges)]
    o = planner.options
    for r, (a, b) in enumerate(zip(arranged.run_starts.tolist(), ends.tolist())):
        run = arranged.bounds[(arranged.bounds >= a) & (arranged.bounds <= b)] - a
        last = r == len(ends) - 1
        if not last:
            assert len(run) - 1 == world  # a full run: one step of all ranks
        if not arranged.pooled[r]:
            assert len(set(buckets[a:b].tolist())) == 1  # synced: one bucket per step
        greedy = greedy_bounds(planner.costs[order[a:b]], o.max_seqs, planner.budget)
        if arranged.pooled[r] and o.uneven == "split" and len(run) - 1 == world:
            # maybe re-cut into balanced batches: no more of them than greedy batching needs
            assert len(greedy) - 1 <= world
        else:
            np.testing.assert_array_equal(run, greedy)
    # pool runs hold only what buckets could not fill a run with
    full_pooled = int(arranged.pooled[:-1].sum()) if len(ends) else 0
    assert full_pooled * world <= (int(arranged.merged.max(initial=0)) + 1) * world
    return order, batches


@settings(max_examples=60, deadline=None)
@given(plan_cases(), chains)
def test_shard_plans_keep_every_contract(case: tuple[Planner, int], chain: tuple) -> None:
    planner, world = case
    o = planner.options
    # the shared contracts on this world size and a resume chain from it, over the first full
    # epoch and the next one's first sub-epoch (determinism from fresh planners included)
    worlds, cuts = [world, *chain[0]], chain[1][: len(chain[0])]
    epochs = range(1, o.partition_epoch + 2)
    plans = check_plan_contracts(factory(planner), worlds, cuts, epochs, ordered=True).plans
    full_epoch_orders = []
    for epoch in range(1, o.partition_epoch + 1):
        order, greedy = planned_batches(planner, epoch, world)
        full_epoch_orders.append(order)
        plan = plans[epoch, world]
        assert_batches_fit(planner, plan.batches)
        n = len(order)
        if o.uneven == "drop":
            # whole last round dropped, nothing repeated, the report's count is exact
            assert plan.steps == len(greedy) // world
            assert plan.repeats == 0
            continue
        # split and pad: every sequence exactly once among the real entries, in plan order
        assert plan.dropped == 0
        assert plan.steps == -(-len(greedy) // world)
        slots = plan.steps * world
        if o.uneven == "split":
            # repeats only where unavoidable, and then as few as possible
            assert plan.repeats == max(0, slots - n)
        else:  # pad: repeats are copies of early batches, only to fill the last round
            assert plan.repeats == plan.batches.bounds[-1] - n
            extra = len(plan.batches) - len(greedy)
            for k in range(extra):
                seqs, mask = plan.batches.batch(len(greedy) + k)
                assert not mask.any()
                np.testing.assert_array_equal(seqs, greedy.batch(k % len(greedy))[0])
    # C1 with partition_epoch: sub-epochs of sizes by part_bounds (their union is checked above)
    joined = np.concatenate(full_epoch_orders)
    np.testing.assert_array_equal(np.sort(joined), planner.admission.admitted)
    sizes = [len(x) for x in full_epoch_orders]
    assert sizes == [
        part_bounds(len(joined), o.partition_epoch, p)[1]
        - part_bounds(len(joined), o.partition_epoch, p)[0]
        for p in range(o.partition_epoch)
    ]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@settings(max_examples=40, deadline=None)
@given(plan_cases(distribution="random_seed_offset"), chains)
def test_random_seed_offset_gives_each_rank_its_own_full_order(
    case: tuple[Planner, int], chain: tuple
) -> None:
    """Each rank a prefix of its own greedy plan over its own permutation, the surplus counted
    as dropped (``check_plan_contracts``), no repeats; resumed on another world size mid-epoch:
    refused by name (the chain then goes on with its world size)."""
    planner, world = case
    epoch = planner.options.partition_epoch  # the last sub-epoch of the first full epoch
    worlds, cuts = [world, *chain[0]], chain[1][: len(chain[0])]
    plan = check_plan_contracts(factory(planner), worlds, cuts, [epoch, epoch + 1]).plans[
        epoch, world
    ]
    assert_batches_fit(planner, plan.batches)
    assert plan.repeats == 0


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(
        [
            "random",
            "laplace:3",
            "laplace:.25",
            "sort_bin_shuffle:.5",
            "sort_bin_shuffle_x2:.20",
            "buckets:3",
        ]
    ),
    st.integers(40, 400),
    st.integers(0, 10_000),
    st.integers(1, 3),
)
def test_random_orderings_change_with_epoch_and_seed(
    ordering: str, n: int, seed: int, partition_epoch: int
) -> None:
    """Distinct lengths, so only the random draws can make orders equal. Epochs of one full epoch
    share the order (they are its parts); the next full epoch and another seed reshuffle it."""
    lengths = np.random.default_rng(seed).permutation(n) + 1
    options = PlanOptions(
        ordering=ordering, seed=seed, partition_epoch=partition_epoch, planning="global"
    )

    def full_order(planner: Planner, full_epoch: int) -> np.ndarray:
        first = full_epoch * partition_epoch + 1
        return np.concatenate(
            [planner.sub_epoch_order(e) for e in range(first, first + partition_epoch)]
        )

    planner = Planner({"data": lengths}, options)
    other_seed = Planner({"data": lengths}, PlanOptions(**{**options.to_dict(), "seed": seed + 1}))
    # sort_bin_shuffle without _x2 has only bins! orders for distinct lengths (8! at n=40, ".5");
    # comparing several epochs makes a chance collision negligible
    epochs = [full_order(planner, e) for e in range(4)]
    assert any(not np.array_equal(epochs[0], e) for e in epochs[1:])
    assert not all(np.array_equal(full_order(other_seed, e), epochs[e]) for e in range(4))


def test_deterministic_orderings_ignore_epoch_and_seed() -> None:
    lengths = np.random.default_rng(0).integers(1, 50, size=100)
    for ordering in ("default", "reverse", "sorted", "sorted_reverse"):
        orders = [
            Planner({"data": lengths}, PlanOptions(ordering=ordering, seed=s)).sub_epoch_order(e)
            for s, e in [(1, 1), (1, 2), (7, 5)]
        ]
        assert all(np.array_equal(orders[0], o) for o in orders[1:])


@settings(max_examples=30, deadline=None)
@given(
    st.integers(995, 1003),
    st.integers(1, 8),
    st.sampled_from(UNEVEN),
    st.sampled_from([1, 2, 3, 7, 16]),
    st.sampled_from(["random", "laplace:.50", "buckets:10"]),
)
def test_awkward_sizes(n: int, world: int, uneven: str, max_seqs: int, ordering: str) -> None:
    """lhotse-style sizes around 1000 with every small world size and batch size."""
    lengths = np.random.default_rng(n).integers(1, 400, size=n)
    options = PlanOptions(ordering=ordering, max_seqs=max_seqs, max_frames=1600, uneven=uneven)
    planner = Planner({"data": lengths}, options)
    plan = check_plan_contracts(planner, [world], [], [1], workers=()).plans[1, world]
    if uneven == "split" and n >= plan.steps * world:
        assert plan.repeats == 0


@given(st.integers(1, 12), st.integers(1, 16), st.sampled_from(UNEVEN))
@settings(max_examples=40, deadline=None)
def test_more_ranks_than_sequences(n: int, world: int, uneven: str) -> None:
    lengths = np.arange(1, n + 1)
    planner = Planner({"data": lengths}, PlanOptions(ordering="random", uneven=uneven))
    # one greedy batch holds everything (no limits)
    plan = check_plan_contracts(planner, [world], [], [1], workers=()).plans[1, world]
    if uneven == "drop":
        assert (plan.steps, plan.dropped) == ((1, 0) if world == 1 else (0, n))
        return
    assert plan.steps == 1
    assert sorted(real_in_order(plan).tolist()) == list(range(n))
    if uneven == "split":
        # one sequence per rank while they last; the rest of the ranks get one marked repeat
        assert plan.repeats == max(0, world - n)
        assert set(plan.batches.sizes.tolist()) <= ({1} if world >= n else set(range(1, n + 1)))
    else:
        assert plan.repeats == n * (world - 1)


def test_empty_and_tiny_sub_epochs_have_equal_zero_or_more_steps() -> None:
    """partition_epoch larger than the corpus: some sub-epochs are empty, every rank gets 0 steps."""
    planner = Planner({"data": np.array([3, 4])}, PlanOptions(partition_epoch=4, max_seqs=1))
    sizes = [len(planner.sub_epoch_order(e)) for e in range(1, 5)]
    assert sizes == [1, 1, 0, 0]
    for epoch in range(1, 5):
        for uneven in UNEVEN:
            options = PlanOptions(partition_epoch=4, max_seqs=1, uneven=uneven)
            planner = Planner({"data": np.array([3, 4])}, options)
            plan = check_plan_contracts(planner, [3, 2], [0.5], [epoch]).plans[epoch, 3]
            assert plan.steps == (0 if epoch > 2 or uneven == "drop" else 1)


def test_world_size_larger_than_batch_count_splits_batches() -> None:
    """3 greedy batches of 4 over 8 ranks: split re-cuts them into 8 batches, no repeats."""
    lengths = np.full(12, 10)
    options = PlanOptions(max_seqs=4, max_frames=40)
    planner = Planner({"data": lengths}, options)
    assert len(planner.batches(planner.sub_epoch_order(1))) == 3
    plan = planner.global_plan(1, 8)
    assert plan.steps == 1 and plan.repeats == 0
    assert sorted(plan.batches.sizes.tolist()) == [1, 1, 1, 1, 2, 2, 2, 2]
    np.testing.assert_array_equal(plan.batches.seqs, np.arange(12))


def test_split_extends_the_tail_back_by_whole_rounds() -> None:
    """Greedy gives 4 batches of 3 then 5 singles (9 batches) for 4 ranks: the last round (1
    sequence) and the two last rounds (5 sequences) are too small for their 4 and 8 slots, so the
    tail is the whole epoch (17 sequences, 12 slots); its largest batches, latest first, are halved."""
    lengths = np.array([1] * 12 + [10] * 5)
    planner = Planner({"data": lengths}, PlanOptions(max_seqs=3, max_frames=10))
    assert planner.batches(planner.sub_epoch_order(1)).sizes.tolist() == [3] * 4 + [1] * 5
    plan = planner.global_plan(1, 4)
    assert plan.batches.sizes.tolist() == [3, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1]
    assert plan.repeats == 0
    np.testing.assert_array_equal(plan.batches.seqs, np.arange(17))
