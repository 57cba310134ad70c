"""``SeqLoader(features_on=DEVICE)``: an audio source's deferred features computed in the training
process on the batch's device after collation. Tested on the CPU device against the same source
read with features in the workers: the same plan, batches, tags, frame counts and report, the
features within ``device_features.TOLERANCE``, for 0 and 2 workers, KaldiFbank and LogMel."""

from __future__ import annotations

import numpy as np
import pytest

import seqloader as sl
from seqloader.audio.device_features import TOLERANCE
from seqloader.errors import OptionError
from seqloader.shards import ShardSource
from shard_corpora import audio_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("features-on")
    out = audio_corpus(root, n=9, shard_size=4)
    out["root"] = root
    return out


def epoch(src, **options) -> tuple[list[dict], dict]:
    with sl.SeqLoader(src, max_frames=300, ordering="buckets:2", seed=4, **options) as loader:
        batches = [
            {
                "keys": sorted(b),
                "device": {b[k].device.type for k in b},
                "tags": b.seq_tags,
                "lengths": {k: v.tolist() for k, v in b.lengths.items()},
                "data": b["data"].numpy().copy(),
            }
            for b in loader.epoch(1)
        ]
        report = loader.report().to_dict()
    return batches, report


@pytest.mark.parametrize(
    ("features", "workers"),
    [(sl.KaldiFbank(n_mels=24), 0), (sl.KaldiFbank(), 2), (sl.LogMel(n_mels=20), 2)],
)
def test_features_on_the_device_equal_the_workers(corpus, tmp_path, features, workers) -> None:
    shar = corpus["root"] / "shar"
    on_cpu = ShardSource.lhotse_shar(shar, features=features, index_dir=tmp_path)
    deferred = ShardSource.lhotse_shar(
        shar, features=features, defer_features=True, index_dir=tmp_path
    )
    extra = {"num_workers": workers, "multiprocessing_context": "fork"} if workers else {}
    want, want_report = epoch(on_cpu, **extra)
    got, got_report = epoch(deferred, features_on="cpu", **extra)
    assert len(got) == len(want) > 2
    worst = 0.0
    for g, w in zip(got, want):
        assert g["keys"] == w["keys"] == sorted(on_cpu.keys)  # data in place of the waveforms
        assert g["device"] == {"cpu"}
        assert g["tags"] == w["tags"]
        assert g["lengths"] == w["lengths"]
        assert g["data"].shape == w["data"].shape
        worst = max(worst, float(np.abs(g["data"] - w["data"]).max(initial=0.0)))
    assert worst <= TOLERANCE
    for key in ("planned_seqs", "planned_steps", "seqs", "steps", "frames", "padded_frames"):
        assert got_report[key] == want_report[key], key


def test_features_on_refusals(corpus, tmp_path) -> None:
    shar = corpus["root"] / "shar"
    plain = ShardSource.lhotse_shar(shar, features=sl.KaldiFbank(), index_dir=tmp_path)
    with pytest.raises(OptionError, match=r"defers none. Fix: .*defer_features=True"):
        sl.SeqLoader(plain, max_seqs=2, features_on="cpu")
    deferred = ShardSource.lhotse_shar(
        shar, features=sl.KaldiFbank(), defer_features=True, index_dir=tmp_path
    )
    with pytest.raises(OptionError, match=r"'gpu9' is not a torch device"):
        sl.SeqLoader(deferred, max_seqs=2, features_on="gpu9")
    with pytest.raises(OptionError, match=r"features_on needs layout='padded'"):
        sl.SeqLoader(deferred, max_seqs=2, features_on="cpu", layout="packed")
    with pytest.raises(OptionError, match=r"features_on=DEVICE"):  # named in the fix
        sl.SeqLoader(deferred, max_seqs=2)


def test_a_wave_transform_runs_in_the_workers_before_the_device_features(corpus, tmp_path) -> None:
    """Speed perturbation (planned with ``min_speed``) then features: on the device after
    collation, or in the workers with the ``Features`` step, the same frames and values."""
    from seqloader.audio.transforms import Features, SpeedPerturb
    from seqloader.transforms import compose

    fbank = sl.KaldiFbank(n_mels=24)
    perturb = SpeedPerturb((0.9, 1.1))
    src = ShardSource.lhotse_shar(
        corpus["root"] / "shar",
        features=fbank,
        defer_features=True,
        min_speed=perturb.min_factor,
        index_dir=tmp_path,
    )
    want, _ = epoch(src, transform=compose(perturb, Features(fbank)))  # type: ignore[arg-type]
    got, _ = epoch(src, transform=compose(perturb), features_on="cpu")  # the same draws
    assert [b["tags"] for b in got] == [b["tags"] for b in want]
    for g, w in zip(got, want):
        assert g["lengths"]["data"] == w["lengths"]["data"]
        for row, n in enumerate(g["lengths"]["data"]):
            np.testing.assert_allclose(g["data"][row, :n], w["data"][row, :n], atol=TOLERANCE)
