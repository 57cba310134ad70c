"""FileCache and the metadata index against a real S3 API (moto's server): whole-file copies that
are never half, re-fetched when the store's file changed, retried and then named, fetched once per
node by several processes, and metadata read once per node."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import sys
import time

import numpy as np
import pytest

import seqloader as sl
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture, upload_corpus  # noqa: F401 (fixtures)
from seqloader.errors import FetchError, MissingDependencyError, OptionError
from seqloader.sources.remote import COUNTERS, FileCache, RemoteFile

BLOCK = 1024  # small blocks: every download takes several


class KillAfterFirstBlock:
    """``on_block`` hook: the process dies (SIGKILL, no cleanup) mid-download."""

    def __call__(self, f: RemoteFile, done: int) -> None:
        if done < f.size:
            os.kill(os.getpid(), signal.SIGKILL)


class FailFirst:
    """``on_block`` hook: the first ``n`` downloads break off after one block."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def __call__(self, f: RemoteFile, done: int) -> None:
        if self.n > self.seen:
            self.seen += 1
            raise ConnectionResetError("connection reset by peer (test)")


class Slow:
    """``on_block`` hook: a slow network (so concurrent fetchers overlap)."""

    def __call__(self, f: RemoteFile, done: int) -> None:
        time.sleep(0.01)


def _file_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _ensure_in_child(cache: FileCache, files: list[RemoteFile]) -> None:
    for f in files:
        cache.ensure(f)


def _fork_run(target, *args) -> int:
    proc = multiprocessing.get_context("fork").Process(target=target, args=args)
    proc.start()
    proc.join(120)
    return proc.exitcode


