"""Greedy batching: the vectorised batcher equals the plain one-sequence-at-a-time rule (RETURNN's)
on random inputs, also across its block edges and its size cap, and ``padded_frames`` is exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import batching
from seqloader.plan.batching import greedy_bounds, padded_frames


def greedy_reference(lengths: list[int], max_seqs: int | None, max_frames: int | None) -> list[int]:
    """Add the next sequence unless the batch would then exceed ``max_seqs`` or
    ``n_seqs * max_len > max_frames``; a sequence always starts a batch (even an overlong one)."""
    bounds, start, n = [0], 0, len(lengths)
    while start < n:
        size, longest = 1, lengths[start]
        while start + size < n:
            longer = max(longest, lengths[start + size])
            if max_seqs is not None and size + 1 > max_seqs:
                break
            if max_frames is not None and (size + 1) * longer > max_frames:
                break
            size, longest = size + 1, longer
        start += size
        bounds.append(start)
    return bounds


@st.composite
def batching_inputs(draw: st.DrawFn) -> tuple[np.ndarray, int | None, int | None]:
    n = draw(st.integers(0, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    max_frames = draw(st.one_of(st.none(), st.integers(1, 5000)))
    high = draw(st.sampled_from([1, 10, 300, 3000, 6000]))  # 6000: some exceed max_frames
    lengths = rng.integers(0, high + 1, size=n)
    if draw(st.booleans()):
        lengths[rng.random(n) < 0.3] = 0  # empty sequences cost nothing
    max_seqs = draw(st.one_of(st.none(), st.integers(1, 500)))
    return lengths, max_seqs, max_frames


@settings(max_examples=60, deadline=None)
@given(batching_inputs())
def test_greedy_bounds_match_the_reference(case) -> None:
    lengths, max_seqs, max_frames = case
    got = greedy_bounds(lengths, max_seqs, max_frames)
    assert got.dtype == np.int64
    assert got.tolist() == greedy_reference(lengths.tolist(), max_seqs, max_frames)


@settings(max_examples=60, deadline=None)
@given(batching_inputs(), st.integers(1, 9), st.integers(1, 9))
def test_block_edges_and_size_cap_change_nothing(case, block: int, cap: int) -> None:
    """Tiny blocks and lifting caps force every path: batches crossing block edges, and batches
    larger than the lifting resolves (finished by the direct scan)."""
    lengths, max_seqs, max_frames = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batching, "_BLOCK", block)
        mp.setattr(batching, "_LIFT_CAP", cap)
        got = greedy_bounds(lengths, max_seqs, max_frames)
    assert got.tolist() == greedy_reference(lengths.tolist(), max_seqs, max_frames)


def test_greedy_is_memoryless() -> None:
    """Restarting at any batch boundary reproduces the remaining batches (resume relies on it)."""
    lengths = np.random.default_rng(3).integers(1, 800, size=2000)
    bounds = greedy_bounds(lengths, 50, 4000)
    for cut in bounds[1:-1:37]:
        rest = greedy_bounds(lengths[cut:], 50, 4000)
        np.testing.assert_array_equal(rest + cut, bounds[bounds >= cut])


@settings(max_examples=40, deadline=None)
@given(batching_inputs())
def test_padded_frames_is_size_times_longest(case) -> None:
    lengths, max_seqs, max_frames = case
    bounds = greedy_bounds(lengths, max_seqs, max_frames)
    expected = [
        (b - a) * int(lengths[a:b].max()) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())
    ]
    assert padded_frames(lengths, bounds).tolist() == expected
    if max_frames is not None:
        alone = np.diff(bounds) == 1  # only a sequence alone may exceed the limit
        assert (padded_frames(lengths, bounds)[~alone] <= max_frames).all()


def test_empty_batches_have_zero_padded_frames() -> None:
    assert padded_frames(np.array([5, 6]), np.array([0, 0, 2, 2])).tolist() == [0, 12, 0]
    assert padded_frames(np.zeros(0, np.int64), np.zeros(1, np.int64)).tolist() == []
