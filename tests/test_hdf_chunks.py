"""Direct reads of chunked, uncompressed HDF datasets (seqloader.sources.hdf_chunks): the same
bytes as h5py for any shape, chunk shape, dtype and span, and h5py whenever the layout is not one
the index understands."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.sources import hdf_chunks
from seqloader.sources.hdf_chunks import ChunkedRows, chunk_index, chunked_reader
from seqloader.sources.hdf_read import OpenFile

DTYPES = ["<f4", "<f8", "<i2", "<i4", "<i8", "|u1", "<u4"]


def _mmap(path):
    import mmap

    fh = open(path, "rb")  # noqa: SIM115 (kept open by the mmap's lifetime in the test)
    return lambda: mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


@st.composite
def layouts(draw):
    ndim = draw(st.sampled_from([1, 2]))
    rows = draw(st.integers(1, 400))
    shape = (rows,) if ndim == 1 else (rows, draw(st.integers(1, 45)))
    chunks = tuple(draw(st.integers(1, max(1, min(s, 64)))) for s in shape)
    dtype = draw(st.sampled_from(DTYPES))
    resizable = draw(st.booleans())  # SimpleHDFWriter: maxshape None, grown by resize
    spans = draw(
        st.lists(st.tuples(st.integers(0, rows), st.integers(0, rows)), min_size=1, max_size=8)
    )
    return shape, chunks, dtype, resizable, spans


@settings(max_examples=40, deadline=None)
@given(layouts())
def test_same_bytes_as_h5py(tmp_path_factory, layout):
    shape, chunks, dtype, resizable, spans = layout
    path = tmp_path_factory.mktemp("chunks") / "x.hdf"
    rng = np.random.default_rng(len(shape) * 1000 + shape[0])
    values = (rng.standard_normal(shape) * 100).astype(dtype)
    with h5py.File(path, "w") as f:
        if resizable:
            first = (min(shape[0], 3), *shape[1:])
            d = f.create_dataset("x", first, dtype, chunks=chunks, maxshape=(None,) * len(shape))
            d.resize(shape[0], axis=0)
        else:
            d = f.create_dataset("x", shape, dtype, chunks=chunks)
        d[...] = values
    with h5py.File(path, "r") as f:
        reader = chunked_reader(f["x"], _mmap(path))
        assert isinstance(reader, ChunkedRows)
        for a, b in spans:
            got = reader.rows(a, b)
            want = f["x"][a:b] if b > a else np.empty((0, *shape[1:]), dtype)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
            got[...] = 0  # fresh, writable arrays: a transform may work in place
        again = reader.spans(np.array([a for a, _ in spans]), np.array([b for _, b in spans]))
        for (a, b), g in zip(spans, again):
            np.testing.assert_array_equal(g, values[a:b] if b > a else values[:0])


def _dataset(path, **kw):
    f = h5py.File(path, "w")
    return f, f.create_dataset("x", **kw)


@pytest.mark.parametrize(
    "why,kw",
    [
        ("compressed", dict(data=np.ones((100, 4), "f4"), chunks=(10, 2), compression="gzip")),
        ("big-endian", dict(data=np.ones((100, 4), ">f4"), chunks=(10, 2))),
        ("3 axes", dict(data=np.ones((20, 4, 3), "f4"), chunks=(5, 2, 3))),
        ("contiguous", dict(data=np.ones((100, 4), "f4"))),
        ("strings", dict(data=np.array(["a", "b"], dtype=object), dtype=h5py.string_dtype())),
    ],
)
def test_layouts_left_to_h5py(tmp_path, why, kw):
    f, d = _dataset(tmp_path / "x.hdf", **kw)
    with f:
        assert chunk_index(d) is None, why


def test_unallocated_chunks_are_left_to_h5py(tmp_path):
    """A dataset grown but only partly written has chunks HDF5 never allocated (fill values)."""
    f, d = _dataset(tmp_path / "x.hdf", shape=(100, 4), dtype="f4", chunks=(10, 2))
    with f:
        d[:30] = 1.0
        assert chunk_index(d) is None


def test_chunk_count_limit(tmp_path, monkeypatch):
    f, d = _dataset(tmp_path / "x.hdf", data=np.ones((100, 4), "f4"), chunks=(10, 2))
    with f:
        assert chunk_index(d) is not None
        monkeypatch.setattr(hdf_chunks, "MAX_INDEXED_CHUNKS", 19)  # the dataset has 20
        assert chunk_index(d) is None


def test_hdfsource_reads_returnn_layout_through_the_index(tmp_path):
    """A file laid out like SimpleHDFWriter's (resizable, small guessed chunks): HDFSource reads it
    without h5py per sequence, with the same content as its contiguous conversion."""
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 300, 80)
    src = sl.MemorySource(
        {
            "data": [rng.standard_normal((t, 40)).astype(np.float32) for t in lens],
            "classes": [rng.integers(0, 50, max(t // 8, 1)).astype(np.int32) for t in lens],
        },
        vocab_sizes={"classes": 50},
    )
    chunked, contiguous = str(tmp_path / "c.hdf"), str(tmp_path / "flat.hdf")
    sl.write_hdf(chunked, src, chunked=True)
    sl.convert_contiguous(chunked, contiguous)
    opened = OpenFile(chunked, {"data": "inputs", "classes": "targets/data/classes"}, True)
    try:
        assert isinstance(opened.readers["data"], ChunkedRows)
    finally:
        opened.close()
    a, b = sl.HDFSource(chunked), sl.HDFSource(contiguous)
    order = rng.permutation(len(lens))
    for got, want, i in zip(a.read_many(order), b.read_many(order), order):
        for key in ("data", "classes"):
            np.testing.assert_array_equal(got[key], want[key])
            np.testing.assert_array_equal(got[key], src.read(int(i))[key])


def test_index_cache_follows_the_file_not_its_name(tmp_path):
    """Indexes are cached per process by file identity: a file replaced under the same name is
    indexed anew, never read through the old offsets."""
    from seqloader.sources.hdf_chunks import index_files

    path = str(tmp_path / "x.hdf")
    for version, rows in enumerate((100, 137)):
        values = np.arange(rows * 6, dtype=np.float32).reshape(rows, 6) + 1000 * version
        tmp = path + ".tmp"
        with h5py.File(tmp, "w") as f:
            f.create_dataset("x", data=values, chunks=(7, 4))
        import os

        os.replace(tmp, path)
        assert index_files([path]) == 1
        assert index_files([path]) == 1  # cached: no second build
        opened = OpenFile(path, {"x": "x"}, True)
        try:
            np.testing.assert_array_equal(opened.readers["x"].rows(0, rows), values)
        finally:
            opened.close()


def test_forked_workers_read_chunked_files_identically(tmp_path):
    """Through SeqLoader with forked workers (the index built before the fork and inherited):
    the same batches as with num_workers=0."""
    rng = np.random.default_rng(9)
    lens = rng.integers(1, 120, 70)
    src = sl.MemorySource({"data": [rng.standard_normal((t, 40)).astype(np.float32) for t in lens]})
    path = str(tmp_path / "c.hdf")
    sl.write_hdf(path, src, chunked=True)
    kw = dict(ordering="random", max_seqs=8, seed=2)
    with sl.SeqLoader(sl.HDFSource(path), num_workers=0, **kw) as a:
        want = [(b.seq_tags, b["data"].numpy().tobytes()) for b in a.epoch(1)]
    with sl.SeqLoader(sl.HDFSource(path), num_workers=2, multiprocessing_context="fork", **kw) as b:
        got = [(x.seq_tags, x["data"].numpy().tobytes()) for x in b.epoch(1)]
    assert got == want
