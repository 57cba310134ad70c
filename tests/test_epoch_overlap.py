"""An epoch's generator that goes on after the next ``epoch()`` call started counts nothing into
the new epoch's position: it says that its batches stopped coming (and what to do), so a state
saved in the new epoch resumes it exactly once (no batch skipped, none repeated)."""

from __future__ import annotations

import numpy as np
import pytest

import seqloader as sl
from seqloader.errors import SeqLoaderError

WORKERS = {
    "0 workers": {"num_workers": 0},
    "1 per-epoch worker": {"num_workers": 1, "persistent_workers": False},
    "1 persistent worker": {"num_workers": 1, "persistent_workers": True},
}


def _source() -> sl.MemorySource:
    return sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in range(3, 43)]})


@pytest.mark.parametrize("workers", list(WORKERS.values()), ids=list(WORKERS))
def test_old_epoch_generator_counts_nothing_into_the_new_epoch(workers):
    loader = sl.SeqLoader(_source(), max_seqs=2, seed=1, **workers)
    try:
        old = loader.epoch(1)
        assert [next(old).step for _ in range(2)] == [0, 1]
        new = loader.epoch(2)
        assert [next(new).step for _ in range(5)] == [0, 1, 2, 3, 4]
        with pytest.raises(SeqLoaderError, match=r"stopped coming.*epoch\(2\)"):
            for _ in range(3):
                next(old)
        state = loader.state_dict()
        assert (state["epoch"], state["steps"]) == (2, 5)  # was 8 with 0 / per-epoch workers
        rest = [b.step for b in new]
    finally:
        loader.close()
    assert rest == list(range(5, 20))
    resumed = sl.SeqLoader(_source(), max_seqs=2, seed=1)
    resumed.load_state_dict(state)
    assert [b.step for b in resumed.epoch(2)] == list(range(5, 20))  # each batch once


def test_an_old_epoch_generator_never_started_raises_too():
    loader = sl.SeqLoader(_source(), max_seqs=2, seed=1)
    old = loader.epoch(1)
    new = loader.epoch(2)
    assert next(new).step == 0
    with pytest.raises(SeqLoaderError, match="stopped coming"):
        next(old)
    assert loader.state_dict()["steps"] == 1
