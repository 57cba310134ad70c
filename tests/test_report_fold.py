"""The training thread leaves most of the report's per-batch counting to a later moment
(``EpochMeter.fold``): the figures are exactly those of counting each batch as it is handed
(``count_handed``), whenever the report is read; and an epoch's loop takes only its own batches."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import SeqLoaderError
from seqloader.loading.counts import KeyCounts
from seqloader.trainer.report import EpochMeter, EpochReport

counts = st.builds(
    KeyCounts,
    st.integers(0, 64),
    st.integers(0, 8),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
# waits in seconds, any float the clock differences give (sums compared exactly: same order)
waits = st.floats(0.0, 2.0, allow_nan=False)


def _by_count_handed(batches: list[tuple[KeyCounts, float]], step: float) -> EpochReport:
    now = [1.0]
    report = EpochReport(3, 0, 1)
    meter = EpochMeter(report, "data", clock=lambda: now[0], started=now[0])
    for c, wait in batches:
        meter.before_next()
        now[0] += wait
        meter.count_handed(c)
        now[0] += step
    meter.before_next()
    return meter.finish()


def _by_fold(
    batches: list[tuple[KeyCounts, float]],
    step: float,
    folds: set[int],
    read: set[int],
    on_spot: frozenset[int] | set[int] = frozenset(),
) -> EpochReport:
    """As ``run_epoch``: the first batch by ``count_handed``, the rest appended (the request's
    start read off the clock by the loop), folded at ``folds``, the report read at ``read``;
    the batches ``on_spot`` (skipped sequences, named corpora, remote-fetch figures) counted
    on the spot between appended ones, their request's start told to the meter first."""
    now = [1.0]
    report = EpochReport(3, 0, 1)
    meter = EpochMeter(report, "data", clock=lambda: now[0], started=now[0])
    for i, (c, wait) in enumerate(batches):
        asked = now[0]
        now[0] += wait
        if i == 0 or i in on_spot:
            if i:
                meter.asked_at(asked)
            meter.count_handed(c)
        else:
            if i in folds:
                meter.fold()
            meter.counts.append(c)
            meter.waits.append(now[0] - asked)
        if i in read:  # a read during the epoch counts every batch handed so far
            assert report.current().steps == i + 1
        now[0] += step
    meter.asked_at(now[0])  # the final request, which finds the epoch over
    return meter.finish()


@given(
    st.lists(st.tuples(counts, waits), min_size=1, max_size=40),
    st.sampled_from([2.0**-7, 0.01]),
    st.sets(st.integers(0, 40)),
    st.sets(st.integers(0, 40)),
)
def test_folded_report_is_the_one_counted_batch_by_batch(batches, step, folds, read):
    expected = _by_count_handed(batches, step)
    got = _by_fold(batches, step, folds, read)
    assert got.to_dict() == expected.to_dict()
    assert got.computation_pct == expected.computation_pct
    assert "_pending" not in got.__dict__  # the finished report holds no meter


def test_report_read_mid_epoch_counts_every_batch_handed():
    """With a worker: ``loader.report()`` during the epoch counts each batch the loop took (in a
    batch with skipped sequences too, counted on the spot), and the end of the epoch matches."""
    src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in range(3, 43)]})
    loader = sl.SeqLoader(src, max_seqs=2, num_workers=1, seed=1)
    try:
        frames = 0
        for i, batch in enumerate(loader.epoch(1)):
            frames += int(batch.lengths["data"].sum())
            report = loader.report()
            assert report.steps == i + 1 and report.frames == frames
        final = loader.report()
        assert (final.steps, final.seqs, final.frames) == (20, 40, frames)
        assert sum(final.wait_histogram) == final.steps - 1
    finally:
        loader.close()


def test_a_loop_that_goes_on_after_the_next_epoch_started_takes_none_of_its_batches():
    """An epoch's generator takes from its own run: once the next epoch's ``iter()`` stopped
    it, it hands what it had received and then says so, instead of taking (and so skipping for
    the new loop) a batch of the new epoch."""
    src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in range(3, 43)]})
    loader = sl.SeqLoader(src, max_seqs=2, num_workers=1, seed=1)
    try:
        old = loader.epoch(1)
        next(old)
        new = loader.epoch(2)
        assert next(new).step == 0
        with pytest.raises(SeqLoaderError, match="stopped coming"):
            for batch in old:  # what it had received before, then the reason
                assert batch.epoch == 1
        assert [(b.epoch, b.step) for b in new] == [(2, step) for step in range(1, 20)]
    finally:
        loader.close()


@given(
    st.lists(st.tuples(counts, waits), min_size=1, max_size=40),
    st.sets(st.integers(1, 40)),
    st.sets(st.integers(0, 40)),
)
def test_batches_counted_on_the_spot_between_folded_ones_keep_the_sums(batches, on_spot, folds):
    """Order-dependent figures (the float sum of the waits, the first batch's wait, the
    longest) are those of counting every batch on the spot, whichever batches are."""
    expected = _by_count_handed(batches, 0.01)
    got = _by_fold(batches, 0.01, folds, set(), on_spot)
    assert got.to_dict() == expected.to_dict()


def test_a_report_held_mid_epoch_gives_every_figure_of_the_batches_handed():
    """The report object ``loader.report()`` returned, held and read later in the epoch: its
    wait quantiles, padding ratio and completeness count every batch handed since, as its
    ``format()`` and ``to_dict()`` do (not the figures of the moment it was first read)."""
    src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in range(3, 43)]})
    loader = sl.SeqLoader(src, max_seqs=2, seed=1)
    try:
        held = None
        for i, _ in enumerate(loader.epoch(1)):
            if i == 1:
                held = loader.report()
            if i == 19:  # the last batch, handed: the epoch's every step is counted
                assert held is not None
                seen = (held.complete, held.padding_ratio, held.wait_summary_ms())
                counted = copy.deepcopy(held)  # (a copy counts every batch handed)
                assert counted.steps == 20
                assert seen == (True, counted.padding_ratio, counted.wait_summary_ms())
                assert held.wait_quantile_s(1.0) == counted.wait_quantile_s(1.0)
    finally:
        loader.close()
