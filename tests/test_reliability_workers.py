"""Worker failures reach the trainer as seqloader errors that name the worker and the batch, and a
restart from ``state_dict()`` resumes exactly (C5).

Real DataLoader workers (fork) are killed with SIGKILL, as the out-of-memory killer does: once from
the test while the loop is busy (torch's SIGCHLD handler fires in the middle of user code), once
from a transform inside the worker while the trainer waits in ``next()``.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from torch._utils import ExceptionWrapper

import seqloader as sl
from conftest import children, children_since, index_corpus, settled_children, summary
from seqloader import errors
from seqloader.errors import DataError, SeqLoaderError, WorkerError
from seqloader.torch._compat import current_iterator, worker_processes

OPTIONS = {"ordering": "random", "max_seqs": 3, "seed": 4}


def reference(src: sl.Source, epoch: int = 1) -> list:
    """The uninterrupted epoch, in the main process (C3: identical with any worker count)."""
    return summary(sl.SeqLoader(src, **OPTIONS).epoch(epoch))


def resume_rest(src: sl.Source, state: dict, epoch: int = 1) -> list:
    """A restart: a new loader (new workers) continuing from ``state``."""
    with sl.SeqLoader(src, num_workers=2, **OPTIONS) as loader:
        loader.load_state_dict(state)
        return summary(loader.epoch(epoch))


def test_worker_killed_from_outside_names_worker_and_batch_then_resume_is_exact():
    before = settled_children()
    src = index_corpus(45)
    ref = reference(src)
    got = []
    killed = False
    with (
        pytest.raises(WorkerError) as err,
        sl.SeqLoader(src, num_workers=2, **OPTIONS) as loader,
    ):
        for batch in loader.epoch(1):
            if killed:  # a batch taken ahead before the death; the error follows it
                continue
            got.extend(summary([batch]))
            if batch.step == 3:
                state = loader.state_dict()
                it = current_iterator(loader._dataloader)
                pid = worker_processes(it)[0].pid
                os.kill(pid, signal.SIGKILL)  # as the OOM killer would
                killed = True
                # the "training step" until SIGCHLD lands and its handler raises here, or until
                # the loader's dispatch thread has found the death first (the worker's pipe broke
                # before the handler ran: it then takes the workers off torch's SIGCHLD check, and
                # the next step raises the same error); events, no deadline (pytest's timeout
                # guards a hang)
                while it._dispatch.thread.is_alive():
                    time.sleep(0.01)
    assert not children_since(before), "the with-block must stop the surviving worker"
    e = err.value
    # steps 0..3 consumed; worker 0 holds item 4 (4 % 2 == 0) and the prefetched item 6, and
    # item 8 too once the dispatch thread has taken batch 4 ahead of the loop (torch then sends
    # the next index); killed from outside, it was idle (all built) or building one of them
    assert (e.worker_id, e.pid, e.epoch) == (0, pid, 1)
    assert e.steps in ((4, 6), (4, 6, 8))
    assert e.building is None or e.building in e.steps
    named = 4 if e.building is None else e.building
    planned = sl.SeqLoader(src, **OPTIONS).plan(1)[named]
    assert e.tags == tuple(src.tag(int(i)) for i in planned[:3])
    message = str(e)
    for part in (f"worker 0 (pid {pid})", "killed by signal", f"epoch 1 step {named}"):
        assert part in message
    assert repr(e.tags[0]) in message
    assert "load_state_dict" in message and "out-of-memory" in message
    assert got == ref[:4] and state["steps"] == 4
    assert got + resume_rest(src, state) == ref


class KillOnce:
    """A transform that SIGKILLs its own worker on one sequence, once (a marker file remembers)."""

    def __init__(self, seq: int, marker: Path) -> None:
        self.seq, self.marker = seq, marker

    def __call__(self, seq: dict, rng: np.random.Generator) -> dict:
        if int(seq["data"][0, 0]) == self.seq and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return seq


# spawned: four workers importing torch anew (the two killed and the two that resume); the error
# crossing a spawned worker's pickle is test_store_damage.py's spawned worker: make chaos
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.extended)])
def test_worker_killed_inside_a_transform_then_same_loader_recovers(tmp_path, context):
    """The worker dies while building step 5: the error names exactly that batch (the board of
    what each worker builds), whatever else the worker had been sent."""
    before = settled_children()
    src = index_corpus(45)
    ref = reference(src)
    step = 5
    victim = ref[step][2][0]  # first sequence of step 5: executed by worker 5 % 2 == 1
    loader = sl.SeqLoader(
        src,
        num_workers=2,
        multiprocessing_context=context,
        transform=KillOnce(victim, tmp_path / "m"),
        **OPTIONS,
    )
    got = []
    with pytest.raises(WorkerError) as err:
        got.extend(summary(loader.epoch(1)))
    e = err.value
    assert e.worker_id == 1 and step in e.steps and e.epoch == 1
    assert e.building == step
    assert f"while building epoch 1 step {step} " in str(e)
    assert e.tags == tuple(src.tag(int(i)) for i in ref[step][2][:3])
    assert not [p for p in children() if p.pid == e.pid]
    # the failed iterator was shut down; loading the consumed position restarts fresh workers
    state = loader.state_dict()
    assert state["steps"] == e.steps[0] <= step
    loader.load_state_dict(state)
    rest = summary(loader.epoch(1))
    assert ref[: state["steps"]] + rest == ref
    loader.close()
    assert not children_since(before)


class FailingReads(sl.MemorySource):
    """``read_many`` that fails with a non-seqloader error (as a bug in a source would)."""

    def read_many(self, indices):
        if 7 in list(indices):
            raise RuntimeError("decoder state corrupted")
        return [self.read(int(i)) for i in indices]


def test_non_seqloader_error_in_worker_becomes_worker_error_naming_batch():
    base = index_corpus(20)
    src = FailingReads({"data": [base.read(i)["data"] for i in range(20)]})
    with sl.SeqLoader(src, max_seqs=3, num_workers=1) as loader:
        with pytest.raises(WorkerError) as err:
            for _ in loader.epoch(1):
                pass
        e = err.value
        # default ordering, batches of 3: sequence 7 is in step 2
        assert (e.worker_id, e.steps, e.tags[0]) == (0, (2,), "seq-6")
        assert "failed with RuntimeError on epoch 1 step 2" in str(e)
        assert "decoder state corrupted" in str(e)


def test_data_error_in_worker_keeps_its_type_and_message():
    """A transform error becomes a DataError in the worker; the trainer raises that DataError
    itself: its message (sequence index and tag) first, the worker's traceback as the cause."""

    def broken(seq: dict, rng: np.random.Generator) -> dict:
        if int(seq["data"][0, 0]) == 11:
            raise ValueError("bad frame rate")
        return seq

    loader = sl.SeqLoader(index_corpus(20), max_seqs=4, num_workers=1, transform=broken)
    with loader, pytest.raises(DataError) as err:
        list(loader.epoch(1))
    message = str(err.value)
    assert message.startswith("transform failed on sequence 11 (tag 'utt-11'): ValueError: bad")
    assert "Caught" not in message and "Original Traceback" not in message
    assert "in DataLoader worker process 0" in str(err.value.__cause__)


