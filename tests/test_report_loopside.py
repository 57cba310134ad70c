"""The epoch report measures what the training loop experiences: a loop that times ``next()``
itself (from its request for the epoch to the request that finds it over) and the report agree
on computation time within 0.5 points, in the first epoch (DataLoader and worker start, first
batch: all data wait) and in a later one, with and without workers. The test compares two
measurements of the same run; it asserts no speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

import seqloader as sl


def _hdf_source(tmp_path) -> sl.HDFSource:
    rng = np.random.default_rng(4)
    lens = rng.integers(20, 120, 400)
    data = [rng.standard_normal((int(n), 16)).astype(np.float32) for n in lens]
    labels = [rng.integers(0, 50, max(int(n) // 4, 1)).astype(np.int32) for n in lens]
    path = str(tmp_path / "loop.hdf")
    sl.write_hdf(path, sl.MemorySource({"data": data, "classes": labels}), chunked=True)
    return sl.HDFSource(path)


def timed_epoch(loader: sl.SeqLoader, epoch: int, step_s: float) -> tuple[float, float, int]:
    """(computation %, wait before the first batch, batches) as the loop itself measures them."""
    clock = time.perf_counter
    t0 = clock()
    it = loader.epoch(epoch)  # the request for the epoch
    waited = clock() - t0
    first = None
    batches = 0
    batch = None
    while True:
        t = clock()
        batch = next(it, None)  # the loop keeps its last batch while asking for the next
        waited += clock() - t
        if first is None:
            first = waited
        if batch is None:
            break
        batches += 1
        time.sleep(step_s)  # the step
    wall = clock() - t0
    return 100.0 * (wall - waited) / wall, first, batches


@pytest.mark.parametrize("workers", [0, 1])
def test_report_agrees_with_the_loops_own_measurement(tmp_path, workers):
    loader = sl.SeqLoader(
        _hdf_source(tmp_path), max_seqs=4, ordering="random", seed=1, num_workers=workers
    )
    try:
        for epoch in (1, 2):
            loop_pct, first, batches = timed_epoch(loader, epoch, step_s=0.004)
            report = loader.report()
            assert report.epoch == epoch and report.steps == batches == loader.steps(epoch)
            assert abs(report.computation_pct - loop_pct) <= 0.5, (epoch, report.format())
            # time to first batch: everything from the request to the first batch, kept apart
            assert 0 < report.first_batch_s <= first
            assert report.data_wait_s >= report.first_batch_s
    finally:
        loader.close()


def test_first_epoch_counts_the_start_as_data_wait(tmp_path):
    """Building the DataLoader and starting workers happen in the first request: the report's
    first batch includes them (it used to start its clock after them)."""
    loader = sl.SeqLoader(_hdf_source(tmp_path), max_seqs=4, num_workers=1)
    try:
        t0 = time.perf_counter()
        it = loader.epoch(1)
        next(it)
        outside = time.perf_counter() - t0
        it.close()
        report = loader.report()
        assert report.first_batch_s <= outside
        assert report.first_batch_s >= 0.5 * outside  # the start is inside, not before, it
    finally:
        loader.close()
