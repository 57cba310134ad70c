"""Every node store records its format in its header (issue 34): ``seqloader cache --clean
--superseded`` keeps this seqloader's format over a newer store of another version's (a node
shared by two versions no longer rebuilds on each start), and a store of another format found
where this one's belongs is never read as data: it is rebuilt, with a ``DataWarning`` that says
so. The stores are the ones ``sl.prepare`` writes (an HDF's metadata, the bucket index, the
duplicate-tag verdict), used from 3 sequences on here (a size, not a rule)."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

import seqloader as sl
from seqloader.cli.cache import FORMATS
from seqloader.cli.main import main
from seqloader.errors import DataWarning
from seqloader.loading import bucket_store
from seqloader.sources import hdf_store, node_cache, screen_verdicts
from seqloader.sources.columns import ColumnStore, StaleFormat, open_or_build, write_store
from seqloader.trainer import duplicate_store
from test_prepare import FLAGS, OPTIONS, cache, corpus, run  # noqa: F401 - the fixture
from test_store_damage import flip

EXPECTED = {
    "hdf": hdf_store.STORE_VERSION,
    "buckets": bucket_store.FORMAT,
    "checks": duplicate_store.CHECK_VERSION,
}


@pytest.fixture
def prepared(cache, tmp_path) -> dict[str, str]:  # noqa: F811 - the fixture imported above
    """An HDF corpus's node stores, built by ``seqloader prepare``: kind folder -> path."""
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, corpus())
    assert main(["prepare", str(path), *FLAGS]) == 0
    return {s.kind: s.path for s in node_cache.list_stores()}


def hdf_file(tmp_path) -> str:
    return str(tmp_path / "train.hdf")


def test_each_store_records_its_format(prepared, capsys):
    assert set(prepared) == set(EXPECTED)
    for kind, path in prepared.items():
        assert ColumnStore(path).format == EXPECTED[kind]
    assert set(EXPECTED.values()) <= FORMATS
    capsys.readouterr()
    code, out, _ = run(capsys, "cache", "--json")
    listed = json.loads(out)["stores"]
    assert code == 0 and all(s["current_format"] for s in listed)
    assert {s["kind"]: s["format"] for s in listed} == EXPECTED


def another_versions_copy(path: str, format: str, age: float = 0.0) -> str:
    """What another seqloader version builds for the same source: its own file (its identity
    differs), the same description, written after this version's (``age`` seconds ago)."""
    store = ColumnStore(path)
    columns = {name: store.column(name) for name in store.names}
    other = path.replace(".", "-other.", 1)
    write_store(other, store.identity + "-other", columns, store.meta, format=format)
    when = time.time() - age
    os.utime(other, (when, when))
    return other


def test_superseded_keeps_this_versions_format_over_a_newer_one(prepared, capsys, tmp_path):
    # each store records when its data was last modified (the newest data wins)
    data_mtime = os.stat(hdf_file(tmp_path)).st_mtime_ns / 1e9
    assert {k: ColumnStore(p).meta.get("data_mtime") for k, p in prepared.items()} == dict.fromkeys(
        EXPECTED, data_mtime
    )
    an_hour_ago = time.time() - 3600
    for path in prepared.values():  # this version's stores: built first
        os.utime(path, (an_hour_ago, an_hour_ago))
    others = {another_versions_copy(p, f"{EXPECTED[k]}-older") for k, p in prepared.items()}
    capsys.readouterr()
    code, out, _ = run(capsys, "cache")
    assert code == 0 and out.count("another seqloader version's") == 3
    code, out, _ = run(capsys, "cache", "--clean", "--superseded", "--json")
    assert code == 0 and set(json.loads(out)["removed"]) == others
    assert all(os.path.exists(p) for p in prepared.values())
    # and the loader finds everything: nothing rebuilt
    code, out, _ = run(capsys, "prepare", hdf_file(tmp_path), *FLAGS)
    assert code == 0 and "everything was there" in out