class BrokenSequence(sl.MemorySource):
    """A source whose ``read`` of one sequence raises the library's ``DataError`` (file, tag,
    fix), as a reader does for a damaged file."""

    MESSAGE = (
        "file 'corpus/part-3.hdf': sequence {i} (tag {tag!r}) has 7 frames of 'data' but "
        "seqLengths says 9. Fix: rewrite the file with seqloader convert"
    )

    def __init__(self, data: dict, broken: int) -> None:
        super().__init__(data)
        self.broken = broken

    def read(self, index: int) -> dict:
        if index == self.broken:
            raise DataError(self.MESSAGE.format(i=index, tag=self.tag(index)))
        return super().read(index)


# spawned workers (each imports torch anew): a seqloader error crossing a spawned worker's pickle,
# raised in the loop as itself with the worker's traceback as its cause, is
# test_store_damage.py::test_a_spawned_worker_refuses_a_store_replaced_by_a_damaged_copy; the
# error while the other worker runs is 2-fork: make chaos runs both spawn variants
@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "context"),
    [
        (1, "fork"),
        (2, "fork"),
        pytest.param(1, "spawn", marks=pytest.mark.extended),
        pytest.param(2, "spawn", marks=pytest.mark.extended),
    ],
)
def test_data_error_raised_in_a_worker_leads_with_the_library_message(workers, context):
    """What the attack did: a DataError raised while a worker reads; the trainer's error is that
    DataError, its message the library's (file, tag, fix) from its first character, the worker's
    traceback (down to the raising ``read``) kept as ``__cause__``; the batches before it came."""
    base = index_corpus(24)
    src = BrokenSequence({"data": [base.read(i)["data"] for i in range(24)]}, broken=13)
    expected = BrokenSequence.MESSAGE.format(i=13, tag=src.tag(13))
    got = []
    with (
        sl.SeqLoader(
            src, max_seqs=4, num_workers=workers, multiprocessing_context=context
        ) as loader,
        pytest.raises(DataError) as err,
    ):
        for batch in loader.epoch(1):
            got.append(batch.step)
    e = err.value
    assert type(e) is DataError
    assert str(e) == expected
    cause = e.__cause__
    assert cause is not None and "in DataLoader worker process" in str(cause)
    assert "in read" in str(cause) and expected in str(cause)  # the worker's traceback
    failing_step = next(k for k, seqs in enumerate(loader.plan(1)) if 13 in seqs.tolist())
    assert got == list(range(failing_step))


def _error_types() -> list[type[BaseException]]:
    return [
        v
        for v in vars(errors).values()
        if isinstance(v, type) and issubclass(v, SeqLoaderError) and v.__module__ == errors.__name__
    ]


@pytest.mark.parametrize("cls", _error_types(), ids=lambda c: c.__name__)
def test_every_error_type_survives_pickling_and_torch_reraise(cls):
    e = cls("sequence 3 (tag 'a/b') in file 'x.hdf': got 2, expected 3")
    e.steps = (4, 6)  # attributes set after construction (as WorkerError has) travel too
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls and str(back) == str(e) and back.steps == (4, 6)
    try:
        raise e
    except cls:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 1")
    with pytest.raises(cls, match=r"tag 'a/b'\) in file 'x.hdf': got 2, expected 3"):
        wrapper.reraise()
