"""benchmarks/epoch_scale.py at a small size: its children run a rank's whole epoch, the report,
half of the next epoch and a resume of it (same and another world size) through the real loader,
with forked DataLoader workers whose memory the sampler sees (no timing assertions); the
benchmark's source pickles as its path, not its lengths."""

from __future__ import annotations

import pickle

from benchmarks import epoch_scale, loader_scale


def test_run_and_resume_children(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = loader_scale.corpus_store(40_000, str(tmp_path))
    assert len(pickle.dumps(loader_scale.StoreSource(path))) < 1024
    config = {"store": path, **loader_scale.CASES["shard laplace"], "workers": 2, "method": "fork"}
    run = epoch_scale.child({**config, "phase": "run"})
    assert run["checks_ok"] and run["epoch1"]["batches"] >= 2
    assert run["memory"]["overall"]["workers"] > 0  # the workers were sampled
    assert set(run["memory"]["phases"]) >= {"epoch 1", "report", "boundary", "epoch 2"}
    assert run["report1"]["step_imbalance"] >= 1.0
    for world in (epoch_scale.WORLD, epoch_scale.RESUME_WORLD):
        conf = {**config, "phase": "resume", "world": world, "state": run["state"]}
        resumed = epoch_scale.child(conf)
        assert resumed["checks_ok"] and resumed["rest"]["batches"] >= 1