def test_superseded_without_this_versions_store_keeps_the_newest(cache, tmp_path):  # noqa: F811
    """Only other versions' stores of a source: the newest is kept (this version reads none)."""
    folder = tmp_path / "stores"
    meta = {"about": "a source", "sequences": 3}
    old = write_store(folder / "a.cols", "A", {"x": [1, 2, 3]}, meta, format="v1").path
    new = write_store(folder / "b.cols", "B", {"x": [1, 2, 3]}, meta, format="v2").path
    os.utime(old, (time.time() - 60, time.time() - 60))
    chosen = node_cache.stale(
        node_cache.list_stores([str(folder)]), superseded=True, formats={"v3"}
    )
    assert [s.path for s in chosen] == [old]
    chosen = node_cache.stale(
        node_cache.list_stores([str(folder)]), superseded=True, formats={"v1"}
    )
    assert [s.path for s in chosen] == [new]


def test_superseded_keeps_the_store_of_the_newest_data_whatever_its_format(cache, tmp_path):  # noqa: F811
    """A store of older data is never read again by any version (each one's next open sees the
    data changed): it is superseded by a store of newer data even when it is of this version's
    format (it was kept, and the other version's store of the newer data removed: both rebuilt).
    Which data is newer: the data's modification times the stores recorded (one clock, the
    data's file system's), else a store built before the data another was built from changed."""
    folder, now = tmp_path / "stores", time.time()

    def store(name: str, format: str, built: float, data: float | None) -> str:
        meta: dict = {"about": "a source", "sequences": 3}
        if data is not None:
            meta["data_mtime"] = data
        path = write_store(folder / name, name, {"x": [1, 2, 3]}, meta, format=format).path
        os.utime(path, (built, built))
        return path

    def superseded() -> list[str]:
        found = node_cache.list_stores([str(folder)])
        return [s.path for s in node_cache.stale(found, superseded=True, formats={"v3"})]

    ours = store("ours.cols", "v3", now - 3000, now - 3600)
    theirs = store("theirs.cols", "v2", now - 500, now - 600)  # the data changed since ours
    assert superseded() == [ours]
    os.utime(ours, (now - 100, now - 100))  # built later from data of an older record: the
    assert superseded() == [theirs]  # data restored (its time kept), or unknown: our format kept
    os.unlink(ours)
    ours = store("ours.cols", "v3", now - 300, now - 600)  # the same data: our format is kept
    assert superseded() == [theirs]
    os.unlink(ours)
    ours = store("ours.cols", "v3", now - 3000, None)  # no record (written before stores kept
    assert superseded() == [ours]  # one), built before the data the other was built from
    os.utime(ours, (now - 100, now - 100))  # built after it: nothing says its data is older
    assert superseded() == [theirs]


def test_data_restored_with_an_older_time_keeps_its_store(prepared, capsys, tmp_path):
    """The data replaced by a copy that keeps its older modification time (``tar``,
    ``rsync -a``, ``cp -p``: a corpus restored): the store built for it is the one the loader
    reads now, never superseded by the store of the data it replaced (whose record is newer)."""
    path = hdf_file(tmp_path)
    sl.write_hdf(path, corpus(41))
    a_day_ago = time.time() - 86400
    os.utime(path, (a_day_ago, a_day_ago))
    assert main(["prepare", path, *FLAGS]) == 0
    now = {s.path for s in node_cache.list_stores() if s.kind == "hdf"} - {prepared["hdf"]}
    capsys.readouterr()
    code, out, _ = run(capsys, "cache", "--clean", "--superseded", "--json")
    assert code == 0 and prepared["hdf"] in json.loads(out)["removed"]
    assert all(os.path.exists(p) for p in now)
    code, out, _ = run(capsys, "prepare", path, *FLAGS)
    assert code == 0 and "everything was there" in out


