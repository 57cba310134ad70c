"""``seqloader prepare`` / ``sl.prepare``: the node's stores built ahead of a job, at the paths a
loader with the same options uses, so that the loader builds nothing; and ``seqloader cache``:
listing and cleaning them, never one a process is building.

The stores are used from a million sequences on; the tests lower that threshold (a size, not a
rule) so that corpora of a few dozen sequences use them."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import seqloader as sl
from seqloader.cli.main import main
from seqloader.errors import DataError
from seqloader.loading import bucket_store
from seqloader.sources import node_cache
from seqloader.sources.columns import open_or_build, write_store
from seqloader.trainer import duplicate_store

OPTIONS = {"ordering": "buckets:3", "max_seqs": 4, "planning": "indexed"}
FLAGS = ["--ordering", "buckets:3", "--max-seqs", "4", "--planning", "indexed"]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache root, with the node stores used from 3 sequences on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(duplicate_store, "MIN_SEQUENCES", 3)
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 3)
    return tmp_path / "xdg" / "seqloader"


def corpus(n: int = 40, repeat: tuple[int, int] | None = None) -> sl.MemorySource:
    tags = [f"rec{i}" for i in range(n)]
    if repeat is not None:
        tags[repeat[1]] = tags[repeat[0]]
    data = [np.zeros((i % 7 + 1, 2), "float32") for i in range(n)]
    return sl.MemorySource({"data": data}, tags=tags)


def files_under(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` -> (inode, mtime_ns): a rebuilt store is a new file."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            out[os.path.join(folder, name)] = (st.st_ino, st.st_mtime_ns)
    return out


def test_prepare_then_loader_builds_nothing(cache, monkeypatch):
    src = corpus()
    report = sl.prepare(src, **OPTIONS)
    kinds = {s.kind: s for s in report.stores}
    assert set(kinds) == {"bucket index", "duplicate-tag verdict"}
    assert all(s.built and s.path and os.path.isfile(s.path) for s in kinds.values())
    before = files_under(cache)
    assert len([p for p in before if not p.endswith(".lock")]) == 2

    def no_build(*args, **kwargs):
        raise AssertionError("the loader built a node store after prepare")

    monkeypatch.setattr(bucket_store, "node_bucket_index", no_build)  # what builds the index
    monkeypatch.setattr(duplicate_store, "open_or_build", found_only)
    loader = sl.SeqLoader(src, rank=1, world_size=2, **OPTIONS)
    assert loader.steps(1) > 0
    assert files_under(cache) == before  # same files, same inodes, untouched


def found_only(path, identity, build, **kwargs):
    store, built = open_or_build(path, identity, _refuse, **kwargs)
    assert not built
    return store, built


def _refuse():
    raise AssertionError("the loader built a node store after prepare")


def test_prepare_is_idempotent(cache):
    src = corpus()
    first = sl.prepare(src, **OPTIONS)
    before = files_under(cache)
    second = sl.prepare(src, **OPTIONS)
    assert [s.path for s in first.stores] == [s.path for s in second.stores]
    assert second.built == () and all(not s.built for s in second.stores)
    assert files_under(cache) == before
    other = sl.prepare(src, **{**OPTIONS, "ordering": "buckets:2"})  # other options: own index
    assert [s.kind for s in other.built] == ["bucket index"]


def test_the_loaders_paths_are_preparess(cache):
    """The loader's own first build lands where prepare looks: prepare after it finds all."""
    src = corpus()
    sl.SeqLoader(src, **OPTIONS)
    assert sl.prepare(src, **OPTIONS).built == ()


def test_repeated_tags_refused_by_prepare_and_loader_alike(cache):
    src = corpus(repeat=(7, 31))
    with pytest.raises(DataError, match="repeat a tag") as first:
        sl.prepare(src, **OPTIONS)
    with pytest.raises(DataError, match="repeat a tag") as second:
        sl.SeqLoader(src, **OPTIONS)  # reads the verdict prepare stored
    assert str(first.value) == str(second.value)
    assert "'rec7'" in str(first.value) and "[7, 31]" in str(first.value)
    with pytest.warns(sl.DataWarning, match="repeat a tag"):
        warned = sl.prepare(src, checks=sl.CheckOptions(duplicate_tags="warn"), **OPTIONS)
    assert warned.built == ()  # the verdict and the index were kept from the first run


