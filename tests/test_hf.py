"""``HFSource`` against the real ``datasets``: Arrow files written by ``Dataset.save_to_disk`` (in
several shards) and memory-mapped by ``load_from_disk``; values compared with ``datasets``' own
row decoding; epochs with 0 and 2 DataLoader workers (fork and spawn) deliver every row exactly
once; bad columns fail naming the column, the row and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import seqloader as sl
from adapter_util import check_epochs
from seqloader.errors import DataError, OptionError

datasets = pytest.importorskip("datasets")
from datasets import Array2D, Audio, ClassLabel, Features, List, Value  # noqa: E402

N_ROWS = 37  # prime
FEAT_DIM = 3
LABELS = ("a", "b", "c", "d")
FEATURES = Features(
    {
        "id": Value("string"),
        "feat": List(List(Value("float32"))),
        "grid": Array2D(shape=(None, FEAT_DIM), dtype="float32"),
        "fixed": List(List(Value("float16"), length=FEAT_DIM)),  # fixed-size frames
        "label": List(ClassLabel(names=list(LABELS))),
        "text": Value("string"),
        "speaker": Value("int64"),
    }
)


def rows(n: int = N_ROWS, seed: int = 4) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {k: [] for k in FEATURES}
    for i in range(n):
        t = int(rng.integers(0, 12))  # an empty sequence too
        feat = rng.standard_normal((t, FEAT_DIM)).astype(np.float32)
        out["id"].append(f"utt-{i:03d}")
        out["feat"].append(feat.tolist())
        out["grid"].append(feat.tolist())
        out["fixed"].append(feat.astype(np.float16).tolist())
        out["label"].append(rng.integers(0, len(LABELS), size=int(rng.integers(0, 5))).tolist())
        out["text"].append(" ".join(rng.choice(list(LABELS), size=int(rng.integers(1, 4)))))
        out["speaker"].append(int(rng.integers(0, 5)))
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The dataset as ``datasets`` writes it: Arrow files (3 shards) plus its metadata."""
    path = tmp_path_factory.mktemp("hf") / "ds"
    datasets.Dataset.from_dict(rows(), features=FEATURES).save_to_disk(path, num_shards=3)
    return path


@pytest.fixture
def ds(saved):
    return datasets.load_from_disk(saved)


KEYS = {"data": "feat", "grid": "grid", "fixed": "fixed", "classes": "label", "text": "text"}


def test_values_match_datasets_decoding(ds):
    assert len(ds.data.table.column("feat").chunks) >= 3  # really several chunks
    src = sl.HFSource(ds, keys=KEYS, tags="id")
    assert src.keys == ("data", "grid", "fixed", "classes", "text")
    assert src.schema["fixed"] == sl.KeySpec(np.dtype(np.float16), (FEAT_DIM,))
    assert list(src.tags) == ds["id"]
    assert src.schema["data"] == sl.KeySpec(np.dtype(np.float32), (FEAT_DIM,))
    assert src.schema["classes"].sparse and src.schema["classes"].vocab_size == len(LABELS)
    for i in range(len(ds)):
        row, got = ds[i], src.read(i)
        want = np.asarray(row["feat"], dtype=np.float32).reshape(-1, FEAT_DIM)
        np.testing.assert_array_equal(got["data"], want)
        np.testing.assert_array_equal(got["grid"], want)
        np.testing.assert_array_equal(got["fixed"], want.astype(np.float16))
        assert got["classes"].tolist() == row["label"]
        assert got["text"].tobytes().decode() == row["text"]
        assert src.lengths("data")[i] == len(want) and src.lengths("text")[i] == len(row["text"])


def test_open_and_read_decode_no_rows_through_datasets(ds, monkeypatch):
    """Lengths come from the Arrow offsets, rows from the Arrow buffers: ``datasets``' row
    decoding (``__getitem__``, iteration, formatting) is never called."""

    def refuse(*args, **kwargs):
        raise AssertionError("a row was decoded by datasets")

    for name in ("__getitem__", "_getitem", "__iter__", "iter", "to_pandas", "to_dict"):
        monkeypatch.setattr(datasets.Dataset, name, refuse)
    src = sl.HFSource(ds, keys={"data": "feat", "classes": "label"}, tags="id")
    assert src.read(5)["data"].shape[1] == FEAT_DIM


def test_selection_is_followed(ds):
    sub = ds.shuffle(seed=1).select(range(10))
    src = sl.HFSource(sub, keys={"data": "feat"}, tags="id")
    assert list(src.tags) == sub["id"]
    for i in range(10):
        want = np.asarray(sub[i]["feat"], dtype=np.float32).reshape(-1, FEAT_DIM)
        np.testing.assert_array_equal(src.read(i)["data"], want)


