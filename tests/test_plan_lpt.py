"""``assign_lpt`` places runs of units per numpy step and the rest by a heap: it gives the plain
heap's assignment exactly (the heap below is the rule's definition, kept as the reference); the
sequences per (rank, bucket) of an assignment of files equal a plain sum either way they are
summed (rank by rank, a chunk of files at a time)."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import lpt
from seqloader.plan.indexed import files_distribution
from seqloader.plan.indexed.files_distribution import _rank_counts
from seqloader.plan.lpt import assign_lpt


def heap_lpt(weights: np.ndarray, world_size: int) -> np.ndarray:
    """The rule one unit at a time: largest first (ties: the earlier unit), to the rank with
    the least weight (ties: fewer units, then the lower rank)."""
    heap = [(0, 0, r) for r in range(world_size)]
    out = np.zeros(len(weights), dtype=np.int64)
    for i in sorted(range(len(weights)), key=lambda i: (-int(weights[i]), i)):
        load, count, r = heap[0]
        out[i] = r
        heapq.heapreplace(heap, (load + int(weights[i]), count + 1, r))
    return out


@st.composite
def weights(draw: st.DrawFn) -> np.ndarray:
    """Unit weights of the shapes that make runs long or short: similar sizes, few distinct
    values (ties), zeros, heavy tails, huge values (loads past 2**63 when packed)."""
    n = draw(st.integers(0, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = draw(st.sampled_from(["similar", "ties", "zeros", "tail", "huge"]))
    if shape == "similar":
        return rng.integers(1000, 1100, n)
    if shape == "ties":
        return rng.integers(0, 4, n)
    if shape == "zeros":
        return np.where(rng.random(n) < 0.5, 0, rng.integers(1, 50, n))
    if shape == "tail":
        return (rng.pareto(1.0, n) * 100).astype(np.int64)
    return rng.integers(2**50, 2**55, n)


@settings(max_examples=150, deadline=None)
@given(weights(), st.integers(1, 40), st.sampled_from([(1, 3), (2, 7), (48, 2048)]))
def test_runs_and_heap_stretches_give_the_heap_assignment(
    w: np.ndarray, world_size: int, limits: tuple[int, int]
) -> None:
    """Every mix of numpy runs and heap stretches (a run of 1 up; stretches of 3 units up)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lpt, "_MIN_RUN", limits[0])
        mp.setattr(lpt, "_STRETCH", limits[1])
        np.testing.assert_array_equal(assign_lpt(w, world_size), heap_lpt(w, world_size))


@pytest.mark.parametrize("world_size", [1, 7, 64])
def test_many_similar_files_place_as_the_heap(world_size: int) -> None:
    """A corpus' files (similar sizes, rounds of ``world_size`` units per step), as planned."""
    w = np.random.default_rng(world_size).integers(900_000, 1_100_000, 3000)
    np.testing.assert_array_equal(assign_lpt(w, world_size), heap_lpt(w, world_size))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 120),
    st.integers(1, 12),
    st.integers(1, 5),
    st.sampled_from([1, 3, 16]),
)
def test_rank_bucket_counts_are_the_sum_of_the_files_rows(
    seed: int, n_files: int, world_size: int, n_buckets: int, per_rank: int
) -> None:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 1000, (n_files + 3, n_buckets)).astype(np.int32)
    part = rng.permutation(n_files + 3)[:n_files]  # some files not in the sub-epoch
    rank_of = rng.integers(0, world_size, n_files)
    want = np.zeros((world_size, n_buckets), dtype=np.int64)
    np.add.at(want, rank_of, table[part].astype(np.int64))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(files_distribution, "_PER_RANK", per_rank)
        mp.setattr(files_distribution, "_ROWS", 7)
        got = _rank_counts(table, part, rank_of, world_size)
    np.testing.assert_array_equal(got, want)
