"""The next epoch's first batches, built by persistent workers while the current epoch ends
(``seqloader.torch.receiving``: the dispatch thread resets torch's iterator ahead for the run the
loader most likely asks next), are used only when the loop asks for exactly that run: whatever the
loop does at the boundary (the next epoch, another one, stopping midway, saving and loading its
state, a new loader resuming), every epoch yields what a main-process loader yields, in order,
each batch once, for any worker count and prefetch; an error while building a prepared batch is
raised at that batch with the same text."""

from __future__ import annotations

import itertools
import threading
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record, index_corpus
from seqloader.errors import DataError, SeqLoaderError
from seqloader.torch._compat import current_iterator
from seqloader.torch.dataloader import Execution
from seqloader.torch.dataset import PlanSampler, RunPlan
from seqloader.torch.receiving import ReceivingIter

PLAN = {"ordering": "random", "max_seqs": 3, "seed": 5}
N = 14  # 5 batches per epoch

# (epoch asked for, batches taken: None = the whole epoch, and the end), reload the state first
ACTIONS = st.lists(
    st.tuples(st.integers(1, 4), st.one_of(st.none(), st.integers(0, 4)), st.booleans()),
    min_size=2,
    max_size=5,
)


def play(loader: sl.SeqLoader, actions) -> list:
    """What each action gave: the records of the batches taken, or the error's type and text."""
    out: list = []
    for epoch, take, reload in actions:
        if reload:
            loader.load_state_dict(loader.state_dict())
        got: list = []
        try:
            for k, batch in enumerate(loader.epoch(epoch)):
                if take is not None and k == take:
                    break
                got.append(batch_record(batch))
        except SeqLoaderError as e:  # e.g. another epoch than a mid-epoch state's
            got.append((type(e).__name__, str(e)))
        out.append(got)
    return out


def clean_boundaries(actions) -> int:
    """Epoch starts the workers must have prepared: the epoch after a whole one, no reload."""
    return sum(
        1
        for (e, take, _), (e2, _, reload) in itertools.pairwise(actions)
        if take is None and e2 == e + 1 and not reload
    )


def recording_settle(records: list) -> object:
    """``ReceivingIter.settle`` that records, for a run taken whole, what the loader decided
    (``use``) and what followed: whether the preparation was decided (its ``ended``) and whether
    the dispatch thread still runs."""
    real = ReceivingIter.settle

    def settle(self, use: bool = True) -> None:
        dispatch = self._dispatch
        run = dispatch.run
        whole = run.length is not None and run.taken >= run.length
        real(self, use)
        if whole:
            records.append((use, run.ended.is_set(), dispatch.thread.is_alive()))

    return settle


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS, workers=st.integers(1, 2), prefetch=st.integers(1, 3))
def test_any_boundary_yields_what_the_main_process_yields(actions, workers, prefetch):
    """... and the loader waits for the prepared run exactly where it asks for it; anywhere else
    it stops the preparation before taking its plan."""
    src = index_corpus(N)
    want = play(sl.SeqLoader(src, **PLAN), actions)
    records: list = []
    with (
        mock.patch.object(ReceivingIter, "settle", recording_settle(records)),
        sl.SeqLoader(src, num_workers=workers, prefetch_factor=prefetch, **PLAN) as loader,
    ):
        got = play(loader, actions)
        it = current_iterator(loader._dataloader) if loader._dataloader is not None else None
        reused = getattr(it, "reused_resets", 0)
    assert got == want
    for use, decided, running in records:
        assert decided if use else not running  # waited for, or stopped before the plan's taken
    # the prepared run really was used where the loop went on to the next epoch (then the
    # property above covered batches built ahead): the loader waited for it there
    clean = clean_boundaries(actions)
    assert reused >= clean
    assert sum(use for use, _, _ in records) >= clean


class Gate:
    """Holds the dispatch thread's guess of the next run (``PlanSampler.upcoming``) until the
    loop's next ``epoch()`` has decided (``Execution.settle``, recorded): if it will not use the
    prepared run, until the preparation is being stopped. So whether a reset ahead happens
    depends on the decision alone, not on which thread runs first."""

    def __init__(self, loader: sl.SeqLoader) -> None:
        self.loader = loader
        self.guess = loader._execution.sampler.upcoming
        self.cond = threading.Condition()
        self.decisions: list[bool] = []
        self.entered = threading.Event()  # the thread waits in the gate

    def upcoming(self, ended: int):
        it = current_iterator(self.loader._dataloader)
        dispatch = it._dispatch  # the thread running this
        with self.cond:
            n = len(self.decisions)
            self.entered.set()
            self.cond.wait_for(lambda: len(self.decisions) > n)
            use = self.decisions[n]
        if not use:
            dispatch.stop_event.wait()
        return self.guess(ended)

    def decide(self, use: bool) -> None:
        with self.cond:
            self.decisions.append(use)
            self.cond.notify_all()

    def settle(self):
        """``Execution.settle`` that records the decision before it acts on it (code before:
        ``settle()`` without one always waited)."""
        real = Execution.settle
        gate = self

        def settle(self, *args, **kwargs) -> None:
            gate.decide(kwargs.get("use", args[0] if args else True))
            real(self, *args, **kwargs)

        return settle

    def epoch(self, epoch: int) -> list:
        """Epoch ``epoch``, whole, once the thread waits in the gate (after a whole epoch)."""
        if self.loader._dataloader is not None:
            self.entered.wait()
            self.entered.clear()
        return [batch_record(b) for b in self.loader.epoch(epoch)]


