"""Length variants' classes built once per node (``loading.variant_store``): plans identical
with the store mapped and with the classes built in the rank; a damaged store rebuilt, never
served."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import DataWarning
from seqloader.loading import variant_store
from seqloader.plan import PlanOptions, make_planner
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.planners import node_variant_classes
from seqloader.plan.variants import LengthVariants
from seqloader.sources.columns import ColumnStore

FACTORS = (0.9, 1.0, 1.1)


def _inputs(n: int, ordering: str, seed: int) -> PlanInputs:
    base = np.random.default_rng(seed).integers(1, 300, n).astype(np.int32)
    table = np.stack([np.ceil(base / f).astype(np.int32) for f in FACTORS])
    variants = LengthVariants({"data": table}, tuple(str(f) for f in FACTORS))
    options = PlanOptions(
        ordering=ordering, seed=seed, max_seqs=7, max_frames=900, planning="indexed"
    )
    return PlanInputs({"data": table.max(axis=0)}, options, origin="toy", variants=variants)


def _shares(inputs: PlanInputs, world: int = 3) -> list[tuple[bytes, ...]]:
    planner = make_planner(inputs)
    out = []
    for epoch in (1, 2):
        plan = planner.global_plan(epoch, world)
        for rank in range(world):
            s = plan.rank_share(rank)
            out.append((s.seqs.tobytes(), s.bounds.tobytes(), np.asarray(s.variants).tobytes()))
    return out


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(0, 120),
    ordering=st.sampled_from(["laplace", "buckets:3", "sorted", "sort_bin_shuffle"]),
    seed=st.integers(0, 5),
)
def test_plans_with_prebuilt_classes_are_those_built_in_the_rank(n, ordering, seed):
    inputs = _inputs(n, ordering, seed)
    built = node_variant_classes(inputs)
    assert built
    assert _shares(replace(inputs, variant_classes=built)) == _shares(inputs)


def test_node_store_is_mapped_and_a_damaged_one_rebuilt_never_served(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(variant_store, "MIN_SEQUENCES", 10)
    inputs = _inputs(400, "laplace", 1)
    stores: list = []
    first = variant_store.shared_variant_classes(inputs, lambda: "fp", stores)
    again = variant_store.shared_variant_classes(inputs, lambda: "fp", stores)
    assert first is not None and again is not None
    assert [s.built for s in stores] == [True, False]
    want = _shares(inputs)
    assert _shares(replace(inputs, variant_classes=again)) == want
    path = stores[0].path
    offset, _ = ColumnStore(path).byte_range("classes.bucket.members")
    with open(path, "r+b") as fh:  # a changed byte in the members column's data
        fh.seek(offset + 3)
        byte = fh.read(1)
        fh.seek(offset + 3)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = variant_store.shared_variant_classes(inputs, lambda: "fp", stores)
    assert any(issubclass(w.category, DataWarning) and path in str(w.message) for w in caught)
    assert stores[-1].built and rebuilt is not None
    assert _shares(replace(inputs, variant_classes=rebuilt)) == want
    other = replace(inputs, variants=LengthVariants(inputs.variants.lengths, ("a", "b", "c")))
    assert variant_store.variant_classes_path(other, "fp") != variant_store.variant_classes_path(
        inputs, "fp"
    )


def test_a_shorter_variants_changed_lengths_under_the_same_fingerprint_get_their_own_classes(
    tmp_path, monkeypatch
):
    # a source whose fingerprint covers only its (longest) lengths: variant b grows to 1.15x its
    # base, still below a, under the same labels; the classes must not be the stale ones
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(variant_store, "MIN_SEQUENCES", 10)
    base = np.random.default_rng(1).integers(1, 300, 400)

    def inputs(slow: float) -> tuple[PlanInputs, np.ndarray]:
        table = np.stack([np.ceil(base * f).astype(np.int64) for f in (1.2, slow, 1.0)])
        options = PlanOptions(ordering="laplace", seed=1, max_frames=900, planning="indexed")
        lv = LengthVariants({"data": table}, ("a", "b", "c"))
        return PlanInputs({"data": table.max(axis=0)}, options, origin="toy", variants=lv), table

    before, _ = inputs(1.0)
    after, table = inputs(1.15)
    assert variant_store.shared_variant_classes(before, lambda: "fp") is not None
    mapped = variant_store.shared_variant_classes(after, lambda: "fp")
    assert _shares(replace(after, variant_classes=mapped)) == _shares(after)
    plan = make_planner(replace(after, variant_classes=mapped)).global_plan(1, 1).batches
    lengths = table[plan.variants, plan.seqs]
    for k in range(len(plan)):
        group = lengths[plan.bounds[k] : plan.bounds[k + 1]]
        assert len(group) * int(group.max(initial=0)) <= 900
