"""RETURNN's ``CombinedDataset`` (speech + text-only data, the shape of the i6 joint ASR/TTS and
text-injection setups): every ordering it has (``interleave``, with and without the Gumbel-max
softening, ``random_dataset``, ``default``, a joint ``laplace`` / ``random`` with
``partition_epoch``) over sub-datasets with their own ``seq_ordering`` and
``partition_epoch`` gives RETURNN's tags, order, batches and values per key (a key the other
sub-dataset gives is empty, as RETURNN fills it) through RETURNN's own pipeline: train sub-epochs
1, 2 and a later one, dev, 0 and 2 workers, and per rank on 2 ranks (RETURNN's default
``random_seed_offset`` distribution; ``shard`` refused, as RETURNN fails on it). Stand-in data:
RETURNN's ``SimpleHDFWriter``."""

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


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("returnn_combined")
    rng = np.random.default_rng(27)
    for part, n_asr, n_text in (("train", 17, 11), ("dev", 6, 4)):
        write_hdf(folder / f"asr.{part}.hdf", [f"asr/{part}/{i}" for i in range(n_asr)], rng,
                  dim=5, data_len=(8, 50), target_len=lambda n: max(1, n // 4), target_dim=20)  # fmt: skip
        write_hdf(folder / f"text.{part}.hdf", [f"text/{part}/{i}" for i in range(n_text)], rng,
                  dim=None, data_len=(3, 30), target_len=lambda n: max(1, n // 2), target_dim=20)  # fmt: skip
    yield folder


def _config(folder: Path, tmp: Path, combined: str, asr: str, text: str) -> Path:
    """A CombinedDataset of features + targets (asr) and phonemes + targets (text): the text
    dataset's 'data' becomes 'phon', both give 'classes'."""
    text_config = f"""#!rnn.py
def sub(name, part, extra):
    return {{"class": "HDFDataset", "files": ["{folder}/%s.%s.hdf" % (name, part)], **extra}}

def combined(part, extra, asr, text):
    return {{
        "class": "CombinedDataset",
        "datasets": {{"asr": sub("asr", part, asr), "text": sub("text", part, text)}},
        "data_map": {{("asr", "data"): "data", ("asr", "classes"): "classes",
                      ("text", "data"): "phon", ("text", "classes"): "classes"}},
        **extra,
    }}

train = combined("train", {combined}, {asr}, {text})
dev = combined("dev", {{}}, {{}}, {{}})
batch_size = 120
max_seqs = 5
"""
    path = tmp / "combined.config"
    path.write_text(text_config)
    return path


CASES = {
    "interleave": ('{"seq_ordering": "interleave"}',
                   '{"seq_ordering": "laplace:3", "partition_epoch": 2}', '{"seq_ordering": "random"}'),
    "gumbel": ('{"seq_ordering": "interleave", "interleave_gumbel_scale": 1.0}',
               '{"seq_ordering": "random"}', '{"seq_ordering": "sorted"}'),
    "gumbel_remaining": ('{"seq_ordering": "interleave", "interleave_gumbel_scale": "remaining"}',
                         '{"seq_ordering": "random", "partition_epoch": 2}', "{}"),
    "random_dataset": ('{"seq_ordering": "random_dataset", "partition_epoch": 2}',
                       '{"seq_ordering": "random"}', "{}"),
    "default": ("{}", '{"seq_ordering": "laplace:2"}', '{"seq_ordering": "random"}'),
    "joint_laplace": ('{"seq_ordering": "laplace:3", "partition_epoch": 2}',
                      '{"seq_ordering": "random"}', "{}"),
    "joint_random": ('{"seq_ordering": "random", "random_seed_offset": 3}', "{}", "{}"),
}  # fmt: skip


def _compare(config: Path, name: str, epochs: tuple[int, ...], workers: int, tmp: Path) -> None:
    expected_batches, expected_values = reference(str(config), name, epochs)
    got_batches, got_values = ours(config, workers, name, epochs, tmp)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref) == {"data", "classes", "phon"}, tag
        for key, value in ref.items():
            assert got_values[tag][key].shape == value.shape, (tag, key)
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_combined_dataset_train_as_returnn(
    data: Path, tmp_path: Path, case: str, num_workers: int
) -> None:
    config = _config(data, tmp_path, *CASES[case])
    _compare(config, "train", (1, 2, 5), num_workers, tmp_path / "ours")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_combined_dataset_dev_as_returnn(data: Path, tmp_path: Path, num_workers: int) -> None:
    """dev: RETURNN's default 'sorted', jointly over both sub-datasets' length estimates."""
    config = _config(data, tmp_path, *CASES["interleave"])
    _compare(config, "dev", (1,), num_workers, tmp_path / "ours")


def _convert(data: Path, **opts) -> None:
    spec = {
        "class": "CombinedDataset",
        "datasets": {
            "asr": {"class": "HDFDataset", "files": [str(data / "asr.train.hdf")]},
            "text": {"class": "HDFDataset", "files": [str(data / "text.train.hdf")]},
        },
        "data_map": {("asr", "data"): "data", ("text", "classes"): "classes"},
        **opts,
    }
    from_returnn_config({"train": spec, "batch_size": 1000})


@pytest.mark.parametrize(
    "opts,message",
    [
        ({"seq_ordering": "interleave", "partition_epoch": 2}, r"asserts partition_epoch 1"),
        (
            {"sampling_sizes": 5},
            r"'sampling_sizes' is not supported: the installed RETURNN fails "
            r"on it.*ZeroDivisionError.*ConcatSource\(...\) with mix",
        ),
        ({"seq_ordering": "buckets:3"}, r"no RETURNN ordering"),
        ({"data_map": {"data": ("asr", "data")}}, r"the reverse of MetaDataset's data_map"),
        ({"seq_list_filter_file": "x"}, r"'seq_list_filter_file' is not supported.*sub-datasets"),
        ({"seq_ordering": lambda epoch, **_: "random"}, r"a function is not supported"),
    ],
)
def test_what_returnn_refuses_is_refused_at_conversion(data: Path, opts: dict, message: str):
    with pytest.raises(OptionError, match=r"train dataset \(CombinedDataset\): .*" + message):
        _convert(data, **opts)


def test_joint_sorting_needs_returnns_length_estimate(data: Path) -> None:
    """RETURNN sorts a CombinedDataset by its sub-datasets' get_estimated_seq_length, which a
    MetaDataset (or an OggZipDataset) lacks (RETURNN raises): refused at conversion naming it."""
    meta = {
        "class": "MetaDataset",
        "datasets": {"t": {"class": "HDFDataset", "files": [str(data / "text.train.hdf")]}},
        "data_map": {"data": ("t", "data")},
        "seq_order_control_dataset": "t",
    }
    spec = {
        "class": "CombinedDataset",
        "datasets": {
            "asr": {"class": "HDFDataset", "files": [str(data / "asr.train.hdf")]},
            "text": meta,
        },
        "data_map": {("asr", "data"): "data", ("text", "data"): "phon"},
        "seq_ordering": "laplace:3",
    }
    with pytest.raises(
        OptionError, match=r"sorts by RETURNN's length estimate, which \['text'\] do not have"
    ):
        from_returnn_config({"train": spec, "batch_size": 1000})
    loader = from_returnn_config({"train": {**spec, "seq_ordering": "random"}, "batch_size": 1000})
    assert len(loader["train"].source) == 28
    loader["train"].close()


TTS_ENCODER = Path(__file__).parent / "returnn_configs" / "tts_encoder_combined.config"


@pytest.fixture
def corpora(tmp_path_factory, monkeypatch) -> Iterator[Path]:
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_tts_encoder")) as folder:
        yield folder


def test_published_text_injection_setup_is_refused_at_conversion(corpora: Path) -> None:
    """The published setup (CombinedDataset interleave + torch_batching alternate_batching):
    refused when converted, naming torch_batching, why and the native equivalent."""
    with pytest.raises(
        OptionError,
        match=r"'torch_batching' = functools.partial\(<function alternate_batching.*a "
        r"user-written batching function.*train_step can branch on which keys are empty",
    ):
        from_returnn_config(TTS_ENCODER)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_text_injection_data_as_returnn(
    corpora: Path, tmp_path: Path, monkeypatch, num_workers: int
) -> None:
    """Its data part without torch_batching: the interleave of the HDF speech and the
    PostprocessingDataset over the LmDataset (its own laplace and partition_epoch), RETURNN's
    tags, order, batches and values per key (the other branch's keys empty)."""
    monkeypatch.setenv("TTS_ENCODER_AS_PUBLISHED", "0")
    expected_batches, expected_values = reference(str(TTS_ENCODER), "train", (1, 2, 3))
    got_batches, got_values = ours(TTS_ENCODER, num_workers, "train", (1, 2, 3), tmp_path)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref) == {"data", "classes", "phonemes"}, tag
        for key, value in ref.items():
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, size: int) -> None:
    """RETURNN as rank ``rank`` of ``size`` by its own means: the init info its
    ``DistributedContext`` reads in a rank's processes (``_RETURNN_TORCH_DISTRIBUTED_INIT_INFO``),
    its global context set up anew (``Dataset._get_default_random_seed_offset`` reads the rank
    there, and the sharding ``get_default_kwargs_train`` passes)."""
    import returnn.torch.distributed as distributed

    info = {"rank": rank, "size": size, "hostnames": ["localhost"] * size}
    monkeypatch.setenv("_RETURNN_TORCH_DISTRIBUTED_INIT_INFO", repr(info))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(size))
    monkeypatch.setattr(distributed, "_is_set_up", False)
    monkeypatch.setattr(distributed, "_ctx", None)


