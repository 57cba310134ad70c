"""Length variants with ``epoch_wise_filter`` and epoch selections under indexed planning
(``seqloader.plan.indexed.variants_filter``): the filter keeps what global planning's keeps of
the same sub-epoch (the shortest by the source's lengths, the longest variant's), and what it
kept is batched at the drawn variants' lengths. The planning contracts hold against that kept
set computed here (``check_plan_contracts`` with an ``expected`` of its own)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from plan_contracts import Units, check_plan_contracts
from seqloader.plan.admission import mean_len_selection
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner, resolve_planning
from seqloader.plan.selections import EpochSelection
from test_speed_plan_indexed import SEEN, check_variants, digest, planner_of, speed_variants

ORDERINGS = ["laplace:.8", "buckets:3", "laplace:3", "buckets:2", "default", "random:2", "sorted",
             "sort_bin_shuffle:.3"]  # fmt: skip


LONG = ((np.arange(40) * 7919 + 17) % 300 + 1).tolist()


def selected_planner(base: np.ndarray, selections: list, **options):
    """``planner_of`` with epoch selections."""
    variants = speed_variants(base)
    given_ = PlanOptions(planning="indexed", **options)
    longest = {"data": variants.longest("data")}
    return make_planner(longest, given_, variants=variants, selections=selections)


def filtered_expected(base: np.ndarray, options: dict, means: list[float], keep=None):
    """``expected`` for ``check_plan_contracts``: the unfiltered sub-epoch's sequences (the same
    options unfiltered, ``shard``: the sets ``random_seed_offset`` shares), the selection's
    ``keep`` (None: none applies), then each filter in turn by the longest variant's lengths, as
    global planning filters (the order is not compared)."""
    plain = {**options, "distribution": "shard", "epoch_wise_filter": None}
    unfiltered = planner_of(base, **plain)
    longest = speed_variants(base).longest("data")

    def expected(planner, epoch: int, world: int) -> Units:
        b = unfiltered.global_plan(epoch, 1).batches
        seqs = np.sort(b.seqs[b.real])
        if keep is not None:
            seqs = seqs[keep[seqs]]
        for m in means:
            seqs = seqs[mean_len_selection(seqs, longest, m)]
        return Units(seqs)

    return expected


def variant_cases(orderings: list[str], **more) -> st.SearchStrategy:
    """Small variant corpora and plan options: lengths, seed, ordering, distribution, parts,
    uneven, and ``more``."""
    return st.fixed_dictionaries(
        {
            "lengths": st.lists(st.integers(1, 300), min_size=1, max_size=70),
            "seed": st.integers(0, 1000),
            "ordering": st.sampled_from(orderings),
            "distribution": st.sampled_from(["shard", "random_seed_offset"]),
            "parts": st.integers(1, 2),
            "uneven": st.sampled_from(["split", "pad", "drop"]),
            **more,
        }
    )


CASES = variant_cases(
    ORDERINGS, means=st.lists(st.integers(20, 250), max_size=2), select=st.booleans()
)


def example_case(
    ordering: str, distribution: str, parts: int, uneven: str, means: list, select: bool = False
) -> dict:
    return {"lengths": LONG, "seed": 3, "ordering": ordering, "distribution": distribution,
            "parts": parts, "uneven": uneven, "means": means, "select": select}  # fmt: skip


@settings(max_examples=8, deadline=None)
@given(case=CASES)
@example(example_case("laplace:.8", "random_seed_offset", 2, "split", [150, 90]))
@example(example_case("buckets:3", "shard", 2, "pad", [120]))
@example(example_case("sorted", "shard", 2, "drop", [140, 200]))
@example(example_case("buckets:3", "random_seed_offset", 2, "pad", [], True))
@example(example_case("laplace:3", "shard", 2, "split", [130], True))
@example(example_case("sort_bin_shuffle:.3", "shard", 1, "split", [], True))
def test_filtered_variant_plans_hold_every_contract(case):
    """``epoch_wise_filter``, epoch selections (the first full epoch's), or both."""
    base, parts, means = np.asarray(case["lengths"], dtype=np.int64), case["parts"], case["means"]
    wise = {(1, 2 * parts): {"max_mean_len": means[0]}} if means else {}
    if len(means) > 1:
        wise[(2, 2)] = {"max_mean_len": means[1]}
    options = {"max_frames": 1200, "max_seqs": 9, "ordering": case["ordering"],
               "seed": case["seed"], "partition_epoch": parts, "uneven": case["uneven"],
               "distribution": case["distribution"], "epoch_wise_filter": wise or None}  # fmt: skip
    keep = (np.arange(len(base)) * 7 + case["seed"]) % 3 != 0
    sels = [EpochSelection(1, parts, keep, "subdirs=['a']")] if case["select"] else []
    SEEN.clear()
    applying = {e: [m for (a, z), f in wise.items() if a <= e <= z for m in [f["max_mean_len"]]]
                for e in range(1, 2 * parts + 1)}  # fmt: skip
    expect = {
        e: filtered_expected(base, options, applying[e], keep if sels and e <= parts else None)
        for e in applying
    }
    check_plan_contracts(
        lambda: selected_planner(base, sels, **options),
        [3, 2, 4],
        [0.5],
        epochs=list(applying),
        workers=(),
        expected=lambda planner, epoch, world: expect[epoch](planner, epoch, world),
        each_plan=check_variants,
    )


def test_fixed_orders_filtered_are_global_plannings_batches():
    """``default`` and ``reverse`` keep global planning's draw and order: filtered, the same
    batches (and the same report counts) as ``planning="global"`` with the same variants."""
    base = np.random.default_rng(4).integers(20, 400, 500)
    variants = speed_variants(base)
    longest = {"data": variants.longest("data")}
    wise = {(1, 3): {"max_mean_len": 150}}
    for ordering in ("default", "reverse"):
        given_ = {"max_frames": 2000, "ordering": ordering, "seed": 7, "partition_epoch": 2,
                  "epoch_wise_filter": wise}  # fmt: skip
        indexed = planner_of(base, **given_)
        options = PlanOptions(planning="global", **given_)
        global_ = make_planner(longest, options, variants=variants)
        for epoch in (1, 2, 3):
            b = indexed.global_plan(epoch, 1).batches
            want = global_.global_plan(epoch, 1).batches
            assert b.seqs.tolist() == want.seqs.tolist()
            assert b.bounds.tolist() == want.bounds.tolist()
            assert indexed.filtered(epoch) == global_.filtered(epoch)


def test_auto_plans_variants_with_epoch_wise_filter_indexed():
    base = np.arange(10, 40, dtype=np.int64)
    variants = speed_variants(base)
    lengths = {"data": variants.longest("data")}
    for ordering in ("laplace:.5", "buckets:3", "default", "random", "sorted"):
        options = PlanOptions(max_frames=500, ordering=ordering,
                              epoch_wise_filter={(1, 1): {"max_mean_len": 20}})  # fmt: skip
        got = resolve_planning(PlanInputs(lengths, options, variants=variants)).options.planning
        assert got == "indexed", ordering


def test_the_filter_keeps_by_the_longest_variant_not_the_drawn_one():
    """Every ordering keeps global planning's set: the shortest by the source's lengths (where
    the drawn lengths' shortest would keep another set, checked here)."""
    base = np.random.default_rng(6).integers(20, 400, 600)
    table = np.asarray(speed_variants(base).lengths["data"])
    longest = table.max(axis=0)
    for ordering in ("laplace:.5", "buckets:4", "random", "sorted_reverse"):
        options = {"max_frames": 3000, "ordering": ordering, "seed": 1, "partition_epoch": 2}
        plain = planner_of(base, **options)
        planner = planner_of(base, epoch_wise_filter={(1, 2): {"max_mean_len": 120}}, **options)
        for epoch in (1, 2):
            b, u = planner.global_plan(epoch, 2).batches, plain.global_plan(epoch, 1).batches
            want = u.seqs[mean_len_selection(u.seqs, longest, 120)]
            at_drawn = np.zeros_like(longest)
            at_drawn[u.seqs] = table[u.variants, u.seqs]
            drawn = u.seqs[mean_len_selection(u.seqs, at_drawn, 120)]
            assert sorted(b.seqs[b.real].tolist()) == sorted(want.tolist())
            assert sorted(drawn.tolist()) != sorted(want.tolist())


# ---------------------------------------------------------------- golden digests (new sets)

FILTERED_CASES = {
    "laplace:.8 filtered partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "laplace:.8", "max_frames": 2400, "seed": 3, "partition_epoch": 2,
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 150}}},
        "world": 3, "elastic": (2, 2)},
    "random_seed_offset sorted filtered W2 pad": {
        "options": {"ordering": "sorted", "max_frames": 1500, "max_seqs": 7, "seed": 2,
                    "distribution": "random_seed_offset", "uneven": "pad",
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 120}}}, "world": 2},
}  # fmt: skip
FILTERED_GOLDEN = {
    "laplace:.8 filtered partition 2 W3 split elastic -> W2": (
        "6a7bd6a0ad7f3d90607d1d63d6b5e3c306648e97ba2f036e2444e5e403751235"
    ),
    "random_seed_offset sorted filtered W2 pad": (
        "8550800e12aaf142cd7ee7c539e256dd3d04853d3c4ce5de327dc0a84e7dda5b"
    ),
}