def test_killed_download_leaves_no_whole_looking_file(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    killer = FileCache(tmp_path / "c", storage_options=s3.options, block_bytes=BLOCK)
    f = killer.stat(urls)[0]
    killer.on_block = KillAfterFirstBlock()
    assert _fork_run(_ensure_in_child, killer, [f]) == -signal.SIGKILL
    left = os.listdir(tmp_path / "c" / "files")
    assert left and all(n.endswith(".part") for n in left), left  # only the temporary name
    assert not killer.has(f)
    # a new cache on the directory (a restart) removes the leftover, then fetches the file whole
    cache = FileCache(tmp_path / "c", storage_options=s3.options, block_bytes=BLOCK)
    assert os.listdir(tmp_path / "c" / "files") == []
    path = cache.ensure(f)
    assert _file_bytes(path) == s3.fs().cat(urls[0])
    assert [u for _, _, u in cache.fetch_log()] == [urls[0]]


def test_broken_download_is_retried_then_whole(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    hook = FailFirst(2)
    cache = FileCache(
        tmp_path / "c", storage_options=s3.options, block_bytes=BLOCK, backoff_s=0.01, on_block=hook
    )
    f = cache.stat(urls)[0]
    assert _file_bytes(cache.ensure(f)) == s3.fs().cat(urls[0])
    assert hook.seen == 2
    assert [n for n in os.listdir(tmp_path / "c" / "files") if n.endswith(".part")] == []


def test_retries_end_in_an_error_naming_the_url(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    hook = FailFirst(100)
    cache = FileCache(
        tmp_path / "c",
        storage_options=s3.options,
        block_bytes=BLOCK,
        retries=2,
        backoff_s=0.01,
        on_block=hook,
    )
    f = cache.stat(urls)[0]
    with pytest.raises(FetchError) as e:
        cache.ensure(f)
    msg = str(e.value)
    assert urls[0] in msg and "3 attempt(s)" in msg and "ConnectionResetError" in msg
    assert "Fix:" in msg and "storage_options" in msg
    assert hook.seen == 3
    assert os.listdir(tmp_path / "c" / "files") == []  # no partial file counts or stays


def test_a_truncated_copy_is_fetched_again(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    cache = FileCache(tmp_path / "c", storage_options=s3.options)
    f = cache.stat(urls)[0]
    path = cache.ensure(f)
    with open(path, "r+b") as fh:  # damaged on disk: shorter than the store's size
        fh.truncate(f.size // 2)
    assert not cache.has(f)
    assert _file_bytes(cache.ensure(f)) == s3.fs().cat(urls[0])
    assert len(cache.fetch_log()) == 2


def test_etag_mismatch_names_the_changed_file(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=2, per_file=20)
    cache = FileCache(tmp_path / "c", storage_options=s3.options, backoff_s=0.01)
    old = cache.stat(urls)[0]
    # the store's file is replaced after open (other bytes, same size): its MD5 is not the ETag
    other = s3.fs().cat(urls[1])
    s3.fs().pipe(urls[0], other[: old.size].ljust(old.size, b"\0"))
    with pytest.raises(FetchError, match="changed since the source was opened"):
        cache.ensure(old)
    assert not cache.has(old)
    # a source opened now sees the new version: another entry, fetched whole
    new = cache.stat(urls)[0]
    assert new.key != old.key and new.size == old.size
    assert _file_bytes(cache.ensure(new)) == s3.fs().cat(urls[0])


def test_two_processes_fetch_each_file_once(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=3, per_file=30)
    cache = FileCache(tmp_path / "c", storage_options=s3.options, block_bytes=BLOCK)
    files = cache.stat(urls)
    cache.on_block = Slow()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_ensure_in_child, args=(cache, files)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    log = cache.fetch_log()
    assert sorted(u for _, _, u in log) == sorted(urls)  # each once, by one of the two
    for f in files:
        assert _file_bytes(cache.path(f)) == s3.fs().cat(f.url)


def test_metadata_is_read_once_per_node(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=3, per_file=10)
    before = COUNTERS.metadata_reads
    first = sl.HDFSource(urls, cache_dir=tmp_path / "c", storage_options=s3.options)
    assert COUNTERS.metadata_reads - before == 3  # ranged reads, no data file fetched
    assert os.listdir(tmp_path / "c" / "files") == []
    again = sl.HDFSource(urls, cache_dir=tmp_path / "c", storage_options=s3.options)
    assert COUNTERS.metadata_reads - before == 3  # a restart reads the local index
    assert again.fingerprint() == first.fingerprint()
    assert list(again.tags) == [f"utt-{i}" for i in range(30)]
    assert _fork_run(_open_source, urls, str(tmp_path / "c"), s3.options) == 0
    # the same data read locally gives the same source
    local = sl.HDFSource([first.remote_files().cache.ensure(f) for f in first.remote_files().files])
    assert local.fingerprint() == first.fingerprint()
    for i in range(30):
        assert (first.read(i)["data"] == i).all()


def _open_source(urls: list[str], cache_dir: str, options: dict) -> None:
    before = COUNTERS.metadata_reads
    sl.HDFSource(urls, cache_dir=cache_dir, storage_options=options)
    if COUNTERS.metadata_reads != before:  # another process on the node: the index, no reads
        raise SystemExit(3)


def test_missing_remote_file_and_option_errors(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=5)
    with pytest.raises(sl.DataError, match="does not exist"):
        sl.HDFSource([s3.url("nope.hdf")], cache_dir=tmp_path / "c", storage_options=s3.options)
    with pytest.raises(OptionError, match="need cache_dir"):
        sl.HDFSource(urls, storage_options=s3.options)
    with pytest.raises(OptionError, match="mix URLs"):
        sl.HDFSource([urls[0], str(tmp_path / "x.hdf")], cache_dir=tmp_path / "c")
    with pytest.raises(OptionError, match="apply to remote files"):
        sl.HDFSource([str(tmp_path / "x.hdf")], cache_dir=tmp_path / "c")
    with pytest.raises(OptionError, match="cache_bytes"):
        FileCache(tmp_path / "c", cache_bytes=0)


def test_eviction_keeps_what_live_loaders_need(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=3, per_file=10)
    cache = FileCache(tmp_path / "c", storage_options=s3.options)
    files = cache.stat(urls)
    for f in files:
        cache.ensure(f)
    other = FileCache(tmp_path / "c")  # another loader on the node needs file 1
    other.post_needs("other", [files[1].key])
    freed = cache.evict(keep=[files[0].key])
    assert freed == files[2].size
    assert [cache.has(f) for f in files] == [True, True, False]
    assert cache.dir_high_water() >= sum(f.size for f in files)
    assert cache.usage() == files[0].size + files[1].size
    other.withdraw_needs()  # that loader closed: file 1 is no longer kept
    assert cache.evict(keep=[files[0].key]) == files[1].size
    sizes = np.array([f.size for f in files])
    assert cache.high_water == sizes.sum()


def test_urls_without_fsspec_name_the_remote_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'seqloader\[remote\]'"):
        sl.HDFSource(["s3://bucket/x.hdf"], cache_dir=tmp_path / "c")


def test_readers_close_evicted_copies_and_refetch_them(monkeypatch, tmp_path) -> None:
    from remote_s3 import index_files
    from seqloader.sources import hdf, hdf_chunks

    (tmp_path / "chunked").mkdir()
    paths = [tmp_path / "chunked" / p.name for p in index_files(tmp_path, n_files=2, per_file=6)]
    for p in paths:  # RETURNN's chunked layout: the reader builds a chunk index per copy
        sl.write_hdf(p, sl.HDFSource([tmp_path / p.name]), chunked=True)
    source = sl.HDFSource([p.as_uri() for p in paths], cache_dir=tmp_path / "c")
    cache, files = source.remote_files().cache, source.remote_files().files
    assert (source.read(0)["data"] == 0).all()  # file 0 fetched, opened, indexed
    # a copy is its (path, inode): a later fetch of another file may reuse the freed inode
    first = (os.path.realpath(cache.path(files[0])), os.stat(cache.path(files[0])).st_ino)
    assert any((k[0], k[2]) == first for k in hdf_chunks._INDEXES)
    cache.evict(keep=[files[1].key])  # the plan moved on: file 0 goes
    monkeypatch.setattr(hdf, "SWEEP_S", 0.0)
    assert (source.read(6)["data"] == 6).all()  # any read sweeps: file 0's handle is closed
    assert source._open[0] is None
    assert not any((k[0], k[2]) == first for k in hdf_chunks._INDEXES)
    assert (source.read(1)["data"] == 1).all()  # needed again: fetched again, read whole
    assert [u for _, _, u in cache.fetch_log()].count(files[0].url) == 2


# ---- a cached copy that changed on disk after it was verified is never served ----


def _flip_byte(path: str, at: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_an_edited_copy_of_the_same_size_is_fetched_again(s3: S3, tmp_path) -> None:
    """The attack: the copy is edited in place after download (same size); the cache compared
    only the size, so the edited bytes were delivered as good data."""
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    cache = FileCache(tmp_path / "c", storage_options=s3.options)
    f = cache.stat(urls)[0]
    path = cache.ensure(f)
    _flip_byte(path, f.size // 2)
    assert os.stat(path).st_size == f.size
    assert not cache.has(f)
    with pytest.warns(sl.DataWarning, match=r"cached copy .* is not served: changed on disk"):
        again = cache.ensure(f)
    assert _file_bytes(again) == s3.fs().cat(urls[0])
    assert len(cache.fetch_log()) == 2
    # another process's cache on the directory (a worker, another rank) serves the new copy
    assert FileCache(tmp_path / "c").has(f)


def test_edited_copy_read_through_hdfsource_gives_the_stores_data(s3: S3, tmp_path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=2, per_file=10)
    opts = {"cache_dir": tmp_path / "c", "storage_options": s3.options}
    first = sl.HDFSource(urls, **opts)
    want = [first.read(i) for i in range(len(first))]
    copies = sorted(p for p in os.listdir(tmp_path / "c" / "files") if not p.startswith("."))
    assert len(copies) == 2
    for name in copies:  # flip bytes in the second half (feature data), keep the size
        path = str(tmp_path / "c" / "files" / name)
        _flip_byte(path, os.stat(path).st_size * 3 // 4)
    with pytest.warns(sl.DataWarning, match="not served"):
        second = sl.HDFSource(urls, **opts)
        got = [second.read(i) for i in range(len(second))]
    for a, b in zip(want, got):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_a_copy_without_its_seal_is_fetched_again(s3: S3, tmp_path) -> None:
    """Killed between the rename and the seal (or written by an older version): not trusted."""
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=20)
    cache = FileCache(tmp_path / "c", storage_options=s3.options)
    f = cache.stat(urls)[0]
    cache.ensure(f)
    os.unlink(cache.seal_path(f))
    fresh = FileCache(tmp_path / "c", storage_options=s3.options)
    assert fresh.check_copy(f).startswith("no record of its verification")
    with pytest.warns(sl.DataWarning, match="no record of its verification"):
        fresh.ensure(f)
    assert fresh.has(f) and len(fresh.fetch_log()) == 2


def test_checksum_catches_what_leaves_the_stat_unchanged(s3: S3, tmp_path) -> None:
    """Bit rot on the medium changes no stat field: the default (a stat per open) serves it,
    ``verify="checksum"`` (the whole copy's MD5 per open) fetches it again. Simulated by flipping
    a byte and writing the seal's stat fields to match (user space cannot flip a byte without
    touching ctime)."""
    urls = upload_corpus(s3, tmp_path, n_files=1, per_file=40)
    cache = FileCache(tmp_path / "c", storage_options=s3.options)
    f = cache.stat(urls)[0]
    path = cache.ensure(f)
    with open(cache.seal_path(f)) as fh:
        seal = json.load(fh)
    assert seal["md5"] == f.version  # moto's ETag is the MD5: what was verified is recorded
    _flip_byte(path, 100)
    st = os.stat(path)
    seal.update(mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, ino=st.st_ino)
    with open(cache.seal_path(f), "w") as fh:
        json.dump(seal, fh)
    assert FileCache(tmp_path / "c").has(f)  # the stated limit of verify="stat"
    checking = FileCache(tmp_path / "c", storage_options=s3.options, verify="checksum")
    assert "content MD5" in checking.check_copy(f)
    with pytest.warns(sl.DataWarning, match="its content MD5 is"):
        assert _file_bytes(checking.ensure(f)) == s3.fs().cat(urls[0])
    assert checking.has(f)
    with pytest.raises(OptionError, match="verify: got 'sha'"):
        FileCache(tmp_path / "c", verify="sha")


def test_seal_records_a_content_hash_when_the_version_is_not_an_md5(tmp_path) -> None:
    """A store whose version is not an MD5 (here a file:// URL: its mtime): the MD5 computed
    while downloading is what the seal records, and verify="checksum" checks against it."""
    src = tmp_path / "store.bin"
    src.write_bytes(os.urandom(5000))
    cache = FileCache(tmp_path / "c", verify="checksum")
    f = cache.stat([f"file://{src}"])[0]
    assert f.version.startswith("mtime:")
    path = cache.ensure(f)
    with open(cache.seal_path(f)) as fh:
        assert json.load(fh)["md5"] == hashlib.md5(src.read_bytes()).hexdigest()
    _flip_byte(path, 10)
    with pytest.warns(sl.DataWarning, match="not served"):
        assert _file_bytes(cache.ensure(f)) == src.read_bytes()
