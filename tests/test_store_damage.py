"""A node's column stores never serve a changed byte (issue 30, findings 1, 2 and 4).

Every store kind (the generic store, ``HDFSource``'s metadata, ``ConcatSource``'s index space,
the shard index, indexed planning's bucket index, the duplicate-tag verdict, the NaN/Inf screen's
verdict) is built, then one
byte of each of its columns (and of its sums and header) is changed on disk, and the store is
used again: it either serves exactly what it served before (rebuilt from the data, with a
``DataWarning`` naming the file and column) or refuses with a ``DamagedStore`` that names the
file and the column and says how to rebuild it. It never serves the changed value, never blames
the data files, and never fails with a bare buffer error.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import DataWarning
from seqloader.loading import bucket_store
from seqloader.sources import concat_store, hdf_layout
from seqloader.sources.columns import (
    MAGIC,
    ColumnStore,
    DamagedStore,
    StaleFormat,
    StringColumn,
    open_or_build,
    write_store,
)
from seqloader.trainer import duplicate_store
from shard_corpora import index_shar
from test_screen_verdicts import settle_and_count

#: what a damaged store's message must never say (finding 4: blaming the data files)
BLAMES_DATA = ("changed since the source was opened", "remove the duplicate", "open a new")


def put_bytes(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, written to a new file renamed over it: a mapping of the old
    file that a loader not yet collected (or its planning of the next epoch, in the background)
    still reads keeps its pages. Rewritten in place the file is first truncated, and reading a
    mapped page past its new end is a SIGBUS (the whole suite died of it once under load)."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


def flip(path: str | Path, column: str, at: float = 0.5, mask: int = 0x5A) -> None:
    """Change one byte of ``column`` (``".sums"``: the block sums; ``"header"``: the header) in
    the file at ``path``, ``at`` of the way into it."""
    store = ColumnStore(path)
    if column == ".sums":
        offset, nbytes = _sums_range(path)
    elif column == "header":
        offset, nbytes = _header_range(path)
    else:
        offset, nbytes = store.byte_range(column)
    del store
    pos = offset + min(nbytes - 1, int(nbytes * at))
    with open(path, "r+b") as fh:
        fh.seek(pos)
        byte = fh.read(1)[0]
        fh.seek(pos)
        fh.write(bytes([byte ^ mask]))


def _header_range(path: str | Path) -> tuple[int, int]:
    data = Path(path).read_bytes()
    length = int(np.frombuffer(data[-len(MAGIC) - 16 : -len(MAGIC) - 8], "<u8")[0])
    return len(data) - len(MAGIC) - 16 - length, length


def _sums_range(path: str | Path) -> tuple[int, int]:
    offset, length = _header_range(path)
    header = json.loads(Path(path).read_bytes()[offset : offset + length])
    return int(header["sums"]["offset"]), 4 * int(header["sums"]["count"])


def columns_of(path: str | Path) -> list[str]:
    """The store's columns with a byte to change (an empty one has none), its sums and header."""
    store = ColumnStore(path)
    return [*(c for c in store.names if store.byte_range(c)[1]), ".sums", "header"]


