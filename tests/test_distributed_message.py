"""C7 in one process: what ranks compare and the message when they differ (the real all_gather runs
in test_distributed_torchrun.py)."""

from __future__ import annotations

import seqloader as sl
from conftest import index_corpus
from seqloader.torch.distributed import mismatch_message


def agreement(loader: sl.SeqLoader, epoch: int = 1) -> dict[str, str]:
    return loader._agreement(epoch)


def test_agreeing_ranks_give_no_message() -> None:
    ds = [
        agreement(sl.SeqLoader(index_corpus(30), rank=r, world_size=3, max_seqs=2))
        for r in range(3)
    ]
    assert mismatch_message(ds) is None


def test_message_names_ranks_hosts_and_the_differing_option() -> None:
    loaders = [
        sl.SeqLoader(index_corpus(30), rank=0, world_size=4, max_seqs=2, seed=1),
        sl.SeqLoader(index_corpus(30), rank=1, world_size=4, max_seqs=2, seed=1),
        sl.SeqLoader(index_corpus(30), rank=2, world_size=4, max_seqs=2, seed=9),
        sl.SeqLoader(index_corpus(29), rank=3, world_size=4, max_seqs=2, seed=1),
    ]
    message = mismatch_message(
        [agreement(ld) for ld in loaders],
        hosts=["a", "a", "b", "c"],
        this_rank=3,
        shown=[{"source_fingerprint": repr(ld.source)} for ld in loaders],
    )
    assert message is not None
    first, *details = message.splitlines()
    assert "rank(s) [2, 3] differ from rank 0" in first
    assert "options, plan_fingerprint, source_fingerprint" in first
    assert "(this is rank 3)" in first
    assert "  options.seed: ranks [0, 1, 3] (host a, c): 1; ranks [2] (host b): 9" in details
    source = next(d for d in details if d.startswith("  source_fingerprint:"))
    fp30, fp29 = loaders[0].source.fingerprint(), loaders[3].source.fingerprint()
    assert f"ranks [0, 1, 2] (host a, b): {fp30} (MemorySource(30 seqs" in source
    assert f"ranks [3] (host c): {fp29} (MemorySource(29 seqs" in source


def test_same_data_under_other_names_agrees() -> None:
    """Nodes may hold the same files under other names; only content and options count."""
    descriptions = [
        agreement(sl.SeqLoader(index_corpus(30), rank=r, world_size=2)) for r in range(2)
    ]
    shown = [{"source_fingerprint": "train.hdf"}, {"source_fingerprint": "copy-of-train.hdf"}]
    assert mismatch_message(descriptions, shown=shown) is None


def test_ranks_that_loaded_different_states_disagree() -> None:
    """One rank forgetting load_state_dict would skip or repeat data: caught before any batch."""
    make = lambda r: sl.SeqLoader(index_corpus(40), rank=r, world_size=2, max_seqs=3)  # noqa: E731
    first = make(0)
    it = first.epoch(1)
    next(it)
    state = first.state_dict()
    resumed, fresh = make(0), make(1)
    resumed.load_state_dict(state)
    message = mismatch_message([agreement(resumed), agreement(fresh)])
    assert message is not None
    assert "rank(s) [1] differ from rank 0 in resume_position" in message
    assert '"segment_steps": 1' in message and "ranks [1]: none" in message


def test_ranks_asking_for_different_epochs_disagree() -> None:
    loaders = [sl.SeqLoader(index_corpus(10), rank=r, world_size=2) for r in range(2)]
    message = mismatch_message([agreement(loaders[0], 1), agreement(loaders[1], 2)])
    assert message is not None and "  epoch: ranks [0]: 1; ranks [1]: 2" in message


def test_long_values_are_shortened() -> None:
    message = mismatch_message([{"source": "x" * 1000}, {"source": "y"}])
    assert message is not None and len(message) < 800 and "..." in message
