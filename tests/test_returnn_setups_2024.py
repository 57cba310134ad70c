"""Published i6_experiments setups of 2024-2026 (tests/returnn_configs/, the source in each
header) against RETURNN's own pipeline: tags, order, batches and values per key, train sub-epochs
1, 2 and a later one, dev (and eval datasets), 0 and 2 workers, over the stand-in corpora of
tests/returnn_configs/corpora.py (RETURNN's own writers and the official OggZip layout)."""

from __future__ import annotations

import ast
import gzip
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
pytest.importorskip("librosa")
from test_returnn_public_configs import CONFIGS, ours, reference


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    """The stand-in corpora, and ``dataset/cv.segments``: every other dev utterance (the cv
    segment list of the standalone 2024 setups)."""
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_2024")) as folder:
        tags = []
        for part in ("dev-clean", "dev-other"):
            with gzip.open(folder / "dataset-ogg" / f"{part}.txt.gz", "rt") as f:
                tags += [entry["seq_name"] for entry in ast.literal_eval(f.read())]
        (folder / "dataset" / "cv.segments").write_text("\n".join(tags[::2]) + "\n")
        write_tts(folder)
        write_feature_label(folder)
        write_word_lm(folder)
        yield folder


def write_word_lm(folder: Path) -> None:
    """``berger_lm/``: a word vocabulary (``<s>`` 0, ``UNK`` 1, then the words) and text corpora a
    sentence a line, every word in the vocabulary."""
    from seqloader.synthetic.audio import WORDS

    out = folder / "berger_lm"
    out.mkdir()
    symbols = ["<s>", "UNK", *WORDS]
    (out / "vocab.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(symbols)))
    rng = np.random.default_rng(26)
    for split, n in (("train", 30), ("dev", 8)):
        lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))) for _ in range(n)]
        (out / f"{split}.txt").write_text("\n".join(lines) + "\n")


def write_feature_label(folder: Path) -> None:
    """``berger/``: per split, log-mel features in two HDF files and label ids in one, stored in
    another order (RETURNN's ``SimpleHDFWriter``)."""
    from returnn.datasets.hdf import SimpleHDFWriter

    out = folder / "berger"
    out.mkdir()
    rng = np.random.default_rng(25)
    for split, n in (("train", 20), ("dev", 7)):
        tags = [f"corpus/{split}/{i}" for i in range(n)]
        frames = rng.integers(30, 200, size=n)
        for k, part in enumerate((tags[: n // 2], tags[n // 2 :])):
            writer = SimpleHDFWriter(str(out / f"{split}.features.{k + 1}.hdf"), dim=50)
            for tag in part:
                t = int(frames[tags.index(tag)])
                x = rng.standard_normal((1, t, 50)).astype("float32")
                writer.insert_batch(x, [t], [tag])
            writer.close()
        labels = SimpleHDFWriter(str(out / f"{split}.labels.hdf"), dim=30, ndim=1)
        for i in rng.permutation(n):
            m = max(1, int(frames[i]) // 12)
            y = rng.integers(0, 30, size=(1, m)).astype("int32")
            labels.insert_batch(y, [m], [tags[i]])
        labels.close()


def write_tts(folder: Path) -> None:
    """``tts/``: the TTS duration setup's word vocabulary (standing in for phonemes), train / cv
    segment lists of train-clean-100, one speaker index per utterance and one duration per word
    (RETURNN's ``SimpleHDFWriter``)."""
    from returnn.datasets.hdf import SimpleHDFWriter

    from seqloader.synthetic.audio import WORDS

    tts = folder / "tts"
    tts.mkdir()
    vocab = {word: i for i, word in enumerate(WORDS)}
    (tts / "phonemes.vocab").write_text(repr(vocab) + "\n")
    with gzip.open(folder / "dataset-ogg" / "train-clean-100.txt.gz", "rt") as f:
        entries = ast.literal_eval(f.read())
    tags = [e["seq_name"] for e in entries]
    (tts / "cv.segments").write_text("\n".join(tags[::5]) + "\n")
    (tts / "train.segments").write_text("\n".join(t for i, t in enumerate(tags) if i % 5) + "\n")
    rng = np.random.default_rng(24)
    speakers = SimpleHDFWriter(str(tts / "speakers.hdf"), dim=3, ndim=1)
    durations = SimpleHDFWriter(str(tts / "durations.hdf"), dim=1, ndim=2)
    for i in rng.permutation(len(entries)):  # stored in another order than the corpus
        tag, n = tags[i], len(entries[i]["text"].split())
        speakers.insert_batch(np.array([[int(tag.split("-")[3]) % 3]], "int32"), [1], [tag])
        durations.insert_batch(rng.integers(1, 20, size=(1, n, 1)).astype("int32"), [n], [tag])
    speakers.close()
    durations.close()


CASES = [
    ("standalone_2024_ctc_bpe.config", "train", (1, 2, 5)),
    ("standalone_2024_ctc_bpe.config", "dev", (1,)),
    ("standalone_2024_ctc_bpe.config", "devtrain", (1,)),
    ("standalone_2024_tts_duration.config", "train", (1, 2, 4)),
    ("standalone_2024_tts_duration.config", "dev", (1,)),
    ("standalone_2024_tts_duration.config", "devtrain", (1,)),
    ("standalone_2024_tts_aligner.config", "train", (1, 2, 3)),
    ("standalone_2024_tts_aligner.config", "dev", (1,)),
    ("standalone_2024_tts_aligner.config", "joint", (1,)),
    ("berger_feature_label_meta.config", "train", (1, 2, 5)),
    ("berger_feature_label_meta.config", "dev", (1,)),
    ("berger_word_lm.config", "train", (1, 2, 4)),
    ("berger_word_lm.config", "dev", (1,)),
]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("config,name,epochs", CASES)
def test_setup_as_returnn(
    data: Path, tmp_path: Path, config: str, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    path = CONFIGS / config
    expected_batches, expected_values = reference(str(path), name, epochs)
    got_batches, got_values = ours(path, num_workers, name, epochs, tmp_path)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref), tag
        for key, value in ref.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got_values[tag][key], value, atol=1e-5, err_msg=tag)
            else:
                np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")
