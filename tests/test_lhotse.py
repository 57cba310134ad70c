"""``LhotseSource`` against the real Lhotse: wav files read by Lhotse (``Recording.from_file``),
features computed by Lhotse into its own storages (lilcom chunky, numpy HDF5, numpy files), cut
manifests written by ``CutSet.to_file``. Values are compared with Lhotse's own ``load_features`` /
``load_audio``; epochs with 0 and 2 DataLoader workers (fork and spawn) deliver every cut exactly
once; broken inputs fail naming the cut and the fix."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import seqloader as sl
from adapter_util import check_epochs
from seqloader.errors import DataError, OptionError

lhotse = pytest.importorskip("lhotse")
from lhotse import (  # noqa: E402
    CutSet,
    Fbank,
    FbankConfig,
    Mfcc,
    MfccConfig,
    Recording,
    RecordingSet,
    SupervisionSegment,
    SupervisionSet,
)
from lhotse.features.io import (  # noqa: E402
    LilcomChunkyWriter,
    NumpyFilesWriter,
    NumpyHdf5Writer,
)

N_CUTS = 23  # prime: no batch size or world size divides it
WORDS = ("one", "two", "three", "four", "five")
STORAGES = {"lilcom_chunky": LilcomChunkyWriter, "numpy_hdf5": NumpyHdf5Writer}
STORAGES["numpy_files"] = NumpyFilesWriter


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Wav files, a cuts manifest without features, and one with features per Lhotse storage."""
    root = tmp_path_factory.mktemp("lhotse")
    rng = np.random.default_rng(3)
    recordings, supervisions = [], []
    for i in range(N_CUTS + 1):
        rate = 8000 if i == N_CUTS else 16000  # the extra one is only in the mixed-rate manifest
        samples = int(rng.integers(rate // 5, rate))  # 0.2-1.0 s
        wav = root / f"utt{i:02d}.wav"
        sf.write(wav, (0.1 * rng.standard_normal(samples)).astype(np.float32), rate)
        rec = Recording.from_file(wav, recording_id=f"rec{i:02d}")
        recordings.append(rec)
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5))))
        supervisions.append(SupervisionSegment(f"sup{i:02d}", rec.id, 0.0, rec.duration, text=text))
    mixed = CutSet.from_manifests(
        recordings=RecordingSet.from_recordings(recordings),
        supervisions=SupervisionSet.from_segments(supervisions),
    )
    paths = {"audio": root / "cuts_audio.jsonl.gz", "mixed": root / "cuts_mixed.jsonl"}
    mixed.to_file(paths["mixed"])
    cuts = mixed.subset(first=N_CUTS)
    cuts.to_file(paths["audio"])
    fbank = Fbank(FbankConfig(num_mel_bins=24))
    for name, writer in STORAGES.items():
        with_feats = cuts.compute_and_store_features(
            fbank, storage_path=root / f"feats_{name}", storage_type=writer, num_jobs=1
        )
        paths[name] = root / f"cuts_{name}.jsonl"
        with_feats.to_file(paths[name])
    return paths


def reference(path: Path) -> dict[str, object]:
    """Each cut as Lhotse itself loads it."""
    return {c.id: c for c in lhotse.load_manifest(path)}


@pytest.mark.parametrize("storage", sorted(STORAGES))
def test_features_from_every_storage(corpus, storage):
    src = sl.LhotseSource(corpus[storage])
    cuts = reference(corpus[storage])
    assert src.keys == ("data", "text")
    assert list(src.tags) == list(cuts)
    assert src.schema["data"].feature_shape == (24,)
    want_frames = [c.num_frames for c in cuts.values()]
    assert src.lengths("data").tolist() == want_frames
    for i, cut in enumerate(cuts.values()):
        got = src.read(i)
        np.testing.assert_array_equal(got["data"], cut.load_features())
        assert got["text"].tobytes().decode() == cut.supervisions[0].text


def test_classes_through_a_vocabulary(corpus):
    vocab = sl.TokenVocab(WORDS)
    src = sl.LhotseSource(corpus["numpy_hdf5"], vocab=vocab)
    assert src.keys == ("data", "text", "classes")
    for i, cut in enumerate(reference(corpus["numpy_hdf5"]).values()):
        ids = src.read(i)["classes"]
        assert [WORDS[k] for k in ids] == cut.supervisions[0].text.split()
        assert src.lengths("classes")[i] == len(ids)