def served_or_refused(
    serve: Callable[[], object], expected: object, path: str | Path, column: str
) -> str:
    """``serve()`` gives ``expected`` ("served": the store was rebuilt, or the byte lies where
    nothing is served) or raises ``DamagedStore`` naming ``path`` and ``column`` ("refused")."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = serve()
    except DamagedStore as e:
        text = str(e)
        assert str(path) in text and "Fix:" in text, text
        assert not any(b in text for b in BLAMES_DATA), text
        assert not column or e.column == column, text
        return "refused"
    assert _equal(got, expected), (column, got, expected)
    for w in caught:
        text = str(w.message)
        assert not any(b in text for b in BLAMES_DATA), text
    rebuilt = [w for w in caught if "rebuilt from the data" in str(w.message)]
    if rebuilt:
        assert issubclass(rebuilt[0].category, DataWarning) and str(path) in str(rebuilt[0].message)
        return "rebuilt"
    return "served"


def each_column(
    store: Path, serve: Callable[[], object], expected: object, at: float = 0.5
) -> dict[str, str]:
    """One byte of each column (and of the sums and header) of ``store`` changed in turn, the
    store used again each time: column -> outcome (``served_or_refused``)."""
    pristine = store.read_bytes()
    seen = {}
    for column in columns_of(store):
        put_bytes(store, pristine)
        flip(store, column, at)
        seen[column] = served_or_refused(serve, expected, store, column)
    put_bytes(store, pristine)
    return seen


def _equal(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


# ---- the generic store: every byte of the file -------------------------------------------------


def _generic_build() -> tuple[dict, dict]:
    rng = np.random.default_rng(3)
    n = 12
    tags = [f"s{i}{'x' * int(rng.integers(0, 3))}" for i in range(n)]
    columns = {
        "len": rng.integers(1, 500, n).astype(np.int32),
        "start": np.cumsum(rng.integers(1, 9, n + 1)).astype(np.int64),
        "tags": StringColumn.from_strings(tags),
        "pair": rng.integers(0, 9, (3, 2)).astype(np.int16),
    }
    return columns, {"note": "x"}


def _generic_serve(path: Path) -> object:
    store, _ = open_or_build(path, "id", _generic_build, lazy=("start",))
    rows = store.rows("start")
    tags = store.strings("tags")
    return {
        "len": store.column("len").tolist(),
        "pair": store.column("pair").tolist(),
        "start": [int(rows[i]) for i in range(len(rows))] + [rows[3:9].tolist()],
        "tags": [tags[i] for i in range(len(tags))] + tags.take(np.arange(len(tags))[::-1]),
        "meta": store.meta,
    }


def test_every_changed_byte_of_a_store_is_rebuilt_or_refused(tmp_path) -> None:
    """Every byte of a small store's columns and sums (of its padding and header, a sample), one
    at a time: never a changed value served."""
    path = tmp_path / "s.cols"
    expected = _generic_serve(path)
    pristine = path.read_bytes()
    outcomes: dict[str, int] = {}
    header, _ = _header_range(path)
    for pos in range(len(MAGIC), len(pristine) - len(MAGIC) - 16):
        if (pristine[pos] == 0 and pos % 3) or (pos >= header and pos % 16):
            continue  # padding and the header (one CRC): a sample of them
        damaged = bytearray(pristine)
        damaged[pos] ^= 0x5A
        put_bytes(path, bytes(damaged))
        outcome = served_or_refused(lambda: _generic_serve(path), expected, path, "")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # padding between columns is served as nothing; every other byte is rebuilt or refused
    assert outcomes.get("rebuilt", 0) > 0 and outcomes.get("refused", 0) > 0
    assert outcomes.get("served", 0) < 64 * 6  # at most the alignment padding


def test_each_column_names_itself(tmp_path) -> None:
    path = tmp_path / "s.cols"
    expected = _generic_serve(path)
    pristine = path.read_bytes()
    for column in ("len", "pair", "start", "tags.bytes", "tags.offsets"):
        put_bytes(path, pristine)
        flip(path, column)
        store = ColumnStore(path, "id") if column.startswith(("start", "tags")) else None
        if store is not None:  # lazy columns: refused when the damaged rows are read
            with pytest.raises(DamagedStore, match=rf"column '{column}'") as info:
                _generic_serve(path)
            assert info.value.column == column and info.value.path == str(path)
            assert "rm " in str(info.value) and "seqloader prepare" in str(info.value)
        else:  # checked when mapped: rebuilt, the warning names the column
            with pytest.warns(DataWarning, match=rf"column '{column}'.*rebuilt from the data"):
                assert _equal(_generic_serve(path), expected)


def test_a_header_whose_shape_passes_the_file_is_refused_by_column(tmp_path) -> None:
    """Finding 4: a header (with a valid CRC) saying a column is larger than the file gave a
    bare ``ValueError: buffer is smaller than requested size``."""
    path = tmp_path / "s.cols"
    expected = _generic_serve(path)
    offset, length = _header_range(path)
    data = path.read_bytes()
    header = json.loads(data[offset : offset + length])
    header["columns"]["len"]["shape"] = [10**9]
    raw = json.dumps(header).encode()
    trailer = np.array([len(raw), zlib.crc32(raw)], "<u8").tobytes() + MAGIC
    put_bytes(path, data[:offset] + raw + trailer)
    with pytest.raises(DamagedStore, match=r"column 'len'.*beyond the file") as info:
        ColumnStore(path)
    assert info.value.column == "len"
    with pytest.warns(DataWarning, match="rebuilt from the data"):
        assert _equal(_generic_serve(path), expected)


def test_a_header_forged_from_another_store_is_refused(tmp_path) -> None:
    """Same layout, another identity's header: the sums are seeded by the identity."""
    a, b = tmp_path / "a.cols", tmp_path / "b.cols"
    open_or_build(a, "A", _generic_build)
    open_or_build(b, "B", _generic_build)
    oa, _la = _header_range(a)
    ob, _lb = _header_range(b)
    forged = a.read_bytes()[:oa] + b.read_bytes()[ob:]
    put_bytes(a, forged)
    with pytest.raises(DamagedStore, match="sums"):
        ColumnStore(a, "B")