def _rank_references(config: Path, epochs: tuple[int, ...], monkeypatch, tmp: Path) -> list:
    """RETURNN's (batches, values) of ``train`` on rank 0 and rank 1 of 2."""
    out = []
    for rank in (0, 1):
        copy = tmp / f"returnn_rank{rank}.config"  # reference() is cached by path
        copy.write_text(config.read_text())
        with monkeypatch.context() as m:
            _as_rank(m, rank, 2)
            out.append(reference(str(copy), "train", epochs))
    return out


# RETURNN's default distribution: dataset_distribution 'random_seed_offset'
DISTRIBUTED = "\ntorch_distributed = {}\n"


@pytest.mark.parametrize(
    "case,num_workers",
    [(c, 0) for c in sorted(set(CASES) - {"joint_random"})] + [("interleave", 2)],
)
def test_combined_dataset_on_two_ranks_as_returnn(
    data: Path, tmp_path: Path, monkeypatch, case: str, num_workers: int
) -> None:
    """torch_distributed (RETURNN's default distribution): rank r's CombinedDataset and its
    sub-datasets take random_seed_offset 16127 r; each rank gets RETURNN's tags, order, batches
    and values of that rank, every rank stopping after the shortest rank's batch count (RETURNN's
    engine ends the sub-epoch when one rank runs out)."""
    config = _config(data, tmp_path, *CASES[case])
    config.write_text(config.read_text() + DISTRIBUTED)
    epochs = (1, 2, 5)
    expected = _rank_references(config, epochs, monkeypatch, tmp_path)
    assert expected[0][0] != expected[1][0]  # the ranks' orders differ
    for rank in (0, 1):
        batches, values = ours(config, num_workers, "train", epochs, tmp_path / f"r{rank}", rank, 2)
        for epoch in epochs:
            steps = min(len(expected[r][0][epoch]) for r in (0, 1))
            assert batches[epoch] == expected[rank][0][epoch][:steps], (rank, epoch)
        ref = expected[rank][1]
        assert values and set(values) <= set(ref)
        for tag, got in values.items():
            assert set(got) == set(ref[tag]) == {"data", "classes", "phon"}, tag
            for key, value in ref[tag].items():
                assert got[key].shape == value.shape, (tag, key)
                np.testing.assert_array_equal(got[key], value, err_msg=f"{rank} {tag} {key}")


@pytest.mark.parametrize("case", ["interleave", "joint_laplace"])
def test_sharding_a_combined_dataset_is_refused_as_returnn_fails(
    data: Path, tmp_path: Path, monkeypatch, case: str
) -> None:
    """dataset_distribution 'shard': RETURNN's CombinedDataset asserts it supports no sharding
    on 2 ranks (checked here on rank 1); refused at conversion naming the option and the fix."""
    config = _config(data, tmp_path, *CASES[case])
    config.write_text(
        config.read_text() + "\ntorch_distributed = {'dataset_distribution': 'shard'}\n"
    )
    with monkeypatch.context() as m:
        _as_rank(m, 1, 2)
        with pytest.raises(AssertionError, match="does not support sharding"):
            reference(str(config), "train", (1,))
    with pytest.raises(
        OptionError,
        match=r"train dataset \(CombinedDataset\): torch_distributed dataset_distribution "
        r"'shard' is not supported.*'random_seed_offset'.*distribution='shard'",
    ):
        from_returnn_config(config)
