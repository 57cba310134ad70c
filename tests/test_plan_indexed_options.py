"""``planning="indexed"`` with the admission options of global planning: per-key
``max_seq_length``/``min_seq_length``, ``fixed_random_subset`` (+ its seed), ``fixed_random_seed``
and ``epoch_wise_filter``, ``distribution="random_seed_offset"``, and the packed limits
(``batch_cost="packed"``, ``max_packed_frames``, limits as mappings on the length key)
(hypothesis; pure numpy).

Which sequences an epoch holds is global planning's set exactly (one sub-epoch per epoch: the
whole admitted corpus, filtered alike; counted alike per reason), while order and batches are the
indexed algorithm's; and every contract holds: exactly once, equal steps, a rank's share alone
equal to its part of the global list, determinism, resume chains ``W -> W' -> W''`` (through
``continue_plan``, which checks every position's reachability).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import ResumeError, SequenceTooLongError
from seqloader.plan import PlanOptions, Position, continue_plan
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.limits import BatchLimits
from test_plan_indexed import ORDERINGS, check_limits, indexed_digest

FILTERS = [
    None,
    {(1, 1): {"max_mean_len": 60}},
    {(1, 2): {"max_mean_len": 90}, (2, None): {"max_mean_len": 40}},
    {(2, 3): {"max_mean_len": 25.5}},
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    high = draw(st.sampled_from([3, 40, 300]))
    data = rng.integers(0 if draw(st.booleans()) else 1, high + 1, size=n).astype(np.int64)
    classes = rng.integers(0, 30, size=n).astype(np.int64)
    longest = draw(
        st.sampled_from([None, 250, {"data": 200, "classes": 25}, {"classes": 20}, {"*": 280}])
    )
    shortest = draw(st.sampled_from([0, 1, 5, {"classes": 3}, {"data": 2, "classes": 1}]))
    subset = draw(st.sampled_from([None, 1, 50, 0.4, 10**6]))
    options = {
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 20))),
        "max_frames": draw(st.one_of(st.none(), st.integers(300, 3000))),
        "max_seq_length": longest,
        "min_seq_length": shortest,
        "fixed_random_subset": subset,
        "fixed_random_subset_seed": draw(st.integers(0, 50)),
        "fixed_random_seed": draw(st.sampled_from([None, 0, 7])),
        "epoch_wise_filter": draw(st.sampled_from(FILTERS)),
        "partition_epoch": draw(st.integers(1, 3)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 5)),
    }
    return {
        "lengths": {"data": data, "classes": classes},
        "options": options,
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "world": draw(st.integers(1, 7)),
        "worlds": draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }


def indexed(case: dict) -> IndexedPlanner:
    options = PlanOptions(**case["options"], ordering=case["ordering"], planning="indexed")
    return IndexedPlanner(case["lengths"], options)


def greedy(case: dict) -> Planner:
    """Global planning at the same admission options (``random``: any ordering admits alike)."""
    return Planner(case["lengths"], PlanOptions(**case["options"], ordering="random"))


def real(plan) -> np.ndarray:
    b = plan.batches
    return b.seqs[b.real]


# 2 full epochs of contracts per example; the contracts over the same cases with resume chains:
# test_resume_chains_with_world_size_changes (80)
@settings(max_examples=50, deadline=None)
@given(cases())
def test_each_epoch_holds_global_plannings_set_counted_alike(case: dict) -> None:
    """One sub-epoch per epoch: the set and the per-reason counts of global planning, epoch by
    epoch (epoch_wise_filter differs per epoch); with sub-epochs, every full epoch is the
    admitted set exactly once (no epoch filter) and every sub-epoch is filtered alike."""
    planner, reference = indexed(case), greedy(case)
    o, world = planner.options, case["world"]
    assert planner.num_admitted == reference.num_admitted
    assert sorted(planner.admission.admitted.tolist()) == reference.admission.admitted.tolist()
    seen: list[np.ndarray] = []
    epochs = range(1, 2 * o.partition_epoch + 1)
    checked = check_plan_contracts(
        lambda: indexed(case), [world], [], epochs, each_plan=check_limits
    )
    for epoch in epochs:
        plan = checked.plans[epoch, world]
        got = real(plan)
        assert len(np.unique(got)) == len(got)
        assert planner.order_size(epoch, world) == len(got) + plan.dropped
        if o.partition_epoch == 1:
            if not plan.dropped:
                assert sorted(got.tolist()) == sorted(reference.sub_epoch_order(epoch).tolist())
            assert planner.filtered(epoch) == reference.filtered(epoch)
        elif not o.epoch_wise_filter and epoch <= o.partition_epoch:
            seen.append(got)
    if seen and not any(planner.global_plan(e, world).dropped for e in range(1, len(seen) + 1)):
        full = np.concatenate(seen)
        assert sorted(full.tolist()) == reference.admission.admitted.tolist()
    if o.fixed_random_seed is not None and not o.epoch_wise_filter:  # the same full epoch again
        P = o.partition_epoch
        for epoch in range(1, P + 1):
            again = checked.plans[epoch + P, world].batches.seqs
            np.testing.assert_array_equal(checked.plans[epoch, world].batches.seqs, again)


def test_fixed_random_seed_keys_the_draws_by_itself() -> None:
    lengths = {"data": np.random.default_rng(1).integers(1, 300, 3000)}
    opts = {"ordering": "buckets:4", "max_frames": 3000, "planning": "indexed"}
    fixed = IndexedPlanner(lengths, PlanOptions(**opts, fixed_random_seed=3, seed=1))
    other_seed = IndexedPlanner(lengths, PlanOptions(**opts, fixed_random_seed=3, seed=2))
    free = IndexedPlanner(lengths, PlanOptions(**opts, seed=1))
    e1, e2 = fixed.global_plan(1, 4).batches.seqs, fixed.global_plan(2, 4).batches.seqs
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(e1, other_seed.global_plan(1, 4).batches.seqs)
    assert not np.array_equal(e1, free.global_plan(1, 4).batches.seqs)


# 40 examples (was 80) draw every ordering, admission option and uneven the 80 drew
@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 3))
def test_resume_chains_with_world_size_changes(case: dict, epoch: int) -> None:
    """Stop anywhere, save as JSON, continue on other world sizes (each position checked for
    reachability on the way): the sub-epoch's sequences exactly once, equal steps per segment."""
    worlds = case["worlds"]
    check_plan_contracts(lambda: indexed(case), worlds, [case["cut"]] * (len(worlds) - 1), [epoch])