def test_small_corpus_and_global_planning_need_no_files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    report = sl.prepare(corpus(), ordering="laplace", max_seqs=4)  # global planning, < 10^6
    assert report.built == ()
    assert all(s.path is None and s.note for s in report.stores)
    assert not (tmp_path / "seqloader").exists()


def test_prepare_reports_an_hdf_sources_metadata_store(cache, tmp_path):
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    src = sl.HDFSource(path, index_dir=tmp_path / "index")
    report = sl.prepare(src, **OPTIONS)
    meta = [s for s in report.stores if s.kind == "source metadata"]
    assert len(meta) == 1 and meta[0].built and meta[0].path == src.store.path
    again = sl.prepare(sl.HDFSource(path, index_dir=tmp_path / "index"), **OPTIONS)
    assert again.built == ()


# ---- the command line ----


def run(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prepare_then_again(cache, tmp_path, capsys):
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    code, out, err = run(capsys, "prepare", path, *FLAGS)
    assert code == 0, err
    assert "bucket index: built" in out and "duplicate-tag verdict: built" in out
    assert "source metadata: built" in out
    code, out, _ = run(capsys, "prepare", path, *FLAGS, "--json")
    report = json.loads(out)
    assert code == 0 and not any(s["built"] for s in report["stores"])
    assert all("private_peak_bytes" in s for s in report["stores"])  # each step's memory
    paths = {s["kind"]: s["path"] for s in report["stores"]}
    # the loader over the same file with the same options maps exactly these files
    before = files_under(cache)
    loader = sl.SeqLoader(sl.HDFSource(path), ordering="buckets:3", max_seqs=4, planning="indexed")
    assert loader.steps(1) > 0 and files_under(cache) == before
    assert paths["source metadata"].startswith(str(cache / "hdf"))
    code, out, _ = run(capsys, "prepare", path, *FLAGS)
    assert "everything was there" in out


def test_cli_prepare_duplicates_one_line_error(cache, tmp_path, capsys):
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    code, _, err = run(capsys, "prepare", path, path, *FLAGS)
    assert code == 2
    assert "repeat a tag" in err and "'rec0'" in err and "train.hdf" in err
    assert len(err.strip().splitlines()) == 1


# ---- the cache ----


def test_cache_lists_what_prepare_built(cache, capsys):
    src = corpus()
    report = sl.prepare(src, **OPTIONS)
    code, out, _ = run(capsys, "cache", "--json")
    listed = json.loads(out)["stores"]
    assert code == 0
    assert {s["path"] for s in listed} == {s.path for s in report.stores}
    assert {s["kind"] for s in listed} == {"buckets", "checks"}
    assert all(s["state"] == "ok" and s["sequences"] == 40 for s in listed)
    assert all("MemorySource" in s["about"] for s in listed)
    code, out, _ = run(capsys, "cache")
    assert "2 file(s)" in out and "buckets ok" in out


def test_cache_clean_by_age_keeps_recent(cache, capsys):
    report = sl.prepare(corpus(), **OPTIONS)
    old, recent = (s.path for s in report.stores)
    assert old and recent
    long_ago = time.time() - 40 * 86400
    os.utime(old, (long_ago, long_ago))
    code, out, _ = run(capsys, "cache", "--clean", "--older-than", "30")
    assert code == 0 and "removed 1 file(s)" in out
    assert not os.path.exists(old) and not os.path.exists(old + ".lock")
    assert os.path.exists(recent)
    # the loader rebuilds what was removed, at the same place
    assert [s.kind for s in sl.prepare(corpus(), **OPTIONS).built] == [
        s.kind for s in report.stores if s.path == old
    ]


def test_cache_clean_superseded_keeps_the_newest(cache, capsys):
    first = sl.prepare(corpus(), **OPTIONS)
    an_hour_ago = time.time() - 3600  # built before the second (not: a moment passed in between)
    for store in first.stores:
        os.utime(store.path, (an_hour_ago, an_hour_ago))
    data = [np.zeros((i % 5 + 2, 2), "float32") for i in range(40)]  # the data changed
    changed = sl.MemorySource({"data": data}, tags=[f"rec{i}" for i in range(40)])
    second = sl.prepare(changed, **OPTIONS)
    assert {s.path for s in first.stores}.isdisjoint({s.path for s in second.stores})
    code, out, _ = run(capsys, "cache", "--clean", "--superseded", "--json")
    removed = set(json.loads(out)["removed"])
    assert code == 0
    assert removed == {s.path for s in first.stores}
    assert all(os.path.exists(s.path) for s in second.stores if s.path)


def test_cache_never_removes_a_store_being_built(cache, tmp_path):
    """A build in progress holds PATH.lock and writes PATH.PID.HEX.tmp: listed as building,
    never removed, while a dead build's temporary file is a leftover, removed."""
    folder = cache / "buckets"
    store = write_store(folder / "buckets-x.seqcols", "x", {"a": np.arange(3)}, {"about": "t"})
    live_tmp = folder / "buckets-y.seqcols.123.abcdef12.tmp"
    live_tmp.write_bytes(b"SEQCOLS1 partial")
    dead_tmp = folder / "buckets-z.seqcols.456.abcdef12.tmp"
    dead_tmp.write_bytes(b"SEQCOLS1 partial")
    locks = []
    for held in (store.path, str(folder / "buckets-y.seqcols")):
        fd = os.open(held + ".lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        locks.append(fd)
    try:
        listed = {os.path.basename(s.path): s.state for s in node_cache.list_stores()}
        assert listed == {
            "buckets-x.seqcols": "building",
            os.path.basename(live_tmp): "building",
            os.path.basename(dead_tmp): "leftover",
        }
        chosen = node_cache.stale(node_cache.list_stores(), older_than_days=0, superseded=True)
        assert [os.path.basename(s.path) for s in chosen] == [os.path.basename(dead_tmp)]
        # even if asked to, remove() skips a store whose lock is held
        everything = node_cache.list_stores()
        removed, skipped = node_cache.remove(everything)
        assert removed == [str(dead_tmp)]
        assert set(skipped) == {store.path, str(live_tmp)}
    finally:
        for fd in locks:
            os.close(fd)
    assert os.path.exists(store.path) and live_tmp.exists() and not dead_tmp.exists()


def test_cache_reports_incomplete_files_and_ignores_foreign_ones(cache):
    folder = cache / "hdf"
    folder.mkdir(parents=True)
    (folder / "hdf-broken.cols").write_bytes(b"SEQCOLS1 no trailer")
    (folder / "notes.txt").write_text("not ours")
    listed = node_cache.list_stores()
    assert [(os.path.basename(s.path), s.state) for s in listed] == [
        ("hdf-broken.cols", "incomplete")
    ]
    removed, _ = node_cache.remove(node_cache.stale(listed))
    assert removed == [str(folder / "hdf-broken.cols")]
    assert (folder / "notes.txt").exists()


def test_prepare_reports_every_corpus_metadata_store(cache, tmp_path):
    paths = []
    for name in ("a", "b"):
        paths.append(tmp_path / f"{name}.hdf")
        sl.write_hdf(paths[-1], corpus(20 if name == "a" else 30))
    index = tmp_path / "index"
    both = sl.ConcatSource({n: sl.HDFSource(p, index_dir=index) for n, p in zip("ab", paths)})
    report = sl.prepare(
        both,
        ordering="laplace",
        max_seqs=4,
        planning="indexed",
        checks=sl.CheckOptions(duplicate_tags="off"),
    )  # the corpora share tags
    meta = [s for s in report.stores if s.kind == "source metadata"]
    assert len(meta) == 2 and all(s.built for s in meta)
    assert [s.kind for s in report.stores][-1] == "duplicate-tag verdict"  # off: said so


def test_cache_dir_lists_an_index_dir(cache, tmp_path, capsys):
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    src = sl.HDFSource(path, index_dir=tmp_path / "index")
    code, out, _ = run(capsys, "cache", "--dir", tmp_path / "index", "--json")
    listed = json.loads(out)["stores"]
    assert code == 0 and [s["path"] for s in listed] == [src.store.path]
    assert listed[0]["sequences"] == 40 and str(path) in listed[0]["about"]


# ---- each step's time and private memory ----


def test_step_meter_takes_the_peak_of_its_samples_and_the_clocks_time():
    """The peak private memory above the first sample, whatever the samples in between; the
    step's time from the injected clock (no sleeping: the sampler sets an event once it has been
    called enough, and the block waits on it)."""
    import itertools
    import threading

    from seqloader.sources.step_meter import StepMeter

    values = itertools.chain([100, 180, 350, 220], itertools.repeat(150))
    seen = threading.Event()
    calls = []

    def sample() -> int:
        calls.append(1)
        if len(calls) >= 4:
            seen.set()
        return next(values)

    ticks = iter([10.0, 12.5])
    with StepMeter(clock=lambda: next(ticks), sample=sample, every=0) as m:
        seen.wait()  # an event, not a deadline: the sampler ran four times
    assert m.seconds == 2.5 and m.peak_private == 250
    with StepMeter(sample=lambda: -1, every=0) as unknown:
        pass
    assert unknown.peak_private == -1


def test_prepare_reports_each_steps_time_and_private_memory(cache, tmp_path):
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    src = sl.HDFSource(path, index_dir=tmp_path / "index")
    report = sl.prepare(src, **OPTIONS)
    for store in report.stores:
        assert store.seconds >= 0 and store.private_peak >= 0, store
    meta = next(s for s in report.stores if s.kind == "source metadata")
    assert (meta.seconds, meta.private_peak) == src.index_step
    assert all("private memory at its peak" in line for line in report.lines() if "built" in line)


def test_prepares_lines_say_what_each_steps_meter_measured(cache, tmp_path, monkeypatch):
    """Each built store's line carries its own step's time and peak private memory: every step
    metered, and every build timed, with injected clocks and sampler (step k: k + 0.25 s, k MiB
    above its first sample), nothing timed for real."""
    from seqloader.sources import hdf as hdf_module
    from seqloader.sources import step_meter
    from seqloader.sources.node_cache import size_text
    from seqloader.trainer import prepare as prepare_module

    made = []

    def metered() -> step_meter.StepMeter:
        k = len(made) + 1
        made.append(k)
        ticks = iter([10.0, 10.0 + k + 0.25])
        samples = iter([1 << 30])  # the first sample, then k MiB above it
        return step_meter.StepMeter(
            clock=lambda: next(ticks),
            sample=lambda: next(samples, (1 << 30) + k * (1 << 20)),
            every=3600.0,  # the sample at the step's end is the one that counts
        )

    monkeypatch.setattr(hdf_module, "StepMeter", metered)
    monkeypatch.setattr(prepare_module, "StepMeter", metered)
    # the bucket index and the verdict time their own build (from its start to the store's)
    for module, k in ((bucket_store, 2), (duplicate_store, 3)):
        ticks = iter([20.0, 20.0 + k + 0.25])
        monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=ticks.__next__))
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    src = sl.HDFSource(path, index_dir=tmp_path / "index")
    report = sl.prepare(src, **OPTIONS)
    built = {s.kind: s for s in report.stores if s.built}
    assert set(built) == {"source metadata", "bucket index", "duplicate-tag verdict"}
    for k, kind in enumerate(["source metadata", "bucket index", "duplicate-tag verdict"], 1):
        assert (built[kind].seconds, built[kind].private_peak) == (k + 0.25, k << 20)
        (line,) = [x for x in report.lines() if x.startswith(f"{kind}: built")]
        assert f"{k + 0.25:.2f} s, {size_text(k << 20)} private memory at its peak" in line


def test_the_suite_keeps_its_stores_out_of_the_users_cache():
    """conftest: the node stores of every test (and of the processes tests start, which inherit
    the environment) go to a folder of the run, not the user's cache."""
    from conftest import RUN_CACHE

    assert RUN_CACHE and os.environ["XDG_CACHE_HOME"] == RUN_CACHE
    assert node_cache.cache_root() == os.path.join(RUN_CACHE, "seqloader")
