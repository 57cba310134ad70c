"""benchmarks/node_builds.py at a small size: every stage's child runs, the index digest is the
one of the index the planner holds, and the first loader writes the node's files into the cache
it is given (no timing assertions)."""

from __future__ import annotations

import os

from benchmarks import loader_scale, node_builds

from seqloader.loading import bucket_store
from seqloader.trainer import duplicate_store


def test_every_stage(tmp_path, monkeypatch):
    monkeypatch.setattr(duplicate_store, "MIN_SEQUENCES", 10)  # node files from 10 sequences on
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "unused"))
    path = loader_scale.corpus_store(4000, str(tmp_path))
    hdf = node_builds.hdf_corpus(4000, str(tmp_path), block=1500)
    digests = set()
    for stage, case in node_builds.stages():
        if stage == "node":  # two processes on one cache: below
            continue
        cache = tmp_path / f"cache-{len(digests)}-{stage}".replace(" ", "-")
        config = {"store": path, "stage": stage, "case": case, "cache": str(cache), "hdf": hdf}
        out = node_builds.child(config)
        assert out["seconds"] > 0 and out["private_bytes"] >= 0
        if stage == "hdf metadata":  # the corpus' fingerprint, its metadata store in the cache
            from seqloader.sources.hdf import HDFSource

            source = HDFSource(hdf, index_dir=str(tmp_path / "again"))
            assert out["digest"] == source.fingerprint() and len(source) == 4000
            assert source.tag(3999) == "corpus/rec3999/seg3999"
            assert len([f for f in os.listdir(cache) if f.endswith(".cols")]) == 1
            source.close()
        elif stage == "verdict":
            assert out["digest"] == "0"  # no repeated tags
        elif stage == "index":
            digests.add(out["digest"])
        else:
            assert sorted(os.listdir(cache / "seqloader")) == ["buckets", "checks"]
    assert len(digests) == 2  # one index per case
    # the node stage: the first process builds the three stores, another maps them
    node = tmp_path / "node"
    runs = []
    for part in ("node first", "node other"):
        config = {"store": None, "stage": part, "case": node_builds.NODE_CASE, "hdf": hdf}
        runs.append(node_builds.child({**config, "cache": str(node)}))
        assert set(runs[-1]["steps"]) == {"open", "loader", "plan"}
        if part == "node first":
            built = {p: os.path.getmtime(p) for p in map(str, node.rglob("*")) if "." in p}
    assert runs[0]["digest"] == runs[1]["digest"] and "variable-length" in runs[0]["seq_tags"]
    assert sorted(os.listdir(node / "seqloader")) == ["buckets", "checks"]
    assert {p: os.path.getmtime(p) for p in built} == built  # the other process built nothing