def test_epoch_wise_filter_keeps_the_shortest_in_the_bucket_it_cuts() -> None:
    """The cut falls inside one bucket: everything shorter is kept, of the bucket's equal lengths
    the lowest indices (RETURNN sorts (length, index)), nothing longer."""
    lengths = np.array([10, 50, 50, 50, 90, 20, 50, 70], dtype=np.int64)
    ewf = {(1, 1): {"max_mean_len": 34}}
    options = PlanOptions(ordering="laplace:2", epoch_wise_filter=ewf, planning="indexed")
    planner = IndexedPlanner({"data": lengths}, options)
    kept = sorted(real(planner.global_plan(1, 2)).tolist())
    # shortest first: 10, 20, 50 (#1), 50 (#2), ... means 10, 15, 26.7, 32.5, 36: RETURNN keeps 5
    assert kept == [0, 1, 2, 3, 5]
    assert planner.filtered(1) == {"epoch_wise_filter max_mean_len=34 (epoch 1)": 3}
    assert sorted(real(planner.global_plan(2, 2)).tolist()) == list(range(8))


# a full epoch of per-rank chains per example; random_seed_offset's contracts also hold over
# test_plan_indexed_random's, test_plan_indexed_chunks' and test_plan_indexed_selections' cases
# 22 examples (was 30) draw every ordering, admission option and uneven the 30 drew
@settings(max_examples=22, deadline=None)
@given(cases())
def test_random_seed_offset_gives_each_rank_every_sequence_once_per_full_epoch(case: dict) -> None:
    """``random_seed_offset``: every rank its own draws of the whole data: per rank, a full epoch
    holds the admitted set exactly once; equal steps, nothing dropped; the ranks' orders differ;
    a rank's share is its ``rank_order``; resuming on the same world size continues batch for
    batch, on another one mid-epoch is refused by name. With ``epoch_wise_filter`` and sub-epochs
    every rank's sub-epoch is one shared set, filtered alike (each in the rank's own order): what
    a rank's full epoch lacks of the admitted set is exactly what the epochs' filters counted."""
    o = case["options"]
    shared = bool(o["epoch_wise_filter"]) and o["partition_epoch"] > 1
    options = PlanOptions(
        **o, ordering=case["ordering"], planning="indexed", distribution="random_seed_offset"
    )
    planner, world = IndexedPlanner(case["lengths"], options), case["world"]
    reference = greedy(case)
    seen: list[list[np.ndarray]] = [[] for _ in range(world)]
    for epoch in range(1, options.partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        assert plan.dropped == 0 and plan.repeats == 0
        b = plan.batches
        assert plan.real_total() == len(b.seqs) == world * planner.order_size(epoch, world)
        for r in range(world):
            share = plan.rank_share(r)
            assert len(share) == plan.steps
            np.testing.assert_array_equal(share.seqs, planner.rank_order(epoch, r, world))
            seen[r].append(share.seqs)
        if shared:  # one filtered set on every rank
            for r in range(1, world):
                assert sorted(seen[r][-1].tolist()) == sorted(seen[0][-1].tolist())
        if not o["epoch_wise_filter"] or shared:
            continue
        for r in range(world):  # one sub-epoch: filtered as global planning filters it
            want = reference.sub_epoch_order(epoch)
            assert sorted(seen[r][-1].tolist()) == sorted(want.tolist())
    if not o["epoch_wise_filter"]:
        for r in range(world):
            got = np.concatenate(seen[r]).tolist()
            assert sorted(got) == reference.admission.admitted.tolist()
    if shared:  # disjoint sub-epochs; the admitted ones missing are the filters' counts
        base = sum(planner.admission.filtered.values())
        counted = sum(
            sum(planner.filtered(e).values()) - base for e in range(1, options.partition_epoch + 1)
        )
        admitted = planner.admission.admitted
        for r in range(world):
            got = np.concatenate(seen[r])
            assert len(np.unique(got)) == len(got) and np.isin(got, admitted).all()
            assert len(admitted) - len(got) == counted
    counts, _, sizes = planner._counts(EpochIndex(1, options.partition_epoch))  # per bucket
    if world > 1 and (counts > 8 * sizes).any():  # a bucket of several windows (of its runs')
        assert not np.array_equal(seen[0][0], seen[1][0])
    worlds = [world, *case["worlds"]]  # other world sizes mid-epoch: refused, then continued
    check_plan_contracts(
        lambda: IndexedPlanner(case["lengths"], options),
        worlds,
        [case["cut"]] * (len(worlds) - 1),
        range(1, options.partition_epoch + 1),
        each_plan=check_limits,
    )
    plan = planner.global_plan(1, world)
    k = int(case["cut"] * plan.steps)
    if 0 < k < plan.steps:
        with pytest.raises(ResumeError, match="random_seed_offset"):
            continue_plan(planner, Position(1, 0, world, k), world + 1)


LIMITS = [
    {"batch_cost": "packed", "max_frames": 900},
    {"max_frames": 1500, "max_packed_frames": 700},
    {"max_frames": {"data": 1200}, "max_packed_frames": {"data": 1000}},
    {"max_frames": {"data": 800}, "batch_cost": "packed"},
    {"max_packed_frames": 600},
    {"max_frames": {"*": 1500}},  # the other key too
    {"max_frames": {"data": 1200, "classes": 90}, "max_packed_frames": {"classes": 100}},
]


def packed_limit(o: PlanOptions) -> int | None:
    value = o.max_frames if o.cost.packed else o.max_packed_frames
    return value.get("data", value.get("*")) if isinstance(value, dict) else value


def padded_limit(o: PlanOptions) -> int | None:
    value = None if o.cost.packed else o.max_frames
    return value.get("data", value.get("*")) if isinstance(value, dict) else value


def batch_limits(lengths: dict[str, np.ndarray]):
    """A check that every batch is within the options' own limits, key by key: padded frames,
    sums of lengths, max_seqs (resolved as global planning resolves them)."""

    def check(planner: IndexedPlanner, epoch: int, plan) -> None:
        o, b = planner.options, plan.batches
        if not len(b.seqs):
            return
        limits = BatchLimits.of(
            o.max_seqs, o.max_frames, o.max_packed_frames, o.cost, list(lengths), "data"
        )
        sizes = np.diff(b.bounds)
        for key, budget in limits.padded.items():
            units = limits.units(key, np.asarray(lengths[key])[b.seqs])
            assert (sizes * np.maximum.reduceat(units, b.bounds[:-1])).max() <= budget
        for key, budget in limits.packed.items():
            sums = np.add.reduceat(np.asarray(lengths[key])[b.seqs], b.bounds[:-1])
            assert sums.max() <= budget
        if o.max_seqs is not None:
            assert sizes.max() <= o.max_seqs

    return check


# packed and quadratic limits over every ordering and distribution, with the contracts:
# test_plan_indexed_limits.py (80)
@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from(LIMITS), st.sampled_from(["laplace", "laplace:.7", "laplace:3"]))
def test_packed_and_length_key_limits(case: dict, limits: dict, ordering: str) -> None:
    """``batch_cost="packed"``, ``max_packed_frames`` and ``max_frames``/``max_packed_frames`` as
    mappings, on the length key and another: every batch within every limit (a bucket's batch
    size fits its longest length of every limited key, so their sums fit too), the contracts, and
    global planning's admitted set."""
    o = {**case["options"], **limits, "max_seq_length": None}
    fits = min(v for v in (padded_limit(PlanOptions(**o)), packed_limit(PlanOptions(**o))) if v)
    o["max_seq_length"] = fits  # what fits no batch alone is filtered, counted
    lengths = case["lengths"]
    options = PlanOptions(**o, ordering=ordering, planning="indexed")
    worlds = case["worlds"]
    check_plan_contracts(
        lambda: IndexedPlanner(lengths, options),
        worlds,
        [case["cut"]] * (len(worlds) - 1),
        range(1, options.partition_epoch + 1),
        each_plan=batch_limits(lengths),
    )
    reference = Planner(lengths, PlanOptions(**o, ordering="random"))
    planner = IndexedPlanner(lengths, options)
    assert planner.admission.admitted.tolist() == reference.admission.admitted.tolist()
    if options.partition_epoch == 1 or not options.epoch_wise_filter:  # else its own sub-epoch
        assert planner.filtered(1) == reference.filtered(1)


