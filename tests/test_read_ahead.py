"""``read_ahead`` (the node's metadata store reads the next block of tags in a thread): every item
once and in order, a producer's exception raised in the caller at its place, and a caller that
stops early leaves no thread behind and the source closed."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.test_kept_tag_hashes import write_hdf

from seqloader.errors import DataError
from seqloader.sources import hdf_layout
from seqloader.sources.hdf import HDFSource
from seqloader.sources.read_ahead import read_ahead


class Broken(Exception):
    pass


def _alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "seqloader-read-ahead"]


@settings(max_examples=25, deadline=None)
@given(
    items=st.lists(st.integers(), max_size=12),
    depth=st.integers(1, 3),
    fail_at=st.none() | st.integers(0, 12),
    stop_after=st.none() | st.integers(0, 12),
)
def test_items_in_order_errors_in_place_and_early_stop(
    items: list[int], depth: int, fail_at: int | None, stop_after: int | None
) -> None:
    """Property: the caller gets ``items`` in order up to the producer's failure (then the
    failure itself) or up to where it stops; either way the source is closed and the thread is
    gone when the iterator is closed."""
    closed = threading.Event()

    def source() -> Iterator[int]:
        try:
            for k, x in enumerate(items):
                if k == fail_at:
                    raise Broken(k)
                yield x
        finally:
            closed.set()

    got: list[int] = []
    ahead = read_ahead(source(), depth)
    failed = fail_at is not None and fail_at < len(items)
    last = len(items) if fail_at is None else min(len(items), fail_at)
    stops = stop_after is not None and stop_after < last
    if failed and not stops:
        with pytest.raises(Broken):
            for x in ahead:
                got.append(x)
        assert got == items[:fail_at]
    else:
        for x in ahead:
            if stop_after is not None and len(got) == stop_after:
                break
            got.append(x)
        ahead.close()
        assert got == items[: len(got)]
        assert stops or got == items
    assert closed.is_set()
    assert not _alive()


def test_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="depth must be at least 1"):
        next(read_ahead([1], 0))


@pytest.mark.parametrize("fast_vlen", [True, False])
def test_a_damaged_tag_heap_is_named_not_blamed_on_the_store_directory(
    tmp_path, monkeypatch, fast_vlen
) -> None:
    """The store of three files is written from blocks of tags read in the read-ahead thread;
    the middle file's string heap is damaged (h5py's ``OSError`` in that thread). The open fails
    with a ``DataError`` naming that file, with no warning that the metadata directory cannot be
    written (an ``OSError`` reached ``open_metadata``, which kept the metadata in memory and told
    the user to pass another index_dir), no thread left and no store beside its lock."""
    paths = []
    for j in range(3):
        paths.append(str(tmp_path / f"f{j}.hdf"))
        write_hdf(paths[-1], [f"corpus/rec{j}/seg{i}".encode() for i in range(50)], fixed=False)
    raw = bytearray((tmp_path / "f1.hdf").read_bytes())
    heap = raw.find(b"GCOL")  # the global heap collection holding the tags' bytes
    assert heap > 0
    raw[heap + 16 : heap + 600] = b"\xff" * 584
    (tmp_path / "f1.hdf").write_bytes(bytes(raw))
    monkeypatch.setattr(hdf_layout, "TAG_BLOCK", 7)  # several blocks per file
    monkeypatch.setattr(hdf_layout, "FAST_VLEN", fast_vlen)
    index = tmp_path / "index"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            DataError, match=r"f1\.hdf' \(file 2 of 3\) is damaged: reading its seqTags"
        ):
            HDFSource(paths, index_dir=str(index))
    assert not _alive()
    assert [p.name for p in index.iterdir() if not p.name.endswith(".lock")] == []
