"""A 200k-sequence plan (the scale of a real corpus, checked with vectorised assertions): arrays,
not Python lists, and the contracts hold. No timing here; docs/planning.md records measurements."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.plan import Planner, PlanOptions
from seqloader.plan.batching import padded_frames

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
