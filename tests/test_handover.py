"""The worker -> trainer hand-over (seqloader.torch.handover) with real DataLoader workers.

Properties: batches are byte-identical for any ``num_workers`` (C3); slots are really reused (the
trainer pays no per-batch segment); a batch the user keeps is never overwritten; nothing leaks
(shared-memory segments, worker processes, the trainer's slot mappings) after ``close()``.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
from multiprocessing.connection import Connection

import numpy as np
import psutil
import pytest
import torch

import seqloader as sl
from conftest import BatchRecord, batch_record, children, new_shm_entries, shm_entries
from seqloader.torch import handover
from seqloader.torch._compat import current_iterator, worker_processes
from seqloader.trainer import release


def make_source(n: int = 60, seed: int = 0) -> sl.MemorySource:
    """Three keys of different dtypes and feature shapes, awkward lengths (1..97 frames)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 98, size=n)
    return sl.MemorySource(
        {
            "data": [rng.standard_normal((t, 5)).astype(np.float32) for t in lens],
            "classes": [rng.integers(0, 50, size=max(t // 3, 1)).astype(np.int32) for t in lens],
            "pitch": [rng.standard_normal((t, 2, 3)).astype(np.float64) for t in lens],
        },
        vocab_sizes={"classes": 50},
    )


def epoch_batches(loader: sl.SeqLoader, epoch: int = 1) -> list[sl.Batch]:
    return list(loader.epoch(epoch))


def snapshot(batches: list[sl.Batch]) -> list[BatchRecord]:
    """Everything of the batches as bytes, to compare after the tensors could have been reused."""
    return [batch_record(b) for b in batches]


HANG_BOUND_S = 120  # a torch_shm_manager that never exits fails the test; nothing waits on it

LOADER_KW = dict(ordering="laplace:.7", max_seqs=6, max_frames=300, seed=5)


def reference(src: sl.Source, epoch: int = 1, **kw) -> list[tuple]:
    with sl.SeqLoader(src, num_workers=0, **LOADER_KW, **kw) as loader:
        return snapshot(epoch_batches(loader, epoch))


@pytest.mark.parametrize("num_workers,prefetch", [(1, None), (2, None), (2, 1), (3, 4)])
def test_batches_byte_identical_for_any_num_workers(num_workers, prefetch):
    src = make_source()
    want = {e: reference(src, e) for e in (1, 2)}
    with sl.SeqLoader(src, num_workers=num_workers, prefetch_factor=prefetch, **LOADER_KW) as ld:
        for epoch in (1, 2):  # persistent workers: the second epoch reuses the slots
            got = []
            for batch in ld.epoch(epoch):
                got.extend(snapshot([batch]))
            assert got == want[epoch]


def test_slots_are_reused_and_the_trainer_maps_each_once():
    """The point of the design: over many batches the trainer sees only a few distinct blocks."""
    src = make_source(n=200)
    with sl.SeqLoader(src, num_workers=1, **LOADER_KW) as loader:
        blocks = set()
        steps = 0
        for batch in loader.epoch(1):
            blocks.add(batch["data"].untyped_storage().data_ptr())
            steps += 1
            del batch
            # the batch before this one was handed to the release thread at this request: wait
            # until it is freed, so that a loaded machine (a lagging release thread, workers
            # falling back to per-batch tensors) does not decide the count
            assert release.flush()
        owner = loader._dataloader.dataset.owner
        assert steps > 3 * handover.MAX_SLOTS
        assert len(blocks) <= handover.MAX_SLOTS
        assert 1 <= handover.received_slots(owner) <= handover.MAX_SLOTS
    gc.collect()
    assert handover.received_slots(owner) == 0  # close() dropped the trainer's mappings


def test_kept_batches_are_never_overwritten():
    """Hold every batch of two epochs (more than any pool has slots): all stay intact."""
    src = make_source(n=150)
    want = reference(src, 1) + reference(src, 2)
    with sl.SeqLoader(src, num_workers=2, **LOADER_KW) as loader:
        kept = epoch_batches(loader, 1) + epoch_batches(loader, 2)
        assert len(kept) > 2 * handover.MAX_SLOTS
        assert snapshot(kept) == want


def test_views_and_numpy_arrays_keep_their_block():
    """Drop the Batch but keep a slice of a tensor / a numpy array made from one: the slot they
    live in must not be reused while they exist."""
    src = make_source(n=150)
    want = reference(src)
    with sl.SeqLoader(src, num_workers=1, **LOADER_KW) as loader:
        kept = []
        for batch in loader.epoch(1):
            if batch.step % 3 == 0:
                kept.append((batch.step, batch["data"][:, 1:].numpy(), batch["pitch"][0]))
            del batch
        for step, data_tail, pitch_row in kept:
            by_key = {k: (raw, shape) for k, _, shape, raw in want[step].tensors}
            raw, shape = by_key["data"]
            full = np.frombuffer(raw, np.float32).reshape(shape)
            np.testing.assert_array_equal(data_tail, full[:, 1:])
            raw, shape = by_key["pitch"]
            np.testing.assert_array_equal(
                pitch_row.numpy(), np.frombuffer(raw, np.float64).reshape(shape)[0]
            )


def _grow_every_other(seq: dict, rng: np.random.Generator) -> dict:
    """A transform that lengthens some sequences beyond the lengths known at open, so the slot
    estimate is short and the fallback path runs for some keys."""
    if rng.random() < 0.5:
        seq = dict(seq)
        seq["data"] = np.concatenate([seq["data"], seq["data"], seq["data"]])
    return seq


def test_transform_that_outgrows_the_estimate_is_still_identical():
    src = make_source()
    want = reference(src, transform=_grow_every_other)
    with sl.SeqLoader(src, num_workers=2, transform=_grow_every_other, **LOADER_KW) as loader:
        assert snapshot(epoch_batches(loader)) == want


# make chaos: test_loader_workers.py::test_spawned_workers_give_the_same_batches keeps a spawned
# worker's batches byte for byte against 0 workers (two epochs, persistent workers, a random
# transform); the hand-over is the same for both start methods, its dtypes and shapes are checked
# with forked workers above
@pytest.mark.extended
def test_spawned_workers_give_identical_batches():
    src = make_source(n=30)
    want = reference(src)
    with sl.SeqLoader(src, num_workers=1, multiprocessing_context="spawn", **LOADER_KW) as loader:
        assert snapshot(epoch_batches(loader)) == want


def test_close_leaves_no_processes_segments_or_mappings():
    src = make_source(n=120)
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    shm_before = shm_entries()
    loader = sl.SeqLoader(src, num_workers=2, **LOADER_KW)
    kept = epoch_batches(loader)[:3]  # a user may still hold batches at close
    owner = loader._dataloader.dataset.owner
    assert {p.pid for p in me.children(recursive=True)} - children_before  # workers ran
    loader.close()
    del loader
    gc.collect()
    # close() joins the workers: none is left to wait for
    assert {p.pid for p in children()} - children_before == set()
    assert handover.received_slots(owner) == 0
    assert kept[0]["data"].shape[0] == kept[0].size  # held batches stay readable after close
    del kept
    gc.collect()
    assert new_shm_entries(shm_before) == set()


def _epoch_under_file_system_strategy(conn: Connection) -> None:
    """In a forked process (the sharing strategy is global to a process): an epoch with 2 forked
    workers under torch's ``file_system`` strategy -> (batches equal to 0 workers', the pids of
    this process and its workers), or the error."""
    try:
        torch.multiprocessing.set_sharing_strategy("file_system")
        src = make_source(n=80)
        want = reference(src)
        with sl.SeqLoader(src, num_workers=2, **LOADER_KW) as loader:
            it = loader.epoch(1)
            got = [next(it)]
            workers = worker_processes(current_iterator(loader._dataloader))
            pids = [os.getpid(), *(w.pid for w in workers)]
            got = snapshot(got + list(it))
            # torch's shm managers (started by the first process that allocated), which unlink
            # what is left when their last client has gone
            managers = [
                (p.pid, p.create_time())
                for p in psutil.Process().children(recursive=True)
                if p.name() == "torch_shm_manager"
            ]
        gc.collect()
        conn.send((got == want, pids, managers))
    except BaseException as e:  # the test names it
        conn.send((f"{type(e).__name__}: {e}", [], []))
    finally:
        conn.close()


def test_file_system_sharing_strategy_leaves_nothing_in_dev_shm():
    """With torch's ``file_system`` strategy slots are named files in /dev/shm: after close and
    process exit none may remain. The strategy is global, so the epoch runs in a process forked
    from this one (torch already imported), which sets it and exits."""
    before = {e for e in shm_entries() if e.startswith("torch_")}
    reader, writer = mp.get_context("fork").Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_epoch_under_file_system_strategy, args=(writer,))
    proc.start()
    writer.close()  # the child's end: reading raises EOFError if the child dies without a word
    try:
        same, pids, managers = reader.recv()
    finally:
        proc.join()
        reader.close()
    assert same is True, f"batches differ under the file_system strategy: {same}"
    assert proc.exitcode == 0 and managers, (proc.exitcode, managers)
    for pid, created in managers:  # an event: each manager exits once its clients have gone
        with contextlib.suppress(psutil.NoSuchProcess):
            manager = psutil.Process(pid)
            if manager.create_time() == created:
                manager.wait(timeout=HANG_BOUND_S)
    # the last process that refers to a segment unlinks it; the names carry their creator's pid,
    # so only the run's own processes count (other programs' come and go in /dev/shm)
    ours = {str(pid) for pid in pids}
    after = {e for e in shm_entries() if e.startswith("torch_") and e.split("_")[1] in ours}
    assert after - before == set()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_pin_memory_with_workers_gives_identical_pinned_batches():
    src = make_source()
    want = reference(src)
    with sl.SeqLoader(src, num_workers=2, pin_memory=True, **LOADER_KW) as loader:
        batches = epoch_batches(loader)
        assert all(b["data"].is_pinned() for b in batches)
        assert snapshot(batches) == want


@pytest.mark.parametrize("num_workers", [0, 2])
def test_precomputed_counts_match_the_tensors_and_the_report(num_workers):
    """The counts a batch carries (computed in the worker / receiving thread so the training
    thread does no array work) equal what its tensors say, and add up to the epoch report."""
    from seqloader.loading.counts import count_key

    src = make_source(n=90)
    with sl.SeqLoader(src, num_workers=num_workers, uneven="pad", **LOADER_KW) as loader:
        frames = padded = seqs = 0
        for batch in loader.epoch(1):
            assert set(batch.counts) == set(batch.lengths)
            for key in batch.lengths:
                want = count_key(batch.lengths[key].numpy(), batch.mask.numpy())
                assert batch.counts[key] == want
            c = batch.counts["data"]
            frames, padded, seqs = frames + c.frames, padded + c.padded_frames, seqs + c.real_seqs
        report = loader.report()
    assert (report.frames, report.padded_frames, report.seqs) == (frames, padded, seqs)
    assert report.seqs == 90
