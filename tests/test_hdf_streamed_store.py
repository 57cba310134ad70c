"""The node's metadata store of local HDF files is written block by block (``FileScan``): the same
columns and corpus fingerprint as the store built from the files' arrays read whole, whatever the
block sizes, and no array of ``n`` held while it is written."""

from __future__ import annotations

import os
import tempfile
import tracemalloc

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.sources import hdf_layout, hdf_store, repeats
from seqloader.sources.hdf_layout import PackedTags, read_layout, scan_file

TAG_CHARS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12
)


def write_file(path: str, tags: list[str], data: list[int], extra: list[int] | None) -> None:
    """A RETURNN HDF file (``SimpleHDFWriter``'s layout: variable-length utf-8 tags) with
    ``inputs`` of the given lengths and, if given, a sparse target ``extra``."""
    n = len(tags)
    columns = [data] + ([extra] if extra is not None else [])
    with h5py.File(path, "w") as f:
        f.create_dataset("seqTags", data=np.array(tags, dtype=object), dtype=h5py.string_dtype())
        f.create_dataset("seqLengths", data=np.array(columns, dtype=np.int32).T.reshape(n, -1))
        f.create_dataset("inputs", data=np.zeros((sum(data), 2), np.float32))
        f.create_group("targets/data")
        f.create_group("targets/size")
        if extra is not None:
            f["targets/data"].create_dataset("extra", data=np.zeros(sum(extra), np.int32))
            f["targets/size"].attrs["extra"] = 7


@st.composite
def corpora(draw: st.DrawFn) -> list[tuple[list[str], list[int], list[int] | None]]:
    with_extra = draw(st.booleans())
    files = []
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 12))
        tags = draw(st.lists(TAG_CHARS, min_size=n, max_size=n))
        data = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
        extra = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)) if with_extra else None
        files.append((tags, data, extra))
    return files


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=corpora(), rows=st.integers(1, 5), tag_rows=st.integers(1, 5))
def test_streamed_store_equals_the_store_of_whole_arrays(
    corpus: list, rows: int, tag_rows: int
) -> None:
    """Property: for any files and block sizes, the store written block by block holds the same
    lengths (and dtype), row offsets, bounds and tags as the arrays read whole, and the corpus
    fingerprint is the same digest."""
    folder = tempfile.mkdtemp(prefix="streamed-")
    paths = []
    for i, (tags, data, extra) in enumerate(corpus):
        paths.append(os.path.join(folder, f"f{i}.hdf"))
        write_file(paths[-1], tags, data, extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hdf_layout, "ROW_BLOCK", rows)
        mp.setattr(hdf_layout, "TAG_BLOCK", tag_rows)
        source = sl.HDFSource(paths, index_dir=os.path.join(folder, "index"))
        assert source.index_built
        layouts = [read_layout(p) for p in paths]  # the arrays, read whole
        columns, meta = hdf_store._build(
            lambda: layouts, lambda lays: (layouts[0].schema, {}), in_memory=True
        )
    assert isinstance(meta, dict)
    assert source._stored_fingerprint == meta["fingerprint"]
    store = source._store
    assert store is not None
    assert list(source._tags) == [t for tags, _, _ in corpus for t in tags]
    for name, column in columns.items():
        if name == "tags":
            continue
        got = np.asarray(store.column(name))
        assert got.dtype == np.asarray(column).dtype, name
        assert np.array_equal(got, column), name
    reopened = sl.HDFSource(paths, index_dir=os.path.join(folder, "index"))
    assert not reopened.index_built and reopened.fingerprint() == source.fingerprint()


def test_scan_checks_what_read_layout_checks(tmp_path: object) -> None:
    """A negative length found in a later block is refused by the scan, naming the sequence, its
    tag and the count, as reading the file whole does."""
    path = os.path.join(str(tmp_path), "bad.hdf")
    data = [3, 1, 2, 4, 1, 2, 1]
    write_file(path, [f"t{i}" for i in range(7)], data, None)
    with h5py.File(path, "a") as f:
        f["seqLengths"][5, 0] = -2
        f["seqLengths"][6, 0] = -1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hdf_layout, "ROW_BLOCK", 2)
        for read in (scan_file, read_layout):
            with pytest.raises(sl.DataError, match=r"row 5 \(sequence 5, tag 't5'\).*2 negative"):
                read(path)


def test_streamed_build_holds_no_array_of_n(tmp_path: object) -> None:
    """Writing the store of 10^5 sequences in blocks of 1,000 rows (250 tags) allocates far less
    than one int64 array of ``n`` (800 kB) at its peak (reading the whole file took ~76 bytes per
    tag) besides the copy of the hashes that finds the repeated ones (8 bytes per tag,
    ``Repeats``): a block and its hash tables (32 bytes per byte of the block's tags); the tags'
    offsets and hashes go to their columns as each block is read. Measured by tracemalloc
    (numpy's allocations)."""
    n = 100_000
    path = os.path.join(str(tmp_path), "big.hdf")
    write_file(path, [f"corpus/rec{i}/seg{i}" for i in range(n)], [1] * n, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hdf_layout, "ROW_BLOCK", 1000)
        mp.setattr(hdf_layout, "TAG_BLOCK", 250)
        # through h5py: a block read from the heap holds its whole collections (HDF5 writes up
        # to ~1 MiB each), more than this small corpus's array of n (test_hdf_vlen covers it)
        mp.setattr(hdf_layout, "FAST_VLEN", False)
        mp.setattr(repeats, "PART", 1 << 12)  # 2^5 parts of the hashes
        tracemalloc.start()
        try:
            source = sl.HDFSource(path, index_dir=os.path.join(str(tmp_path), "index"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert source.index_built and len(source) == n
    # 8 bytes per tag for the parts' copy, and per block of 250 an array's header (~112 bytes)
    # and its 33 part bounds
    assert peak < 4 * n + 10 * n, f"peak {peak} bytes while building the store of {n} sequences"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.binary(max_size=8), st.text(max_size=6).map(lambda t: t.replace("\0", ""))),
        max_size=20,
    )
)
def test_packed_tags_from_h5py_objects(values: list) -> None:
    """Property: tags as h5py returns them (bytes, or str) pack to each value's utf-8 bytes up
    to its first NUL (RETURNN's reading), whether or not some value holds a NUL or is a str."""
    packed = PackedTags.from_array(np.array([*values, b""], dtype=object)[:-1])
    want = [(v.encode() if isinstance(v, str) else v).split(b"\0", 1)[0] for v in values]
    assert [packed.raw(i) for i in range(len(packed))] == want
