"""Chunked batching from fits (``seqloader.plan.chunk_batching``) gives the same batches as the
general batcher over every chunk's length: as properties over random corpora, chunkings, limits,
orderings and resume starts, and for the greedy core against ``greedy_bounds`` itself."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan import Planner, PlanOptions
from seqloader.plan.batching import greedy_bounds
from seqloader.plan.chunk_batching import MAX_CAP, ChunkFits, greedy_from_fits
from seqloader.plan.options import batch_cost_option


@st.composite
def runs_of_lengths(draw: st.DrawFn) -> tuple[np.ndarray, int, int]:
    """(lengths, max_seqs, max_frames): runs of one long length (the tightest unit, as full
    windows are) between stretches of random shorter ones, so both ways of deciding a batch
    start are taken, across the lifting's blocks."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    longest = draw(st.integers(1, 60))
    parts = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            parts.append(np.full(draw(st.integers(1, 400)), longest))
        else:
            parts.append(rng.integers(1, longest + 1, draw(st.integers(1, 400))))
    lengths = np.concatenate(parts).astype(np.int64)
    max_seqs = draw(st.integers(2, 300))
    max_frames = draw(st.integers(longest, 40 * longest))
    return lengths, max_seqs, max_frames


@settings(max_examples=200, deadline=None)
@given(runs_of_lengths())
def test_greedy_from_fits_equals_greedy_bounds(case: tuple[np.ndarray, int, int]) -> None:
    lengths, max_seqs, max_frames = case
    cap = min(max_seqs, len(lengths))
    fits = np.minimum(max_frames // lengths, cap)
    top = max(1, int(fits.max()))
    got = greedy_from_fits(np.minimum(fits, top).astype(np.int16), top)
    np.testing.assert_array_equal(got, greedy_bounds(lengths, max_seqs, max_frames))


@st.composite
def chunked_planners(draw: st.DrawFn) -> tuple[Planner, int]:
    """(a chunked planner whose limits take the fits' way, a chunk position to start from)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 3000))
    data = rng.integers(0, draw(st.sampled_from([10, 80, 400, 3000])) + 1, n)
    lengths = {"data": data, "classes": rng.integers(0, 50, n)}
    size, step = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    which = draw(st.sampled_from(["every", "data", "classes"]))
    if which == "every":
        lengths["classes"] = data.copy()
        chunking: object = f"{size}:{step}"
    else:
        chunking = {which: (size, step)}
    max_frames = draw(st.one_of(st.none(), st.integers(60, 4000)))
    cost = draw(st.sampled_from(["frames", "frames", "quadratic:40"]))
    longest = max_frames
    if cost != "frames" and max_frames is not None:  # every chunk must fit alone
        longest = batch_cost_option(cost).longest_fitting(max_frames)
    options = PlanOptions(
        ordering=draw(st.sampled_from(["random", "sorted", "laplace:.25", "default"])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 250))),
        max_frames=max_frames,
        max_seq_length=longest,
        batch_cost=cost,
        chunking=chunking,
        min_chunk_size=draw(st.sampled_from([0, 0, 2])),
        seed=draw(st.integers(0, 50)),
    )
    return Planner(lengths, options), draw(st.integers(0, 40))


@settings(max_examples=150, deadline=None)
@given(chunked_planners())
def test_chunked_batches_equal_the_general_batcher(case: tuple[Planner, int]) -> None:
    planner, start = case
    assert planner.chunks is not None
    order = planner.sub_epoch_slots(1)[0]
    units = planner.chunks.expand(order, planner.batcher.keys)
    start = min(start, len(units))
    want = planner.units.chunk_batches(units.tail(start))  # every chunk's length per key
    got = planner.units.batches(order, start, 1)
    np.testing.assert_array_equal(got.bounds, want.bounds)
    np.testing.assert_array_equal(got.seqs, want.seqs)
    np.testing.assert_array_equal(got.chunks, want.chunks)


def test_a_sequence_end_cutting_many_windows_takes_the_general_batcher() -> None:
    """``ceil(size / step)`` above ``MAX_CUT``: fits per sequence would cost more than they
    save; the planner then batches chunk lengths (same batches)."""
    lengths = {"data": np.arange(1, 200)}
    planner = Planner(lengths, PlanOptions(chunking="100:1", max_frames=1000, max_seqs=50))
    assert planner.chunks is not None
    assert ChunkFits.of(planner.chunks, "data", 1000, lambda x: x, 50) is None
    order = planner.sub_epoch_slots(1)[0]
    want = planner.units.chunk_batches(planner.chunks.expand(order, ["data"]))
    got = planner.units.batches(order, 0, 1)
    np.testing.assert_array_equal(got.bounds, want.bounds)


def test_batches_of_more_than_max_cap_chunks_take_the_general_batcher() -> None:
    """A batch could hold more than ``MAX_CAP`` chunks (no ``max_seqs``, tiny chunks): the fits
    would not fit int16 lifting; the planner batches chunk lengths (same batches)."""
    lengths = {"data": np.random.default_rng(1).integers(3, 50, 400)}
    planner = Planner(lengths, PlanOptions(chunking="1:1", max_frames=10_000))
    assert planner.chunks is not None
    assert (
        ChunkFits.of(planner.chunks, "data", 10_000, lambda x: x, planner.chunks.num_units) is None
    )
    order = planner.sub_epoch_slots(1)[0]
    want = planner.units.chunk_batches(planner.chunks.expand(order, ["data"]))
    got = planner.units.batches(order, 0, 1)
    np.testing.assert_array_equal(got.bounds, want.bounds)
    assert int(np.diff(got.bounds).max()) > MAX_CAP


@settings(max_examples=100, deadline=None)
@given(chunked_planners())
def test_decided_starts_per_sequence_equal_those_found_per_chunk(case: tuple[Planner, int]) -> None:
    """``ChunkFits.decided`` (from each sequence's tight chunks) marks the very starts that a scan
    of every chunk's fit finds: those with a chunk of the least fit within that many chunks."""
    planner, start = case
    fits = planner.units.fits
    if not isinstance(fits, ChunkFits) or not fits.chunked:
        return
    assert planner.chunks is not None
    order = planner.sub_epoch_slots(1)[0]
    counts = planner.chunks.counts[order]
    ends = np.cumsum(counts, dtype=np.int64)
    every = fits.fits(order, counts, ends)
    start = min(start, len(every))
    fit = every[start:]
    runs = fits.decided(order, counts, ends, start)
    f = int(fit.min()) if len(fit) else 0
    brute = np.zeros(len(fit), dtype=bool)  # start i decided iff a fit-f chunk in [i, i + f)
    for t in np.flatnonzero(fit == f).tolist():
        brute[max(t - f + 1, 0) : t + 1] = True
    if runs is None:
        assert not len(fit) or f > fits.full
        return
    got = np.zeros(len(fit), dtype=bool)
    for lo, hi in zip(*runs, strict=True):
        got[lo:hi] = True
    np.testing.assert_array_equal(got, brute)