# spawn: make chaos (the gate and the decision live in the loop's process, the same for both start
# methods; a spawned worker's batches are test_loader_workers.py's spawn test)
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.extended)])
def test_another_epoch_stops_the_preparation_before_the_workers_build_anything(context):
    """After a whole epoch 1, ``epoch(3)`` (not the next) stops the preparation of epoch 2
    before torch's reset ahead: the workers build nothing for it, and the loader does not wait
    for it. ``epoch(4)`` after a whole epoch 3 waits, and the batches prepared for it are used.
    Every epoch yields what a main-process loader yields."""
    src = index_corpus(N)
    reference = sl.SeqLoader(src, **PLAN)
    want = {e: [batch_record(b) for b in reference.epoch(e)] for e in (1, 3, 4)}
    resets: list[int] = []
    reset_ahead = ReceivingIter.reset_ahead

    def recording_reset(self, run):
        resets.append(run.epoch)
        return reset_ahead(self, run)

    loader = sl.SeqLoader(src, num_workers=1, multiprocessing_context=context, **PLAN)
    gate = Gate(loader)
    loader._execution.sampler.upcoming = gate.upcoming
    with (
        mock.patch.object(Execution, "settle", gate.settle()),
        mock.patch.object(ReceivingIter, "reset_ahead", recording_reset),
        loader,
    ):
        got = {e: gate.epoch(e) for e in (1, 3)}
        assert resets == []  # nothing prepared for epoch 2
        got[4] = gate.epoch(4)
        assert resets == [4]
        assert current_iterator(loader._dataloader).reused_resets == 1
        gate.entered.wait()
        gate.decide(False)  # the thread's guess after epoch 4: stopped by close()
    assert gate.decisions == [False, False, True, False]
    assert got == want


def test_a_run_set_ahead_is_iterated_once_and_never_outlives_its_reset():
    """``PlanSampler.iterating``: the reset made ahead iterates the run it prepares, once; an
    exception inside leaves nothing behind; the loop's own iteration yields the loader's plan."""
    plan = sl.SeqLoader(index_corpus(N), **PLAN).global_plan
    sampler = PlanSampler()
    sampler.set_plan(1, plan(1).rank_share(0), 0)
    ahead = RunPlan(2, plan(2).rank_share(0), 0)

    def epochs() -> list[int]:
        return [spec.epoch for spec in sampler]

    with sampler.iterating(ahead):
        assert epochs() == [2] * 5
        assert epochs() == [1] * 5
    with pytest.raises(RuntimeError), sampler.iterating(ahead):
        raise RuntimeError("torch's reset failed before it iterated")
    assert epochs() == [1] * 5


def test_a_new_loader_resumes_at_the_boundary_and_mid_epoch():
    """States saved at the boundary (the next epoch prepared, not consumed) and mid-epoch (after
    a prepared start) resume exactly in a new loader."""
    src = index_corpus(N)
    reference = sl.SeqLoader(src, **PLAN)
    want = {e: [batch_record(b) for b in reference.epoch(e)] for e in (1, 2)}
    with sl.SeqLoader(src, num_workers=2, **PLAN) as loader:
        assert [batch_record(b) for b in loader.epoch(1)] == want[1]
        at_boundary = loader.state_dict()  # epoch 2's first batches are being built now
        taken = []
        for k, b in enumerate(loader.epoch(2)):
            taken.append(batch_record(b))
            if k == 1:
                break
        mid = loader.state_dict()
    assert taken == want[2][:2]
    for state, rest in ((at_boundary, want[2]), (mid, want[2][2:])):
        with sl.SeqLoader(src, num_workers=1, **PLAN) as fresh:
            fresh.load_state_dict(state)
            assert [batch_record(b) for b in fresh.epoch(2)] == rest


_SEEN: dict[int, int] = {}
_FAIL = {"index": -1}  # set by the test before the workers start (fork: they inherit it)


def fails_second_time(seq: dict, rng: np.random.Generator) -> dict:
    """Raises the second time this process builds the sequence ``_FAIL["index"]`` (epoch 1
    builds it once; epoch 2 again, in a batch prepared ahead)."""
    i = int(seq["data"][0, 0])
    _SEEN[i] = _SEEN.get(i, 0) + 1
    if i == _FAIL["index"] and _SEEN[i] == 2:
        raise ValueError("bad frame rate")
    return seq


@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_in_a_prepared_batch_is_raised_at_that_batch(workers):
    """The sequence fails in epoch 2's first batch, which one worker builds while epoch 1 ends:
    epoch 1 is whole, and epoch 2's first request raises the transform's error, as without
    workers."""
    src = index_corpus(N)
    first = sl.SeqLoader(src, **PLAN).plan(2)[0]
    _FAIL["index"] = int(first[0])
    _SEEN.clear()
    with sl.SeqLoader(src, num_workers=workers, transform=fails_second_time, **PLAN) as loader:
        assert len(list(loader.epoch(1))) == len(loader.plan(1))
        with pytest.raises(DataError) as err:
            next(iter(loader.epoch(2)))
    assert str(err.value).startswith(
        f"transform failed on sequence {int(first[0])} (tag 'utt-{int(first[0])}'): ValueError"
    )
    _FAIL["index"] = -1
