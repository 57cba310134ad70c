"""The next epoch's first batches, built by persistent workers while the current epoch ends
(``seqloader.torch.receiving``: the dispatch thread resets torch's iterator ahead for the run the
loader most likely asks next), are used only when the loop asks for exactly that run: whatever the
loop does at the boundary (the next epoch, another one, stopping midway, saving and loading its
state, a new loader resuming), every epoch yields what a main-process loader yields, in order,
each batch once, for any worker count and prefetch; an error while building a prepared batch is
raised at that batch with the same text."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record, index_corpus
from seqloader.errors import DataError, SeqLoaderError
from seqloader.torch._compat import current_iterator

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


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS, workers=st.integers(1, 2), prefetch=st.integers(1, 3))
def test_any_boundary_yields_what_the_main_process_yields(actions, workers, prefetch):
    src = index_corpus(N)
    want = play(sl.SeqLoader(src, **PLAN), actions)
    with sl.SeqLoader(src, num_workers=workers, prefetch_factor=prefetch, **PLAN) as loader:
        got = play(loader, actions)
        it = current_iterator(loader._dataloader) if loader._dataloader is not None else None
        reused = getattr(it, "reused_resets", 0)
    assert got == want
    # the prepared run really was used where the loop went on to the next epoch (then the
    # property above covered batches built ahead)
    assert reused >= clean_boundaries(actions)


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
