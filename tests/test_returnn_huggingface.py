"""RETURNN's ``HuggingFaceDataset`` over local ``datasets`` copies: the LoquaciousSet setup
(tests/returnn_configs/loquacious_hf.config, rwth-i6/i6_experiments users/zeyer) over stand-in
data written with the ``datasets`` library itself (``save_to_disk`` in Arrow shards) gives
RETURNN's tags, order, batches and values per key through its own pipeline: train (a
``DistributeFilesDataset`` over the shard files, ``MultiProcDataset`` around the
``HuggingFaceDataset``) sub-epochs 1, 2 and a later one, dev, 0 and 2 workers. What cannot be
planned is refused at conversion by name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

datasets = pytest.importorskip("datasets")
pytest.importorskip("returnn.datasets.huggingface")
pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from returnn_configs.corpora import write_spm  # noqa: E402
from seqloader.synthetic.audio import WORDS  # noqa: E402
from test_returnn_public_configs import CONFIGS, ours, reference  # noqa: E402

CONFIG = CONFIGS / "loquacious_hf.config"


def write_split(path: Path, split: str, n: int, shards: int, rng: np.random.Generator) -> None:
    """LoquaciousSet's columns (``id``, ``duration``, ``audio``, ``spk_id``, ``sex``, ``text``),
    the audio as decoded 16 kHz samples; some durations equal (ties in the sort)."""
    samples = rng.integers(800, 4000, size=n)
    samples[1::5] = samples[0]
    rows = {
        "id": [f"loq/{split}/{i:03d}" for i in range(n)],
        "duration": (samples / 16000).astype("float32").tolist(),
        "audio": [rng.standard_normal(int(s)).astype("float32") for s in samples],
        "spk_id": [f"spk{i % 3}" for i in range(n)],
        "sex": ["F" if i % 2 else "M" for i in range(n)],
        "text": [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))) for _ in range(n)],
    }
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "duration": datasets.Value("float32"),
            "audio": datasets.Sequence(datasets.Value("float32")),
            "spk_id": datasets.Value("string"),
            "sex": datasets.Value("string"),
            "text": datasets.Value("string"),
        }
    )
    table = datasets.Dataset.from_dict(rows, features=features)
    table.save_to_disk(str(path / split), num_shards=shards)


@pytest.fixture(scope="module")
def loquacious(tmp_path_factory) -> Iterator[Path]:
    """``$SEQLOADER_RETURNN_DATA/loquacious/{train,dev}`` (train in 4 Arrow shards) and the
    SentencePiece model of its texts; RETURNN's file cache under the same folder."""
    folder = tmp_path_factory.mktemp("returnn_hf")
    root = folder / "loquacious"
    rng = np.random.default_rng(33)
    write_split(root, "train", 14, 4, rng)
    write_split(root, "dev", 6, 1, rng)
    write_spm(root, rng)
    mp = pytest.MonkeyPatch()
    mp.setenv("SEQLOADER_RETURNN_DATA", str(folder))
    cache = json.dumps({"cache_directory": str(root / "file_cache")})
    mp.setenv("RETURNN_FILE_CACHE_OPTS", cache)
    yield folder
    mp.undo()


def in_process(folder: Path) -> Path:
    """The config with RETURNN's datasets run in this process (``_IN_PROCESS``: no
    ``MultiProcDataset``, ``DistributeFilesDataset(use_worker_proc=False)``), for the reference:
    RETURNN documents both as where the dataset runs, not what it gives;
    ``test_loquacious_hf_as_published_as_returnn`` checks that they agree here."""
    path = folder / "loquacious_hf_in_process.config"
    if not path.exists():
        path.write_text("#!rnn.py\n_IN_PROCESS = True\n" + CONFIG.read_text())
    return path


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name,epochs", [("train", (1, 2, 5)), ("dev", (1,))])
def test_loquacious_hf_as_returnn(
    loquacious: Path, tmp_path: Path, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    """The config as published (ours) against RETURNN running the same datasets in-process."""
    expected_batches, expected_values = reference(str(in_process(loquacious)), name, epochs)
    got_batches, got_values = ours(CONFIG, num_workers, name, epochs, tmp_path)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref) == {"audio", "text"}, tag
        for key, value in ref.items():
            assert got_values[tag][key].dtype == value.dtype, (tag, key)
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")


