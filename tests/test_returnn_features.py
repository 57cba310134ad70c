"""``ReturnnFeatures`` gives the frames RETURNN's own ``ExtractAudioFeatures`` (with librosa)
computes: same frame count, values within 1e-4 (relative above magnitude 1, where one float32
step of a value near 1000 is already 6e-5), on audio files decoded from FLAC, WAV and OGG."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.audio.features import LogMel
from seqloader.audio.returnn_features import ReturnnFeatures, delta, fit_frames
from seqloader.errors import DataError, OptionError
from seqloader.synthetic.audio import encode_audio, speech_like

sf = pytest.importorskip("soundfile")

# option sets RETURNN users write (feature type defaults, deltas, norms, preemphasis, options)
OPTION_SETS = [
    {"features": "log_mel_filterbank", "num_feature_filters": 80},
    {"features": "mfcc"},
    {"features": "mfcc", "num_feature_filters": 13, "with_delta": 2,
     "feature_options": {"n_mels": 40, "fmin": 20, "fmax": 3800, "center": False}},
    {"features": "log_mel_filterbank", "num_feature_filters": 40, "with_delta": True,
     "norm_mean": "per_seq", "norm_std_dev": "per_seq", "preemphasis": 0.97},
    {"features": "db_mel_filterbank", "num_feature_filters": 64, "window_len": 0.032,
     "step_len": 0.0125, "join_frames": 3},
    {"features": "log_log_mel_filterbank", "num_feature_filters": 40,
     "peak_normalization": False},
    {"features": "linear_spectrogram", "num_feature_filters": 256, "norm_mean": 0.5,
     "norm_std_dev": 2.0},
]  # fmt: skip
FILES = [("wav", 16000, 1.47), ("flac", 16000, 2.3), ("ogg", 8000, 1.0), ("flac", 22050, 0.61)]


def assert_close(expected: np.ndarray, got: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - expected) / np.maximum(1.0, np.abs(expected))
    assert err.max() <= 1e-4, f"max error {err.max():.3g}"


def audio_file(fmt: str, rate: int, seconds: float, seed: int = 0) -> bytes:
    return encode_audio(speech_like(seconds, rate, np.random.default_rng(seed)), rate, fmt)


@pytest.mark.parametrize("fmt,rate,seconds", FILES)
@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: o["features"])
def test_frames_are_returnns(fmt: str, rate: int, seconds: float, opts: dict) -> None:
    feature_extraction = pytest.importorskip("returnn.datasets.util.feature_extraction")
    pytest.importorskip("librosa")
    blob = audio_file(fmt, rate, seconds)
    ref = feature_extraction.ExtractAudioFeatures(**opts)
    wave, file_rate = sf.read(io.BytesIO(blob), dtype="float32")
    if opts["features"] == "linear_spectrogram" and int(0.025 * file_rate) > 2 * 256:
        with pytest.raises(AssertionError):  # RETURNN: window longer than the FFT
            ref.get_audio_features_from_raw_bytes(io.BytesIO(blob))
        with pytest.raises(OptionError, match="linear_spectrogram"):
            ReturnnFeatures(sample_rate=file_rate, **opts)
        return
    expected = ref.get_audio_features_from_raw_bytes(io.BytesIO(blob))
    ours = ReturnnFeatures(sample_rate=file_rate, **opts)
    assert ours.num_frames(len(wave)) == expected.shape[0]  # planned before decoding
    assert ours.dim == ref.get_feature_dimension()
    assert_close(expected, ours(wave))


def test_the_issue_example_148_frames_not_145() -> None:
    """1.47 s at 16 kHz, 25 ms / 10 ms: RETURNN's centred frames are 148; LogMel's 145."""
    samples = round(1.47 * 16000)
    assert (
        ReturnnFeatures(features="log_mel_filterbank", num_feature_filters=80).num_frames(samples)
        == 148
    )
    assert LogMel(16000, 80).num_frames(samples) == 145


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 3000),
    st.sampled_from([0.025, 0.02, 0.0301]),
    st.sampled_from([0.01, 0.0125, 0.007]),
    st.booleans(),
    st.sampled_from([None, 2, 3]),
)
def test_planned_frames_equal_computed(samples, window, step, center, join) -> None:
    f = ReturnnFeatures(
        features="mfcc",
        num_feature_filters=13,
        window_len=window,
        step_len=step,
        sample_rate=8000,
        join_frames=join,
        feature_options={"n_mels": 30, "center": center},
    )
    wave = np.random.default_rng(samples).uniform(-0.5, 0.5, samples).astype(np.float32)
    out = f(wave)
    assert out.shape == (f.num_frames(samples), f.dim)


def test_delta_matches_librosa() -> None:
    librosa = pytest.importorskip("librosa")
    x = (np.random.default_rng(1).standard_normal((50, 4)) * 10).astype(np.float32)
    for order in (1, 2):
        expected = librosa.feature.delta(x, order=order, axis=0)
        np.testing.assert_allclose(delta(x, order), expected, atol=1e-5, rtol=1e-6)


def test_too_few_frames_for_deltas_is_an_error_naming_the_fix() -> None:
    f = ReturnnFeatures(features="log_mel_filterbank", with_delta=True)
    with pytest.raises(DataError, match="min_seq_length=9"):
        f(np.zeros(5 * 160, dtype=np.float32) + 0.1)


@pytest.mark.parametrize(
    "audio,match",
    [
        ({"features": "raw_ogg"}, "features"),
        ({"features": "raw", "num_feature_filters": 2}, "num_feature_filters=1"),
        ({"features": "mfcc", "random_permute": {"rnd_scale_lower": 0.5}}, "random_permute"),
        ({"features": "mfcc", "pre_process": 3}, "pre_process"),
        ({"features": "mfcc", "feature_options": {"htk": True}}, "htk"),
        ({"features": "log_mel_filterbank", "feature_options": {"fmin": 20}}, "fmin"),
        ({"features": "mfcc", "sample_rate": None}, "sample_rate"),
        ({"features": "mfcc", "num_feature_filters": 13, "norm_mean": [0.0] * 12}, "13"),
        ({"features": "mfcc", "window": 0.02}, "window"),
    ],
)
def test_unsupported_options_are_refused_by_name(audio: dict, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        ReturnnFeatures.from_returnn(audio, sample_rate=None if "sample_rate" in audio else 16000)


def test_from_returnn_fills_the_rate_and_reads_norm_files(tmp_path) -> None:
    path = tmp_path / "mean.txt"
    np.savetxt(path, np.arange(13.0))
    f = ReturnnFeatures.from_returnn(
        {"features": "mfcc", "num_feature_filters": 13, "norm_mean": str(path),
         "random_permute": False},
        sample_rate=8000,
    )  # fmt: skip
    assert f.sample_rate == 8000 and f.norm_mean == tuple(np.arange(13.0))
    assert hash(f) == hash(ReturnnFeatures.from_returnn(
        {"features": "mfcc", "num_feature_filters": 13, "norm_mean": list(np.arange(13.0))},
        sample_rate=8000,
    ))  # fmt: skip


def test_fit_frames_keeps_returnns_frames() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(fit_frames(x, 3), x[:3])
    np.testing.assert_array_equal(fit_frames(x, 5)[:4], x)
    np.testing.assert_array_equal(fit_frames(x, 5)[4], x[3])
    assert fit_frames(x[:0], 2).shape == (2, 3)


@pytest.mark.parametrize("rounded", [False, True])
def test_audio_source_gives_returnns_oggzip_frames(tmp_path, rounded: bool) -> None:
    """RETURNN's own ``OggZipDataset`` on a zip vs ``AudioSource(zip, features=ReturnnFeatures)``,
    per tag. With durations rounded to 10 ms in the listing (as corpus tools write them) the
    planned frame count may differ from RETURNN's by a frame; every frame we deliver that RETURNN
    also has is RETURNN's."""
    audio_mod = pytest.importorskip("returnn.datasets.audio")
    pytest.importorskip("librosa")
    from seqloader.audio.source import AudioSource
    from seqloader.synthetic.audio import write_audio_corpus

    corpus = write_audio_corpus(tmp_path, 8, formats=("flac", "wav", "ogg"), seconds=(0.3, 1.6))
    if rounded:
        import ast
        import zipfile

        with zipfile.ZipFile(corpus.oggzip) as z:
            members = {n: z.read(n) for n in z.namelist()}
        listing = ast.literal_eval(members["corpus.txt"].decode())
        for e in listing:
            e["duration"] = round(e["duration"], 2)
        members["corpus.txt"] = repr(listing).encode()
        with zipfile.ZipFile(corpus.oggzip, "w") as z:
            for n, blob in members.items():
                z.writestr(n, blob)
    audio = {"features": "log_mel_filterbank", "num_feature_filters": 40, "with_delta": True,
             "norm_mean": "per_seq", "norm_std_dev": "per_seq"}  # fmt: skip
    ref = audio_mod.OggZipDataset(corpus.oggzip, audio=audio, targets=None)
    ref.init_seq_order(epoch=1)
    ours = AudioSource(
        corpus.oggzip, features=ReturnnFeatures.from_returnn(audio, sample_rate=16000)
    )
    by_tag = {ours.tag(i): i for i in range(len(ours))}
    checked = 0
    for k in range(ref.num_seqs):
        ref.load_seqs(k, k + 1)
        expected = ref.get_data(k, "data")
        i = by_tag[ref.get_tag(k)]
        got = ours.read(i)["data"]
        assert len(got) == ours.lengths("data")[i]  # the plan holds
        if not rounded:
            assert len(got) == len(expected)
        common = min(len(got), len(expected))
        assert abs(len(got) - len(expected)) <= 2
        assert_close(expected[:common], got[:common])
        checked += 1
    assert checked == len(ours) == 8
