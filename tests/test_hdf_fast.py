"""The fast read paths (mmap of contiguous datasets, merged batch reads through h5py) return exactly
the bytes plain h5py slicing returns, for every dtype and layout; convert_contiguous keeps the file's
content and makes it mappable. No timing here: speed is measured outside the tests."""

from __future__ import annotations

import itertools
import os
import zlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from hdf_files import write_simplewriter_style
from seqloader.sources import hdf_read
from seqloader.sources.hdf_read import merge_runs

DTYPES = [
    "<f4",
    "<f8",
    "<f2",
    "i1",
    "<i2",
    "<i4",
    "<i8",
    "u1",
    "<u2",
    "<u4",
    ">f4",
    ">f8",
    ">i2",
    "?",
]
LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (3, 1), "maxshape": None},  # tiny chunks, as SimpleHDFWriter's
    "gzip": {"chunks": (4, 1), "compression": "gzip", "shuffle": True},
}


def write_by_hand(path: str, dtype: str, layout: str, rng: np.random.Generator):
    """inputs [T, 3] and a target [T', 2, 2], both of ``dtype``, in ``layout``; 17 sequences."""
    n = 17
    lens = rng.integers(0, 9, n)
    lens2 = rng.integers(0, 5, n)
    opts = dict(LAYOUTS[layout])

    def values(shape):
        return (rng.standard_normal(shape) * 50).astype(np.dtype(dtype))

    with h5py.File(path, "w") as f:
        for name, total, feat in (
            ("inputs", lens.sum(), (3,)),
            ("targets/data/t2", lens2.sum(), (2, 2)),
        ):
            kw = dict(opts)
            if "maxshape" in kw:
                kw["maxshape"] = (None, *feat)
            if "chunks" in kw:
                kw["chunks"] = (kw["chunks"][0], *feat[:-1], kw["chunks"][1])
            f.create_dataset(name, data=values((total, *feat)), **kw)
        f.create_group("targets/size").attrs["t2"] = [2, 3]
        f.create_group("targets/labels")
        f.create_dataset("seqLengths", data=np.stack([lens, lens2], axis=1).astype(np.int32))
        f.create_dataset("seqTags", data=np.array([f"s{i}".encode() for i in range(n)]))
    return n


def plain_h5py(path: str, key: str, i: int) -> np.ndarray:
    """The reference: what RETURNN's HDFDataset does (slice the h5py dataset), in native byte
    order (a big-endian file's batches are native: torch takes no other)."""
    with h5py.File(path, "r") as f:
        col = 0 if key == "data" else 1
        starts = np.concatenate([[0], np.cumsum(f["seqLengths"][:, col], dtype=np.int64)])
        dset = f["inputs" if key == "data" else f"targets/data/{key}"]
        rows = dset[starts[i] : starts[i + 1]]
        return rows.astype(rows.dtype.newbyteorder("="))


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_paths_return_the_bytes_of_plain_h5py(tmp_path, dtype, layout):
    rng = np.random.default_rng(zlib.crc32(f"{dtype}/{layout}".encode()))
    path = str(tmp_path / "x.hdf")
    n = write_by_hand(path, dtype, layout, rng)
    fast = sl.HDFSource(path)
    slow = sl.HDFSource(path, use_mmap=False)
    mappable = layout == "contiguous" and dtype != "?"  # bool is an HDF5 enum: through h5py
    assert fast.mapped_keys()[path] == (("data", "t2") if mappable else ())
    assert slow.mapped_keys()[path] == ()
    for key in ("data", "t2"):
        assert fast.schema[key].dtype == np.dtype(dtype).newbyteorder("=")
    for i in range(n):
        want = {k: plain_h5py(path, k, i) for k in ("data", "t2")}
        for got in (fast.read(i), slow.read(i)):
            assert all(same_bytes(got[k], want[k]) for k in want), (i, dtype, layout)
    for idx in ([5, 2, 2, 16, 0], list(range(3, 12)), rng.integers(0, n, 12).tolist()):
        for src in (fast, slow):
            for i, got in zip(idx, src.read_many(idx)):
                want = src.read(i)
                assert all(same_bytes(got[k], want[k]) for k in want), (idx, i)