@pytest.mark.extended
def test_loquacious_hf_as_published_as_returnn(loquacious: Path) -> None:
    """RETURNN as published (its DistributeFilesDataset and MultiProcDataset worker processes,
    minutes under load) gives the batches and values it gives in-process."""
    for name, epochs in (("train", (1, 2, 5)), ("dev", (1,))):
        published = reference(str(CONFIG), name, epochs)
        here = reference(str(in_process(loquacious)), name, epochs)
        assert published[0] == here[0]
        assert set(published[1]) == set(here[1])
        for tag, ref in here[1].items():
            for key, value in ref.items():
                np.testing.assert_array_equal(published[1][tag][key], value)


def _convert(tmp_path: Path, dataset: str, extra: str = "") -> None:
    config = tmp_path / "hf.config"
    config.write_text(f"#!rnn.py\nbackend = 'torch'\ntrain = {dataset}\n{extra}batch_size = 100\n")
    loaders = from_returnn_config(config)
    for loader in loaders.values():
        loader.close()


REFUSALS = [
    ("{'path': 'speechbrain/LoquaciousSet', 'name': 'large', 'split': 'train'}", "hub"),
    ("{'path': 'parquet', 'data_files': ['/nonexistent/*.parquet'], 'split': 'train'}", "hub"),
    ("'/nonexistent/loquacious/train'", "not a local directory"),
    ("['/nonexistent/data-00000-of-00001.arrow']", "not local Arrow files"),
]


@pytest.mark.parametrize("dataset_opts,says", REFUSALS)
def test_not_local_is_refused_at_conversion(tmp_path: Path, dataset_opts: str, says: str) -> None:
    opts = (
        f"{{'class': 'HuggingFaceDataset', 'dataset_opts': {dataset_opts}, "
        "'data_format': {'audio': {'dtype': 'float32', 'shape': [None]}}}"
    )
    with pytest.raises(OptionError, match="HuggingFaceDataset") as e:
        _convert(tmp_path, opts)
    assert says in str(e.value) and "save_to_disk" in str(e.value)


def test_streaming_and_map_func_and_plain_strings_are_refused(
    loquacious: Path, tmp_path: Path
) -> None:
    train = loquacious / "loquacious" / "train"
    base = (
        "{'class': 'HuggingFaceDataset', 'dataset_opts': %s, 'seq_tag_column': 'id', "
        "'data_format': %s%s}"
    )
    audio = "{'audio': {'dtype': 'float32', 'shape': [None]}}"
    streaming = f"{{'path': 'arrow', 'data_files': ['{train}/*.arrow'], 'streaming': True}}"
    with pytest.raises(OptionError, match="streaming=True: an IterableDataset has no length"):
        _convert(tmp_path, base % (streaming, audio, ""))
    with pytest.raises(OptionError, match="option 'map_func' is not supported"):
        _convert(tmp_path, base % (repr(str(train)), audio, ", 'map_func': lambda ds: ds"))
    text = "{'text': {'dtype': 'string', 'shape': []}}"
    with pytest.raises(OptionError, match="no time axis"):
        _convert(tmp_path, base % (repr(str(train)), text, ""))
    laplace = ", 'seq_ordering': 'laplace:.3'"
    with pytest.raises(OptionError, match="neither sorting_seq_len_column nor"):
        _convert(tmp_path, base % (repr(str(train)), audio, laplace))


