"""Chunking in configs written for RETURNN's TF engine (``use_tensorflow`` / ``backend``): the
chunks of RETURNN's own ``Dataset.iterate_seqs`` (the TF engine's chunking), in order, with their
values: a per-sequence label key (speaker, length 1) beside the features (RETURNN repeats it
whole and stops each such sequence after its first chunk), ``min_chunk_size`` (kept while more
than it remains), and dev unchunked (RETURNN's eval default); 0 and 2 workers. What the TF
engine cannot chunk is refused at conversion naming the key and why. Stand-in data: RETURNN's
``SimpleHDFWriter``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

returnn_config = pytest.importorskip("returnn.config")
from returnn_reference import returnn_dataset  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    from returnn.datasets.hdf import SimpleHDFWriter

    folder = tmp_path_factory.mktemp("returnn_tf_chunking")
    rng = np.random.default_rng(3)
    for part, n in (("train", 14), ("dev", 5)):
        labelled = SimpleHDFWriter(str(folder / f"{part}.speaker.hdf"), dim=3, ndim=2)
        framewise = SimpleHDFWriter(str(folder / f"{part}.frames.hdf"), dim=3, ndim=2)
        for i in range(n):
            t = int(rng.integers(8, 60))
            x = rng.standard_normal((1, t, 3)).astype("float32")
            speaker = np.array([[i % 4]], dtype="int32")
            labelled.insert_batch(x, [t], [f"{part}/{i}"], extra={"speaker": speaker})
            y = rng.integers(0, 9, size=(1, t)).astype("int32")
            framewise.insert_batch(x, [t], [f"{part}/{i}"], extra={"classes": y})
        labelled.close()
        framewise.close()
    yield folder


def _config(folder: Path, tmp: Path, kind: str, extra: str) -> Path:
    path = tmp / f"tf_{kind}.config"
    path.write_text(
        f"""#!rnn.py
use_tensorflow = True
train = {{"class": "HDFDataset", "files": ["{folder}/train.{kind}.hdf"],
         "seq_ordering": "laplace:3", "partition_epoch": 2}}
dev = {{"class": "HDFDataset", "files": ["{folder}/dev.{kind}.hdf"]}}
chunking = "10:5"
batch_size = 200
max_seqs = 4
{extra}
"""
    )
    return path


def _returnn_chunks(config: Path, name: str, epoch: int) -> list[tuple[str, dict]]:
    """RETURNN's chunks of ``epoch``: ``iterate_seqs`` over its dataset as its engine builds it."""
    cfg = returnn_config.Config()
    cfg.load_file(str(config))
    out = []
    with returnn_dataset(cfg, name) as dataset:
        dataset.init_seq_order(epoch=epoch)
        for s, start, end in dataset.iterate_seqs():
            dataset.load_seqs(s, s + 1)
            values = {
                k: np.asarray(dataset.get_data(s, k))[start[k] : end[k]]
                for k in dataset.get_data_keys()
            }
            out.append((str(dataset.get_tag(s)), values))
    return out


def _our_chunks(config: Path, name: str, epoch: int) -> list[tuple[str, dict]]:
    loader = from_returnn_config(config, rank=0, world_size=1)[name]
    out = []
    for batch in loader.epoch(epoch):
        for b, tag in enumerate(batch.seq_tags):
            out.append(
                (tag, {k: batch[k][b, : int(batch.lengths[k][b])].numpy() for k in batch.lengths})
            )
    loader.close()
    return out


def _same(got: list, expected: list) -> None:
    assert [t for t, _ in got] == [t for t, _ in expected]
    for (tag, ours), (_, ref) in zip(got, expected):
        assert set(ours) == set(ref), tag
        for key, value in ref.items():
            np.testing.assert_array_equal(ours[key], value, err_msg=f"{tag} {key}")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    "kind,extra",
    [("speaker", ""), ("frames", "min_chunk_size = 3"), ("frames", "")],
    ids=["label_key", "min_chunk_size", "plain"],
)
def test_tf_chunks_as_returnns_iterate_seqs(
    data: Path, tmp_path: Path, kind: str, extra: str, num_workers: int
) -> None:
    config = _config(
        data, tmp_path, kind, extra + f"\ntorch_dataloader_opts = {{'num_workers': {num_workers}}}"
    )
    for epoch in (1, 2, 3):
        expected = _returnn_chunks(config, "train", epoch)
        _same(_our_chunks(config, "train", epoch), expected)
    if kind == "speaker":  # one chunk per sequence, the label whole in it
        assert len({t for t, _ in expected}) == len(expected)
        assert all(len(v["speaker"]) == 1 and len(v["data"]) <= 10 for _, v in expected)
    dev = _returnn_chunks(config, "dev", 1)
    assert max(len(v["data"]) for _, v in dev) > 10  # RETURNN's eval default: not chunked
    _same(_our_chunks(config, "dev", 1), dev)


def test_what_the_tf_engine_cannot_chunk_is_refused(data: Path, tmp_path: Path) -> None:
    short = _config(data, tmp_path, "frames", "min_chunk_size = 20")
    with pytest.raises(
        OptionError,
        match=r"train dataset \(HDFDataset\): min_chunk_size 20 in a TF-engine config: .*keeps a "
        r"sequence's first chunk whatever its size.*set min_chunk_size 0",
    ):
        from_returnn_config(short)
    per_key = _config(data, tmp_path, "frames", "chunking = ({'data': 10}, {'data': 5})")
    with pytest.raises(OptionError, match=r"per key in a TF-engine config"):
        from_returnn_config(per_key)
    torch_config = tmp_path / "torch.config"
    torch_config.write_text(
        per_key.read_text().replace("use_tensorflow = True", "backend = 'torch'")
    )
    from_returnn_config(torch_config)["train"].close()  # the torch engine's per-key chunking
