"""``laplace`` with ``distribution="files"`` under indexed planning: what the order means to a user.

RETURNN's ``laplace`` puts sequences into bins in a random order and sorts the bins alternately
ascending and descending, so an epoch never runs short-to-long as a curriculum. A ``files`` rank
plans its own batches; on many ranks most of its units (``seqloader.plan.indexed.files``) hold
one batch. The property pinned here: a rank with ``B`` bins, whose batches in length order (the
planner's length order: a batch's unit's first bucket) are ``L_0 <= L_1 <= ...``, lists bin 0's
batches, then bin 1's, ..., where bin ``b`` holds ``L_b, L_{b+B}, L_{b+2B}, ...`` ascending when
``b`` is even and descending when ``b`` is odd. So whenever ``L_1 < L_B`` the rank's order rises
and falls: never one monotone ramp. Checked on a first segment and after an elastic resume (a
rank holds the rest of several old ranks' units), with and without a mix over files.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqloader.plan import PlanOptions
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.indexed.replay import files_bins
from seqloader.plan.mix import Corpora


def dealt_levels(levels: np.ndarray, bins: int) -> np.ndarray:
    """The listed order the property asks for, from the rank's batch levels alone."""
    ranked = np.sort(levels)
    parts = [ranked[b::bins] for b in range(bins)]
    return np.concatenate([p if b % 2 == 0 else p[::-1] for b, p in enumerate(parts)])


@st.composite
def many_small_ranks(draw: st.DrawFn) -> dict:
    n = draw(st.integers(150, 500))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    world = draw(st.integers(6, 24))
    files = np.unique(np.concatenate([[0, n], rng.choice(np.arange(1, n), 4 * world, False)]))
    mixed = draw(st.booleans())
    options = PlanOptions(
        ordering=draw(st.sampled_from(["laplace", "laplace:3", "laplace:.6", "laplace:.40"])),
        max_seqs=draw(st.integers(2, 8)),
        max_frames=draw(st.integers(400, 2400)),
        uneven=draw(st.sampled_from(["pad", "split", "drop"])),
        distribution="files",
        planning="indexed",
        seed=draw(st.integers(0, 9)),
        mix={"a": 0.7, "b": 1.5} if mixed else None,
    )
    corpora = Corpora(("a", "b"), files[[0, len(files) // 2, -1]]) if mixed else None
    lengths = rng.integers(1, 401, n)
    return {
        "planner": IndexedPlanner({"data": lengths}, options, files=files, corpora=corpora),
        "world": world,
        "resume": draw(st.sampled_from([None, 1, 2])),  # elastic: after 1 or 2 steps
        "then": draw(st.integers(2, 9)),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(many_small_ranks())
def test_files_laplace_deals_each_ranks_batches_to_bins_rising_and_falling(case: dict) -> None:
    """Every rank's listed batches are its bins in turn, bin ``b`` the ``b``-th of every ``B``
    batches in length order, ascending in even bins and descending in odd ones, ``B`` at most
    half its batches (at least 2: every bin holds two batches or more); so where ``L_1 < L_B``
    the order is neither rising nor falling throughout."""
    planner, world = case["planner"], case["world"]
    history: tuple[tuple[int, int], ...] = ()
    if case["resume"] is not None:
        history = ((world, case["resume"]),)
        world = case["then"]
    seg = planner.distribution._segment_at(1, world, history)
    ordering = planner.options.parsed_ordering
    for rank in range(world):
        unit, _, _ = seg.layout(rank)
        levels = seg.units.level[unit].astype(np.int64)
        bins = files_bins(ordering, int(seg.rem[seg.rank_units(rank)].sum()), len(levels))
        assert 2 <= bins <= max(len(levels) // 2, 2)
        np.testing.assert_array_equal(levels, dealt_levels(levels, bins))
        ranked = np.sort(levels)
        if len(levels) > bins >= 2 and ranked[1] < ranked[bins]:
            steps = np.diff(levels)
            assert (steps > 0).any() and (steps < 0).any(), levels.tolist()


def test_files_laplace_on_many_ranks_no_rank_runs_one_ramp_of_lengths() -> None:
    """The reported case, small: 32 ranks of about 60 sequences each, most units one batch. Each
    rank's batches, by their longest sequence as drawn, rise and fall (before, every rank's ran
    as one rising ramp: its one-batch units all sat in bin 0)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 2001, 2000).astype(np.int32)
    options = PlanOptions(
        ordering="laplace", distribution="files", max_seqs=200, max_frames=20_000, seed=3
    )
    files = np.linspace(0, len(lengths), 321).astype(np.int64)
    plan = IndexedPlanner({"data": lengths}, options, files=files).global_plan(1, 32)
    for rank in range(32):
        b = plan.rank_share(rank)
        b = b.first(int(b.real[b.bounds[:-1]].sum()))  # its real batches
        steps = np.diff(np.maximum.reduceat(lengths[b.seqs], b.bounds[:-1]))
        assert len(b) >= 4 and (steps > 0).any() and (steps < 0).any(), (rank, steps.tolist())


def test_files_laplace_bins_below_a_batch_still_rise_and_fall() -> None:
    """``laplace:.N`` with ``N`` below a batch's sequences (here ``.10`` with batches of up to
    14 sequences, about 7 a rank) gave every batch a bin of its own, so each rank listed its
    batches in length order, one rising ramp; capped at half its batches (3 bins for 7), every
    rank of 4 or more batches whose second-shortest batch is below its bins-th lists its batches
    rising and falling."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(50, 2001, 3200).astype(np.int32)
    options = PlanOptions(
        ordering="laplace:.10", distribution="files", max_seqs=14, max_frames=20_000, seed=3
    )
    files = np.linspace(0, len(lengths), 321).astype(np.int64)
    planner = IndexedPlanner({"data": lengths}, options, files=files)
    seg = planner.distribution._segment_at(1, 32, ())
    ordering = planner.options.parsed_ordering
    checked = 0
    for rank in range(32):
        unit, _, _ = seg.layout(rank)
        levels = seg.units.level[unit].astype(np.int64)
        seqs = int(seg.rem[seg.rank_units(rank)].sum())
        bins = files_bins(ordering, seqs, len(levels))
        assert ordering.num_bins(seqs) > len(levels) // 2  # uncapped: a bin or more a batch
        ranked = np.sort(levels)
        if len(levels) >= 4 and ranked[1] < ranked[bins]:
            steps = np.diff(levels)
            assert (steps > 0).any() and (steps < 0).any(), (rank, levels.tolist())
            checked += 1
    assert checked >= 16