def test_local_parquet_and_sorting_by_data_length_as_returnn(
    loquacious: Path, tmp_path: Path
) -> None:
    """``load_dataset("parquet", data_files=...)`` of local files, ``sorting_seq_len_column_data``
    (the audio list's length), ``sorted``: RETURNN's batches and values."""
    table = datasets.load_from_disk(str(loquacious / "loquacious" / "train"))
    table.to_parquet(str(tmp_path / "train.parquet"))
    config = tmp_path / "parquet.config"
    config.write_text(
        "#!rnn.py\nbackend = 'torch'\n"
        "train = {'class': 'HuggingFaceDataset', 'dataset_opts': {'path': 'parquet', "
        f"'data_files': [{str(tmp_path / 'train.parquet')!r}], 'split': 'train'}}, "
        "'seq_tag_column': 'id', 'sorting_seq_len_column_data': 'audio', 'seq_ordering': 'sorted', "
        "'partition_epoch': 2, 'data_format': {'audio': {'dtype': 'float32', 'shape': [None]}}}\n"
        "batch_size = 6000\nmax_seqs = 3\n"
    )
    epochs = (1, 2, 3)
    expected_batches, expected_values = reference(str(config), "train", epochs)
    got_batches, got_values = ours(config, 0, "train", epochs, tmp_path / "ours")
    assert got_batches == expected_batches
    for tag, ref in expected_values.items():
        np.testing.assert_array_equal(got_values[tag]["audio"], ref["audio"])


@pytest.mark.parametrize("rate,cast", [(16000, True), (8000, False)])
def test_audio_column_is_decoded_at_its_declared_rate(
    tmp_path: Path, rate: int, cast: bool
) -> None:
    """An ``Audio`` column (``decode=True``, as the published LoquaciousSet copy holds it): the
    samples of each row's file at the rate it declares, lengths planned from the headers.
    RETURNN cannot decode it here (``datasets`` >= 4 needs torchcodec), so this compares with the
    file's own samples. Without a declared rate (LoquaciousSet's ``cast_columns`` names
    ``sample_rate``, which ``datasets`` drops), the files' own rate, as ``datasets`` decodes."""
    import io

    import soundfile as sf

    rng = np.random.default_rng(5)
    waves = [rng.uniform(-0.5, 0.5, int(n)).astype("float32") for n in (1600, 2400, 800)]
    blobs = []
    for wave in waves:
        buf = io.BytesIO()
        sf.write(buf, wave, rate, format="FLAC")
        blobs.append({"bytes": buf.getvalue(), "path": None})
    table = datasets.Dataset.from_dict({"id": ["a", "b", "c"], "audio": blobs})
    table = table.cast_column("audio", datasets.Audio(sampling_rate=16000 if cast else None))
    table.save_to_disk(str(tmp_path / "audio"))
    config = tmp_path / "audio.config"
    config.write_text(
        "#!rnn.py\nbackend = 'torch'\n"
        f"train = {{'class': 'HuggingFaceDataset', 'dataset_opts': {str(tmp_path / 'audio')!r}, "
        "'seq_tag_column': 'id', 'data_format': {'audio': {'dtype': 'float32', 'shape': [None]}}, "
        "'cast_columns': {'audio': {'_type': 'Audio', 'sample_rate': 16000}}}\n"
        "batch_size = 100000\nmax_seqs = 2\n"
    )
    loader = from_returnn_config(config)["train"]
    got = {}
    for batch in loader.epoch(1):
        for b, tag in enumerate(batch.seq_tags):
            got[tag] = batch["audio"][b, : int(batch.lengths["audio"][b])].numpy()
    loader.close()
    assert sorted(got) == ["a", "b", "c"]
    for tag, wave in zip("abc", waves):
        decoded = sf.read(io.BytesIO(blobs["abc".index(tag)]["bytes"]), dtype="float32")[0]
        np.testing.assert_array_equal(got[tag], decoded)
        assert len(got[tag]) == len(wave)
