"""RETURNN's ``PostprocessingDataset``: a ``map_seq`` that keeps lengths (or adds a key whose
lengths follow an input key) converts and gives RETURNN's tags, order, batches and values per key
through RETURNN's own pipeline (train sub-epochs 1, 2 and 3, dev; 0 and 2 workers), around an
``HDFDataset``, a ``MetaDataset`` and an ``OggZipDataset``. A ``map_seq`` that draws from its
rng, depends on its position or changes lengths without a rule, and any ``map_seq_stream``, are
refused at conversion with the reason and the native equivalent. Stand-in data: RETURNN's
``SimpleHDFWriter`` and the OggZip stand-in corpora (``returnn_configs.corpora``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from returnn_configs.corpora import write_hdf
from test_returnn_public_configs import ours, reference

N = 20


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("returnn_post")
    rng = np.random.default_rng(33)
    tags = [f"corpus/rec{i // 4}/{i}" for i in range(N)]
    write_hdf(folder / "train.hdf", tags, rng, dim=6, data_len=(10, 60),
              target_len=lambda n: max(1, n // 5), target_dim=20)  # fmt: skip
    write_hdf(folder / "dev.hdf", [f"dev/{i}" for i in range(9)], rng, dim=6, data_len=(10, 60),
              target_len=lambda n: max(1, n // 5), target_dim=20)  # fmt: skip
    yield folder


# map_seq as RETURNN calls it: scales the features, adds a derived per-frame key and a
# per-sequence key; map_outputs declares every key the dataset then has
MAP_SEQ = """
import numpy
from returnn.tensor import Tensor

def map_seq(data, *, rng, epoch, seq_idx, **kwargs):
    x = data.data["data"].raw_tensor
    data.data["data"].raw_tensor = (x * 0.5 + 1.0).astype("float32")
    energy = Tensor("energy", shape=(None,), dtype="float32", batch_dim_axis=None)
    energy.raw_tensor = (x ** 2).sum(axis=-1).astype("float32")
    data.data["energy"] = energy
    count = Tensor("count", shape=(None,), dtype="int32", batch_dim_axis=None)
    count.raw_tensor = numpy.array([len(data.data["classes"].raw_tensor)], dtype="int32")
    data.data["count"] = count
    return data

outputs = {
    "data": {"shape": (None, 6), "dtype": "float32"},
    "classes": {"shape": (None,), "dtype": "int32", "sparse": True, "dim": 20},
    "energy": {"shape": (None,), "dtype": "float32"},
    "count": {"shape": (None,), "dtype": "int32"},
}
"""

INNER = {
    "hdf": '{{"class": "HDFDataset", "files": ["{d}/{part}.hdf"]{opts}}}',
    "meta": '{{"class": "MetaDataset", "datasets": {{"a": {{"class": "HDFDataset", '
    '"files": ["{d}/{part}.hdf"]{opts}}}}}, "data_map": {{"data": ("a", "data"), '
    '"classes": ("a", "classes")}}, "seq_order_control_dataset": "a"}}',
}


def _config(folder: Path, inner: str, extra: str = "") -> Path:
    train = INNER[inner].format(
        d=folder, part="train", opts=', "seq_ordering": "laplace:3", "partition_epoch": 2'
    )
    dev = INNER[inner].format(d=folder, part="dev", opts="")
    text = "#!rnn.py\n" + MAP_SEQ + extra
    text += f'train = {{"class": "PostprocessingDataset", "dataset": {train}, '
    text += '"map_seq": map_seq, "map_outputs": outputs}\n'
    text += (
        f'dev = {{"class": "PostprocessingDataset", "dataset": {dev}, "seq_ordering": "default", '
    )
    text += '"map_seq": map_seq, "map_outputs": outputs}\n'
    text += "batch_size = 150\nmax_seqs = 4\n"
    path = folder / f"{inner}.config"
    path.write_text(text)
    return path


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name,epochs", [("train", (1, 2, 3)), ("dev", (1,))])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_map_seq_as_returnn(
    data: Path, tmp_path: Path, inner: str, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    config = _config(data, inner)
    _as_returnn(config, name, epochs, num_workers, tmp_path, {"data", "classes", "energy", "count"})


def _as_returnn(
    config: Path, name: str, epochs: tuple[int, ...], workers: int, tmp: Path, keys: set[str]
) -> None:
    """Tags, order and batches of every epoch, values per key of the first, as RETURNN's."""
    expected_batches, expected_values = reference(str(config), name, epochs)
    got_batches, got_values = ours(config, workers, name, epochs, tmp)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref) == keys, tag
        for key, value in ref.items():
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")


