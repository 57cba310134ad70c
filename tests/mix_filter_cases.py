"""The filtered mixes the one-bucket and one-bucket-per-value filter properties plan
(``test_plan_indexed_mix_random_filter.py``, ``test_plan_indexed_mix_sorted_filter.py``)."""

from __future__ import annotations

import numpy as np

from seqloader.plan import PlanOptions
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora


def filtered_mix(
    n: int, top: int, means: list[float], parts: int, max_seqs: int | None, kind: str, seed: int,
    **more: object,
) -> tuple[np.random.Generator, np.ndarray, PlanOptions, IndexedPlanner]:  # fmt: skip
    """Two corpora mixed at rates 1.5 and 0.5, ``n`` random lengths up to ``top``, one
    ``max_mean_len`` filter from epoch 1 on (two: the second in epochs 1-2) -> (the draws'
    generator, lengths, options, planner); ``more``: further options."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, top + 1, size=n).astype(np.int64)
    wise = {(1, None): {"max_mean_len": means[0]}}
    if len(means) > 1:
        wise[(1, 2)] = {"max_mean_len": means[1]}
    options = PlanOptions(ordering=kind, mix={"a": 1.5, "b": 0.5}, partition_epoch=parts,
                          max_frames=6 * top, max_seqs=max_seqs, seed=seed % 5,
                          epoch_wise_filter=wise, planning="indexed", **more)  # type: ignore[arg-type]  # fmt: skip
    planner = IndexedPlanner({"data": lengths}, options,
                             corpora=Corpora(("a", "b"), np.array([0, n // 3, n])))  # fmt: skip
    return rng, lengths, options, planner


def every_listed(draw, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every bucket's (a cut's: batch's) ``counts`` slots of ``draw``, one after the other ->
    (sequences, corpus epochs int64)."""
    b = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    pos = np.arange(len(b), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    seqs, uses = draw.slots(b, pos)
    return np.asarray(seqs), np.asarray(uses, dtype=np.int64)