def test_limits_the_indexed_plan_cannot_keep_are_refused_by_name() -> None:
    lengths = {"data": np.arange(1, 50), "classes": np.arange(1, 50) % 7}
    per_key = PlanOptions(
        ordering="laplace", max_frames={"*": 500, "classes": 5}, planning="indexed"
    )
    with pytest.raises(SequenceTooLongError, match=r"sequence 5 .*'classes'.*\{'classes': 5\}"):
        IndexedPlanner(lengths, per_key)
    chunked = PlanOptions(**{**per_key.to_dict(), "chunking": {"data": (10, 5)}})  # taken
    with pytest.raises(SequenceTooLongError, match=r"sequence 5 .*'classes'.*\{'classes': 5\}"):
        IndexedPlanner(lengths, chunked)  # classes not chunked: a chunk carries it whole
    quadratic = PlanOptions(  # taken (test_plan_indexed_limits); a sequence over it refused
        ordering="laplace",
        max_frames=5000,
        max_packed_frames=30,
        batch_cost="quadratic:100",
        planning="indexed",
    )
    with pytest.raises(SequenceTooLongError, match="or more than max_packed_frames=30"):
        IndexedPlanner({"data": np.arange(1, 50)}, quadratic)
    with pytest.raises(SequenceTooLongError, match="max_packed_frames=30"):
        IndexedPlanner(
            {"data": np.arange(1, 50)},
            PlanOptions(
                ordering="laplace", max_frames=500, max_packed_frames=30, planning="indexed"
            ),
        )