def test_filtered_variant_golden_plans_are_pinned():
    """Recorded when these sets were first planned; bump ``INDEXED_ALGORITHM`` and record anew
    if one changes."""
    got = {name: digest(case) for name, case in FILTERED_CASES.items()}
    assert got == FILTERED_GOLDEN, f"record: {got}"


SELECTED_CASES = {
    "buckets:4 selected partition 2 W4 pad": {
        "options": {"ordering": "buckets:4", "max_frames": 3000, "max_seqs": 12, "seed": 8,
                    "partition_epoch": 2, "uneven": "pad"}, "world": 4},
    "random selected filtered W3 split elastic -> W2": {
        "options": {"ordering": "random", "max_frames": 2000, "seed": 5,
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}},
        "world": 3, "elastic": (2, 2)},
}  # fmt: skip
SELECTED_GOLDEN = {
    "buckets:4 selected partition 2 W4 pad": (
        "d991708dffda8aa0714a04cc6d604973756e302aceb2c40c182751663bcde5fc"
    ),
    "random selected filtered W3 split elastic -> W2": (
        "a9bae954a4893a0779e3d6cb3528931eb31672795e0f0b83091cd25756c7a22f"
    ),
}


def test_selected_variant_golden_plans_are_pinned():
    """Epoch selections (epochs 1 and 2) with variants; recorded when first planned."""

    def make(base, **options):
        keep = np.arange(len(base)) % 5 != 2
        return selected_planner(base, [EpochSelection(1, 2, keep, "subdirs=['a']")], **options)

    got = {name: digest(case, make) for name, case in SELECTED_CASES.items()}
    assert got == SELECTED_GOLDEN, f"record: {got}"
