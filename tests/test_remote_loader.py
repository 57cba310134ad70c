"""SeqLoader over s3:// HDF files (moto's S3 server): the same batches as over local copies, exactly
once with 0 and 2 workers; the plan-driven cache keeps a rank's files within its budget, refuses
an impossible budget, reports fetch wait apart from read wait, and resumes fetching only what is
missing."""

from __future__ import annotations

import collections
import threading

import pytest

import seqloader as sl
from conftest import batch_record, check_rows
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture, upload_corpus  # noqa: F401 (fixtures)
from seqloader.errors import OptionError
from seqloader.sources.remote import FileCache, RemoteFile


class Slow:
    """``on_block`` hook: a slow network, so readers find files still missing."""

    def __call__(self, f: RemoteFile, done: int) -> None:
        import time

        time.sleep(0.005)


def _remote(s3: S3, urls: list[str], tmp_path, name: str = "c", **cache_kw) -> sl.HDFSource:
    cache = FileCache(tmp_path / name, storage_options=s3.options, backoff_s=0.01, **cache_kw)
    return sl.HDFSource(urls, cache=cache)


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, None), (1, "spawn")])
def test_remote_loader_equals_local_and_is_exactly_once(
    s3: S3, tmp_path, workers: int, context: str | None
) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=4, per_file=12)
    local = sl.HDFSource(sorted((tmp_path / "upload").glob("*.hdf")))
    remote = _remote(s3, urls, tmp_path, block_bytes=2048, on_block=Slow())
    assert remote.fingerprint() == local.fingerprint()
    opts = dict(ordering="random", max_seqs=5, audit=True, seed=3)
    # the local copies read in-process: batches do not depend on num_workers (C3), so the remote
    # loader's workers must give these exactly (and no worker is started twice per epoch)
    with sl.SeqLoader(local, **opts) as loader:
        want = {e: [batch_record(b) for b in loader.epoch(e)] for e in (1, 2)}
    opts["num_workers"] = workers
    epochs = (1, 2)  # a loader each: the second finds the first one's files in the cache
    if context is not None:  # spawned workers get the source (and its cache) pickled
        opts["multiprocessing_context"] = context
        # one loader, one spawned worker (it imports torch anew); a second loader finding the
        # files in the cache: the 0- and 2-worker cases
        epochs = (1,)
    for epoch in epochs:
        got = []
        with sl.SeqLoader(remote, **opts) as loader:
            for b in loader.epoch(epoch):
                check_rows(b)
                got.append(batch_record(b))
            report = loader.report()
        assert got == want[epoch]
        assert report.audit is not None and report.audit.ok
        assert "fetch wait" in report.format()
    cache = remote.remote_files().cache
    counts = collections.Counter(u for _, _, u in cache.fetch_log())
    assert set(counts) == set(urls) and set(counts.values()) == {1}  # no file fetched twice


class NoPrefetch:
    """``on_block`` hook: downloads by the prefetch thread break off, so readers fetch each file
    themselves and must wait for it (deterministically, whatever the timing)."""

    def __call__(self, f: RemoteFile, done: int) -> None:
        if threading.current_thread().name == "seqloader-prefetch":
            raise ConnectionResetError("prefetch disabled by the test")


@pytest.mark.parametrize("workers", [0, 2])
def test_fetch_wait_is_reported_apart_from_data_wait(s3: S3, tmp_path, workers: int) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=3, per_file=10)
    source = _remote(s3, urls, tmp_path, on_block=NoPrefetch(), retries=0)
    with sl.SeqLoader(source, max_seqs=4, num_workers=workers, seed=1) as loader:
        batches = list(loader.epoch(1))
        report = loader.report()
    waits = [b.fetch_wait_s for b in batches]
    assert report.fetch_wait_s == pytest.approx(sum(waits)) and report.fetch_wait_s > 0
    assert report.fetched_bytes == sum(f.size for f in source.remote_files().files)
    assert sum(b.fetch_bytes for b in batches) == report.fetched_bytes  # all by the readers
    assert "fetch wait" in report.format()


def test_budget_keeps_two_sub_epochs_of_files(s3: S3, tmp_path) -> None:
    # "default" order with 4 sub-epochs: sub-epoch k reads 2 of the 8 files
    urls = upload_corpus(s3, tmp_path, n_files=8, per_file=10)
    probe = _remote(s3, urls, tmp_path, name="probe")
    sizes = [f.size for f in probe.remote_files().files]
    budget = max(a + b + c + d for a, b, c, d in zip(sizes, sizes[1:], sizes[2:], sizes[3:]))
    source = _remote(s3, urls, tmp_path, cache_bytes=budget)
    opts = dict(ordering="default", partition_epoch=4, max_seqs=4, num_workers=2, audit=True)
    with sl.SeqLoader(source, **opts) as loader:
        for epoch in range(1, 6):
            seen = set()
            for b in loader.epoch(epoch):
                check_rows(b)
                seen.update(b.seq_indices.tolist())
            report = loader.report()
            assert report.audit.ok
            assert report.cache_high_water_bytes <= budget
            files = {i // 10 for i in seen}
            assert len(files) == 2  # this sub-epoch's files
    cache = source.remote_files().cache
    assert cache.dir_high_water() <= budget
    counts = collections.Counter(u for _, _, u in cache.fetch_log())
    # 5 sub-epochs read files 0-1, 2-3, 4-5, 6-7, 0-1 (+ 2-3 fetched ahead); 0-1 came back
    # after their eviction, everything else was fetched once
    assert set(counts) == set(urls[:8])
    assert counts[urls[0]] == 2 and counts[urls[4]] == 1


def test_impossible_budget_is_refused_at_start_with_the_numbers(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=4, per_file=10)
    source = _remote(s3, urls, tmp_path, cache_bytes=1000)
    loader = sl.SeqLoader(source, ordering="random", partition_epoch=2, max_seqs=4)
    with pytest.raises(OptionError) as e:
        next(iter(loader.epoch(1)))
    msg = str(e.value)
    for text in ("cache_bytes=1000", "rank 0", "sub-epochs 1 and 2", "partition_epoch", "files'"):
        assert text in msg, msg
    assert source.remote_files().cache.fetch_log() == []  # nothing fetched before the check
    loader.close()


def test_resume_fetches_only_missing_files(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=6, per_file=8)
    opts = dict(ordering="default", partition_epoch=3, max_seqs=4, num_workers=0, audit=True)
    sizes = [f.size for f in _remote(s3, urls, tmp_path, name="p").remote_files().files]
    budget = 4 * max(sizes)
    source = _remote(s3, urls, tmp_path, cache_bytes=budget)
    first = sl.SeqLoader(source, **opts)
    it = iter(first.epoch(1))
    before = [next(it).seq_indices.tolist() for _ in range(2)]
    state = first.state_dict()
    it.close()
    first.close()
    fetched = collections.Counter(u for _, _, u in source.remote_files().cache.fetch_log())
    # a new process on the same cache directory continues the epoch
    again = _remote(s3, urls, tmp_path, cache_bytes=budget)
    second = sl.SeqLoader(again, **{**opts, "audit": False})
    second.load_state_dict(state)
    rest = [b.seq_indices.tolist() for b in second.epoch(1)]
    second.close()
    everything = sorted(i for b in before + rest for i in b)
    assert everything == list(range(16))  # sub-epoch 1: files 0-1, each sequence once
    after = collections.Counter(u for _, _, u in again.remote_files().cache.fetch_log())
    assert all(after[u] == fetched[u] for u in fetched)  # what was cached was not fetched again
    assert set(after) <= set(urls[:4])
