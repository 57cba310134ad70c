"""What a spawned DataLoader worker receives of a loader over mapped metadata: the dataset pickles
to the same few KB whatever the corpus size (the metadata store's path, no lengths, tags or plan);
each batch then travels as its own indices (the sampler stays in the rank's process)."""

from __future__ import annotations

import pickle

import numpy as np

import seqloader as sl


def payload(tmp_path, n: int) -> bytes:
    rng = np.random.default_rng(n)
    data = [np.zeros((int(t), 2), np.float32) for t in rng.integers(1, 30, n)]
    path = tmp_path / f"c{n}.hdf"
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=[f"utt{i}" for i in range(n)]))
    source = sl.HDFSource(path, index_dir=tmp_path / "idx")
    loader = sl.SeqLoader(
        source,
        planning="indexed",
        ordering="laplace",
        max_frames=200,
        rank=1,
        world_size=4,
        num_workers=2,
        multiprocessing_context="spawn",
    )
    dataloader = loader._execution.ready()  # built, no worker started yet
    return pickle.dumps(dataloader.dataset)


def test_spawned_workers_get_a_payload_that_does_not_grow_with_the_corpus(tmp_path) -> None:
    small, large = payload(tmp_path, 300), payload(tmp_path, 10_000)
    assert len(large) < 16_384
    assert abs(len(large) - len(small)) < 256  # a longer file name at most
    assert b"utt9999" not in large and b"IndexedPlan" not in large
