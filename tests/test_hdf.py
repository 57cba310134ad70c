"""HDFSource against RETURNN HDF files written by hand in both writers' layouts; write_hdf round
trips; pickling and real DataLoader workers (fork and spawn); each broken input's error."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import BatchRecord, batch_record
from hdf_files import write_datasetwriter_style, write_simplewriter_style
from seqloader.errors import DataError, DataWarning
from seqloader.sources.base import KeySpec, read_batch

RNG = np.random.default_rng(1234)


def feats(lengths, dim, dtype=np.float32):
    return [RNG.standard_normal((n, dim)).astype(dtype) for n in lengths]


def labels(lengths, vocab, dtype=np.int32):
    return [RNG.integers(0, vocab, n).astype(dtype) for n in lengths]


def assert_same_seq(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# ---- files in RETURNN's layouts, written by hand ----


@pytest.fixture
def datasetwriter_file(tmp_path):
    """Dense inputs; targets: sparse ``classes`` (labels), ``align`` int16 with a scalar size and
    no labels, 2-D float ``feat2``; ``b_only`` is only in targets/size and shifts the columns."""
    n = 9
    lens = RNG.integers(0, 12, n)
    lens[3] = 0  # an empty sequence
    data = {
        "data": feats(lens, 5),
        "classes": labels(RNG.integers(1, 6, n), 7),
        "align": labels(lens, 30, np.int16),
        "feat2": feats(RNG.integers(0, 4, n), 3, np.float64),
    }
    tags = [f"corpus/rec{i}/seg{i}" for i in range(n)]
    tags[2] = "corpus/ünïcode/2"
    path = str(tmp_path / "dw.hdf")
    write_datasetwriter_style(
        path,
        tags,
        inputs=data["data"],
        targets={k: v for k, v in data.items() if k != "data"},
        sizes={"classes": [7, 1], "align": 30, "feat2": [3, 2], "b_only": [4, 1]},
        labels={"classes": [f"c{i}" for i in range(7)]},
        size_only_lengths={"b_only": [100 + i for i in range(n)]},
    )
    return path, data, tags


def test_datasetwriter_layout_reads_back_exactly(datasetwriter_file):
    path, data, tags = datasetwriter_file
    with pytest.warns(DataWarning, match=r"dw\.hdf.*'b_only' is named in targets/size"):
        src = sl.HDFSource(path)
    assert src.keys == ("data", "align", "classes", "feat2")
    assert dict(src.schema) == {
        "data": KeySpec(np.dtype(np.float32), (5,)),
        "align": KeySpec(np.dtype(np.int16), (), True, 30),
        "classes": KeySpec(np.dtype(np.int32), (), True, 7),
        "feat2": KeySpec(np.dtype(np.float64), (3,)),
    }
    assert "b_only" in src.skipped_keys
    assert len(src) == 9
    assert list(src.tags) == tags
    assert [src.tag(i) for i in range(9)] == tags
    for k, seqs in data.items():
        np.testing.assert_array_equal(src.lengths(k), [len(a) for a in seqs])
        assert src.lengths(k).dtype == np.int32  # mapped metadata: int32 where lengths fit
    for i in range(9):
        assert_same_seq(src.read(i), {k: v[i] for k, v in data.items()})
    assert "dw.hdf" in repr(src)


def test_simplewriter_layout_sparse_inputs_vlen_tags(tmp_path):
    n = 7
    lens = RNG.integers(0, 15, n)
    inputs = labels(lens, 50)
    extras = {
        "classes": labels(RNG.integers(0, 5, n), 11, np.int64),
        "vec": feats(lens, 2),
        "orth": [np.array([f"word{i}", "x"], dtype=object) for i in range(n)],
    }
    tags = [f"seq-{i}" for i in range(n)]
    tags[4] = "τag/4"
    path = str(tmp_path / "simple.hdf")
    write_simplewriter_style(path, tags, inputs, extras, dim=50, extra_dims={"classes": 11})
    with h5py.File(path) as f:  # the layout really is SimpleHDFWriter's
        assert f["inputs"].chunks is not None and f["inputs"].maxshape[0] is None
        assert h5py.check_string_dtype(f["seqTags"].dtype).length is None
    src = sl.HDFSource(path)
    assert src.keys == ("data", "classes", "vec")
    assert "orth" in src.skipped_keys  # strings cannot become tensors; said, not silent
    assert src.schema["data"] == KeySpec(np.dtype(np.int32), (), True, 50)
    assert src.schema["classes"] == KeySpec(np.dtype(np.int64), (), True, 11)
    assert src.schema["vec"] == KeySpec(np.dtype(np.float32), (2,))
    assert list(src.tags) == tags
    for i in range(n):
        want = {"data": inputs[i], "classes": extras["classes"][i], "vec": extras["vec"][i]}
        assert_same_seq(src.read(i), want)


def test_tags_are_cut_at_the_first_nul(tmp_path):
    path = str(tmp_path / "nul.hdf")
    write_datasetwriter_style(path, ["a", "bb", "c"], inputs=feats([2, 1, 3], 2))
    with h5py.File(path, "r+") as f:
        f["seqTags"][1] = np.array(b"bb\0junk", dtype=f["seqTags"].dtype)
    assert list(sl.HDFSource(path).tags) == ["a", "bb", "c"]


def test_no_targets_group_has_a_dummy_column(tmp_path):
    path = str(tmp_path / "plain.hdf")
    x = feats([3, 0, 4], 6)
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.concatenate(x))
        f.create_dataset("seqLengths", data=np.array([[3, 0], [0, 0], [4, 0]], np.int32))
        f.create_dataset("seqTags", data=np.array([b"a", b"b", b"c"]))
    src = sl.HDFSource(path)
    assert src.keys == ("data",)
    for i in range(3):
        assert_same_seq(src.read(i), {"data": x[i]})


def test_targets_without_size_attributes(tmp_path):
    """RETURNN then takes dims from the data; a 1-D int key stays sparse, vocabulary unknown."""
    path = str(tmp_path / "nosize.hdf")
    c, v = labels([3, 2], 5), feats([1, 4], 3)
    write_datasetwriter_style(path, ["a", "b"], inputs=feats([2, 2], 2), targets={"c": c, "v": v})
    with h5py.File(path, "r+") as f:
        del f["targets/size"]
    src = sl.HDFSource(path)
    assert src.schema["c"] == KeySpec(np.dtype(np.int32), (), True, None)
    assert src.schema["v"] == KeySpec(np.dtype(np.float32), (3,))
    for i in range(2):
        assert_same_seq(src.read(i), {"data": src.read(i)["data"], "c": c[i], "v": v[i]})


def test_targets_without_inputs(tmp_path):
    """HDFDatasetWriter without an input key: the columns are the target keys only."""
    path = str(tmp_path / "targets_only.hdf")
    a, b = labels([2, 5, 1], 9), feats([4, 0, 3], 2)
    write_datasetwriter_style(
        path, ["x", "y", "z"], targets={"a": a, "b": b}, sizes={"a": [9, 1], "b": [2, 2]}
    )
    src = sl.HDFSource(path)
    assert src.keys == ("a", "b")
    for i in range(3):
        assert_same_seq(src.read(i), {"a": a[i], "b": b[i]})


def test_several_files_are_concatenated_and_extra_keys_dropped(tmp_path):
    parts, paths, all_tags = [], [], []
    for f in range(3):
        n = 3 + f
        lens = RNG.integers(0, 8, n)
        targets = {"classes": labels(lens, 4)}
        if f == 1:
            targets["extra"] = feats(lens, 2)  # only in a later file: dropped
        tags = [f"file{f}/seq{i}" for i in range(n)]
        path = str(tmp_path / f"part{f}.hdf")
        write_datasetwriter_style(
            path,
            tags,
            inputs=feats(lens, 3),
            targets=targets,
            sizes={k: ([4, 1] if k == "classes" else [2, 2]) for k in targets},
        )
        with h5py.File(path) as h:
            d = h["inputs"][()]
            starts = np.concatenate([[0], np.cumsum(lens)])
            parts += [
                {
                    "data": d[starts[i] : starts[i + 1]],
                    "classes": targets["classes"][i],
                }
                for i in range(n)
            ]
        paths.append(path)
        all_tags += tags
    src = sl.HDFSource(paths)
    assert len(src) == 3 + 4 + 5 and src.keys == ("data", "classes")
    assert list(src.tags) == all_tags
    for i, want in enumerate(parts):
        assert_same_seq(src.read(i), want)
    got = src.read_many([11, 0, 3, 3, 7, 2])
    for g, i in zip(got, [11, 0, 3, 3, 7, 2]):
        assert_same_seq(g, parts[i])
    np.testing.assert_array_equal(src.lengths("data"), [len(p["data"]) for p in parts])
    assert "3 files" in repr(src)


# ---- write_hdf round trips ----

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int16, np.bool_]


@st.composite
def memory_sources(draw):
    n = draw(st.integers(0, 8))
    keys = draw(
        st.lists(
            st.sampled_from(["data", "classes", "b", "zz"]), min_size=1, max_size=3, unique=True
        )
    )
    seqs, vocab = {}, {}
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    for k in keys:
        dtype = np.dtype(draw(st.sampled_from(DTYPES)))
        feat = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        lens = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
        arrays = [(rng.standard_normal((t, *feat)) * 20).astype(dtype) for t in lens]
        if dtype.kind in "iu" and not feat:
            arrays = [np.abs(a).astype(dtype) for a in arrays]
            if draw(st.booleans()):
                vocab[k] = 200
        seqs[k] = arrays
    tags = [f"t{i}/{draw(st.text(max_size=4).filter(lambda s: chr(0) not in s))}" for i in range(n)]
    return sl.MemorySource(seqs, tags, vocab)


@settings(max_examples=30, deadline=None)
@given(src=memory_sources(), chunked=st.booleans())
def test_write_hdf_round_trip(tmp_path_factory, src, chunked):
    path = str(tmp_path_factory.mktemp("rt") / "rt.hdf")
    sl.write_hdf(path, src, chunked=chunked)
    assert [p for p in os.listdir(os.path.dirname(path)) if p != "rt.hdf"] == []  # no temp left
    back = sl.HDFSource(path)
    assert back.keys == ("data", *sorted(k for k in src.keys if k != "data")) or (
        "data" not in src.keys and back.keys == tuple(sorted(src.keys))
    )
    assert len(back) == len(src)
    assert list(back.tags) == list(src.tags)
    for k in src.keys:
        want, got = src.schema[k], back.schema[k]
        assert (got.dtype, got.feature_shape) == (want.dtype, want.feature_shape)
        one_d_int = not want.feature_shape and want.dtype.kind in "iu"
        assert got.sparse == one_d_int  # RETURNN: 1-D ints are sparse
        if want.sparse:
            assert got.vocab_size == want.vocab_size
        np.testing.assert_array_equal(back.lengths(k), src.lengths(k))
    for i in range(len(src)):
        assert_same_seq(back.read(i), src.read(i))
    if len(src):
        for got, i in zip(back.read_many(np.arange(len(src))[::-1]), range(len(src) - 1, -1, -1)):
            assert_same_seq(got, src.read(i))
    assert sl.HDFSource(path).fingerprint() == back.fingerprint()


def test_write_hdf_is_atomic_on_failure(tmp_path):
    class Broken(sl.MemorySource):
        def read(self, index):
            if index == 2:
                raise OSError("disk on fire")
            return super().read(index)

    src = Broken({"data": feats([3, 3, 3], 2)})
    path = tmp_path / "out.hdf"
    with pytest.raises(DataError, match=r"sequence 2 \(tag 'seq-2'\).*OSError: disk on fire") as e:
        sl.write_hdf(path, src)  # named as the loader names it (read_batch)
    assert isinstance(e.value.__cause__, OSError)
    assert os.listdir(tmp_path) == []  # neither the file nor a temp file


def test_write_hdf_rejects_a_sequence_that_disagrees_with_the_schema(tmp_path):
    class Liar(sl.MemorySource):
        def read(self, index):
            d = super().read(index)
            return {"data": d["data"][:1]} if index == 1 else d

    with pytest.raises(DataError, match=r"sequence 1 \(tag 'seq-1'\).*'data'"):
        sl.write_hdf(tmp_path / "x.hdf", Liar({"data": feats([3, 3], 2)}))


# ---- processes: pickle, fork, spawn, DataLoader workers ----


@pytest.fixture
def two_files(tmp_path):
    paths, seqs = [], []
    for f in range(2):
        lens = RNG.integers(1, 30, 20)
        src = sl.MemorySource(
            {"data": feats(lens, 4), "classes": labels((lens + 1) // 2, 9)},
            [f"f{f}/s{i}" for i in range(20)],
            {"classes": 9},
        )
        path = str(tmp_path / f"w{f}.hdf")
        sl.write_hdf(path, src, chunked=f == 1)
        paths.append(path)
        seqs += [src.read(i) for i in range(20)]
    return paths, seqs


def test_pickle_round_trip_with_open_handles(two_files):
    paths, seqs = two_files
    src = sl.HDFSource(paths)
    assert_same_seq(src.read(25), seqs[25])  # handles now open in this process
    clone = pickle.loads(pickle.dumps(src))
    assert clone.fingerprint() == src.fingerprint()
    assert list(clone.tags) == list(src.tags)
    for i in (0, 19, 20, 39):
        assert_same_seq(clone.read(i), seqs[i])


def _read_all_in_child(src, queue):
    try:
        from seqloader.sources import hdf

        got = [src.read(i) for i in range(len(src))]
        queue.put((len(hdf._INHERITED), got))
    except BaseException as e:  # report instead of dying silently
        queue.put((repr(e), None))


def test_forked_child_opens_its_own_handles(two_files):
    paths, seqs = two_files
    src = sl.HDFSource(paths)
    src.read(0)
    src.read(30)  # both files open in the parent
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_read_all_in_child, args=(src, queue))
    p.start()
    inherited, got = queue.get(timeout=60)
    p.join(60)
    assert inherited == 2  # the parent's two open files were set aside, not used
    for g, w in zip(got, seqs):
        assert_same_seq(g, w)
    assert_same_seq(src.read(5), seqs[5])  # the parent's handles still work


def _epoch_batches(src, **workers) -> list[BatchRecord]:
    loader = sl.SeqLoader(src, ordering="random", max_seqs=3, max_frames=200, seed=7, **workers)
    try:
        return [batch_record(b) for b in loader.epoch(1)]
    finally:
        loader.close()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_give_the_same_batches(two_files, context):
    paths, seqs = two_files
    src = sl.HDFSource(paths)
    src.read(0)  # an open handle in the main process must not leak into workers
    want = _epoch_batches(src)
    # 2 forked workers split the work; one spawned worker (each imports torch) gets the source
    # by pickle
    workers = 2 if context == "fork" else 1
    got = _epoch_batches(src, num_workers=workers, multiprocessing_context=context)
    assert len(got) == len(want) > 0
    assert got == want  # indices, tags, dtypes, shapes, lengths, bytes
    seen = []
    for record in got:
        shape = {k: shape for k, _, shape, _ in record.tensors}["data"]
        batch = np.frombuffer(record.tensor_bytes("data"), seqs[0]["data"].dtype).reshape(shape)
        lengths = dict(record.lengths)["data"]
        for row, i in enumerate(record.seqs):
            np.testing.assert_array_equal(batch[row, : lengths[row]], seqs[i]["data"])
        seen += record.seqs
    assert sorted(seen) == list(range(40))


# ---- broken inputs: the right error, naming the file ----


def test_missing_file_names_which_of_the_list(two_files, tmp_path):
    paths, _ = two_files
    missing = str(tmp_path / "nope.hdf")
    with pytest.raises(DataError, match=r"nope\.hdf.*file 2 of 3.*does not exist"):
        sl.HDFSource([paths[0], missing, paths[1]])


def test_not_an_hdf_file(tmp_path):
    path = tmp_path / "notes.hdf"
    path.write_text("this is text\n" * 100)
    with pytest.raises(DataError, match=r"notes\.hdf.*not an HDF5 file"):
        sl.HDFSource(str(path))


def test_truncated_file(two_files, tmp_path):
    paths, _ = two_files
    with open(paths[0], "rb") as f:
        data = f.read()
    path = tmp_path / "cut.hdf"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut\.hdf.*truncated"):
        sl.HDFSource(str(path))


def test_missing_seq_lengths(tmp_path):
    path = str(tmp_path / "nolen.hdf")
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.zeros((4, 2), np.float32))
        f.create_dataset("seqTags", data=np.array([b"a"]))
    with pytest.raises(DataError, match=r"nolen\.hdf.*no 'seqLengths'"):
        sl.HDFSource(path)


def test_seq_lengths_disagreeing_with_the_data(datasetwriter_file):
    path, data, _ = datasetwriter_file
    with h5py.File(path, "r+") as f:
        f["seqLengths"][0, 3] += 1  # column 3 = "classes" (after data, align, b_only)
    total = sum(len(a) for a in data["classes"])
    with (
        pytest.raises(DataError, match=rf"dw\.hdf.*'classes'.*sums to {total + 1}.*has {total}"),
        pytest.warns(DataWarning, match="b_only"),
    ):
        sl.HDFSource(path)


def test_tag_count_mismatch(tmp_path):
    path = str(tmp_path / "tags.hdf")
    write_datasetwriter_style(path, ["a", "b", "c"], inputs=feats([1, 2, 3], 2))
    with h5py.File(path, "r+") as f:
        del f["seqTags"]
        f.create_dataset("seqTags", data=np.array([b"a", b"b"]))
    with pytest.raises(DataError, match=r"tags\.hdf.*2 tags.*3 sequences"):
        sl.HDFSource(path)


def test_wrong_column_count(tmp_path):
    path = str(tmp_path / "cols.hdf")
    write_datasetwriter_style(
        path, ["a", "b"], inputs=feats([1, 2], 2), targets={"c": labels([1, 1], 3)}, sizes={"c": 3}
    )
    with h5py.File(path, "r+") as f:
        del f["seqLengths"]
        f.create_dataset("seqLengths", data=np.array([[1], [2]], np.int32))
    with pytest.raises(
        DataError, match=r"cols\.hdf.*seqLengths has shape \[2, 1\].*\['data', 'c'\]"
    ):
        sl.HDFSource(path)


def test_later_file_missing_a_key_of_the_first(tmp_path):
    a, b = str(tmp_path / "full.hdf"), str(tmp_path / "less.hdf")
    write_datasetwriter_style(
        a, ["x"], inputs=feats([2], 2), targets={"c": labels([2], 3)}, sizes={"c": 3}
    )
    write_datasetwriter_style(b, ["y"], inputs=feats([2], 2))
    with pytest.raises(DataError, match=r"less\.hdf.*file 2 of 2.*lacks key\(s\) \['c'\]"):
        sl.HDFSource([a, b])
    assert sl.HDFSource([b, a]).keys == ("data",)  # the fix the message suggests


def test_later_file_with_another_feature_dim(tmp_path):
    a, b = str(tmp_path / "d2.hdf"), str(tmp_path / "d3.hdf")
    write_datasetwriter_style(a, ["x"], inputs=feats([2], 2))
    write_datasetwriter_style(b, ["y"], inputs=feats([2], 3))
    with pytest.raises(DataError, match=r"d3\.hdf.*'data' is float32\[T, 3\].*float32\[T, 2\]"):
        sl.HDFSource([a, b])


def test_read_error_names_sequence_tag_and_file(two_files, tmp_path):
    paths, _ = two_files
    path = str(tmp_path / "damaged.hdf")
    with open(paths[1], "rb") as f:  # the chunked one: reads go through HDF5
        data = f.read()
    with open(path, "wb") as f:
        f.write(data)
    src = sl.HDFSource(path)
    with open(path, "r+b") as f:
        f.truncate(len(data) // 3)  # damaged after open, e.g. overwritten on a shared disk
    with pytest.raises(DataError, match=r"sequence 17 \(tag 'f1/s17'.*damaged\.hdf"):
        src.read(17)
    with pytest.raises(DataError, match=r"sequence 17 \(tag 'f1/s17'.*damaged\.hdf"):
        read_batch(src, np.array([17, 18]))  # read_many fails; read_batch names the sequence
    with pytest.raises(DataError, match=r"2 sequences of file '.*damaged\.hdf' in one pass"):
        src.read_many([17, 18])  # no fallback of its own


def test_file_replaced_after_open_is_refused(tmp_path):
    path = str(tmp_path / "swap.hdf")
    sl.write_hdf(path, sl.MemorySource({"data": feats([4, 5], 2)}, ["a", "b"]))
    src = sl.HDFSource(path)
    sl.write_hdf(path, sl.MemorySource({"data": feats([4, 6], 2)}, ["a", "b"]))
    with pytest.raises(DataError, match=r"sequence 1 \(tag 'b'.*swap\.hdf.*changed since"):
        src.read(1)


def test_read_error_in_a_worker_reaches_the_trainer(two_files, tmp_path):
    paths, _ = two_files
    path = str(tmp_path / "damaged.hdf")
    with open(paths[1], "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data)
    src = sl.HDFSource(path)
    with open(path, "r+b") as f:
        f.truncate(len(data) // 3)
    loader = sl.SeqLoader(src, max_seqs=40, num_workers=1, multiprocessing_context="fork")
    try:
        with pytest.raises(DataError, match=r"sequence \d+ \(tag 'f1/s\d+'.*damaged\.hdf"):
            list(loader.epoch(1))
    finally:
        loader.close()


# ---- RETURNN itself (skipped when the returnn package is not importable) ----


def _returnn_dataset(paths):
    hdf = pytest.importorskip("returnn.datasets.hdf")
    ds = hdf.HDFDataset(files=list(paths), cache_byte_size=0)
    ds.initialize()
    ds.init_seq_order(epoch=1)
    return ds


@pytest.mark.parametrize("chunked", [False, True])
def test_returnn_reads_write_hdf_output_identically(tmp_path, chunked):
    lens = RNG.integers(0, 20, 12)
    src = sl.MemorySource(
        {
            "data": feats(lens, 6),
            "classes": labels(lens // 2, 13),
            "score": feats(RNG.integers(0, 3, 12), 2, np.float64),
        },
        [f"rec/{i}" for i in range(12)],
        {"classes": 13},
    )
    path = str(tmp_path / "ours.hdf")
    sl.write_hdf(path, src, chunked=chunked)
    ds = _returnn_dataset([path])
    assert ds.num_seqs == 12
    assert sorted(ds.get_data_keys()) == sorted(src.keys)
    assert ds.is_data_sparse("classes") and not ds.is_data_sparse("data")
    assert ds.num_outputs["classes"][0] == 13
    for i in range(12):
        ds.load_seqs(i, i + 1)
        assert ds.get_tag(i) == src.tag(i)
        for k in src.keys:
            got = ds.get_data(i, k)
            assert got.dtype == src.schema[k].dtype
            np.testing.assert_array_equal(got, src.read(i)[k])


def test_returnn_reads_sparse_inputs_without_targets(tmp_path):
    src = sl.MemorySource({"data": labels([3, 0, 5], 21)}, vocab_sizes={"data": 21})
    path = str(tmp_path / "sparse.hdf")
    sl.write_hdf(path, src)
    ds = _returnn_dataset([path])
    assert ds.is_data_sparse("data") and ds.num_inputs == 21
    for i in range(3):
        ds.load_seqs(i, i + 1)
        np.testing.assert_array_equal(ds.get_data(i, "data"), src.read(i)["data"])
    assert sl.HDFSource(path).schema["data"] == KeySpec(np.dtype(np.int32), (), True, 21)


def test_we_read_returnn_simplehdfwriter_output(tmp_path):
    hdf = pytest.importorskip("returnn.datasets.hdf")
    path = str(tmp_path / "returnn.hdf")
    writer = hdf.SimpleHDFWriter(path, dim=4, ndim=2)
    lens = [5, 3, 7, 1]
    x = np.zeros((4, 7, 4), np.float32)
    y = np.zeros((4, 7), np.int32)
    for i, n in enumerate(lens):
        x[i, :n] = RNG.standard_normal((n, 4))
        y[i, :n] = RNG.integers(0, 9, n)
    writer.insert_batch(x[:2, :5], [5, 3], ["a/1", "a/2"], extra={"classes": y[:2, :5]})
    writer.insert_batch(x[2:], [7, 1], ["b/1", "b/2"], extra={"classes": y[2:]})
    writer.close()
    src = sl.HDFSource(path)
    assert list(src.tags) == ["a/1", "a/2", "b/1", "b/2"]
    assert src.keys == ("data", "classes")
    assert src.schema["data"] == KeySpec(np.dtype(np.float32), (4,))
    ds = _returnn_dataset([path])
    for i in range(4):
        ds.load_seqs(i, i + 1)
        got = src.read(i)
        np.testing.assert_array_equal(got["data"], ds.get_data(i, "data"))
        np.testing.assert_array_equal(got["classes"], ds.get_data(i, "classes"))
        np.testing.assert_array_equal(got["data"], x[i, : lens[i]])


def test_returnn_reads_our_concatenated_files_like_we_do(two_files):
    paths, _ = two_files
    ds = _returnn_dataset(paths)
    ours = sl.HDFSource(paths)
    assert ds.num_seqs == len(ours) == 40
    for i in range(40):
        ds.load_seqs(i, i + 1)
        assert ds.get_tag(i) == ours.tag(i)
        got = ours.read(i)
        for k in ours.keys:
            np.testing.assert_array_equal(ds.get_data(i, k), got[k])