def test_map_seq_without_map_outputs_as_returnn(data: Path, tmp_path: Path) -> None:
    """No map_outputs: RETURNN keeps the inner dataset's keys (a key map_seq adds is dropped)."""
    config = _config(data, "hdf")
    text = config.read_text().replace(', "map_outputs": outputs', "")
    config = tmp_path / "plain.config"
    config.write_text(text)
    _as_returnn(config, "train", (1, 2), 2, tmp_path / "ours", {"data", "classes"})


def _convert(folder: Path, map_seq: str, **opts) -> None:
    train = {"class": "HDFDataset", "files": [str(folder / "train.hdf")]}
    namespace: dict = {}
    exec(map_seq, namespace)
    spec = {"class": "PostprocessingDataset", "dataset": train, **opts}
    if "map_seq" in namespace:
        spec["map_seq"] = namespace["map_seq"]
    from_returnn_config({"train": spec, "batch_size": 1000})


WHERE = r"train dataset \(PostprocessingDataset\): "


NOISE = """
def map_seq(data, *, rng, **kwargs):
    x = data.data["data"].raw_tensor
    data.data["data"].raw_tensor = x + rng.normal(size=x.shape).astype(x.dtype)
    return data
"""
POSITION = """
def map_seq(data, *, seq_idx, **kwargs):
    data.data["data"].raw_tensor = data.data["data"].raw_tensor * seq_idx
    return data
"""
THIRD = """
def map_seq(data, **kwargs):
    data.data["data"].raw_tensor = data.data["data"].raw_tensor[::3]
    return data
"""
BROKEN = """
def map_seq(data, **kwargs):
    return data.data["nonexistent"]
"""


@pytest.mark.parametrize(
    "code,message",
    [
        (
            NOISE,
            r"map_seq map_seq draws from its rng .*one RandomState per \(sub-\)epoch, in reading "
            r"order.*SeqLoader\(\.\.\., transform=\.\.\.\).*per-sequence RNG",
        ),
        (POSITION, r"map_seq map_seq returns other values for .*depends on where RETURNN reads"),
        (
            THIRD,
            r"map_seq map_seq changes the length of 'data' in a way not known at conversion.*"
            r"RETURNN batches after map_seq",
        ),
        (BROKEN, r"map_seq map_seq raised KeyError: .*when called as RETURNN"),
    ],
    ids=["rng", "position", "length", "raises"],
)
def test_a_map_seq_planning_cannot_know_is_refused_at_conversion(
    data: Path, code: str, message: str
) -> None:
    with pytest.raises(OptionError, match=WHERE + message):
        _convert(data, code)


def test_map_seq_stream_is_refused_naming_why_and_the_native_equivalent(data: Path) -> None:
    with pytest.raises(
        OptionError,
        match=WHERE + r"map_seq_stream sorted is not supported: map_seq_stream is a function over "
        r"the stream of sequences.*merge, split, drop or reorder.*seqloader plans every epoch "
        r"ahead.*seq_ordering.*transform=",
    ):
        _convert(data, "", map_seq_stream=sorted)


# around an OggZipDataset (the published LibriSpeech data config, its stand-in corpora): the
# features map_seq receives are RETURNN's own, computed from the decoded audio
OGG_MAP_SEQ = """
def map_seq(data, **kwargs):
    data.data["data"].raw_tensor = data.data["data"].raw_tensor * 2.0
    return data
train = {"class": "PostprocessingDataset", "dataset": train, "map_seq": map_seq,
         "seq_ordering": "default"}
dev = {"class": "PostprocessingDataset", "dataset": dev, "map_seq": map_seq,
       "seq_ordering": "default"}
"""


@pytest.mark.parametrize("name,epochs", [("train", (1, 2)), ("dev", (1,))])
def test_map_seq_around_oggzip_as_returnn(
    tmp_path_factory, tmp_path: Path, name: str, epochs: tuple[int, ...]
) -> None:
    pytest.importorskip("librosa")
    from returnn_configs.corpora import corpora_env

    configs = Path(__file__).parent / "returnn_configs"
    with corpora_env(tmp_path_factory.mktemp("returnn_post_ogg")):
        config = tmp_path / "ogg.config"
        text = (configs / "librispeech_data_prepare.config").read_text() + OGG_MAP_SEQ
        config.write_text(text)
        _as_returnn(config, name, epochs, 2, tmp_path / "ours", {"data", "classes", "text"})
