"""Length variants under indexed planning when the filters admit no sequence: an empty plan, as
without variants and as global planning gives (the class pass found no class to number)."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner
from seqloader.plan.variants import LengthVariants


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("ordering", ["laplace:2", "buckets:3"])
def test_nothing_admitted_plans_no_batch(ordering, count):
    table = np.stack([np.array([30, 40, 50]) + 5 * f for f in range(count)])
    variants = LengthVariants({"data": table}, tuple(str(f) for f in range(count)))
    options = PlanOptions(max_frames=300, ordering=ordering, max_seq_length=20, planning="indexed")
    planner = make_planner({"data": table.max(axis=0)}, options, variants=variants)
    for epoch in (1, 2):
        plan = planner.global_plan(epoch, 2)
        assert plan.steps == 0
        share = plan.rank_share(1)
        assert len(share) == 0 and share.variants is not None and len(share.variants) == 0
    plain = make_planner({"data": table.max(axis=0)}, options)  # without variants: the same
    assert planner.filtered(1) == plain.filtered(1) == {"data longer than max_seq_length=20": 3}


@pytest.mark.parametrize("ordering", ["laplace:2", "default"])
def test_an_empty_share_of_a_plan_with_variants_carries_no_variant(ordering):
    """``random_seed_offset`` with fewer sequences than sub-epochs: the empty sub-epoch's shares
    (and a share past the last step) still say they hold variants (none), as chunks and uses do."""
    table = np.array([[10], [12]])
    variants = LengthVariants({"data": table}, ("a", "b"))
    options = PlanOptions(max_frames=100, ordering=ordering, distribution="random_seed_offset",
                          partition_epoch=2, planning="indexed")  # fmt: skip
    planner = make_planner({"data": table.max(axis=0)}, options, variants=variants)
    full, empty = planner.global_plan(1, 2), planner.global_plan(2, 2)
    for share in (empty.rank_share(0), empty.rank_share(1), full.rank_share(1, full.steps)):
        assert len(share) == 0 and share.variants is not None and len(share.variants) == 0
    assert full.rank_share(0).variants.tolist() in ([0], [1])
