"""benchmarks/loader_scale.py at a small size: its column-store corpus holds the tags and lengths
it says (the fingerprint a plain list of them gives), and its child measures a loader that plans
this rank's batches within the limits (no timing assertions)."""

from __future__ import annotations

import os

import numpy as np
from benchmarks import loader_scale

from seqloader.sources.base import fingerprint_of


def test_corpus_store_and_child(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(loader_scale, "_STEP", 700)  # several chunks
    n = 3000
    path = loader_scale.corpus_store(n, str(tmp_path))
    src = loader_scale.StoreSource(path)
    tags = [f"corpus/rec{i}/seg{i}" for i in range(n)]
    assert len(src) == n and src.tag(0) == tags[0] and list(src.tags) == tags
    lengths = src.lengths("data")
    assert lengths.dtype == np.int32 and not lengths.flags.writeable
    assert lengths.min() >= 50 and lengths.max() <= 2000
    plain = fingerprint_of(tags, {"data": np.asarray(lengths, np.int64)}, src.schema, "store")
    assert src.fingerprint() == plain
    out = loader_scale.child({"store": path, **loader_scale.CASES["shard laplace"]})
    assert out["checks_ok"] and out["rank_batches"] >= 1
    assert out["private_bytes"] >= 0 and out["total_s"] > 0


def test_child_over_an_hdf_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = loader_scale.hdf_corpus(2000, str(tmp_path))
    config = {"store": path, "source": "hdf", **loader_scale.CASES["shard buckets:30"]}
    source = loader_scale.open_source(config)
    assert len(source) == 2000 and source.tag(5) == "corpus/rec5/seg5"
    out = loader_scale.child(config)
    assert out["checks_ok"] and out["rank_batches"] >= 1
    assert os.listdir(tmp_path / "hdf-index")  # the HDF metadata store, built once
