"""Length variants with limits on other keys than the length key (per-key ``max_frames``,
``max_packed_frames``) under indexed planning (``seqloader.plan.indexed.variants_limits``): every key of a batch is
limited at the variant each slot is planned in, as global planning limits the drawn lengths (a
key the variants do not list keeps the source's lengths). The planning contracts hold
(``check_plan_contracts``)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner, resolve_planning
from seqloader.plan.variants import LengthVariants
from test_speed_plan_indexed import digest
from test_speed_plan_indexed_filter import variant_cases

FACTORS = (0.9, 1.0, 1.1)
ORDERINGS = ["laplace:.8", "buckets:3", "laplace:3", "default", "random:2", "sorted",
             "sort_bin_shuffle:.3"]  # fmt: skip


def two_keys(base: np.ndarray, vary_targets: bool) -> tuple[dict, LengthVariants, dict]:
    """(the source's lengths, the variants, each key's lengths per variant ``[F, n]``): audio
    ``data`` at three speeds, ``classes`` (targets) about a fifth of it, varying or not."""
    targets = np.maximum(1, base // 5 + base % 7)
    table = {"data": np.stack([np.ceil(base / f).astype(np.int64) for f in FACTORS])}
    table["classes"] = np.stack([targets + i * (base % 3) for i in range(3)]) if vary_targets \
        else np.broadcast_to(targets, (3, len(base)))  # fmt: skip
    declared = {k: t for k, t in table.items() if k == "data" or vary_targets}
    variants = LengthVariants(declared, tuple(str(f) for f in FACTORS))
    return {k: t.max(axis=0) for k, t in table.items()}, variants, table


def keyed_planner(base: np.ndarray, vary_targets: bool, **options):
    lengths, variants, _ = two_keys(base, vary_targets)
    options.setdefault("planning", "indexed")  # auto keeps laplace global here
    return make_planner(lengths, PlanOptions(**options), variants=variants)


def check_keys(table: dict, limits: dict, packed: dict):
    """Every batch within every key's limit at its slots' variants: padded (``limits``) and
    summed (``packed``)."""

    def check(planner, epoch: int, plan) -> None:
        b = plan.batches
        assert b.variants is not None
        for key, limit in limits.items():
            lengths = table[key][b.variants, b.seqs]
            for a, z in zip(b.bounds[:-1].tolist(), b.bounds[1:].tolist()):
                assert (z - a) * int(lengths[a:z].max()) <= limit, key
        for key, limit in packed.items():
            sums = np.add.reduceat(table[key][b.variants, b.seqs], b.bounds[:-1])
            assert (sums[np.diff(b.bounds) > 0] <= limit).all(), key

    return check


LONG = ((np.arange(60) * 7919 + 17) % 300 + 1).tolist()
CASES = variant_cases(
    ORDERINGS, vary=st.booleans(), targets=st.integers(70, 400), packed=st.booleans()
)


def example_case(
    ordering: str, distribution: str, parts: int, vary: bool, packed: bool, targets: int = 120
) -> dict:
    return {"lengths": LONG, "seed": 3, "ordering": ordering, "distribution": distribution,
            "parts": parts, "uneven": "split", "vary": vary, "targets": targets,
            "packed": packed}  # fmt: skip


@settings(max_examples=8, deadline=None)
@given(case=CASES)
@example(example_case("laplace:.8", "random_seed_offset", 2, True, False))
@example(example_case("buckets:3", "shard", 1, True, True))
@example(example_case("sorted", "shard", 2, True, False))
@example(example_case("default", "shard", 2, True, True))
@example(example_case("laplace:3", "shard", 2, True, True, 100))
def test_per_key_limits_with_variants_hold_every_contract(case):
    """Per-key ``max_frames``, or ``max_packed_frames`` per key with ``max_frames``."""
    base = np.asarray(case["lengths"], dtype=np.int64)
    limits = {"data": 1200, "classes": case["targets"]}
    packed = {"data": 1000, "classes": case["targets"]} if case["packed"] else {}
    if packed:
        limits = {"data": 1200}
    options = {"max_frames": limits, "max_packed_frames": packed or None, "max_seqs": 9,
               "ordering": case["ordering"],
               "seed": case["seed"], "partition_epoch": case["parts"], "uneven": case["uneven"],
               "distribution": case["distribution"], "planning": "indexed"}  # fmt: skip
    table = two_keys(base, case["vary"])[2]
    check_plan_contracts(
        lambda: keyed_planner(base, case["vary"], **options),
        [3, 2, 4],
        [0.5],
        epochs=list(range(1, 2 * case["parts"] + 1)),
        workers=(),
        each_plan=check_keys(table, limits, packed),
    )


def test_fixed_orders_with_per_key_limits_are_global_plannings_batches():
    """Per-key ``max_frames`` and ``max_packed_frames``: the same batches as global planning."""
    base = np.random.default_rng(4).integers(20, 400, 500)
    lengths, variants, _ = two_keys(base, True)
    keyed = {"max_frames": {"data": 3000, "classes": 300}, "seed": 7, "partition_epoch": 2}
    packed = {**keyed, "max_frames": 3000, "max_packed_frames": {"data": 2000, "classes": 200}}
    for ordering, given_ in [("default", keyed), ("reverse", keyed), ("default", packed)]:
        indexed = keyed_planner(base, True, ordering=ordering, **given_)
        options = PlanOptions(ordering=ordering, planning="global", **given_)
        global_ = make_planner(lengths, options, variants=variants)
        for epoch in (1, 3):
            b = indexed.global_plan(epoch, 1).batches
            want = global_.global_plan(epoch, 1).batches
            assert b.seqs.tolist() == want.seqs.tolist()
            assert b.bounds.tolist() == want.bounds.tolist()


def test_auto_plans_variants_with_per_key_limits_indexed_but_laplace_global():
    """``laplace`` sizes a bucket's batches by the bucket's longest of the other keys: more
    steps than global planning's cut (docs/performance.md), so ``auto`` keeps it global where
    another key than the length key is limited; ``buckets:N`` (global planning refuses it) and
    the greedy cuts plan indexed."""
    lengths, variants, _ = two_keys(np.arange(10, 40, dtype=np.int64), True)
    for ordering in ("laplace:.5", "buckets:3", "default", "random", "sorted"):
        for limits in (
            {"max_frames": {"data": 500, "classes": 60}},
            {"max_frames": 500, "max_packed_frames": {"data": 400, "classes": 40}},
            {"max_frames": 500, "max_packed_frames": 400},
            {"max_frames": {"data": 500}},
        ):
            options = PlanOptions(ordering=ordering, **limits)  # type: ignore[arg-type]
            given_ = PlanInputs(lengths, options, variants=variants)
            others = isinstance(limits["max_frames"], dict) and "classes" in limits["max_frames"]
            others = others or isinstance(limits.get("max_packed_frames"), dict)
            want = "global" if ordering.startswith("laplace") and others else "indexed"
            assert resolve_planning(given_).options.planning == want, (ordering, limits)


# ---------------------------------------------------------------- golden digests (new sets)

LIMITED_CASES = {
    "laplace:.8 per-key partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "laplace:.8", "max_frames": {"data": 2400, "classes": 200},
                    "seed": 3, "partition_epoch": 2}, "world": 3, "elastic": (2, 2)},
    "random_seed_offset random per-key W2 pad": {
        "options": {"ordering": "random", "max_frames": {"*": 1500, "classes": 150},
                    "max_seqs": 7, "seed": 2, "distribution": "random_seed_offset",
                    "uneven": "pad"}, "world": 2},
    "buckets:4 packed per-key partition 2 W4 pad": {
        "options": {"ordering": "buckets:4", "max_frames": 3000, "max_seqs": 12, "seed": 8,
                    "max_packed_frames": {"data": 2000, "classes": 250}, "partition_epoch": 2,
                    "uneven": "pad"}, "world": 4},
    "sort_bin_shuffle:3 packed W3 split elastic -> W2": {
        "options": {"ordering": "sort_bin_shuffle:3", "max_frames": 3000, "seed": 6,
                    "max_packed_frames": 2200}, "world": 3, "elastic": (2, 2)},
}  # fmt: skip
LIMITED_GOLDEN = {
    "laplace:.8 per-key partition 2 W3 split elastic -> W2": (
        "f188448e5b29bc587d2eff0ab64f2236622a40e1e5364b17a97c2d7cdd2287f5"
    ),
    "random_seed_offset random per-key W2 pad": (
        "09b4b6f5685da4135f58e16e208134822ec6981ce29f654b309c15e8ffc2353d"
    ),
    "buckets:4 packed per-key partition 2 W4 pad": (
        "45103cb9e98a2adbdb1aa29c8f4469c94315e819a808e5747775f1b03af0dc86"
    ),
    "sort_bin_shuffle:3 packed W3 split elastic -> W2": (
        "6b3121283ab00ff932da3173f4cec1e7c7365d33894f43f8da30d5a96a272b92"
    ),
}


def test_per_key_variant_golden_plans_are_pinned():
    """Recorded when these sets were first planned; bump ``INDEXED_ALGORITHM`` and record anew
    if one changes."""

    def make(base, **options):
        return keyed_planner(base, True, **options)

    got = {name: digest(case, make) for name, case in LIMITED_CASES.items()}
    assert got == LIMITED_GOLDEN, f"record: {got}"
