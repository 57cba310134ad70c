"""A RETURNN HDF file whose floats are big-endian ('>f4', as h5py writes when asked): its batches
hold native-order values equal to h5py's own read, and its NaN/Inf are still found."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

import seqloader as sl
from hdf_files import write_datasetwriter_style
from seqloader.errors import DataWarning


def _write(path: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((n, 3)).astype(">f4") for n in (4, 7, 2, 5, 6)]
    seqs[3][1, 2] = np.nan  # one bad value: the screen must still see it
    tags = [f"s{i}" for i in range(len(seqs))]
    write_datasetwriter_style(path, tags, inputs=seqs)
    with h5py.File(path, "r+") as f:  # rewritten big-endian (np.concatenate made it native)
        del f["inputs"]
        f.create_dataset("inputs", data=np.concatenate(seqs), dtype=">f4")
    return seqs


@pytest.mark.parametrize("workers", [0, 1])
def test_big_endian_floats_load_native(tmp_path, workers):
    path = str(tmp_path / "be.hdf")
    seqs = _write(path)
    with h5py.File(path) as f:
        want = f["inputs"][()].astype(np.float32)  # h5py's read, native order
    starts = np.cumsum([0] + [len(s) for s in seqs])
    src = sl.HDFSource(path)
    assert np.dtype(src.schema["data"].dtype).isnative
    assert src.read(0)["data"].dtype.isnative
    extra = {} if not workers else {"num_workers": 1, "multiprocessing_context": "fork"}
    seen = set()
    with sl.SeqLoader(src, max_seqs=5, seed=0, **extra) as loader, pytest.warns(DataWarning):
        for batch in loader.epoch(1):
            data, lengths = batch.data["data"], batch.lengths["data"]
            assert data.dtype == torch.float32
            for row, i in enumerate(batch.seq_indices.tolist()):
                n = int(lengths[row])
                np.testing.assert_array_equal(
                    data[row, :n].numpy(), want[starts[i] : starts[i] + n]
                )
                seen.add(i)
            assert len(batch.nonfinite) == 1 and "s3" in batch.nonfinite[0]
    assert seen == set(range(len(seqs)))