def test_another_format_at_the_path_is_rebuilt_never_read(tmp_path):
    path = str(tmp_path / "s.cols")
    write_store(path, "id", {"x": [9, 9, 9]}, {"about": "t"}, format="v1")
    with pytest.raises(StaleFormat, match=r"format 'v1'.*reads 'v2'"):
        ColumnStore(path, "id", "v2")
    built = []

    def build():
        built.append(1)
        return {"x": [1, 2, 3]}, {"about": "t"}

    with pytest.warns(DataWarning, match=r"format 'v1'.*not 'v2'.*nothing of it was read"):
        store, again = open_or_build(path, "id", build, format="v2")
    assert again and built == [1] and store.column("x").tolist() == [1, 2, 3]
    assert store.format == "v2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_or_build(path, "id", build, format="v2")[1] is False  # found: kept
    # a store written before formats were recorded: its identity (which names its version) decides
    write_store(path, "id", {"x": [4, 5, 6]}, {"about": "t"})
    assert open_or_build(path, "id", build, format="v2")[0].column("x").tolist() == [4, 5, 6]


def test_a_hand_changed_format_is_never_served(prepared, tmp_path):
    """The header's format edited by hand (another version's store passed off as this one's):
    its checksum differs, so the store is rebuilt from the data and listed as incomplete,
    never read."""
    path = prepared["buckets"]
    raw = Path(path).read_bytes()
    said = json.dumps(bucket_store.FORMAT).encode()
    assert raw.count(said) == 1
    with open(path, "r+b") as fh:
        fh.seek(raw.index(said) + 2)
        fh.write(b"X")
    listed = {s.path: s for s in node_cache.list_stores()}
    assert listed[path].state == "incomplete"
    src = sl.HDFSource(hdf_file(tmp_path))
    with pytest.warns(DataWarning, match="nothing of the damaged file was served"):
        report = sl.prepare(src, **OPTIONS)
    assert [s.kind for s in report.built] == ["bucket index"]
    assert ColumnStore(path).format == bucket_store.FORMAT


def test_a_damaged_column_of_a_prepared_store_is_rebuilt(prepared, tmp_path):
    path = prepared["checks"]
    flip(path, "starts")
    src = sl.HDFSource(hdf_file(tmp_path))
    with pytest.warns(DataWarning, match="column 'starts'"):
        report = sl.prepare(src, **OPTIONS)
    assert [s.kind for s in report.built] == ["duplicate-tag verdict"]


def test_superseded_keeps_this_versions_screen_verdict(cache, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The NaN/Inf screen's verdict that ``seqloader prepare`` keeps records its format too:
    ``--superseded`` keeps it over a newer verdict of another version's format and over a newer
    one that records none (it used to keep the newest of them), and the next prepare finds it."""
    ahead = 60 + screen_verdicts.CLOCK_SKEW_S  # the file is settled (on any file system)
    monkeypatch.setattr(screen_verdicts, "now", lambda: time.time() + ahead)
    monkeypatch.setattr(screen_verdicts, "MIN_BYTES", 0)  # the tiny dataset gets a verdict
    sl.write_hdf(hdf_file(tmp_path), corpus())
    assert main(["prepare", hdf_file(tmp_path), *FLAGS]) == 0
    (verdict,) = [s for s in node_cache.list_stores() if s.about.startswith(screen_verdicts.KIND)]
    assert verdict.format == screen_verdicts.FORMAT and verdict.format in FORMATS
    an_hour_ago = time.time() - 3600
    os.utime(verdict.path, (an_hour_ago, an_hour_ago))
    other = another_versions_copy(verdict.path, "seqloader-nonfinite-screen/0 verdict/1")
    unsaid = another_versions_copy(other, "")  # an earlier seqloader's: no format recorded
    capsys.readouterr()
    code, out, _ = run(capsys, "cache", "--clean", "--superseded", "--json")
    assert code == 0 and set(json.loads(out)["removed"]) == {other, unsaid}
    assert os.path.exists(verdict.path)
    code, out, _ = run(capsys, "prepare", hdf_file(tmp_path), *FLAGS)
    assert code == 0 and "everything was there" in out
