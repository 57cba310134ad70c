"""AudioSource over OggZip URLs (moto's S3 server): listings read with ranged reads and indexed once
per node, audio read from whole cached zips, the same batches as over local zips (2 workers), and
JSON-lines manifests behind URLs refused with the fix."""

from __future__ import annotations

import collections

import pytest

import seqloader as sl
from conftest import batch_record
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture  # noqa: F401 (fixtures)
from seqloader.sources.remote import COUNTERS
from seqloader.synthetic.audio import write_audio_corpus

pytest.importorskip("soundfile")


def test_oggzip_urls_read_like_local_zips(s3: S3, tmp_path) -> None:
    corpora = [
        write_audio_corpus(tmp_path / name, 6, name=name, seconds=(0.2, 0.8), seed=i)
        for i, name in enumerate(("a", "b", "c"))
    ]
    local = [c.oggzip for c in corpora]
    urls = [s3.upload(c.oggzip, f"audio/{name}.zip") for c, name in zip(corpora, "abc")]
    before = COUNTERS.metadata_reads
    remote = sl.AudioSource(urls, cache_dir=tmp_path / "cache", storage_options=s3.options)
    assert COUNTERS.metadata_reads - before == 3  # each listing, by ranged reads
    again = sl.AudioSource(urls, cache_dir=tmp_path / "cache", storage_options=s3.options)
    assert COUNTERS.metadata_reads - before == 3  # the index: no remote read
    plain = sl.AudioSource(local)
    assert remote.fingerprint() == plain.fingerprint() == again.fingerprint()
    assert list(remote.tags) == list(plain.tags)
    budget = 3 * max(f.size for f in remote.remote_files().files)
    cached = sl.AudioSource(
        urls, cache_dir=tmp_path / "cache2", cache_bytes=budget, storage_options=s3.options
    )
    # the three generated corpora reuse tags (u0, u1, ...): sequences are told apart by index
    checks = sl.CheckOptions(duplicate_tags="off", audit="error")
    opts = dict(ordering="random", max_seqs=3, num_workers=2, checks=checks, seed=2)
    with sl.SeqLoader(cached, **opts) as loader:
        got = [batch_record(b) for b in loader.epoch(1)]
        assert loader.report().audit.ok
    with sl.SeqLoader(plain, **opts) as loader:
        want = [batch_record(b) for b in loader.epoch(1)]
    assert got == want
    counts = collections.Counter(u for _, _, u in cached.remote_files().cache.fetch_log())
    assert set(counts) == set(urls) and set(counts.values()) == {1}


def test_jsonl_manifest_url_is_refused_with_the_fix(s3: S3, tmp_path) -> None:
    corpus = write_audio_corpus(tmp_path, 2, seconds=(0.2, 0.3))
    url = s3.upload(corpus.jsonl, "audio/corpus.jsonl")
    with pytest.raises(sl.OptionError, match="must be an OggZip corpus"):
        sl.AudioSource([url], cache_dir=tmp_path / "cache", storage_options=s3.options)
