"""Resource hygiene: a loader gives back every worker process, file descriptor and shared-memory
segment when it is closed, leaves a ``with`` block (also by an exception), or is garbage-collected —
also with its epoch generator abandoned mid-way, which persistent workers must survive exactly."""

from __future__ import annotations

import gc
import threading

import pytest

import seqloader as sl
from conftest import (
    children,
    children_since,
    new_shm_entries,
    queue_feeders,
    queue_feeders_done,
    resources,
    summary,
)
from seqloader.torch._compat import current_iterator
from seqloader.trainer.release import later

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
    assert not children_since(set(before["children"]))
    drained = threading.Event()  # the release thread has freed the batches handed to it
    later(drained.set)
    drained.wait()
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
    assert not children_since(set(baseline["children"]))
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
    assert not children_since(set(baseline["children"]))
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
    assert not children_since(set(baseline["children"]))
    assert summary(loader.epoch(2)) == expected[2]  # usable again: starts new workers
    del gen
    loader.close()
    assert_released(baseline)


@pytest.mark.parametrize("persistent", [False, True], ids=["per-epoch workers", "persistent"])
def test_close_stops_the_workers_of_an_epoch_whose_generator_lives_on(
    index_source, baseline, persistent
):
    """``close()`` stops the workers at once although the epoch's generator is still referenced
    (as a traceback or a caller keeps it): torch keeps no handle on workers started per epoch,
    which outlived ``close()`` until the generator was collected (a failed test's traceback kept
    them for the rest of a session, and every later count of child processes failed)."""
    loader = sl.SeqLoader(index_source, num_workers=2, persistent_workers=persistent, **OPTIONS)
    gen = loader.epoch(1)
    assert next(gen).step == 0 and len(children()) == 2
    loader.close()
    assert not children_since(set(baseline["children"]))
    del gen
    assert_released(baseline)


@pytest.mark.parametrize("persistent", [False, True], ids=["per-epoch workers", "persistent"])
def test_an_epoch_asked_for_more_after_close_says_why_nothing_comes(index_source, persistent):
    """Asking a closed loader's epoch for more batches raises, naming the close and the fix (it
    waited forever for results from stopped workers)."""
    with sl.SeqLoader(index_source, num_workers=2, persistent_workers=persistent, **OPTIONS) as ld:
        gen = ld.epoch(1)
        assert next(gen).step == 0
        ld.close()
        with pytest.raises(sl.SeqLoaderError, match=r"the loader was closed.*load_state_dict"):
            for _ in gen:  # at most the batch already taken from the workers, then the error
                pass
        state = ld.state_dict()
        assert state["steps"] >= 1  # the batches the loop received (1 or 2)
        ld.load_state_dict(state)  # the fix the message names: it goes on right after them
        assert summary(ld.epoch(1))[0][1] == state["steps"]


def test_close_puts_nothing_into_the_queue_workers_write(index_source, baseline):
    """torch's shutdown wakes the receiving thread through a pipe of its own, not through the
    workers' result queue: an item put there waits in a feeder thread of this process for the
    queue's write lock, which a worker that exited or was killed while sending a result holds for
    good (the suite under load caught such a feeder waiting forever). So close() puts nothing
    into that queue and starts no feeder of it, and everything is released."""
    loader = sl.SeqLoader(index_source, num_workers=2, **OPTIONS)
    list(loader.epoch(1))
    iterator = current_iterator(loader._dataloader)
    results = iterator._worker_result_queue._results  # the workers' own queue
    put: list = []
    results.put = lambda *args, **kwargs: put.append(args)  # what close() would wait on
    loader.close()
    assert put == [] and results._thread is None  # no feeder of that queue in this process
    del iterator, results  # the iterator holds the slots' mappings until it goes
    assert_released(baseline)