NEW_CASES: dict[str, dict] = {
    "laplace:.10 W3 split, per-key limits, subset": {
        "options": {
            "ordering": "laplace:.10",
            "max_seqs": 6,
            "max_frames": 1500,
            "max_seq_length": {"data": 350},
            "min_seq_length": 3,
            "fixed_random_subset": 200,
        },
        "world": 3,
    },
    "buckets:4 partition 2 W4 pad, fixed_random_seed": {
        "options": {
            "ordering": "buckets:4",
            "max_frames": 1200,
            "partition_epoch": 2,
            "uneven": "pad",
            "fixed_random_seed": 5,
        },
        "world": 4,
    },
    "buckets:3 W3 random_seed_offset, subset": {
        "options": {
            "ordering": "buckets:3",
            "max_frames": 1000,
            "distribution": "random_seed_offset",
            "fixed_random_subset": 0.5,
        },
        "world": 3,
    },
    "laplace:.8 W3 split, packed": {
        "options": {"ordering": "laplace:.8", "batch_cost": "packed", "max_frames": 1600},
        "world": 3,
    },
    "laplace W4 pad, max_packed_frames": {
        "options": {
            "ordering": "laplace",
            "max_frames": 2000,
            "max_packed_frames": 1200,
            "uneven": "pad",
        },
        "world": 4,
    },
    "laplace W2 drop, epoch_wise_filter elastic -> W3": {
        "options": {
            "ordering": "laplace",
            "max_seqs": 5,
            "uneven": "drop",
            "epoch_wise_filter": {(1, 1): {"max_mean_len": 120}},
        },
        "world": 2,
        "elastic": (3, 3),
    },
    "buckets:3 partition 2 W3 random_seed_offset, epoch_wise_filter": {
        "options": {
            "ordering": "buckets:3",
            "max_frames": 2200,
            "partition_epoch": 2,
            "distribution": "random_seed_offset",
            "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}},
            "seed": 6,
        },
        "world": 3,
    },
}
NEW_GOLDEN = {
    "laplace:.10 W3 split, per-key limits, subset": "f349c0e3ac42dc42217f6e3ed8ededff1987dd64d55b6e381d8c64aa6c47298b",
    "buckets:4 partition 2 W4 pad, fixed_random_seed": "deaa8476ca5d43d89204f091df75684e9a2f5bccf5789a73505c6b93c0dadff7",
    "buckets:3 W3 random_seed_offset, subset": "64039e9bae7aadd5b08b5c60cf14ffaf3c6728aca9bd7ad9250900dd02de87d1",
    "laplace:.8 W3 split, packed": "ac2f66b6d595849b448bcca926efac4d56c9926d05da8943de27f5a7020b5e07",
    "laplace W4 pad, max_packed_frames": "f1726c0f71acd3a3fe737a72ea99e8e215cb6b7245d2a83b1b8e10e1ef20d00c",
    "laplace W2 drop, epoch_wise_filter elastic -> W3": "cfd48b67b66c78b8f8470a92c7803c14decd6e198d7f5541f083b64e53f1ed85",
    "buckets:3 partition 2 W3 random_seed_offset, epoch_wise_filter": "3179abf0477fe8af49b229d0037a3bc00868b872c6659c2aed40ed033fbb2028",
}  # fmt: skip