def test_audio_path_with_logmel(corpus):
    """Cuts without features: ``data`` = our LogMel of the audio Lhotse loads (resampled by us to
    the LogMel rate), planned from the manifest's durations."""
    mel = sl.LogMel(n_mels=20)
    src = sl.LhotseSource(corpus["mixed"], features=mel, keys=["data", "audio"])
    cuts = list(reference(corpus["mixed"]).values())
    assert cuts[-1].sampling_rate == 8000
    for i, cut in enumerate(cuts):
        got = src.read(i)
        samples = lhotse.utils.compute_num_samples(cut.duration, 16000)
        assert src.lengths("audio")[i] == samples == len(got["audio"])
        assert src.lengths("data")[i] == mel.num_frames(samples) == len(got["data"])
        if cut.sampling_rate == 16000:
            np.testing.assert_allclose(got["audio"], cut.load_audio()[0], atol=1e-6)
        np.testing.assert_allclose(got["data"], mel(got["audio"]), rtol=1e-5, atol=1e-5)


def test_audio_key_without_features_or_sample_rate_needs_one_rate(corpus):
    with pytest.raises(OptionError, match=r"sampling rates \[8000, 16000\].*sample_rate="):
        sl.LhotseSource(corpus["mixed"], keys=["audio"])
    src = sl.LhotseSource(corpus["mixed"], keys=["audio"], sample_rate=8000)
    assert src.read(5)["audio"].shape == (src.lengths("audio")[5],)
    assert sl.LhotseSource(corpus["audio"], keys=["audio"]).schema["audio"].feature_shape == ()


def test_explicit_logmel_wins_over_stored_features(corpus):
    src = sl.LhotseSource(corpus["numpy_hdf5"], features=sl.LogMel(n_mels=16))
    assert src.schema["data"].feature_shape == (16,)


def test_cutset_object_and_manifest_path_agree(corpus):
    by_path = sl.LhotseSource(corpus["lilcom_chunky"])
    by_cutset = sl.LhotseSource(lhotse.load_manifest(corpus["lilcom_chunky"]))
    assert by_path.fingerprint() == by_cutset.fingerprint()
    np.testing.assert_array_equal(by_path.read(7)["data"], by_cutset.read(7)["data"])


@pytest.mark.parametrize(
    "storage, workers, context",
    [
        ("lilcom_chunky", 0, None),
        ("lilcom_chunky", 2, "fork"),
        ("numpy_hdf5", 2, "fork"),
        ("numpy_hdf5", 1, "spawn"),  # spawn: the source pickled (2 workers: fork above)
    ],
)
def test_every_cut_once_per_epoch_with_workers(corpus, storage, workers, context):
    src = sl.LhotseSource(corpus[storage])
    cuts = reference(corpus[storage])
    loader = sl.SeqLoader(
        src,
        ordering="laplace:.5",
        max_seqs=4,
        max_frames=300,
        seed=2,
        num_workers=workers,
        multiprocessing_context=context,
    )
    check_epochs(loader, src.tags, lambda tag: cuts[tag].load_features())


# ---- bad input ----


def edited_manifest(src: Path, dst: Path, edit) -> Path:
    """A copy of a cuts manifest with ``edit(cut_dict, index)`` applied to every line."""
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        lines = [json.loads(line) for line in f]
    with open(dst, "w") as f:
        for i, d in enumerate(lines):
            edit(d, i)
            f.write(json.dumps(d) + "\n")
    return dst


def test_storage_gone_fails_at_read_naming_the_cut(corpus, tmp_path):
    """Open reads only the manifest; a missing storage is an error at read, naming the cut."""
    storage = Path(str(corpus["numpy_files"]).replace("cuts_", "feats_").removesuffix(".jsonl"))
    moved = tmp_path / "feats_moved"
    manifest = edited_manifest(
        corpus["numpy_files"],
        tmp_path / "cuts.jsonl",
        lambda d, i: d["features"].update(storage_path=str(moved)),
    )
    src = sl.LhotseSource(manifest)  # nothing read: the storage is not there
    with pytest.raises(
        DataError, match=r"sequence 3 \(cut 'rec03-\d+'\).*cannot load its features"
    ):
        src.read(3)
    shutil.copytree(storage, moved)
    assert src.read(3)["data"].shape[1] == 24
    skipping = sl.LhotseSource(
        edited_manifest(manifest, tmp_path / "c2.jsonl", lambda d, i: None), on_error="skip"
    )
    shutil.rmtree(moved)
    with pytest.raises(sl.SequenceSkipped, match="cut 'rec04"):
        skipping.read(4)


def test_manifest_disagreeing_with_storage(corpus, tmp_path):
    manifest = edited_manifest(
        corpus["numpy_hdf5"],
        tmp_path / "cuts.jsonl",
        lambda d, i: d["features"].update(num_features=30),
    )
    src = sl.LhotseSource(manifest)
    assert src.schema["data"].feature_shape == (30,)
    with pytest.raises(DataError, match=r"cut 'rec02.*the storage does not match the manifest"):
        src.read(2)