# ---- the store kinds ---------------------------------------------------------------------------


def _write_hdf(path: Path, n: int = 30, vlen: bool = False) -> None:
    """``n`` sequences tagged ``<stem>-<i>``: fixed-length ``S`` tags, or (``vlen``) variable-
    length ones as SimpleHDFWriter writes them (read from the heap when the store is built)."""
    name = path.stem
    rng = np.random.default_rng(1)
    lengths = rng.integers(2, 9, n)
    data = np.concatenate([np.full((int(t), 2), i, np.float32) for i, t in enumerate(lengths)])
    tags = [f"{name}-{i}" for i in range(n)]
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=data)
        f.create_dataset("seqLengths", data=lengths[:, None])
        if vlen:
            f.create_dataset("seqTags", data=np.array(tags, object), dtype=h5py.string_dtype())
        else:
            f.create_dataset("seqTags", data=np.array([t.encode() for t in tags], "S"))
        f.attrs["inputPattSize"] = 2
        f.create_group("targets/data")
        f.create_group("targets/size")


def _hdf_serve(files: list[Path], index: Path) -> object:
    src = sl.HDFSource(files, index_dir=index)
    with src:
        seqs = [src.read(i)["data"] for i in range(len(src))]
        with sl.SeqLoader(src, max_seqs=4) as loader:
            return {
                "tags": [src.tag(i) for i in range(len(src))],
                "lengths": src.lengths("data").tolist(),
                "seqs": seqs,
                "batches": [b.seq_tags for b in loader.epoch(1)],
            }


@pytest.mark.parametrize("vlen", [False, True])
def test_hdf_metadata_store(tmp_path, monkeypatch, vlen) -> None:
    """Built block by block (``vlen``: tags out of the HDF heap, 4 per block: blocks end inside
    runs of tags of one length, the last block partial; ``seqLengths`` 8 rows per block)."""
    monkeypatch.setattr(hdf_layout, "TAG_BLOCK", 4)
    monkeypatch.setattr(hdf_layout, "ROW_BLOCK", 8)
    files = [tmp_path / "a.hdf", tmp_path / "b.hdf"]
    for i, f in enumerate(files):
        _write_hdf(f, 20 + 7 * i, vlen)
    index = tmp_path / "idx"
    expected = _hdf_serve(files, index)
    (store,) = index.glob("hdf-*.cols")
    for at in (0.0, 0.99):  # first and last block of each column
        seen = each_column(store, lambda: _hdf_serve(files, index), expected, at)
        # row offsets and tags are checked per block when read; the rest when mapped
        assert seen["len.data"] == seen["bounds"] == seen["header"] == seen[".sums"] == "rebuilt"
        assert seen["start.data"] == seen["tags.bytes"] == seen["tags.offsets"] == "refused"
        # the duplicate-tag screen reads the kept repeats (none here: an empty column, no byte)
        assert "tags.repeats" not in seen and "tags.hashes" not in seen


