"""Resource hygiene: a loader gives back every worker process, file descriptor and shared-memory
segment when it is closed, leaves a ``with`` block (also by an exception), or is garbage-collected —
also with its epoch generator abandoned mid-way, which persistent workers must survive exactly."""

from __future__ import annotations

import gc

import pytest

import seqloader as sl
from conftest import (
    children,
    new_shm_entries,
    queue_feeders,
    queue_feeders_done,
    resources,
    summary,
)

OPTIONS = {"ordering": "laplace:.6", "max_seqs": 3, "seed": 2}


@pytest.fixture
def baseline(index_source):
    """Resources after one full warm-up run (torch opens a few things once per process), and the
    queue feeder threads alive then."""
    with sl.SeqLoader(index_source, num_workers=2, **OPTIONS) as loader:
        list(loader.epoch(1))
    gc.collect()
    return {**resources(), "feeders": queue_feeders()}


def leaks(before: dict) -> dict:
    """What exists now and did not before (something released since is not a leak); /dev/shm
    names only of this process tree (other programs' come and go there)."""
    now = resources()
    now["shm"] = new_shm_entries(before["shm"])
    return {k: sorted(set(now[k]) - set(before[k])) for k in now if set(now[k]) - set(before[k])}


def assert_released(before: dict) -> None:
    """Nothing left over once the loader's workers have exited (joined by close) and the queue
    feeder threads it started have finished (they close their pipes after ``close()`` returns):
    waits on those events, never on a deadline."""
    gc.collect()  # a loader only garbage-collected shuts its workers down here
    assert not children()
    queue_feeders_done(before["feeders"])
    gc.collect()
    left = leaks(before)
    assert not left, f"leaked: {left}"


def test_with_block_stops_persistent_workers_after_an_abandoned_epoch(index_source, baseline):
    with sl.SeqLoader(index_source, num_workers=2, **OPTIONS) as loader:
        list(loader.epoch(1))
        pids = sorted(p.pid for p in children())
        assert len(pids) == 2
        gen = loader.epoch(2)
        kept = [next(gen), next(gen)]  # batches still referenced when the block ends
        assert sorted(p.pid for p in children()) == pids  # persistent: the same workers
    assert not children()
    del kept, gen
    assert_released(baseline)


def test_loop_raising_inside_with_block_releases_everything(index_source, baseline):
    with (
        pytest.raises(ZeroDivisionError),
        sl.SeqLoader(index_source, num_workers=2, **OPTIONS) as loader,
    ):
        for batch in loader.epoch(1):
            if batch.step == 2:
                _ = 1 / 0  # the training step fails
    assert not children()
    del batch  # the loop variable still holds the last batch (and its shared memory)
    assert_released(baseline)


def test_garbage_collected_loader_with_abandoned_generator_releases_everything(
    index_source, baseline
):
    loader = sl.SeqLoader(index_source, num_workers=2, **OPTIONS)
    gen = loader.epoch(1)
    batch = next(gen)
    assert len(children()) == 2 and batch.step == 0
    del loader, gen, batch  # no close(), no with: only garbage collection
    assert_released(baseline)


def test_close_is_idempotent_and_the_loader_works_again_after_an_abandoned_epoch(
    index_source, baseline
):
    """Closing with an abandoned epoch's batches in flight in the persistent workers, twice, then
    using the loader again (new workers, exactly the planned batches) releases everything. (That
    the next epochs are exact after abandoning one: test_loader_workers.py.)"""
    ref = sl.SeqLoader(index_source, **OPTIONS)
    expected = {e: summary(ref.epoch(e)) for e in (1, 2)}
    loader = sl.SeqLoader(index_source, num_workers=2, prefetch_factor=3, **OPTIONS)
    gen = loader.epoch(1)
    assert summary([next(gen), next(gen)]) == expected[1][:2]
    loader.close()
    loader.close()  # idempotent
    assert not children()
    assert summary(loader.epoch(2)) == expected[2]  # usable again: starts new workers
    del gen
    loader.close()
    assert_released(baseline)