def test_mixed_feature_dims_named(corpus, tmp_path):
    manifest = edited_manifest(
        corpus["numpy_hdf5"],
        tmp_path / "cuts.jsonl",
        lambda d, i: d["features"].update(num_features=40) if i == 4 else None,
    )
    with pytest.raises(DataError, match=r"cut 'rec04-\d+'.*40 features per frame.*has 24"):
        sl.LhotseSource(manifest)


@pytest.mark.parametrize(
    ("second", "says"),
    [
        (lambda: Fbank(FbankConfig(num_mel_bins=24, frame_shift=0.02)), r"a frame shift of 20 ms"),
        (lambda: Fbank(FbankConfig(num_mel_bins=16)), r"16 features per frame"),
        (lambda: Mfcc(MfccConfig(num_mel_bins=24, num_ceps=24)), r"features of type 'kaldi-mfcc'"),
    ],
    ids=["frame_shift", "dim", "type"],
)
def test_cuts_with_features_of_another_kind_are_refused_naming_two(corpus, tmp_path, second, says):
    """Features computed by Lhotse with two extractors or configs, in one CutSet (as when two
    corpora prepared apart are combined): an error naming a cut of each kind, not a silent mix."""
    cuts = CutSet.from_file(corpus["audio"])
    one = cuts.subset(first=3).compute_and_store_features(
        Fbank(FbankConfig(num_mel_bins=24)), storage_path=tmp_path / "one", num_jobs=1
    )
    other = cuts.subset(last=2).compute_and_store_features(
        second(), storage_path=tmp_path / "two", num_jobs=1
    )
    mixed = one + other
    mixed.to_file(tmp_path / "mixed.jsonl.gz")
    first, odd = next(iter(one)).id, next(iter(other)).id
    for given in (mixed, tmp_path / "mixed.jsonl.gz"):
        with pytest.raises(DataError, match=rf"cut '{odd}' has {says}.*cut '{first}' has"):
            sl.LhotseSource(given)
    from seqloader.cli.rates import frame_rate

    src = sl.LhotseSource(one)  # one kind: its frame shift is known, and stats' hours use it
    assert src.frame_shift == 0.01
    assert frame_rate(None, src, "data", src.lengths("data")).hz == pytest.approx(100)


def test_missing_reader_package_is_named_not_skipped(corpus, monkeypatch):
    """Lhotse's lilcom reader without the lilcom package (made unimportable here, as when it is
    not installed): at open the package is named; a source opened before it went missing fails
    at read naming it, also under on_error="skip" (skipping would drop every cut)."""
    opened = sl.LhotseSource(corpus["lilcom_chunky"], on_error="skip")
    monkeypatch.setitem(sys.modules, "lilcom", None)
    with pytest.raises(OptionError, match=r"'lilcom_chunky' storage.*pip install lilcom"):
        sl.LhotseSource(corpus["lilcom_chunky"])
    with pytest.raises(
        DataError, match=r"cut 'rec02-\d+'.*not installed.*Fix: pip install lilcom$"
    ) as e:
        opened.read(2)
    assert "on_error" not in str(e.value)
    assert sl.LhotseSource(corpus["numpy_files"]).read(2)["data"].shape[1] == 24  # no lilcom


def test_no_features_and_no_logmel(corpus):
    with pytest.raises(OptionError, match=r"cut 'rec00-\d+'.*has no features.*features=LogMel"):
        sl.LhotseSource(corpus["audio"], keys=["data"])
    assert sl.LhotseSource(corpus["audio"], sample_rate=16000).keys == ("audio", "text")


def test_unknown_token_names_the_cut(corpus):
    with pytest.raises(DataError, match=r"cut 'rec\d\d-\d+'.*not in the vocabulary"):
        sl.LhotseSource(corpus["numpy_hdf5"], vocab=sl.TokenVocab(WORDS[:2]))


@pytest.mark.parametrize(
    "given, match",
    [
        ("cuts.txt", "expected a cuts manifest ending in .jsonl"),
        ("missing.jsonl.gz", "does not exist"),
        (42, "got int, expected a lhotse CutSet"),
    ],
)
def test_bad_cuts_argument(tmp_path, given, match):
    arg = tmp_path / given if isinstance(given, str) else given
    with pytest.raises((OptionError, DataError), match=match):
        sl.LhotseSource(arg)


def test_recordings_manifest_is_not_cuts(corpus, tmp_path):
    recs = lhotse.load_manifest(corpus["audio"]).decompose()[0]
    path = tmp_path / "recordings.jsonl.gz"
    recs.to_file(path)
    with pytest.raises(OptionError, match=r"is a RecordingSet manifest, expected cuts"):
        sl.LhotseSource(path)


def test_unknown_key_and_option(corpus):
    with pytest.raises(OptionError, match="expected some of"):
        sl.LhotseSource(corpus["numpy_hdf5"], keys=["feats"])
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['n_mels'\]"):
        sl.LhotseSource(corpus["numpy_hdf5"], n_mels=80)
