"""Row offsets from the lengths and a sparse index (``sources/row_offsets.py``): the same values
as every file's running sum, however the lengths came in blocks; a store of another layout is
built again, never read as this one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.sources import columns as columns_module
from seqloader.sources import hdf_store
from seqloader.sources.row_offsets import STEP, RowOffsets, SparseTotals, sparse_totals


@settings(max_examples=60, deadline=None)
@given(
    files=st.lists(st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=5),
    step=st.sampled_from([1, 2, 3, 8, STEP]),
    cuts=st.lists(st.integers(0, 200), max_size=4),
    picks=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_each_files_row_offsets_are_its_running_sum(files, step, cuts, picks) -> None:
    lengths = np.array([x for f in files for x in f], dtype=np.int32)
    bounds = np.zeros(len(files) + 1, np.int64)
    np.cumsum([len(f) for f in files], out=bounds[1:])
    blocks = np.split(lengths, sorted(c % (len(lengths) + 1) for c in cuts))
    streamed = np.concatenate(list(SparseTotals(step).blocks(blocks)))
    assert streamed.tolist() == sparse_totals(lengths, step).tolist()
    rows = RowOffsets(lengths, streamed, step)
    for f, own in enumerate(files):
        expected = np.concatenate([[0], np.cumsum(own, dtype=np.int64)])
        got = rows.file(bounds, f)
        assert len(got) == len(expected) and np.asarray(got).tolist() == expected.tolist()
        assert [got[j] for j in range(len(expected))] == expected.tolist()
        assert got[-1] == expected[-1]
        local = np.array([p % len(expected) for p in picks], dtype=np.int64)
        assert got[local].tolist() == expected[local].tolist()
        assert got[local.reshape(-1, 1)].reshape(-1).tolist() == expected[local].tolist()


def test_a_store_of_another_row_layout_is_built_again(tmp_path) -> None:
    import seqloader as sl

    path = tmp_path / "a.hdf"
    data = [np.full((k % 5 + 1, 2), k, np.float32) for k in range(150)]
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=[f"s{k}" for k in range(150)]))
    lengths = np.array([len(d) for d in data], np.int64)
    index = tmp_path / "idx"
    sl.HDFSource(path, index_dir=index).close()
    (store_path,) = index.glob("hdf-*.cols")
    store = columns_module.ColumnStore(store_path)
    assert hdf_store._same_layout(store)
    # the same store with its row offsets said to be every 32nd: not this layout
    meta = dict(store.meta, row_step=32)
    columns = {name: np.asarray(store.raw_column(name)) for name in store.names}
    columns_module.write_store(store_path, store.identity, columns, meta)
    stamp = store_path.stat().st_mtime_ns
    src = sl.HDFSource(path, index_dir=index)
    assert store_path.stat().st_mtime_ns != stamp  # built again
    rows = hdf_store.FileStarts(hdf_store.metadata_of(src.store).starts, src.file_layout())[0]
    assert np.asarray(rows["data"]).tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    picked = [0, 63, 64, 65, 149]
    assert all((src.read(k)["data"] == data[k]).all() for k in picked)
    assert all((d["data"] == data[k]).all() for k, d in zip(picked, src.read_many(picked)))
    src.close()