def test_hdf_tag_damaged_into_another_tag_is_not_a_duplicate(tmp_path) -> None:
    """Finding 4: a damaged tag equal to another's blamed the data ('remove the duplicate')."""
    f = tmp_path / "a.hdf"
    _write_hdf(f, 12)
    index = tmp_path / "idx"
    _hdf_serve([f], index)
    (store,) = index.glob("hdf-*.cols")
    offset, _ = ColumnStore(store).byte_range("tags.bytes")
    data = bytearray(store.read_bytes())
    assert data[offset : offset + 6] == b"a-0a-1"
    data[offset + 5] = ord("0")  # tag 1 'a-1' -> 'a-0'
    put_bytes(store, bytes(data))
    with pytest.raises(DamagedStore, match=r"column 'tags.bytes'") as info:
        _hdf_serve([f], index)
    assert not any(b in str(info.value) for b in BLAMES_DATA)


def test_concat_store(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(concat_store, "MIN_SEQUENCES", 10)
    parts = {
        name: index_corpus(n, seed=k, tags=[f"{name}/{i}" for i in range(n)])
        for k, (name, n) in enumerate((("a", 30), ("b", 20)))
    }

    def serve() -> object:
        src = sl.ConcatSource(parts)
        assert src._store is not None
        tags = src.tags
        return {"lengths": src.lengths("data").tolist(), "tags": [tags[i] for i in range(50)]}

    expected = serve()
    (store,) = (tmp_path / "cache").rglob("*.seqcols")
    seen = each_column(store, serve, expected)
    assert seen["len.data"] == "rebuilt" and seen["tags.bytes"] == "refused"


def test_shard_index(tmp_path) -> None:
    def serve() -> object:
        src = index_shar(tmp_path, 14, shard_size=5)
        assert src.store is not None
        return {
            "tags": [src.tag(i) for i in range(len(src))],
            "data": [src.read(i)["data"] for i in range(len(src))],
            "lengths": src.lengths("data").tolist(),
        }

    expected = serve()
    stores = sorted((tmp_path / "index").glob("*.cols"))
    assert len(stores) == 2  # the index, and the lengths planned from it
    for store in stores:
        seen = each_column(store, serve, expected)
        # "served": the same values (a strings column this test reads nothing of, e.g. member)
        assert seen["header"] == seen[".sums"] == "rebuilt"
        if "tags.bytes" in seen:
            assert seen["tags.bytes"] == seen["tags.offsets"] == "refused"


def _indexed_plan(src: sl.Source, **options: object) -> list[list[int]]:
    loader = sl.SeqLoader(
        src,
        ordering="buckets:3",
        planning="indexed",
        max_frames=60,
        rank=1,
        world_size=2,
        **options,
    )
    return [b.tolist() for b in loader.plan(1)]


def test_bucket_index(tmp_path, monkeypatch) -> None:
    """Finding 2: a changed bucket index planned one sequence twice and another never."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    src = index_corpus(200, seed=4)
    expected = _indexed_plan(src)
    (store,) = (tmp_path / "seqloader" / "buckets").glob("*.seqcols")
    pristine = store.read_bytes()
    assert set(each_column(store, lambda: _indexed_plan(src), expected).values()) == {"rebuilt"}
    # two members swapped (each still once): a plan other nodes would not make
    offset, nbytes = ColumnStore(store).byte_range("bucket.members")
    data = bytearray(pristine)
    a, b = offset + 4, offset + nbytes - 8
    data[a : a + 4], data[b : b + 4] = data[b : b + 4], data[a : a + 4]
    put_bytes(store, bytes(data))
    assert served_or_refused(lambda: _indexed_plan(src), expected, store, "members") == "rebuilt"


def test_files_bucket_index_checks_its_members_when_read(tmp_path, monkeypatch) -> None:
    """Under ``distribution="files"`` the planner reads no member (a rank's sequences come from
    its files), so the members are checked per block when read, not at every open: the same
    plans as the index in memory; a changed member byte changes no plan and is refused by name
    where a member is read; every other column is still rebuilt when damaged."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    whole = index_corpus(200, seed=4)
    src = sl.MemorySource(
        {"data": [whole.read(i)["data"] for i in range(200)]},
        list(whole.tags),
        file_bounds=np.arange(0, 201, 8),
    )
    in_memory = _indexed_plan(src, distribution="files")
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    expected = _indexed_plan(src, distribution="files")
    assert expected == in_memory
    (store,) = (tmp_path / "seqloader" / "buckets").glob("*.seqcols")
    seen = each_column(store, lambda: _indexed_plan(src, distribution="files"), expected)
    assert seen.pop("bucket.members") == "served"  # not read: nothing of it served
    assert set(seen.values()) == {"rebuilt"}
    flip(store, "bucket.members", 0.0)
    index = bucket_store.mapped_index(
        ColumnStore(store, defer=(bucket_store.MEMBERS,)), (bucket_store.MEMBERS,)
    )
    for read in (lambda: index.members[np.array([3, 0])], lambda: np.asarray(index.members)):
        with pytest.raises(DamagedStore, match=r"column 'bucket\.members'.*rows 0\.\."):
            read()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _indexed_plan(src, distribution="files") == expected
    assert not caught


def test_bucket_index_with_another_index_s_header(tmp_path, monkeypatch) -> None:
    """Finding 2: a file with another index's header was served (other steps)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    src = index_corpus(200, seed=4)
    expected = _indexed_plan(src)
    other = _indexed_plan(index_corpus(200, seed=9))
    assert other != expected
    mine, theirs = sorted(
        (tmp_path / "seqloader" / "buckets").glob("*.seqcols"), key=lambda p: p.stat().st_mtime_ns
    )
    om, _lm = _header_range(mine)
    ot, _lt = _header_range(theirs)
    body_theirs = theirs.read_bytes()[:ot]
    put_bytes(mine, body_theirs + mine.read_bytes()[om:])  # their columns under my header
    assert served_or_refused(lambda: _indexed_plan(src), expected, mine, "") == "rebuilt"


def test_a_store_removed_while_mapped_is_refused_by_name_where_mapped_again(tmp_path) -> None:
    """``seqloader cache --clean`` can remove a store a running job maps (no lock is held while
    it is mapped): a process that maps it again by path (a spawned worker unpickling the source)
    gets a ``DataError`` naming the store and the fix (it reaches the loop as itself), not a bare
    ``FileNotFoundError``."""
    store = write_store(tmp_path / "s.seqcols", "id", {"x": np.arange(5)}, {"about": "t"})
    pickled = pickle.dumps(store)
    os.unlink(store.path)
    with pytest.raises(sl.DataError, match=r"s\.seqcols' is gone.*cache --clean.*restart"):
        pickle.loads(pickled)


def test_duplicate_tag_verdict(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(duplicate_store, "MIN_SEQUENCES", 10)
    tags = [f"t{i}" for i in range(30)] + ["t3", "t7"]
    src = index_corpus(32, tags=tags)

    def serve() -> str:
        with pytest.raises(sl.DataError) as info:
            sl.SeqLoader(src, max_seqs=2)
        return str(info.value)

    expected = serve()
    (store,) = (tmp_path / "seqloader" / "checks").glob("*.seqcols")
    assert set(each_column(store, serve, expected).values()) == {"rebuilt"}


def test_screen_verdict(tmp_path, monkeypatch) -> None:
    """A damaged NaN/Inf screen verdict is never trusted: the file is screened again (with the
    same messages), and the verdict rebuilt once that pass is whole and clean."""
    screened = settle_and_count(monkeypatch)  # the file counts as settled
    f, index = tmp_path / "a.hdf", tmp_path / "idx"
    _write_hdf(f, 15)

    def serve() -> object:
        screened[0] = 0
        with sl.SeqLoader(sl.HDFSource(f, index_dir=index), max_seqs=4) as loader:
            nonfinite = [b.nonfinite for b in loader.epoch(1)]
        return {"nonfinite": nonfinite, "screened": screened[0]}

    expected = serve()  # no verdict yet: every sequence screened
    assert expected["screened"] == 15
    (store,) = index.glob("screen-*.cols")
    assert set(each_column(store, serve, expected).values()) == {"rebuilt"}
    assert serve()["screened"] == 0  # the verdict as written: trusted


def test_a_refusal_in_a_worker_reaches_the_loop_as_itself(tmp_path) -> None:
    """A store's refusal raised in a DataLoader worker (a lazily checked block of an HDF's row
    offsets, read there first) crosses to the training loop pickled: it arrived as a bare
    ``TypeError`` about ``DamagedStore.__init__``'s arguments instead of the refusal naming the
    file and column. Both store errors with arguments of their own pickle whole."""
    err = DamagedStore("store 'x' column 'c' differs. Fix: rebuild", "x", "c")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.path, back.column) == (DamagedStore, str(err), "x", "c")
    stale = pickle.loads(pickle.dumps(StaleFormat("of format 'v1'", "v1")))
    assert (type(stale), str(stale), stale.found) == (StaleFormat, "of format 'v1'", "v1")
    files = [tmp_path / "a.hdf"]
    _write_hdf(files[0], 20)
    index = tmp_path / "idx"
    sl.HDFSource(files, index_dir=index).close()
    (store,) = index.glob("hdf-*.cols")
    flip(store, "start.data")
    src = sl.HDFSource(files, index_dir=index)
    loader = sl.SeqLoader(src, max_seqs=4, num_workers=1, multiprocessing_context="fork")
    with loader, pytest.raises(DamagedStore, match=r"column 'start\.data'") as caught:
        list(loader.epoch(1))
    assert str(store) in str(caught.value) and caught.value.column == "start.data"


def test_a_spawned_worker_refuses_a_store_replaced_by_a_damaged_copy(tmp_path) -> None:
    """The loop's process mapped the store; then the file was replaced by a copy with a changed
    header. A forked worker reads the loop's mapping (the old file), but a spawned one maps the
    store again by path while torch unpickles its dataset: that refusal killed the worker before
    any of our code ran, and the loop got a bare ``WorkerError`` ("exited with code 1"), the file
    named only on the worker's stderr. It reaches the loop as the refusal itself now."""
    files = [tmp_path / "a.hdf"]
    _write_hdf(files[0], 12)
    index = tmp_path / "idx"
    src = sl.HDFSource(files, index_dir=index)
    (store,) = index.glob("hdf-*.cols")
    copy = tmp_path / "copy.cols"
    copy.write_bytes(store.read_bytes())
    flip(copy, "header")
    os.replace(copy, store)
    loader = sl.SeqLoader(src, max_seqs=6, num_workers=1, multiprocessing_context="spawn")
    with loader, pytest.raises(DamagedStore, match=r"its header differs") as caught:
        list(loader.epoch(1))
    assert str(store) in str(caught.value) and "Fix: delete it" in str(caught.value)
    assert "DataLoader worker process 0" in str(caught.value.__cause__)
