"""``ShardSource`` over URLs (moto's S3 server): listings read at open and indexed once per node,
shards fetched whole into the ``FileCache`` ahead of the plan (``distribution="files"`` within a
disk budget), member positions indexed when a shard's copy arrives; the same batches as over the
local shards, with DataLoader workers."""

from __future__ import annotations

import collections

import pytest

import seqloader as sl
from conftest import batch_record
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture  # noqa: F401 (fixtures)
from seqloader.shards import ShardSource
from shard_corpora import audio_corpus, index_shar

pytest.importorskip("soundfile")


def upload(s3: S3, written, prefix: str) -> tuple[list[str], list[str]]:
    tars = [s3.upload(p, f"{prefix}/{p.rsplit('/', 1)[-1]}") for p in written.tars]
    listings = [s3.upload(p, f"{prefix}/{p.rsplit('/', 1)[-1]}") for p in written.listings]
    return tars, listings


def test_shar_urls_read_like_local_shards(s3: S3, tmp_path) -> None:
    local = index_shar(tmp_path, 36, seed=1, shard_size=4)  # 9 shards
    folder = tmp_path / "index-36-1-4-0"
    tars = [s3.upload(p, f"shar/{p.name}") for p in sorted(folder.glob("features.*.tar"))]
    cuts = [s3.upload(p, f"shar/{p.name}") for p in sorted(folder.glob("cuts.*"))]
    fields = {"cuts": cuts, "features": tars}
    budget = 6 * max(p.stat().st_size for p in folder.glob("features.*.tar"))
    opts = {"cache_dir": tmp_path / "cache", "storage_options": s3.options}
    remote = ShardSource.lhotse_shar(fields, cache_bytes=budget, **opts)
    assert remote.index_built and remote.fingerprint() == local.fingerprint()
    assert remote.remote_files() is not None and len(remote.remote_files().files) == 9
    again = ShardSource.lhotse_shar(fields, cache_bytes=budget, **opts)
    assert not again.index_built  # the listings are not read again
    plan = dict(ordering="laplace:.4", max_seqs=3, distribution="files", seed=2, partition_epoch=2)
    for rank in range(2):
        with sl.SeqLoader(again, rank=rank, world_size=2, num_workers=2, **plan) as loader:
            got = [batch_record(b) for e in (1, 2, 3) for b in loader.epoch(e)]
        with sl.SeqLoader(local, rank=rank, world_size=2, **plan) as loader:
            want = [batch_record(b) for e in (1, 2, 3) for b in loader.epoch(e)]
        assert got == want
    fetched = collections.Counter(u for _, _, u in again.remote_files().cache.fetch_log())
    assert set(fetched) <= set(tars)


def test_nemo_and_webdataset_urls(s3: S3, tmp_path) -> None:
    corpus = audio_corpus(tmp_path / "c", n=5, shard_size=2)
    src = corpus["source"]
    tars, listings = upload(s3, corpus["nemo"], "nemo")
    opts = {"cache_dir": tmp_path / "cache", "storage_options": s3.options}
    with pytest.raises(sl.OptionError, match=r"rate is not known at open.*pass sample_rate"):
        ShardSource.nemo(listings, tars, **opts)  # remote members' headers arrive later
    nemo = ShardSource.nemo(listings, tars, sample_rate=16000, **opts)
    wds = ShardSource.webdataset(upload(s3, corpus["webdataset"], "wds")[0], **opts)
    for i in range(len(src)):
        assert bytes(nemo.read(i)["text"]) == bytes(src.read(i)["text"])
        assert (nemo.read(i)["audio"] == src.read(i)["audio"]).all()
        assert (wds.read(i)["audio"] == src.read(i)["audio"]).all()
    with pytest.raises(sl.OptionError, match="mix URLs"):
        ShardSource.nemo(listings, corpus["nemo"].tars, **opts)


def test_remote_shard_problems_found_on_arrival(s3: S3, tmp_path) -> None:
    import json

    from shard_corpora import tar_of, wav

    tar = tar_of(tmp_path / "audio_0.tar", [("a.wav", wav()), ("b.wav", wav()), ("x.wav", wav())])
    manifest = tmp_path / "manifest_0.json"
    lines = [
        {"audio_filepath": n, "duration": 0.2, "text": "t"} for n in ("a.wav", "b.wav", "c.wav")
    ]
    manifest.write_text("".join(json.dumps(e) + "\n" for e in lines))
    urls = [s3.upload(tar, "bad/audio_0.tar")], [s3.upload(manifest, "bad/manifest_0.json")]
    opts = {"cache_dir": tmp_path / "cache", "storage_options": s3.options, "sample_rate": 16000}
    strict = ShardSource.nemo(urls[1], urls[0], **opts)
    with pytest.raises(
        sl.DataError, match=r"audio_0.tar.*line 3, key 'c'\): entry without member. Fix"
    ):
        strict.read(0)
    lenient = ShardSource.nemo(urls[1], urls[0], on_error="skip", **opts)
    with pytest.warns(sl.DataWarning, match=r"1 x member without entry \(e.g. .*x.wav"):
        assert len(lenient.read(0)["audio"]) == 3200
    with pytest.raises(sl.SequenceSkipped, match="no member"):
        lenient.read(2)