def test_classes_from_a_string_column_with_a_vocabulary(ds):
    src = sl.HFSource(ds, keys={"classes": "text"}, vocab=sl.TokenVocab(LABELS))
    for i in (0, 7):
        assert [LABELS[k] for k in src.read(i)["classes"]] == ds[i]["text"].split()
    assert list(src.tags) == [str(i) for i in range(len(ds))]  # no tags column: row numbers


# spawn: the source reaches its worker pickled (two workers splitting the work: fork)
@pytest.mark.parametrize("workers, context", [(0, None), (2, "fork"), (1, "spawn")])
def test_every_row_once_per_epoch_with_workers(ds, workers, context):
    src = sl.HFSource(ds, keys={"data": "feat", "classes": "label"}, tags="id")
    want = {r["id"]: np.asarray(r["feat"], np.float32).reshape(-1, FEAT_DIM) for r in ds}
    loader = sl.SeqLoader(
        src,
        ordering="laplace:.6",
        max_seqs=4,
        max_frames=40,
        seed=1,
        num_workers=workers,
        multiprocessing_context=context,
    )
    check_epochs(loader, src.tags, want.__getitem__)


def test_audio_column_through_the_audio_path(tmp_path):
    rng = np.random.default_rng(0)
    files = []
    for i, (rate, seconds) in enumerate([(16000, 0.5), (8000, 0.3), (16000, 0.21)]):
        path = tmp_path / f"a{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32), rate)
        files.append(str(path))
    mel = sl.LogMel(n_mels=10)
    in_memory = datasets.Dataset.from_dict({"audio": files}).cast_column("audio", Audio())
    in_memory.save_to_disk(tmp_path / "ds")  # embeds the files' bytes in the Arrow file
    for ds in (in_memory, datasets.load_from_disk(tmp_path / "ds")):  # by path, by bytes
        src = sl.HFSource(ds, keys={"data": "audio"}, features=mel)
        wave_src = sl.HFSource(ds, keys={"audio": "audio"}, sample_rate=16000)
        for i, f in enumerate(files):
            wave = wave_src.read(i)["audio"]
            assert len(wave) == wave_src.lengths("audio")[i]
            if i != 1:  # at the target rate: exactly the file's samples
                np.testing.assert_array_equal(wave, sf.read(f, dtype="float32")[0])
            np.testing.assert_allclose(src.read(i)["data"], mel(wave), rtol=1e-5, atol=1e-5)
            assert src.lengths("data")[i] == mel.num_frames(len(wave))


# ---- bad input ----


def test_unknown_column_lists_the_columns(ds):
    with pytest.raises(OptionError, match=r"keys\['data'\] = 'feats' is not a column; columns: id"):
        sl.HFSource(ds, keys={"data": "feats"})
    with pytest.raises(OptionError, match=r"tags='name' is not a column"):
        sl.HFSource(ds, keys={"data": "feat"}, tags="name")


def test_non_list_column_is_not_a_sequence(ds):
    with pytest.raises(OptionError, match=r"column 'speaker'.*holds int64 per row, not a sequence"):
        sl.HFSource(ds, keys={"classes": "speaker"})


def test_ragged_inner_dimension_names_the_row(tmp_path):
    data = rows(8)
    data["feat"][5] = [[1.0, 2.0, 3.0], [4.0, 5.0]]
    path = tmp_path / "ds"
    datasets.Dataset.from_dict(data, features=FEATURES).save_to_disk(path)
    ds = datasets.load_from_disk(path)
    with pytest.raises(DataError, match=r"frames of 2 values.*ragged.*row 5 \(tag 'utt-005'\)"):
        sl.HFSource(ds, keys={"data": "feat"}, tags="id")


def test_null_row_and_null_value_name_the_row():
    data = rows(6)
    data["label"][4] = None
    ds = datasets.Dataset.from_dict(data, features=FEATURES)
    with pytest.raises(DataError, match=r"'label'.*is empty \(null\).*row 4 \(tag 'utt-004'\)"):
        sl.HFSource(ds, keys={"classes": "label"}, tags="id")
    data = rows(6)
    data["feat"][3] = [[1.0, None, 2.0]]
    ds = datasets.Dataset.from_dict(data, features=FEATURES)
    with pytest.raises(DataError, match=r"holds a null value.*row 3"):
        sl.HFSource(ds, keys={"data": "feat"})