@pytest.mark.parametrize("chunked", [False, True])
def test_batch_arrays_are_writable_and_independent(tmp_path, chunked):
    src = sl.MemorySource({"data": [np.full((4, 2), i, np.float32) for i in range(6)]})
    path = str(tmp_path / "w.hdf")
    sl.write_hdf(path, src, chunked=chunked)
    hdf = sl.HDFSource(path)
    got = hdf.read_many([3, 3, 4, 2])
    got[0]["data"] += 100  # a transform working in place
    np.testing.assert_array_equal(got[1]["data"], np.full((4, 2), 3))  # the repeat: unchanged
    np.testing.assert_array_equal(got[2]["data"], np.full((4, 2), 4))
    np.testing.assert_array_equal(hdf.read(3)["data"], np.full((4, 2), 3))
    single = hdf.read(5)["data"]
    single[:] = -1
    np.testing.assert_array_equal(hdf.read(5)["data"], np.full((4, 2), 5))


def test_nearly_contiguous_batch_is_one_h5py_read_per_key(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    lens = rng.integers(1, 20, 60)
    src = sl.MemorySource(
        {
            "data": [rng.standard_normal((t, 3)).astype(np.float32) for t in lens],
            "classes": [rng.integers(0, 5, t).astype(np.int32) for t in lens],
        },
        vocab_sizes={"classes": 5},
    )
    path = str(tmp_path / "c.hdf")
    sl.write_hdf(path, src, chunked=True)
    hdf = sl.HDFSource(path, use_mmap=False)  # the h5py path (else chunks come from the mmap)
    calls = []
    real_rows = hdf_read.H5Rows.rows
    monkeypatch.setattr(
        hdf_read.H5Rows, "rows", lambda self, a, b: calls.append((a, b)) or real_rows(self, a, b)
    )
    idx = [14, 10, 12, 11, 13, 15, 16, 17, 18, 19, 20, 25, 26, 27]  # one small gap (21-24)
    got = hdf.read_many(idx)
    assert len([c for c in calls if c[1] > c[0]]) == 2  # one read per key
    for i, g in zip(idx, got):
        for k in src.keys:
            np.testing.assert_array_equal(g[k], src.read(i)[k])
    calls.clear()
    hdf.read_many([0, 30, 59])  # far apart: one read per sequence and key
    assert len([c for c in calls if c[1] > c[0]]) == 6


@st.composite
def spans(draw):
    lens = draw(st.lists(st.integers(1, 20), min_size=1, max_size=40))
    starts = np.concatenate([[0], np.cumsum(lens)])
    picks = sorted(draw(st.lists(st.integers(0, len(lens) - 1), min_size=1, max_size=30)))
    return starts[picks], starts[np.array(picks) + 1]


@settings(max_examples=60, deadline=None)
@given(spans(), st.integers(1, 200))
def test_merged_runs_cover_each_span_once_and_read_at_most_twice_the_rows(se, max_rows):
    begin, end = se
    runs = merge_runs(begin, end, max_rows)
    assert [j for run in runs for j in run] == list(range(len(begin)))  # all, once, in order
    for run in runs:
        covered = int(end[run].max() - begin[run[0]])
        useful = len(set().union(*(range(begin[j], end[j]) for j in run)))
        assert covered <= 2 * useful
        assert len(run) == 1 or covered <= max_rows
    for a, b in itertools.pairwise(runs):  # neighbours are split only at a gap or the size cap
        gap = begin[b[0]] > end[a].max()
        assert gap or end[b].max() - begin[a[0]] > max_rows


def _tree(path: str) -> dict:
    """Every group/dataset with its attributes and values."""
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            attrs = {k: np.asarray(v).tolist() for k, v in obj.attrs.items()}
            value = obj[()].tolist() if isinstance(obj, h5py.Dataset) else None
            dtype = str(obj.dtype) if isinstance(obj, h5py.Dataset) else None
            out[name] = (attrs, dtype, value)

        visit("/", f)
        f.visititems(visit)
    return out


@pytest.fixture
def returnn_chunked_file(tmp_path):
    rng = np.random.default_rng(3)
    n = 11
    lens = rng.integers(0, 30, n)
    path = str(tmp_path / "simple.hdf")
    write_simplewriter_style(
        path,
        [f"seg/{i}" for i in range(n)],
        [rng.standard_normal((t, 5)).astype(np.float32) for t in lens],
        {
            "classes": [rng.integers(0, 7, t // 2).astype(np.int32) for t in lens],
            "orth": [np.array(["a", f"w{i}"], dtype=object) for i in range(n)],
        },
        dim=5,
        extra_dims={"classes": 7},
    )
    return path


def test_convert_contiguous_keeps_content_and_makes_it_mappable(tmp_path, returnn_chunked_file):
    src_path = returnn_chunked_file
    dst = str(tmp_path / "out" / "contig.hdf")
    os.makedirs(os.path.dirname(dst))
    sl.convert_contiguous(src_path, dst)
    assert os.listdir(os.path.dirname(dst)) == ["contig.hdf"]  # no temp file left
    assert _tree(dst) == _tree(src_path)
    with h5py.File(dst) as f:
        for name in ("inputs", "seqLengths", "seqTags", "targets/data/classes"):
            assert f[name].chunks is None and f[name].compression is None
    before, after = sl.HDFSource(src_path), sl.HDFSource(dst)
    assert after.mapped_keys()[dst] == ("data", "classes")
    assert before.mapped_keys()[src_path] == ()
    assert after.fingerprint() == before.fingerprint()
    for i in range(len(before)):
        a, b = before.read(i), after.read(i)
        assert all(same_bytes(a[k], b[k]) for k in a)


def test_convert_contiguous_in_place(returnn_chunked_file):
    path = returnn_chunked_file
    want = _tree(path)
    sl.convert_contiguous(path, path)
    assert _tree(path) == want
    assert os.listdir(os.path.dirname(path)) == ["simple.hdf"]
    assert sl.HDFSource(path).mapped_keys()[path] == ("data", "classes")


def test_convert_contiguous_refuses_a_non_returnn_file(tmp_path):
    path = str(tmp_path / "other.hdf")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    with pytest.raises(sl.DataError, match=r"other\.hdf.*seqLengths"):
        sl.convert_contiguous(path, str(tmp_path / "y.hdf"))
    assert sorted(os.listdir(tmp_path)) == ["other.hdf"]


def test_returnn_reads_a_converted_file_like_the_original(tmp_path, returnn_chunked_file):
    hdf = pytest.importorskip("returnn.datasets.hdf")
    dst = str(tmp_path / "contig.hdf")
    sl.convert_contiguous(returnn_chunked_file, dst)
    datasets = []
    for p in (returnn_chunked_file, dst):
        ds = hdf.HDFDataset(files=[p], cache_byte_size=0)
        ds.initialize()
        ds.init_seq_order(epoch=1)
        datasets.append(ds)
    a, b = datasets
    assert a.num_seqs == b.num_seqs == 11
    for i in range(11):
        a.load_seqs(i, i + 1)
        b.load_seqs(i, i + 1)
        assert a.get_tag(i) == b.get_tag(i)
        for k in ("data", "classes"):
            np.testing.assert_array_equal(a.get_data(i, k), b.get_data(i, k))


@pytest.mark.parametrize("userblock", [0, 512])
def test_a_superblock_with_moved_addresses_is_read_through_hdf5_never_mapped(tmp_path, userblock):
    """The mapped reader takes HDF5's dataset offsets and reads the bytes there itself; with a
    damaged base address HDF5 reads every address elsewhere (or refuses one past its end), and
    with a damaged end-of-file address it refuses what lies past it, so such a file is read
    through HDF5 alone. A user block (base address at 512, as HDF5 writes it) is still mapped."""
    path = str(tmp_path / "x.hdf")
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f.create_dataset("x", data=np.arange(60, dtype=np.float32).reshape(20, 3))
    assert hdf_read.plain_superblock(path)
    opened = hdf_read.OpenFile(path, {"x": "x"}, use_mmap=True)
    assert opened.mapped_keys == ("x",)
    opened.close()
    with open(path, "rb") as fh:
        raw = bytearray(fh.read())
    for field, change in ((24, 1), (40, -1)):  # base address, end-of-file address (superblock v0)
        damaged = bytearray(raw)
        value = int.from_bytes(damaged[userblock + field : userblock + field + 8], "little")
        damaged[userblock + field : userblock + field + 8] = (value + change).to_bytes(8, "little")
        bad = str(tmp_path / f"bad{field}.hdf")
        with open(bad, "wb") as fh:
            fh.write(damaged)
        assert not hdf_read.plain_superblock(bad)
        try:
            opened = hdf_read.OpenFile(bad, {"x": "x"}, use_mmap=True)
        except (OSError, KeyError):  # HDF5 itself refuses the file: nothing is read from it
            continue
        assert opened.mapped_keys == ()
        opened.close()
