"""``benchmarks/buckets.py`` on a small corpus: its Lhotse simulation gives exactly what Lhotse's own
samplers give every rank, every method's sequence accounting adds up, and seqloader's plans use every
sequence once with equal steps (no figures asserted)."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("lhotse")  # in the dev and bench extras
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import buckets


def lengths(n: int = 300) -> np.ndarray:
    return np.random.default_rng(3).integers(50, 2000, size=n)


@pytest.mark.parametrize("quadratic", [None, 1500])
def test_lhotse_simulation_is_what_each_rank_sampler_yields(quadratic: int | None) -> None:
    from lhotse import CutSet, MonoCut
    from lhotse.dataset import DynamicBucketingSampler

    lens = lengths()
    steps = buckets.lhotse_steps(lens, 5, 1, quadratic)
    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0.0, duration=int(t) / buckets.FPS, channel=0)
        for i, t in enumerate(lens)
    )
    for rank in range(buckets.WORLD):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = DynamicBucketingSampler(
                cuts,
                max_duration=buckets.MAX_FRAMES / buckets.FPS,
                num_buckets=5,
                shuffle=True,
                buffer_size=20_000,
                quadratic_duration=None if quadratic is None else quadratic / buckets.FPS,
                world_size=buckets.WORLD,
                rank=rank,
                seed=0,
            )
            sampler.set_epoch(1)
            got = [[int(c.id.split("_dup")[0]) for c in b] for b in sampler]
        assert got == [step[rank].tolist() for step in steps]


def test_every_method_accounts_for_every_sequence() -> None:
    result = buckets.measure(reps=1, n=400)
    for corpus, info in result.items():
        assert info["sequences"] == 400
        for name, row in info["rows"].items():
            assert row["once"] + row["dropped"] + row["duplicated"] == 400, (corpus, name)
            assert row["imbalance"] >= 1.0 and row["padding"] >= 0.0
            if name.startswith("seqloader"):  # exactly once, no repeats
                assert (row["once"], row["dropped"], row["duplicated"]) == (400, 0, 0)
    md = buckets.table(result, "frames")
    assert md.count("| seqloader buckets:") == 2 * len(buckets.BUCKETS)
