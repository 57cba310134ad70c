"""``ConcatSource`` of large corpora: its one index space (every key's lengths, every tag) is one
memory-mapped store per node (``sources/concat_store.py``), built once and mapped by every later
open, pickled as its path; equal to the in-memory concatenation, and a loader over it delivers the
same batches with and without DataLoader workers. Small corpora and unwritable caches stay in
memory (the latter with a warning)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import DataWarning
from seqloader.sources import concat_store


def corpora() -> dict[str, sl.MemorySource]:
    return {
        name: index_corpus(n, seed=k, tags=[f"{name}/{i}" for i in range(n)])
        for k, (name, n) in enumerate((("a", 30), ("b", 20), ("c", 9)))
    }


def batches(source: sl.Source, workers: int) -> list[tuple[list[str], list[float]]]:
    options = {"mix": {"a": 0.5, "c": 2.0}, "planning": "indexed", "ordering": "buckets:3"}
    loader = sl.SeqLoader(
        source, **options, max_frames=100, num_workers=workers, rank=1, world_size=2
    )
    with loader:
        return [(b.seq_tags, b["data"][:, 0, 0].tolist()) for e in (1, 2) for b in loader.epoch(e)]


def test_large_concatenations_are_one_mapped_store_per_node(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parts = corpora()
    in_memory = sl.ConcatSource(parts)  # below MIN_SEQUENCES: one copy in memory
    assert in_memory._store is None
    reference = batches(in_memory, 0)
    monkeypatch.setattr(concat_store, "MIN_SEQUENCES", 10)
    src = sl.ConcatSource(parts)
    assert src._store is not None
    lengths = src.lengths("data")
    np.testing.assert_array_equal(lengths, in_memory.lengths("data"))
    assert not lengths.flags.writeable  # a view of the mapped store
    assert list(src.tags) == list(in_memory.tags) and src.tag(35) == "b/5"
    assert src.fingerprint() == in_memory.fingerprint()
    stores = list((tmp_path / "cache" / "seqloader" / "concat").glob("*.seqcols"))
    assert len(stores) == 1
    built = stores[0].stat().st_mtime_ns
    again = sl.ConcatSource(parts)  # every later open maps the node's store
    assert again._store is not None and again._store.path == src._store.path
    assert stores[0].stat().st_mtime_ns == built
    assert "_lengths" not in src.__getstate__()  # pickled as the store's path
    copy = pickle.loads(pickle.dumps(src))
    np.testing.assert_array_equal(copy.lengths("data"), lengths)
    assert list(copy.tags) == list(src.tags)
    other = sl.ConcatSource({**parts, "c": index_corpus(9, seed=5, tags=parts["c"].tags)})
    assert other._store is not None and other._store.path != src._store.path  # other content
    for workers in (0, 2):  # the same batches as over the in-memory concatenation
        assert batches(src, workers) == reference
    assert src.index_built and not again.index_built
    prepared = sl.prepare(again, ordering="laplace", planning="indexed")
    assert [s.path for s in prepared.stores if s.kind == "source metadata"] == [src.store.path]


def test_an_unwritable_cache_keeps_the_concatenation_in_memory(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(concat_store, "MIN_SEQUENCES", 10)
    with pytest.warns(DataWarning, match="cannot write the node's store"):
        src = sl.ConcatSource(corpora())
    assert src._store is None and len(src) == 59


@pytest.mark.slow
def test_a_spawned_worker_maps_the_store_again(tmp_path, monkeypatch) -> None:
    """A spawned DataLoader worker gets the store's path (not the arrays) and maps it itself:
    the same batches as in the main process."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(concat_store, "MIN_SEQUENCES", 10)
    src = sl.ConcatSource(corpora())
    assert src.store is not None

    def run(**workers: object) -> list:
        with sl.SeqLoader(src, mix={"b": 2.0}, ordering="laplace", max_seqs=3, **workers) as ld:
            return [(b.seq_tags, b["data"].numpy().tobytes()) for b in ld.epoch(1)]

    assert run(num_workers=1, multiprocessing_context="spawn") == run(num_workers=0)