def test_golden_plans_of_the_admission_options() -> None:
    """Pinned like ``test_plan_indexed``'s cases (added with the options: no existing plan
    changed, so no algorithm bump)."""
    got = {name: indexed_digest(case) for name, case in NEW_CASES.items()}
    assert got == NEW_GOLDEN, f"indexed plans changed; bump INDEXED_ALGORITHM and record: {got}"


# option sets refused by both plannings before, planned by indexed since (buckets:N with per-key
# or packed limits, fixed_random_subset with files or a mix, a mix with random_seed_offset): their
# plans pinned too, so a later "same plans" claim over them is checked
SINCE_REFUSED_CASES: dict[str, dict] = {
    "buckets:4 W3 split, max_frames per key elastic -> W2": {
        "options": {"ordering": "buckets:4", "max_frames": {"data": 1500, "classes": 400},
                    "max_seqs": 8, "seed": 3},
        "classes": True,
        "world": 3,
        "elastic": (2, 2),
    },
    "buckets:3 W4 pad, packed elastic -> W3": {
        "options": {"ordering": "buckets:3", "batch_cost": "packed", "max_frames": 1500,
                    "uneven": "pad"},
        "world": 4,
        "elastic": (3, 3),
    },
    "files buckets:5 W3 split, max_packed_frames elastic -> W2": {
        "options": {"ordering": "buckets:5", "max_frames": 2000, "max_packed_frames": 1200,
                    "distribution": "files", "seed": 2},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 2),
    },
    "files laplace:.10 W3 split, subset elastic -> W4": {
        "options": {"ordering": "laplace:.10", "max_frames": 1500, "distribution": "files",
                    "fixed_random_subset": 200, "seed": 1},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 4),
    },
    "mix buckets:3 W3 pad, subset": {
        "options": {"ordering": "buckets:3", "max_frames": 1800, "uneven": "pad",
                    "fixed_random_subset": 0.6, "mix": {"a": 0.7, "b": 1.5, "c": 1}},
        "world": 3,
    },
    "mix files laplace W3 split, subset": {
        "options": {"ordering": "laplace", "max_frames": 2000, "distribution": "files",
                    "fixed_random_subset": 180, "mix": {"a": 1.5, "c": 0.5}, "seed": 4},
        "files": list(range(0, 301, 10)),
        "world": 3,
    },
    "mix laplace:.10 partition 2 W3 random_seed_offset": {
        "options": {"ordering": "laplace:.10", "max_frames": 1600, "partition_epoch": 2,
                    "distribution": "random_seed_offset", "mix": {"a": 0.7, "b": 2, "c": "1/3"}},
        "world": 3,
    },
    "chunked 80:40 mix buckets:3 W2 random_seed_offset": {
        "options": {"ordering": "buckets:3", "max_frames": 700, "max_seqs": 9,
                    "chunking": "80:40", "min_chunk_size": 10,
                    "distribution": "random_seed_offset", "mix": {"a": 1.5, "c": 0.5}},
        "world": 2,
    },
    "mix buckets:3 partition 2 W3 random_seed_offset": {
        "options": {"ordering": "buckets:3", "max_frames": 1600, "partition_epoch": 2,
                    "distribution": "random_seed_offset", "mix": {"a": 0.7, "b": 2, "c": "1/3"}},
        "world": 3,
    },
    "mix random W3 random_seed_offset": {
        "options": {"ordering": "random", "max_frames": 1600,
                    "distribution": "random_seed_offset", "mix": {"a": 0.7, "b": 2, "c": "1/3"}},
        "world": 3,
    },
    "chunked 80:40 mix sort_bin_shuffle:.5 W2 random_seed_offset": {
        "options": {"ordering": "sort_bin_shuffle:.5", "chunking": "80:40", "max_frames": 700,
                    "seed": 3, "mix": {"a": 1.5, "c": 0.5}, "distribution": "random_seed_offset"},
        "world": 2,
    },
}  # fmt: skip
SINCE_REFUSED_GOLDEN = {
    "buckets:4 W3 split, max_frames per key elastic -> W2": (
        "feabf1b2fbd792c1d1f64e708ed61e74715928eae6406e97f94e413c4305cbe4"
    ),
    "buckets:3 W4 pad, packed elastic -> W3": (
        "46a0082be05a1aad5571f1cb819f588b1496300ac091276ccafc38397d90087b"
    ),
    "files buckets:5 W3 split, max_packed_frames elastic -> W2": (
        "125b488c47e73e737badb706e9dfd47933405fe9d7a72d4956b1c8e7a5c60524"
    ),
    "files laplace:.10 W3 split, subset elastic -> W4": (
        "60a6ef1464c4d9b475d9f420a27afb34256db90fb6325bd85dae0b86073d5e99"
    ),
    "mix buckets:3 W3 pad, subset": (
        "895cb9088a3caebbbefeb958a9796b3741bd5585c8ea1986fc3158a1b891098a"
    ),
    "mix files laplace W3 split, subset": (
        "f5a0c5db4e1f6cd37cfbec5b05e854c81bce9dbd6667f5dcaaf6122911ee7fa7"
    ),
    "mix laplace:.10 partition 2 W3 random_seed_offset": (
        "b53871c1c72216139636389588b66455e8c8d645fd1fae868009a4a1e7d43252"
    ),
    "chunked 80:40 mix buckets:3 W2 random_seed_offset": (
        "ec534ee8d1f39cc67200e47998116923129294c6f675511916d32b9179e0d9dd"
    ),
    "mix buckets:3 partition 2 W3 random_seed_offset": (
        "cf3930714abe36acae9067fc4b8164a07937efc60ef08447e772b7c49c98b99e"
    ),
    # seqloader-plan-indexed/13 (each rank its own slots of a random or sort_bin_shuffle mix):
    # both differ under /12 (f989cd68..., bc369c60...). The lengths here are distinct, so only
    # a sequence's corpus epochs trade places between ranks; test_plan_indexed_mix_per_rank
    # checks whole batches differ where lengths tie
    "mix random W3 random_seed_offset": (
        "ee4afea2e5ce2a15eade50ffe6a362ba682e2de8a5053ac7f72a19b015ae1ea3"
    ),
    "chunked 80:40 mix sort_bin_shuffle:.5 W2 random_seed_offset": (
        "55d084e2da487d95f8bf6ee77abfed4e9c984a857487b606c0794d59fe8c0096"
    ),
}


def test_since_refused_golden_plans_are_pinned() -> None:
    """Recorded when these sets were already planned (no plan moved by recording them); bump
    ``INDEXED_ALGORITHM`` and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in SINCE_REFUSED_CASES.items()}
    assert got == SINCE_REFUSED_GOLDEN, f"record: {got}"
