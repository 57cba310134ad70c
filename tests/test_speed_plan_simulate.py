"""``simulate`` (``seqloader check``) with length variants: each rank's and worker's frames and
padding are those of the variant every slot is planned and read in (indexed plans carry it per
slot; global planning draws it per full epoch), not the longest variant's."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner
from seqloader.plan.simulate import simulate
from seqloader.plan.variants import LengthVariants, variant_of


def _planner(planning: str, ordering: str, **more):
    rng = np.random.default_rng(3)
    base = rng.integers(5, 60, 80)
    # three variants, not monotone in the factor
    table = np.stack([base + 7, np.maximum(1, base - 4), np.ceil(base * 1.3).astype(np.int64)])
    variants = LengthVariants({"data": table}, ("a", "b", "c"))
    options = PlanOptions(
        max_frames=200, max_seqs=6, seed=4, ordering=ordering, planning=planning, **more
    )
    return make_planner({"data": table.max(axis=0)}, options, variants=variants), table


@pytest.mark.parametrize(
    ("planning", "ordering", "more"),
    [
        ("indexed", "laplace:3", {}),
        ("indexed", "default", {}),
        ("global", "laplace:3", {}),
        # filtered and limited per key: planned indexed under auto since round 14
        ("auto", "laplace:3", {"epoch_wise_filter": {(1, 2): {"max_mean_len": 30}}}),
        ("auto", "random", {"max_packed_frames": {"data": 150}}),
    ],
)
def test_simulated_frames_are_the_planned_variants(planning, ordering, more):
    planner, table = _planner(planning, ordering, **more)
    assert planner.options.planning == ("global" if planning == "global" else "indexed")
    result = simulate(planner, 2, 2, [1, 2])
    for e in result.epochs:
        plan = planner.global_plan(e.epoch, 2)
        for r in e.ranks:
            share = plan.rank_share(r.rank)
            v = share.variants
            if v is None:  # global planning: its per-sequence draw of the full epoch
                v = variant_of(4, e.full_epoch, share.seqs, 3)
            lens = table[v, share.seqs]
            frames = int(lens[share.real].sum())
            sizes = np.diff(share.bounds)
            maxima = [int(lens[a:z].max()) for a, z in zip(share.bounds[:-1], share.bounds[1:])]
            assert (r.load.frames, r.load.padded_frames) == (frames, int(sizes @ maxima))
            assert sum(w.frames for w in r.workers) == frames
    assert result.ok
