"""One copy from file to batch (``loading.direct``, ``HDFSource.read_into``): batches built by
copying each sequence straight into the padded arrays are byte-identical to the per-sequence path
and to plain h5py, every byte of the batch is written (reused memory holds old batches), the
NaN/Inf screen names the same sequences, and reused batch memory is never overwritten while a
batch is alive. No timing here."""

from __future__ import annotations

import zlib

import h5py
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.loading.arena import BlockPool
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.direct import reads_into
from seqloader.loading.execute import WorkerSpec, execute
from seqloader.sources.hdf_chunks import ChunkedRows
from seqloader.sources.hdf_read import MappedRows
from seqloader.sources.padded_rows import SpanRequest
from test_hdf_fast import LAYOUTS, plain_h5py, same_bytes, write_by_hand
from test_row_kernel import row_path  # noqa: F401  (a fixture: the numpy rows, the kernel)

DIRECT_DTYPES = ["<f4", "<f8", "<f2", "i1", "<i4", "<i8", "u1", "<u2", ">f4", ">i2", "?"]


def garbage_alloc(shape, dtype):
    """Memory full of old bytes, as a reused block holds: every byte must be written."""
    dtype = np.dtype(dtype)
    raw = np.full(int(np.prod(shape)) * dtype.itemsize, 0xA5, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def identity(seq, rng):
    return seq  # forces the per-sequence path (a transform needs each sequence)


def reference_batch(path: str, keys, seqs) -> dict[str, np.ndarray]:
    """Plain h5py slices, padded with zeros: what every path must deliver."""
    return reference_batch_files([path], keys, seqs, per_file=10**9)


def reference_batch_files(paths, keys, seqs, per_file: int = 17) -> dict[str, np.ndarray]:
    """``reference_batch`` over several files of ``per_file`` sequences each."""
    out = {}
    for key in keys:
        rows = [plain_h5py(paths[int(i) // per_file], key, int(i) % per_file) for i in seqs]
        t_max = max(len(r) for r in rows)
        padded = np.zeros((len(rows), t_max, *rows[0].shape[1:]), rows[0].dtype)
        for j, r in enumerate(rows):
            padded[j, : len(r)] = r
        out[key] = padded
    return out


def spec_of(seqs) -> BatchSpec:
    seqs = np.asarray(seqs, dtype=np.int64)
    return BatchSpec(1, 0, seqs, np.ones(len(seqs), dtype=bool))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", DIRECT_DTYPES)
def test_direct_batches_equal_h5py_and_the_per_sequence_path(tmp_path, dtype, layout):
    rng = np.random.default_rng(zlib.crc32(f"direct/{dtype}/{layout}".encode()))
    path = str(tmp_path / "x.hdf")
    n = write_by_hand(path, dtype, layout, rng)
    for use_mmap in (True, False):
        src = sl.HDFSource(path, use_mmap=use_mmap)
        assert reads_into(src)
        for seqs in ([5, 2, 2, 16, 0], list(range(3, 12)), rng.integers(0, n, 7).tolist(), [4]):
            want = reference_batch(path, ("data", "t2"), seqs)
            direct = execute(src, spec_of(seqs), WorkerSpec(0, None, screen=True), garbage_alloc)
            general = execute(
                src, spec_of(seqs), WorkerSpec(0, identity, screen=True), garbage_alloc
            )
            for key in want:
                assert same_bytes(direct.data[key], want[key]), (seqs, key, use_mmap)
                assert same_bytes(general.data[key], want[key]), (seqs, key, use_mmap)
                np.testing.assert_array_equal(direct.lengths[key], general.lengths[key])
                assert direct.lengths[key].dtype == np.int64
            assert direct.tags == general.tags == [f"s{i}" for i in seqs]
            assert direct.nonfinite == general.nonfinite == []


@st.composite
def chunked_files(draw):
    dim = draw(st.integers(1, 23))
    n = draw(st.integers(1, 12))
    lens = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    chunk = (draw(st.integers(1, 17)), draw(st.integers(1, dim)))
    dtype = draw(st.sampled_from(["<f4", "<i2", "<f8", "u1"]))
    batches = draw(
        st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=6), min_size=1, max_size=4)
    )
    scatter = draw(st.booleans())  # chunks of one row not back to back in the file
    labels = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))  # a 1-D key
    label_layout = draw(st.sampled_from([None, 1, 5, 64]))  # contiguous or chunk length
    interleaved = draw(st.booleans())  # written sequence by sequence, as RETURNN's writer does
    return dim, lens, chunk, dtype, batches, scatter, labels, label_layout, interleaved


