"""RETURNN's ``DistributeFilesDataset`` in the shapes the i6 torch setups give it: a
``get_sub_epoch_dataset`` returning a ``MetaDataset`` over file trees (features and alignments
per entry), a ``PostprocessingDataset`` around the HDF (its ``map_seq`` a ``functools.partial``
made anew per call) and an ``OggZipDataset`` over zips (RETURNN's own zip layout, its listing
inside): RETURNN's tags, order, batches and values per key through its own pipeline, sub-epochs
1-4 and a later one, 0 and 2 workers; the Meta shape also with its files sharded over 2 ranks.
Stand-in data: RETURNN's ``SimpleHDFWriter`` and zips of the OggZip stand-in corpora."""

from __future__ import annotations

import gzip
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.datasets.distrib_files")
pytest.importorskip("sentencepiece")
from returnn_configs.corpora import write_hdf, write_official_oggzip
from test_returnn_public_configs import CONFIGS, ours, reference

CONFIG = CONFIGS / "librispeech960_distrib_files.config"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    """The config's stand-in corpora, alignments for its HDF parts (the same tags, another key)
    and six small zips in RETURNN's own OggZip layout."""
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_dfd_shapes")) as folder:
        rng = np.random.default_rng(7)
        for k in range(1, 11):
            with h5py.File(folder / "hdf" / "dfd" / f"part.{k:02d}.hdf", "r") as f:
                tags = [t.decode() for t in f["seqTags"][...]]
            write_hdf(folder / "hdf" / "dfd" / f"align.{k:02d}.hdf", tags, rng, dim=None,
                      data_len=(5, 40), target_len=lambda n: 1, target_dim=3)  # fmt: skip
        official = folder / "official"
        official.mkdir()
        for k in range(6):
            name = f"zpart{k}"
            write_official_oggzip(official, name, int(rng.integers(2, 5)), rng)
            _returnn_zip(official, name, folder / f"{name}.zip")
        yield folder


def _returnn_zip(official: Path, name: str, out: Path) -> None:
    """RETURNN's own OggZip layout: ``NAME.txt`` (the listing) and the audio under ``NAME/``."""
    with gzip.open(official / f"{name}.txt.gz", "rt") as f:
        listing = f.read()
    with zipfile.ZipFile(official / f"{name}.zip") as src, zipfile.ZipFile(out, "w") as dst:
        for member in src.namelist():
            if member.endswith(".ogg"):
                dst.writestr(f"{name}/{member}", src.read(member))
        dst.writestr(f"{name}.txt", listing)


META = """
_align = [f.replace("/part.", "/align.") for f in _train_files]
def get_sub_epoch_dataset(files):
    return {
        "class": "MetaDataset",
        "datasets": {
            "feat": {"class": "HDFDataset", "files": [f["feat"] for f in files],
                     "seq_ordering": "laplace:.4"},
            "align": {"class": "HDFDataset", "files": [f["align"] for f in files]},
        },
        "data_map": {"data": ("feat", "data"), "classes": ("feat", "classes"),
                     "align": ("align", "data")},
        "seq_order_control_dataset": "feat",
    }
train["files"] = [{"feat": f, "align": a} for f, a in zip(_train_files, _align)]
train["get_sub_epoch_dataset"] = get_sub_epoch_dataset
"""
POST = """
import functools
def _scaled(data, *, factor, **_kwargs):
    data.data["data"].raw_tensor = data.data["data"].raw_tensor * factor
    return data
def get_sub_epoch_dataset(files):
    return {
        "class": "PostprocessingDataset",
        "dataset": {"class": "HDFDataset", "files": files, "seq_ordering": "laplace:.4"},
        "map_seq": functools.partial(_scaled, factor=2.0),
    }
train["get_sub_epoch_dataset"] = get_sub_epoch_dataset
train["use_worker_proc"] = False  # RETURNN's worker process cannot unpickle config functions
"""
OGG = """
import glob
def get_sub_epoch_dataset(files):
    return {"class": "OggZipDataset", "path": files, "seq_ordering": "laplace:.2",
            "audio": {"features": "raw", "sample_rate": 16000}, "targets": None}
train["files"] = sorted(glob.glob(_data + "/zpart*.zip"))
train["get_sub_epoch_dataset"] = get_sub_epoch_dataset
train["partition_epoch"] = 2
batch_size = 200000
max_seqs = 3
del max_seq_length
"""
SHAPES = {"meta": META, "post": POST, "ogg": OGG}
SHARD = "\ntrain['distrib_shard_files'] = True\ntrain['sharding_fix'] = True\n"


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_sub_epoch_dataset_shapes_as_returnn(
    data: Path, tmp_path: Path, shape: str, num_workers: int
) -> None:
    # in the module's folder: reference() caches by path, so RETURNN runs it once for both counts
    config = data / f"{shape}.config"
    config.write_text(CONFIG.read_text() + SHAPES[shape])
    epochs = (1, 2, 3, 4, 7)
    expected_batches, expected_values = reference(str(config), "train", epochs)
    got_batches, got_values = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref), tag
        for key, value in ref.items():
            assert got_values[tag][key].shape == value.shape, (tag, key)
            np.testing.assert_allclose(got_values[tag][key], value, rtol=1e-6, err_msg=tag)


def test_meta_shape_on_two_ranks_as_returnn(data: Path, tmp_path: Path) -> None:
    """Its file trees sharded over 2 ranks (sharding_fix): rank r gets RETURNN's rank r, every
    rank stopping after the shortest rank's batch count."""
    epochs = (1, 2, 4)
    expected = {}
    for r in range(2):
        config = tmp_path / f"meta_rank{r}.config"
        config.write_text(
            CONFIG.read_text()
            + META
            + SHARD
            + f"__debug_dummy_distributed_rank_and_size = ({r}, 2)\n"
        )
        expected[r] = reference(str(config), "train", epochs)[0]
    config = tmp_path / "meta_sharded.config"
    config.write_text(CONFIG.read_text() + META + SHARD)
    for r in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = from_returnn_config(config, rank=r, world_size=2)["train"]
        for epoch in epochs:
            steps = min(len(expected[0][epoch]), len(expected[1][epoch]))
            assert [list(b.seq_tags) for b in loader.epoch(epoch)] == expected[r][epoch][:steps]
        loader.close()