def test_wrong_kind_of_argument(ds, saved):
    with pytest.raises(OptionError, match=r"expected a datasets\.Dataset.*pick a split"):
        sl.HFSource(datasets.DatasetDict({"train": ds}), keys={"data": "feat"})
    with pytest.raises(OptionError, match=r"string column; token ids need vocab"):
        sl.HFSource(ds, keys={"classes": "text"})
    with pytest.raises(OptionError, match=r"tags column 'feat' holds list"):
        sl.HFSource(ds, keys={"data": "grid"}, tags="feat")


def test_fixed_length_sequences(tmp_path):
    """An outer fixed-size list (every row T frames) has no offsets buffer; lengths still come
    from the type, and a sliced selection reads the right rows."""
    data = np.arange(5 * 4 * 2, dtype=np.float32).reshape(5, 4, 2)
    features = Features({"x": List(List(Value("float32"), length=2), length=4)})
    datasets.Dataset.from_dict({"x": data.tolist()}, features=features).save_to_disk(tmp_path)
    ds = datasets.load_from_disk(tmp_path).select([3, 1])
    src = sl.HFSource(ds, keys={"data": "x"})
    assert src.lengths("data").tolist() == [4, 4]
    np.testing.assert_array_equal(src.read(0)["data"], data[3])
    np.testing.assert_array_equal(src.read(1)["data"], data[1])


def test_default_keys_are_the_list_columns(ds):
    src = sl.HFSource(ds, tags="id")
    assert src.keys == ("feat", "grid", "fixed", "label")


def test_declared_audio_rate_is_the_delivered_rate(tmp_path):
    """A user casts the column with ``Audio(sampling_rate=8000)`` over 16 kHz files, as the datasets
    docs show, and passes no rate: the loader delivers 8 kHz, the samples seqloader's resampler
    makes of each file, also through DataLoader workers."""
    from seqloader.audio.resample import resample

    rng = np.random.default_rng(1)
    files = []
    for i, seconds in enumerate((0.5, 0.31, 0.77, 0.4)):
        path = tmp_path / f"r{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32), 16000)
        files.append(str(path))
    raw = datasets.Dataset.from_dict({"audio": files, "id": [f"u{i}" for i in range(4)]})
    raw.cast_column("audio", Audio(sampling_rate=8000)).save_to_disk(tmp_path / "ds")
    ds = datasets.load_from_disk(tmp_path / "ds")
    assert ds.features["audio"].sampling_rate == 8000

    src = sl.HFSource(ds, keys={"audio": "audio"}, tags="id")
    want = {
        f"u{i}": resample(sf.read(f, dtype="float32")[0], 16000, 8000) for i, f in enumerate(files)
    }
    assert [int(n) for n in src.lengths("audio")] == [len(want[t]) for t in src.tags]
    assert [int(n) for n in src.lengths("audio")] == [round(len(sf.read(f)[0]) / 2) for f in files]
    loader = sl.SeqLoader(src, max_frames=20_000, seed=1, num_workers=2)
    check_epochs(loader, src.tags, lambda tag: want[tag], key="audio")

    # LogMel frames at the declared rate; a rate that agrees is accepted
    mel = sl.LogMel(sample_rate=8000, n_mels=10)
    frames = sl.HFSource(ds, keys={"data": "audio"}, tags="id", features=mel)
    np.testing.assert_allclose(frames.read(2)["data"], mel(want["u2"]), rtol=1e-5, atol=1e-5)
    assert sl.HFSource(ds, keys={"audio": "audio"}, sample_rate=8000).lengths("audio")[0] == 4000


def test_rate_disagreeing_with_the_declared_one_names_both(tmp_path):
    path = tmp_path / "a.wav"
    sf.write(path, np.zeros(1600, dtype=np.float32), 16000)
    ds = datasets.Dataset.from_dict({"audio": [str(path)]}).cast_column(
        "audio", Audio(sampling_rate=8000)
    )
    with pytest.raises(OptionError, match=r"Audio\(sampling_rate=8000\) but sample_rate=16000"):
        sl.HFSource(ds, keys={"audio": "audio"}, sample_rate=16000)
    with pytest.raises(OptionError, match=r"but features=LogMel\(sample_rate=16000\) was given"):
        sl.HFSource(ds, keys={"data": "audio"}, features=sl.LogMel(n_mels=10))
    two = ds.add_column("other", [str(path)]).cast_column("other", Audio(sampling_rate=22050))
    with pytest.raises(OptionError, match=r"'audio': 8000 Hz, 'other': 22050 Hz"):
        sl.HFSource(two, keys={"audio": "audio", "data": "other"}, features=sl.LogMel(n_mels=10))