@settings(max_examples=40, deadline=None)
@given(chunked_files())
def test_direct_chunk_copies_equal_h5py(tmp_path_factory, case):
    """Chunks copied straight into the padded batch, whole chunk rows at once or chunk by chunk,
    for any chunk shape, width and span: the bytes of h5py."""
    dim, lens, chunk, dtype, batches, scatter, labels, label_layout, interleaved = case
    path = str(tmp_path_factory.mktemp("direct") / "c.hdf")
    rng = np.random.default_rng(sum(lens) * 31 + dim)
    total, total_labels = sum(lens), sum(labels)
    if total == 0 or total_labels == 0:
        return  # an all-empty dataset is never read from the file
    values = (rng.standard_normal((total, dim)) * 30).astype(dtype)
    label_values = rng.integers(-99, 99, total_labels, dtype=np.int32)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("inputs", (total, dim), dtype, chunks=chunk, maxshape=(None, dim))
        kw = {} if label_layout is None else {"chunks": (label_layout,), "maxshape": (None,)}
        c = f.create_dataset("targets/data/classes", (total_labels,), np.int32, **kw)
        if interleaved:  # chunks of both datasets allocated in turn: runs of chunk rows break
            x = y = 0
            for n, m in zip(lens, labels):
                d[x : x + n] = values[x : x + n]
                c[y : y + m] = label_values[y : y + m]
                f.flush()
                x, y = x + n, y + m
        else:
            d[...] = values
            c[...] = label_values
        f.create_group("targets/size").attrs["classes"] = [200, 1]
        f.create_dataset("seqLengths", data=np.array([lens, labels], dtype=np.int32).T)
        f.create_dataset("seqTags", data=np.array([f"t{i}".encode() for i in range(len(lens))]))
    src = sl.HDFSource(path)
    readers = src._file(0).readers
    assert isinstance(readers["data"], ChunkedRows)
    assert isinstance(readers["classes"], MappedRows if label_layout is None else ChunkedRows)
    if scatter:
        readers["data"]._row_whole[:] = False
    for seqs in batches:
        got = execute(src, spec_of(seqs), WorkerSpec(0, None), garbage_alloc)
        want = reference_batch(path, ("data", "classes"), seqs)
        for key in want:
            assert same_bytes(got.data[key], want[key]), key


def write_with_values(path: str, seqs: list[np.ndarray], layout: str) -> None:
    kw = dict(LAYOUTS[layout])
    if "maxshape" in kw:
        kw["maxshape"] = (None, seqs[0].shape[1])
    if "chunks" in kw:
        kw["chunks"] = (kw["chunks"][0], kw["chunks"][1])
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.concatenate(seqs), **kw)
        f.create_group("targets/data")  # no targets: seqLengths has the inputs column only
        f.create_dataset("seqLengths", data=np.array([[len(s)] for s in seqs], dtype=np.int32))
        f.create_dataset("seqTags", data=np.array([f"seq{i}".encode() for i in range(len(seqs))]))


