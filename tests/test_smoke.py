"""End-to-end smoke test: a MemorySource through SeqLoader, one epoch, all sequences once."""

import numpy as np

import seqloader as sl


def test_one_epoch_exactly_once_single_rank():
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 50, size=37)
    src = sl.MemorySource({"data": [rng.standard_normal((n, 3)).astype(np.float32) for n in lens]})
    loader = sl.SeqLoader(src, ordering="random", max_seqs=4, max_frames=120, seed=3)
    seen = []
    for batch in loader.epoch(1):
        assert batch["data"].shape[0] == batch.size
        for row, i in enumerate(batch.seq_indices.tolist()):
            n = int(batch.lengths["data"][row])
            assert n == lens[i]
            np.testing.assert_array_equal(batch["data"][row, :n].numpy(), src.read(i)["data"])
            assert not batch["data"][row, n:].any()
        seen.extend(batch.seq_indices.tolist())
    assert sorted(seen) == list(range(37))
    assert loader.report().seqs == 37
