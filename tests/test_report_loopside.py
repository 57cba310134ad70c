"""The epoch report measures what the training loop experiences: a loop that times ``next()``
itself (from its request for the epoch to the request that finds it over) and the report agree
on computation time, first-batch wait and wall time, in the first epoch (DataLoader and worker
start, first batch: all data wait) and in a later one, with and without workers.

Both read one fake clock (``SeqLoader(clock=...)``) that moves only when the test moves it: by
a training step in the loop, by a read in the loader's process, by the start of workers. So the
comparison is exact and the same on any machine, however loaded; how closely they agree on the
real clock is measured, not asserted, by ``benchmarks.looptime`` (report beside loop)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import seqloader as sl

# powers of two, so sums of them are exact in floating point and equality is exact
STEP_S = 2.0**-7  # a training step
READ_S = 2.0**-10  # reading one sequence
START_S = 2.0**-3  # preparing the source before workers start


class FakeClock:
    """Seconds that pass only when ``advance`` says so."""

    def __init__(self) -> None:
        self.now = 1.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TimedSource(sl.MemorySource):
    """Reading a sequence takes ``READ_S`` and preparing workers ``START_S`` on ``clock``. In a
    forked worker the clock is the worker's copy: reading there is no time of the loop's
    process, as reading in a worker is not."""

    def __init__(self, clock: FakeClock, data: dict) -> None:
        super().__init__(data)
        self.clock = clock
        self.starts = 0  # worker starts, counted in the loader's process

    def read(self, index: int) -> dict[str, np.ndarray]:
        self.clock.advance(READ_S)
        return super().read(index)

    def prepare_workers(self) -> None:
        self.starts += 1
        self.clock.advance(START_S)


def _source(clock: FakeClock) -> TimedSource:
    rng = np.random.default_rng(4)
    lens = rng.integers(20, 120, 60)
    return TimedSource(
        clock, {"data": [rng.standard_normal((int(n), 4)).astype("f4") for n in lens]}
    )


def timed_epoch(
    loader: sl.SeqLoader, epoch: int, clock: Callable[[], float], step: Callable[[], None]
) -> tuple[float, float, float, int]:
    """(computation %, wait before the first batch, wall, batches) as the loop itself measures
    them: from its request for the epoch to the request that finds it over."""
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
        step()
    wall = clock() - t0
    assert first is not None
    return 100.0 * (wall - waited) / wall, first, wall, batches


@pytest.mark.parametrize("workers", [0, 1])
def test_report_agrees_with_the_loops_own_measurement(workers):
    clock = FakeClock()
    source = _source(clock)
    loader = sl.SeqLoader(
        source, max_seqs=4, ordering="random", seed=1, num_workers=workers, clock=clock
    )
    try:
        for epoch in (1, 2):
            starts = source.starts
            loop_pct, first, wall, batches = timed_epoch(
                loader, epoch, clock, lambda: clock.advance(STEP_S)
            )
            report = loader.report()
            assert report.epoch == epoch and report.steps == batches == loader.steps(epoch)
            # exactly what the loop measured (same clock, so no tolerance)
            assert report.computation_pct == loop_pct, (epoch, report.format())
            assert report.wall_s == wall
            assert report.first_batch_s == first
            # and what the clock was moved by: the steps are computation, the rest data wait
            assert report.wall_s - report.data_wait_s == batches * STEP_S
            started = (source.starts - starts) * START_S  # workers started in this epoch
            if workers == 0:  # every read is in the loop's process: data wait
                assert report.data_wait_s == len(source) * READ_S
                assert started == 0
            else:  # reads are in the worker; its start is in the first request
                assert report.data_wait_s == started
                assert report.first_batch_s == started
                assert started == (START_S if epoch == 1 else 0)  # persistent workers
    finally:
        loader.close()


def test_first_epoch_counts_the_start_as_data_wait():
    """Building the DataLoader and starting workers happen in the first request: the report's
    first batch includes them (it used to start its clock after them)."""
    clock = FakeClock()
    source = _source(clock)
    loader = sl.SeqLoader(source, max_seqs=4, num_workers=1, clock=clock)
    try:
        t0 = clock()
        it = loader.epoch(1)
        next(it)
        outside = clock() - t0
        it.close()
        report = loader.report()
        assert source.starts == 1
        assert report.first_batch_s == outside == START_S  # the start is inside, not before
    finally:
        loader.close()