@pytest.mark.usefixtures("row_path")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_nonfinite_screen_names_the_same_sequences(tmp_path, layout):
    """NaN/Inf found while copying: the same messages (sequence, tag, file, key, frame) as the
    per-sequence screen, on the numpy rows and the compiled kernel alike; a value whose square
    overflows is a false alarm the exact check drops (the kernel raises none)."""
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((int(rng.integers(1, 9)), 3)).astype(np.float32) for _ in range(9)]
    seqs[2][1, 2] = np.nan
    seqs[5][0, 0] = -np.inf
    seqs[5][3 % len(seqs[5]), 1] = np.nan
    seqs[7][0, 1] = 3e30  # finite, but its square overflows float32
    path = str(tmp_path / "nan.hdf")
    write_with_values(path, seqs, layout)
    for use_mmap in (True, False):
        src = sl.HDFSource(path, use_mmap=use_mmap)
        for batch in ([0, 2, 5, 7], [7, 7, 1], [5, 2, 2], [8]):
            direct = execute(src, spec_of(batch), WorkerSpec(0, None, screen=True), garbage_alloc)
            general = execute(
                src, spec_of(batch), WorkerSpec(0, identity, screen=True), garbage_alloc
            )
            assert direct.nonfinite == general.nonfinite
            named = sorted({i for i in batch if i in (2, 5)})
            assert len(direct.nonfinite) == sum(i in (2, 5) for i in batch)
            for i in named:
                assert any(f"sequence {i} (tag 'seq{i}')" in m for m in direct.nonfinite)
                assert all(path in m for m in direct.nonfinite)
            unscreened = execute(
                src, spec_of(batch), WorkerSpec(0, None, screen=False), garbage_alloc
            )
            assert unscreened.nonfinite == []


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(["<f2", "<f4", "<f8"]),
    layout=st.sampled_from(["contiguous", "chunked"]),
    lens=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    bad=st.lists(
        st.tuples(
            st.integers(0, 5),  # sequence
            st.integers(0, 5),  # frame
            st.integers(0, 2),  # feature
            st.sampled_from(["nan", "inf", "-inf", "max"]),  # max: finite, its square overflows
        ),
        min_size=1,
        max_size=4,
    ),
    mmap=st.booleans(),
)
def test_nonfinite_anywhere_in_any_row_is_caught(tmp_path_factory, dtype, layout, lens, bad, mmap):
    """Whatever the float dtype (float16's squares overflow from 256 on), a NaN/Inf at any frame
    and feature of any sequence of a batch is named (sequence, tag, file, key) by the direct
    path's screen; a large finite value (the screen's false alarm) is never named."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(len(lens))
    seqs = [(rng.standard_normal((n, 3)) * 100).astype(dt) for n in lens]
    special = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "max": np.finfo(dt).max}
    for i, t, c, kind in bad:
        seq = seqs[i % len(seqs)]
        seq[t % len(seq), c] = special[kind]
    named = {i for i, s in enumerate(seqs) if not np.isfinite(s).all()}
    path = str(tmp_path_factory.mktemp("anywhere") / "bad.hdf")
    write_with_values(path, seqs, layout)
    src = sl.HDFSource(path, use_mmap=mmap)
    batch = [*range(len(seqs) - 1, -1, -1), 0]  # every sequence, one of them twice
    got = execute(src, spec_of(batch), WorkerSpec(0, None, screen=True), garbage_alloc)
    assert len(got.nonfinite) == sum(i in named for i in batch)
    for i in named:
        assert any(f"sequence {i} (tag 'seq{i}')" in m for m in got.nonfinite)
    assert all(path in m and "key 'data'" in m for m in got.nonfinite)


@pytest.mark.usefixtures("row_path")
def test_loader_reports_nonfinite_from_the_direct_path(tmp_path):
    seqs = [np.ones((4, 2), np.float32) for _ in range(6)]
    seqs[3][2, 0] = np.inf
    path = str(tmp_path / "inf.hdf")
    write_with_values(path, seqs, "contiguous")
    loader = sl.SeqLoader(sl.HDFSource(path), max_seqs=2, checks=sl.CheckOptions(nonfinite="error"))
    with pytest.raises(sl.DataError, match=r"sequence 3 \(tag 'seq3'\).*inf.hdf.*key 'data'"):
        for _ in loader.epoch(1):
            pass


def test_block_pool_reuses_a_block_only_after_its_batch_died():
    pool = BlockPool(max_blocks=2)
    a = pool.lend(1000)
    x = a((10, 10), np.float32)
    x[...] = 1
    del a  # the allocator goes; the array keeps the block lent
    b = pool.lend(1000)
    y = b((10, 10), np.float32)
    assert not np.shares_memory(x, y)
    assert pool.lend(1000) is None  # both blocks lent
    view = torch.from_numpy(x[2:5])  # a tensor of a slice keeps the block too
    del x
    assert pool.lend(10) is None
    del view
    c = pool.lend(1000)
    assert c is not None and np.shares_memory(c((10, 10), np.float32), b.lease) is False


@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
def test_kept_batches_stay_intact_with_reused_memory(tmp_path, layout):
    """num_workers=0 builds batches in reused blocks: every batch of two epochs held at once (more
    than the pool has blocks), and slices kept after their batch was dropped, still equal h5py."""
    rng = np.random.default_rng(5)
    seqs = [
        rng.standard_normal((int(rng.integers(1, 30)), 4)).astype(np.float32) for _ in range(40)
    ]
    path = str(tmp_path / "keep.hdf")
    write_with_values(path, seqs, layout)
    loader = sl.SeqLoader(sl.HDFSource(path), max_seqs=3, ordering="random", seed=2)
    kept, slices = [], []
    for epoch in (1, 2):
        for batch in loader.epoch(epoch):
            kept.append(batch)
            slices.append((batch.seq_indices.clone(), batch["data"][:, :1]))
    assert len(kept) > 8
    for batch in kept:
        want = reference_batch(path, ("data",), batch.seq_indices.tolist())["data"]
        assert same_bytes(batch["data"].numpy(), want)
    del kept
    for epoch in (3, 4):  # reuse freely now
        for _ in loader.epoch(epoch):
            pass
    for idx, first in slices:
        want = reference_batch(path, ("data",), idx.tolist())["data"][:, :1]
        assert same_bytes(first.numpy(), want)


def test_packed_tags_take_equals_indexing():
    from seqloader.sources.hdf_layout import PackedTags

    tags = ["a", "bé", "", "x/y/z", "\udcff"]
    packed = PackedTags.from_strings(tags)
    idx = np.array([4, 1, 2, 0, 1, 3])
    assert packed.take(idx) == [packed[int(i)] for i in idx]


@pytest.mark.parametrize(
    "shape,dtype",
    [((2, 9, 4), np.float32), ((2, 3, 3), np.float32), ((1, 9, 3), np.float32), ((2, 9, 3), "<f8")],
)
@pytest.mark.usefixtures("row_path")
def test_raw_copies_refuse_a_destination_that_does_not_fit(tmp_path, shape, dtype):
    """The mapped reader copies rows raw (memoryviews, or the compiled kernel): a destination of
    another feature shape, too few frames or rows, or another dtype goes through numpy instead,
    which raises (or converts) rather than writing past the array."""
    seqs = [
        np.arange(i * 30, i * 30 + 3 * (i + 2), dtype=np.float32).reshape(-1, 3) for i in range(3)
    ]
    path = str(tmp_path / "fit.hdf")
    write_with_values(path, seqs, "contiguous")
    reader = sl.HDFSource(path)._file(0).readers["data"]
    assert isinstance(reader, MappedRows)
    rows = np.concatenate(seqs)  # 9 frames in the file
    begin, end = np.array([0, 4]), np.array([4, 9])  # spans of 4 and 5 frames
    out = np.full(shape, 7, dtype=dtype)
    fits = shape[1] >= 5 and shape[0] >= 2 and shape[2:] == (3,)
    if not fits:
        with pytest.raises((ValueError, IndexError)):
            reader.spans_into(SpanRequest(begin, end, out, [0, 1]))
        return
    # float64: converted by numpy, values kept
    reader.spans_into(SpanRequest(begin, end, out, [0, 1]))
    np.testing.assert_array_equal(out[1, :5], rows[4:9])
    np.testing.assert_array_equal(out[0, :4], rows[0:4])
    assert (out[0, 4:] == 0).all()


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=40),
    held=st.integers(0, 2),
)
@example(sizes=[5000, 10, 100, 1000, 2000, 3000], held=2)  # batches growing after the largest
def test_block_pool_allocates_for_the_largest_batch_seen(sizes, held):
    """A block is (re)allocated at the largest batch lent for so far (sized to the batch that
    needed it, blocks were replaced again and again while batches grew): once the largest batch
    of a run has been lent for, the pool allocates at most ``max_blocks`` more blocks, however
    the sizes vary and batches are held; every batch gets memory of its own while held."""
    pool = BlockPool(max_blocks=3)
    after_largest, seen_largest = 0, False
    live: list[np.ndarray] = []
    for n in sizes:
        before = {id(b) for b in pool.blocks}
        lent = pool.lend(n)
        assert lent is not None  # at most ``held`` + 1 < max_blocks batches alive at once
        if seen_largest:
            after_largest += sum(id(b) not in before for b in pool.blocks)
        seen_largest = seen_largest or n == max(sizes)
        x = lent((n,), np.dtype(np.uint8))
        x[...] = len(live) % 251
        assert not any(np.shares_memory(x, y) for y in live)
        live.append(x)
        del lent, x
        while len(live) > held:
            live.pop(0)
    assert after_largest <= pool.max_blocks


def test_batches_over_every_file_read_each_files_row_offsets(tmp_path):
    """A batch over several files reads each sequence at its own file's row offsets (views of
    the store's column, taken per batch): the same bytes as h5py, at every file's first and
    last sequences."""
    rng = np.random.default_rng(7)
    paths = [str(tmp_path / f"{i}.hdf") for i in range(3)]
    for p in paths:
        write_by_hand(p, "<f4", "contiguous", rng)  # 17 sequences each
    src = sl.HDFSource(paths, index_dir=str(tmp_path / "index"))
    seqs = [40, 3, 20, 16, 17, 50, 0, 33]  # every file, its first and last sequences
    want = reference_batch_files(paths, ("data", "t2"), seqs)
    got = execute(src, spec_of(seqs), WorkerSpec(0, None, screen=True), garbage_alloc)
    for key in want:
        assert same_bytes(got.data[key], want[key]), key
