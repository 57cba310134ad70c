"""The memory-mapped column store: round trips, atomic and once-per-node builds, stale and broken
files rebuilt, pickling by path."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.sources.columns import (
    ChunkedColumn,
    ColumnStore,
    StaleStore,
    StoredStrings,
    StoreWriter,
    StringColumn,
    identity_of_files,
    narrow_lengths,
    open_or_build,
    write_store,
)


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 2**40), max_size=50),
    tags=st.lists(st.text(max_size=12), max_size=50),
)
def test_round_trip(tmp_path_factory, lengths, tags) -> None:
    path = tmp_path_factory.mktemp("c") / "x.cols"
    lens = narrow_lengths(np.array(lengths, dtype=np.int64))
    assert lens.dtype == (np.int32 if max(lengths, default=0) < 2**31 else np.int64)
    store = write_store(
        path,
        "id1",
        {"len": lens, "tags": StringColumn.from_strings(tags), "pair": np.zeros((3, 2), np.int16)},
        {"note": "x"},
    )
    assert store.meta == {"note": "x"} and store.identity == "id1"
    np.testing.assert_array_equal(store.column("len"), lengths)
    assert store.column("len").dtype == lens.dtype
    assert store.column("pair").shape == (3, 2)
    strings = store.strings("tags")
    assert list(strings) == tags and len(strings) == len(tags)
    if tags:
        idx = np.arange(len(tags))[::-1]
        assert strings.take(idx) == [tags[i] for i in idx]
        assert strings[len(tags) - 1] == tags[-1]
    assert not store.column("len").flags.writeable  # a view of the read-only mapping


def test_pickles_the_path_not_the_data(tmp_path) -> None:
    n = 200_000
    store = write_store(
        tmp_path / "big.cols",
        "id",
        {
            "len": np.arange(n, dtype=np.int32),
            "tags": StringColumn.from_strings(map(str, range(n))),
        },
    )
    blob = pickle.dumps((store, store.strings("tags")))
    assert len(blob) < 1000
    again, tags = pickle.loads(blob)
    assert isinstance(tags, StoredStrings) and tags[12345] == "12345"
    np.testing.assert_array_equal(again.column("len")[-3:], [n - 3, n - 2, n - 1])


def test_chunked_writer_and_abort(tmp_path) -> None:
    w = StoreWriter(tmp_path / "s.cols", "id", {"k": 1})
    w.add_chunks("rows", np.int64, (2,), [np.ones((3, 2)), np.zeros((0, 2)), np.full((1, 2), 7)])
    store = w.close()
    assert store.column("rows").tolist() == [[1, 1], [1, 1], [1, 1], [7, 7]]
    w2 = StoreWriter(tmp_path / "t.cols", "id")
    w2.add("a", np.ones(3))
    w2.abort()
    assert os.listdir(tmp_path) == ["s.cols"]  # nothing half-written left behind


def test_a_chunked_column_is_written_from_its_chunks(tmp_path) -> None:
    """``open_or_build``'s columns may be ``ChunkedColumn``s: generators read once, while
    writing (the builder never holds the whole column)."""
    parts = (np.arange(k, dtype=np.int32) for k in (3, 0, 2))
    store = write_store(tmp_path / "c.cols", "id", {"len": ChunkedColumn(np.int64, (), parts)})
    got = store.column("len")
    assert got.dtype == np.int64 and got.tolist() == [0, 1, 2, 0, 1]


def test_stale_and_broken_files_are_rebuilt(tmp_path) -> None:
    path = tmp_path / "s.cols"
    calls = []

    def build():
        calls.append(1)
        return {"a": np.arange(4)}, {}

    store, built = open_or_build(path, "v1", build)
    assert built and store.column("a").tolist() == [0, 1, 2, 3]
    assert open_or_build(path, "v1", build)[1] is False
    with pytest.raises(StaleStore, match="other inputs"):
        ColumnStore(path, "v2")
    assert open_or_build(path, "v2", build)[1] is True  # another identity: rebuilt
    with open(path, "r+b") as fh:  # cut off the trailer: a half-written file
        fh.truncate(os.path.getsize(path) - 5)
    assert open_or_build(path, "v2", build)[1] is True
    assert len(calls) == 3


def test_identity_follows_size_and_mtime(tmp_path) -> None:
    f = tmp_path / "shard.tar"
    f.write_bytes(b"abc")
    first = identity_of_files([str(f)])
    assert identity_of_files([str(f)]) == first
    f.write_bytes(b"abcd")
    assert identity_of_files([str(f)]) != first


def _race(path: str, counter: str, barrier) -> None:  # a child process
    barrier.wait()

    def build():
        with open(counter, "a") as fh:
            fh.write("x")
        return {"a": np.arange(1000)}, {}

    store, _ = open_or_build(path, "id", build)
    assert int(store.column("a").sum()) == 499500


# spawn: make chaos (the same lock and rename in four processes that import the module anew)
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.extended)])
def test_processes_racing_build_once(tmp_path, method) -> None:
    ctx = mp.get_context(method)
    barrier = ctx.Barrier(4)
    path, counter = str(tmp_path / "r.cols"), str(tmp_path / "count")
    procs = [ctx.Process(target=_race, args=(path, counter, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with open(counter) as fh:
        assert fh.read() == "x"
    assert sorted(os.listdir(tmp_path)) == ["count", "r.cols", "r.cols.lock"]


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40_000),
    damaged=st.floats(0, 1, exclude_max=True),
    reads=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 9_000)), max_size=6),
)
def test_rows_read_per_block_refuse_exactly_the_damaged_block(
    tmp_path_factory, rows, damaged, reads
) -> None:
    """A lazy column read a few rows at a time (a file's row offsets): a row or slice is
    refused exactly when it lies in a block with a changed byte, before and after the column's
    other blocks were checked."""
    from seqloader.sources.column_sums import BLOCK
    from seqloader.sources.columns import DamagedStore

    path = str(tmp_path_factory.mktemp("rows") / "s.cols")
    w = StoreWriter(path, "id", lazy=("start.",))
    w.add("start.data", np.arange(rows, dtype=np.int64))
    w.close()
    offset, nbytes = ColumnStore(path).byte_range("start.data")
    at = int(damaged * nbytes)
    change_byte(path, offset + at)
    col = ColumnStore(path).rows("start.data")
    bad = at // BLOCK
    for a, n in [*reads, (0, rows)]:  # whole column last: every block asked
        a = min(a, rows - 1)
        b = min(a + n, rows)
        for key in (a, slice(a, b)):
            lo, hi = (a, a + 1) if isinstance(key, int) else (a, max(a, b))
            hit = hi > lo and lo * 8 // BLOCK <= bad <= (hi * 8 - 1) // BLOCK
            if hit:
                with pytest.raises(DamagedStore, match=r"start\.data"):
                    col[key]
            else:
                assert np.array_equal(col[key], np.arange(rows)[key])


@settings(max_examples=40, deadline=None)
@given(
    ranges=st.lists(
        st.tuples(st.integers(0, 5 << 16), st.integers(0, 3 << 16)), min_size=0, max_size=12
    )
)
def test_blocks_of_ranges_are_the_sorted_blocks_the_ranges_touch(ranges) -> None:
    """``blocks_of_ranges``: every block a non-empty byte range touches, once, sorted (what the
    column checks verify before a read)."""
    from seqloader.sources.column_sums import BLOCK, blocks_of_ranges

    lo = np.array([a for a, _ in ranges], dtype=np.int64)
    hi = lo + np.array([n for _, n in ranges], dtype=np.int64)
    want = sorted({b for a, n in ranges for b in range(a // BLOCK, (a + n - 1) // BLOCK + 1) if n})
    got = blocks_of_ranges(lo, hi)
    assert got.dtype == np.int64
    assert got.tolist() == want


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(1, 90_000),
    damaged=st.floats(0, 1, exclude_max=True),
    column=st.sampled_from(["a", "b"]),
)
def test_a_column_checked_when_mapped_is_refused_at_its_damaged_block(
    tmp_path_factory, rows, damaged, column
) -> None:
    """A column checked in full when the store is mapped (several blocks, the last one partial,
    another column after it): one changed byte anywhere in it is refused, naming the column and
    the rows of exactly the block it lies in; the other column's bytes are not its."""
    from seqloader.sources.column_sums import BLOCK
    from seqloader.sources.columns import DamagedStore

    path = str(tmp_path_factory.mktemp("full") / "s.cols")
    values = {"a": np.arange(rows, dtype=np.int32), "b": np.arange(rows // 3 + 1, dtype=np.int64)}
    write_store(path, "id", values)
    offset, nbytes = ColumnStore(path).byte_range(column)
    at = int(damaged * nbytes)
    change_byte(path, offset + at)
    row = values[column].itemsize
    a, b = at // BLOCK * BLOCK, min(nbytes, (at // BLOCK + 1) * BLOCK)
    with pytest.raises(
        DamagedStore, match=rf"column '{column}': .*\(rows {a // row}\.\.{(b - 1) // row}\)"
    ):
        ColumnStore(path)


@settings(max_examples=15, deadline=None)
@given(
    rows=st.integers(1, 60_000),
    damaged=st.floats(0, 1, exclude_max=True),
    picks=st.lists(st.lists(st.integers(-60_000, 59_999), max_size=20), max_size=4),
)
def test_rows_read_by_index_arrays_refuse_exactly_the_damaged_block(
    tmp_path_factory, rows, damaged, picks
) -> None:
    """``rows[indices]`` (what a planner's draw of a deferred column asks): refused exactly when
    some index lies in the block with a changed byte; a boolean mask and ``np.asarray`` read the
    whole column. Negative indices count from the end, as numpy's do."""
    from seqloader.sources.column_sums import BLOCK
    from seqloader.sources.columns import DamagedStore

    path = str(tmp_path_factory.mktemp("picks") / "s.cols")
    write_store(path, "id", {"m": np.arange(rows, dtype=np.uint32)})
    offset, nbytes = ColumnStore(path).byte_range("m")
    at = int(damaged * nbytes)
    change_byte(path, offset + at)
    col = ColumnStore(path, defer=("m",)).rows("m")
    for pick in picks:
        idx = np.array([p % rows if p >= rows else p for p in pick if -rows <= p], dtype=np.int64)
        hit = bool(np.any((idx % rows) * 4 // BLOCK == at // BLOCK))
        if hit:
            with pytest.raises(DamagedStore, match="'m'"):
                col[idx]
        else:
            assert col[idx].tolist() == np.arange(rows)[idx].tolist()
    for whole in (lambda: col[np.ones(rows, dtype=bool)], lambda: np.asarray(col)):
        with pytest.raises(DamagedStore, match="'m'"):
            whole()


def change_byte(path: str, pos: int) -> None:
    """One byte of the file at ``path`` changed in place (a disk error, a stray write)."""
    with open(path, "r+b") as fh:
        fh.seek(pos)
        byte = fh.read(1)[0]
        fh.seek(pos)
        fh.write(bytes([byte ^ 0x5A]))


def test_rows_read_by_any_other_key_check_the_whole_column(tmp_path) -> None:
    """``rows[True]`` (numpy: the whole column under a new axis) served every row with only
    row 1's block checked, and ``rows[...]``, ``rows[None]``, ``rows[(i,)]`` failed with a bare
    ``TypeError`` from ``int()``: a key that is neither an integer, a slice nor an index array
    now checks the whole column first (then reads as numpy does)."""
    from seqloader.sources.columns import DamagedStore

    path = str(tmp_path / "s.cols")
    write_store(path, "id", {"m": np.arange(40_000, dtype=np.uint32)})
    offset, nbytes = ColumnStore(path).byte_range("m")
    change_byte(path, offset + nbytes - 1)
    for key in (True, np.True_, Ellipsis, None, (3,), np.False_):
        with pytest.raises(DamagedStore, match="'m'"):
            ColumnStore(path, defer=("m",)).rows("m")[key]
    write_store(path, "id", {"m": np.arange(40_000, dtype=np.uint32)})
    col = ColumnStore(path, defer=("m",)).rows("m")
    assert col[(3,)] == 3 and col[np.int32(-1)] == 39_999 and col[True].shape == (1, 40_000)
