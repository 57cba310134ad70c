"""RETURNN's ``torch_batching``: ``{"class": "BatchingIterDataPipe", ...}`` (RETURNN's own batching
with the dict's limits in place of the config's ``batch_size`` / ``max_seqs`` /
``packed_batch_size``) gives RETURNN's batches through its own pipeline (train sub-epochs 1, 2,
3 and dev, 0 and 2 workers); a batching function (the i6 text-injection setups'
``alternate_batching``), ``BucketOrderingIterDataPipe`` and other classes are refused at
conversion naming the option, why, and the native equivalent. Stand-in data: the WMT config's
HDF files, written by RETURNN's ``SimpleHDFWriter``."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from test_returnn_public_configs import CONFIGS, ours, reference


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Iterator[Path]:
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_batching")) as folder:
        yield folder


BATCHING = [
    # the config's own batch_size / max_seqs are replaced by the dict's
    '{"class": "BatchingIterDataPipe", "batch_size": 260, "max_seqs": 3}',
    '{"class": "BatchingIterDataPipe", "batch_size": {"classes": 200}, "packed_batch_size": 300}',
    '{"class": "BatchingIterDataPipe", "batch_size": None, "max_seqs": 4}',
]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name,epochs", [("train", (1, 2, 3)), ("dev", (1,))])
@pytest.mark.parametrize("spec", BATCHING, ids=["limits", "dict_packed", "no_frame_limit"])
def test_batching_dict_as_returnn(
    corpora: Path, tmp_path: Path, spec: str, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    config = tmp_path / "wmt_batching.config"
    config.write_text(
        (CONFIGS / "wmt_translation.config").read_text()
        + f"\nbatch_size_dev = 5000\npacked_batch_size = 10\ntorch_batching = {spec}\n"
    )
    expected, _ = reference(str(config), name, epochs)
    got, _ = ours(config, num_workers, name, epochs, tmp_path / "ours")
    assert got == expected
    assert max(len(b) for b in expected[epochs[0]]) > 1  # the dict's limits, not the config's


def alternate_batching(dataset, *, asr_key: str = "data", **_kwargs):
    return dataset  # only its name and kind matter: it is refused before it is called


@pytest.mark.parametrize(
    "spec,message",
    [
        (
            functools.partial(alternate_batching, asr_key="data"),
            r"a user-written batching function, run over the stream of sequences.*batch_size / "
            r"max_seqs",
        ),
        (alternate_batching, r"a user-written batching function"),
        (
            {"class": "BucketOrderingIterDataPipe", "buckets": [(10, 5)], "length_key": "data"},
            r"class 'BucketOrderingIterDataPipe' is not supported: it holds sequences back in "
            r"length buckets.*'buckets:N'",
        ),
        ({"class": "ShufflingDataPipe"}, r"not a batching class"),
        ({"class": "BatchingIterDataPipe", "buckets": 3}, r"\['buckets'\] are no arguments"),
        (
            {"class": "BatchingIterDataPipe", "batch_size": lambda **_: 10},
            r"batch_size is a function.*give batch_size as a number",
        ),
    ],
    ids=["partial", "function", "buckets", "other_class", "bad_argument", "size_function"],
)
def test_unplannable_torch_batching_is_refused_at_conversion(spec, message: str) -> None:
    with pytest.raises(OptionError, match=r"RETURNN config option 'torch_batching' = .*" + message):
        from_returnn_config(
            {"train": {"class": "HDFDataset", "files": ["x.hdf"]}, "torch_batching": spec}
        )
