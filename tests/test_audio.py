"""AudioSource, log-mel features and resampling, on real files (FLAC/WAV/OGG, several rates)
written by soundfile, through JSON-lines and OggZip manifests and real DataLoader workers."""

from __future__ import annotations

import json
import os
import pickle
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record
from seqloader.audio.features import numpy_log_mel, use_kernel
from seqloader.audio.resample import resample, resampled_length, speed_length
from seqloader.audio.torch_kernels import log_filterbank
from seqloader.synthetic.audio import encode_audio, speech_like, write_audio_corpus

pytest.importorskip("soundfile")

LM = sl.LogMel(sample_rate=16000, n_mels=40)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Mixed formats and rates: every read goes through decoding and most through resampling."""
    folder = tmp_path_factory.mktemp("audio")
    return write_audio_corpus(
        folder,
        24,
        formats=("flac", "wav", "ogg"),
        sample_rates=(16000, 8000, 22050, 44100),
        seconds=(0.2, 1.5),
        seed=7,
    )


# ---------------------------------------------------------------- features vs a float64 reference


def reference_log_mel(x: np.ndarray, sr: int, win: int, hop: int, n_fft: int, n_mels: int,
                      fmin: float, fmax: float) -> np.ndarray:  # fmt: skip
    """Independent float64 numpy log-mel: frame by frame, filter by filter."""
    x = x.astype(np.float64)
    frames = 0 if len(x) < n_fft else 1 + (len(x) - n_fft) // hop
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)  # periodic Hann
    window = np.zeros(n_fft)
    start = (n_fft - win) // 2  # the window sits centred in the FFT frame
    window[start : start + win] = hann
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    inv = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    points = [inv(m) for m in np.linspace(mel(fmin), mel(fmax), n_mels + 2)]
    freqs = np.fft.rfftfreq(n_fft, 1 / sr)
    out = np.zeros((frames, n_mels))
    for t in range(frames):
        power = np.abs(np.fft.rfft(x[t * hop : t * hop + n_fft] * window)) ** 2
        for m in range(n_mels):
            lo, mid, hi = points[m], points[m + 1], points[m + 2]
            weights = np.array(
                [
                    (f - lo) / (mid - lo) if lo <= f <= mid else (hi - f) / (hi - mid)
                    if mid < f <= hi else 0.0
                    for f in freqs
                ]
            )  # fmt: skip
            out[t, m] = np.log(max(float(weights @ power), 1e-10))
    return out


@pytest.mark.parametrize(
    "options",
    [
        sl.LogMel(sample_rate=16000, n_mels=40),
        sl.LogMel(sample_rate=8000, n_mels=23, window_s=0.032, hop_s=0.008, n_fft=512),
        sl.LogMel(sample_rate=22050, n_mels=64, n_fft=1024, fmin=60.0, fmax=8000.0),
    ],
)
@pytest.mark.parametrize("kernel", ["torch", "numpy"])
def test_log_mel_equals_float64_reference(options, kernel):
    """Both kernels: torch's (plugged in by ``import seqloader``) and the audio layer's numpy one."""
    rng = np.random.default_rng(1)
    wave = speech_like(0.3, options.sample_rate, rng) + 0.01 * rng.standard_normal(
        round(0.3 * options.sample_rate)
    ).astype(np.float32)
    installed = use_kernel(numpy_log_mel if kernel == "numpy" else log_filterbank)
    try:
        got = options(wave)
    finally:
        use_kernel(installed)
    assert installed is log_filterbank  # the package face computes log-mel with torch
    ref = reference_log_mel(
        wave, options.sample_rate, options.win, options.hop, options.fft_size, options.n_mels,
        options.fmin, options.fmax or options.sample_rate / 2,
    )  # fmt: skip
    assert got.dtype == np.float32 and got.shape == ref.shape and len(ref) > 10
    np.testing.assert_allclose(got, ref, atol=2e-3, rtol=0)


def test_a_tone_peaks_in_the_mel_band_around_its_frequency():
    sr, lm = 16000, sl.LogMel(sample_rate=16000, n_mels=40)
    centres = sl.audio.features.mel_to_hz(
        np.linspace(
            sl.audio.features.hz_to_mel(0), sl.audio.features.hz_to_mel(sr / 2), lm.n_mels + 2
        )
    )[1:-1]
    for freq in (300.0, 1000.0, 3000.0, 6000.0):
        tone = np.sin(2 * np.pi * freq * np.arange(sr // 2) / sr).astype(np.float32)
        peak = int(np.argmax(lm(tone).mean(axis=0)))
        assert abs(peak - int(np.argmin(np.abs(centres - freq)))) <= 1


@settings(max_examples=40, deadline=None)
@given(
    samples=st.integers(0, 3000),
    win_hop_fft=st.sampled_from([(400, 160, None), (256, 100, 512), (200, 200, None)]),
)
def test_frame_count_formula_is_the_real_length(samples, win_hop_fft):
    win, hop, n_fft = win_hop_fft
    lm = sl.LogMel(
        sample_rate=16000, n_mels=8, window_s=win / 16000, hop_s=hop / 16000, n_fft=n_fft
    )
    n_fft = n_fft or win
    expected = 1 + (samples - n_fft) // hop if samples >= n_fft else 0
    assert lm.num_frames(samples) == expected
    assert lm(np.zeros(samples, np.float32)).shape == (expected, 8)


# ---------------------------------------------------------------------------------- resampling


@pytest.mark.parametrize(
    "orig,new", [(44100, 16000), (8000, 16000), (22050, 16000), (16000, 16000)]
)
def test_resample_reproduces_a_band_limited_signal(orig, new):
    n = orig  # one second
    f = 0.3 * min(orig, new)
    y = resample(np.sin(2 * np.pi * f * np.arange(n) / orig).astype(np.float32), orig, new)
    assert len(y) == resampled_length(n, orig, new) == -(-n * new // orig)
    inner = slice(len(y) // 10, len(y) - len(y) // 10)  # away from the edges
    expected = np.sin(2 * np.pi * f * np.arange(len(y)) / new)
    assert np.abs(y[inner] - expected[inner]).max() < 1e-3


def test_downsampling_removes_what_the_new_rate_cannot_hold():
    tone = np.sin(2 * np.pi * 10_000 * np.arange(44100) / 44100).astype(np.float32)
    y = resample(tone, 44100, 16000)  # 10 kHz > 8 kHz Nyquist: must not alias to 6 kHz
    assert np.sqrt(np.mean(y[2000:-2000] ** 2)) < 1e-3


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 2000), factor=st.sampled_from([0.8, 0.9, 0.95, 1.0, 1.1, 1.25]))
def test_speed_length_formula_is_the_real_length(n, factor):
    from seqloader.transforms import SpeedPerturb

    out = SpeedPerturb((factor,))({"audio": np.ones(n, np.float32)}, np.random.default_rng(0))
    assert len(out["audio"]) == speed_length(n, factor)


# -------------------------------------------------------------------------------- the source


def test_planned_lengths_equal_the_decoded_lengths(corpus):
    src = sl.AudioSource(corpus.jsonl, features=LM, keys=("data", "audio", "text"))
    for i in range(len(src)):
        seq = src.read(i)
        for key in src.keys:
            assert len(seq[key]) == src.lengths(key)[i], (i, key)
        assert seq["data"].shape[1] == LM.n_mels
        np.testing.assert_array_equal(seq["data"], LM(seq["audio"]))


def test_planned_lengths_follow_the_duration_formula(corpus):
    src = sl.AudioSource(corpus.jsonl, features=LM, keys=("data", "audio"))
    with open(corpus.jsonl) as f:
        durations = np.array([json.loads(line)["duration"] for line in f])
    samples = np.rint(durations * 16000).astype(np.int64)
    np.testing.assert_array_equal(src.lengths("audio"), samples)
    np.testing.assert_array_equal(src.lengths("data"), 1 + (samples - 400) // 160)


def test_files_at_other_rates_are_resampled_not_reinterpreted(tmp_path):
    """An 8 kHz file holding a 1 kHz tone reads as a 1 kHz tone at 16 kHz."""
    tone = np.sin(2 * np.pi * 1000 * np.arange(8000) / 8000).astype(np.float32) * 0.5
    (tmp_path / "tone.wav").write_bytes(encode_audio(tone, 8000, "wav"))
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio": "tone.wav", "duration": 1.0}) + "\n")
    wave = sl.AudioSource(tmp_path / "m.jsonl", keys=("audio",)).read(0)["audio"]
    assert len(wave) == 16000
    spectrum = np.abs(np.fft.rfft(wave))
    assert abs(np.argmax(spectrum) * 16000 / len(wave) - 1000) < 2


def test_jsonl_and_oggzip_read_identically(corpus):
    vocab = sl.TokenVocab(tuple(sorted({w for w in " ".join(_texts(corpus)).split()})))
    a = sl.AudioSource(corpus.jsonl, features=LM, vocab=vocab, keys=("data", "text", "classes"))
    b = sl.AudioSource(corpus.oggzip, features=LM, vocab=vocab, keys=("data", "text", "classes"))
    assert list(a.tags) == list(b.tags) and a.fingerprint() == b.fingerprint()
    for key in a.keys:
        np.testing.assert_array_equal(a.lengths(key), b.lengths(key))
    for i in range(len(a)):
        x, y = a.read(i), b.read(i)
        for key in a.keys:
            assert x[key].dtype == y[key].dtype and x[key].tobytes() == y[key].tobytes()


def _texts(corpus) -> list[str]:
    with open(corpus.jsonl) as f:
        return [json.loads(line)["text"] for line in f]


def test_text_and_classes_keys(corpus, tmp_path):
    texts = _texts(corpus)
    chars = sorted(set("".join(texts)))
    vocab_file = tmp_path / "chars.txt"
    vocab_file.write_text("".join(c + "\n" for c in ["<unk>", *chars]))
    vocab = sl.TokenVocab.from_file(vocab_file, split="char", unknown="<unk>")
    src = sl.AudioSource(corpus.oggzip, vocab=vocab, keys=("text", "classes"))
    assert src.schema["classes"].vocab_size == len(chars) + 1
    for i, text in enumerate(texts):
        seq = src.read(i)
        assert bytes(seq["text"]).decode("utf-8") == text
        assert [vocab.tokens[k] for k in seq["classes"]] == list(text)
        assert src.lengths("classes")[i] == len(text)


def test_returnn_dict_vocabulary_and_unknown_tokens_name_the_line(tmp_path):
    (tmp_path / "v.py").write_text("{'<unk>': 2, 'hello': 0, 'world': 1}\n")
    vocab = sl.TokenVocab.from_file(tmp_path / "v.py")  # no unknown token: unknown words fail
    (tmp_path / "a.wav").write_bytes(encode_audio(np.zeros(1600, np.float32), 16000, "wav"))
    rows = [{"audio": "a.wav", "duration": 0.1, "text": t} for t in ("hello world", "hello moon")]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(sl.DataError, match=r"m\.jsonl line 2 .*'moon'"):
        sl.AudioSource(tmp_path / "m.jsonl", vocab=vocab)
    ok = sl.AudioSource(tmp_path / "m.jsonl", vocab=sl.TokenVocab.from_file(tmp_path / "v.py",
                                                                           unknown="<unk>"))  # fmt: skip
    assert ok.read(1)["classes"].tolist() == [0, 2]


def test_oggzip_listing_is_parsed_not_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    listing = f"[\n{{'file': 'a.wav', 'duration': __import__('os').mkdir({str(marker)!r})}},\n]\n"
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as z:
        z.writestr("bad.txt", listing)
    with pytest.raises(sl.DataError, match=r"bad\.txt line 2: not a literal"):
        sl.AudioSource(tmp_path / "bad.zip")
    assert not marker.exists()


def test_manifest_errors_name_the_line(tmp_path):
    rows = ['{"audio": "a.wav", "duration": 1.0}', '{"audio": "b.wav"}']
    (tmp_path / "m.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(sl.DataError, match=r"m\.jsonl line 2: no 'duration'.*Fix: "):
        sl.AudioSource(tmp_path / "m.jsonl")


def _broken_corpus(tmp_path, corpus):
    """A copy of the corpus manifest with entry 3 corrupt (garbage bytes) and entry 5 missing."""
    with open(corpus.jsonl) as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        r["audio"] = os.path.join(corpus.audio_dir, os.path.basename(r["audio"]))
    (tmp_path / "corrupt.flac").write_bytes(b"fLaC not really" * 10)
    rows[3]["audio"] = str(tmp_path / "corrupt.flac")
    rows[5]["audio"] = str(tmp_path / "missing.wav")
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_unreadable_files_raise_naming_manifest_line_and_file(tmp_path, corpus):
    path = _broken_corpus(tmp_path, corpus)
    src = sl.AudioSource(path, features=LM)
    with pytest.raises(sl.DataError, match=r"broken\.jsonl line 4 \(audio .*corrupt\.flac\)"):
        src.read(3)
    with pytest.raises(sl.DataError, match=r"broken\.jsonl line 6 \(audio .*missing\.wav\)"):
        src.read(5)
    for workers in (0, 1):  # from a worker process too, with the same type and message
        loader = sl.SeqLoader(src, max_seqs=4, num_workers=workers)
        with (
            loader,
            pytest.raises(sl.DataError, match=r"line 4 \(audio .*corrupt\.flac.*on_error="),
        ):
            list(loader.epoch(1))


def test_corrupt_member_of_an_oggzip_names_the_listing_line(tmp_path, corpus):
    with zipfile.ZipFile(corpus.oggzip) as src, zipfile.ZipFile(tmp_path / "corpus.zip", "w") as z:
        for info in src.infolist():
            data = src.read(info)
            z.writestr(
                info, data[: len(data) // 3] if info.filename.endswith("00002.ogg") else data
            )
    with pytest.raises(sl.DataError, match=r"corpus\.txt line 4 \(audio .*corpus/utt00002\.ogg\)"):
        sl.AudioSource(tmp_path / "corpus.zip", features=LM).read(2)


def test_a_stale_duration_is_an_error_small_differences_are_fitted(tmp_path):
    (tmp_path / "a.wav").write_bytes(encode_audio(np.full(16000, 0.1, np.float32), 16000, "wav"))
    rows = [{"audio": "a.wav", "duration": d} for d in (1.004, 1.5)]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = sl.AudioSource(tmp_path / "m.jsonl", keys=("audio",))
    wave = src.read(0)["audio"]  # 4 ms longer in the manifest: zero-padded to the plan
    assert len(wave) == src.lengths("audio")[0] == 16064 and not wave[16000:].any()
    with pytest.raises(sl.DataError, match=r"m\.jsonl line 2 .*duration 1\.5s"):
        src.read(1)


def test_skip_leaves_the_sequence_out_and_the_report_counts_it(tmp_path, corpus):
    src = sl.AudioSource(_broken_corpus(tmp_path, corpus), features=LM, on_error="skip")
    loader = sl.SeqLoader(src, ordering="random", max_seqs=3, seed=2, num_workers=2)
    seen, skipped, sizes = [], [], {}
    for batch in loader.epoch(1):
        seen += batch.seq_indices.tolist()
        skipped += batch.skipped
        sizes[batch.step] = batch.size
        assert batch["data"].shape[0] == batch.size == len(batch.seq_tags)
    assert sorted(seen) == sorted(set(range(len(src))) - {3, 5})  # everything else exactly once
    assert len(skipped) == 2 and any("corrupt.flac" in m for m in skipped)
    assert any("line 6" in m and "missing.wav" in m for m in skipped)
    report = loader.report()
    assert report.skipped == 2 and report.seqs == len(src) - 2 and "SKIPPED 2" in report.format()
    assert sorted(sizes.values()).count(3) == len(sizes) - 2  # two batches hold one fewer
    loader.close()


def test_a_batch_whose_every_sequence_is_skipped_still_arrives_empty(tmp_path, corpus):
    src = sl.AudioSource(_broken_corpus(tmp_path, corpus), features=LM, on_error="skip")
    loader = sl.SeqLoader(src, max_seqs=1, num_workers=0)
    batches = list(loader.epoch(1))
    assert len(batches) == len(src)  # equal steps: the step still happens
    empty = [b for b in batches if b.size == 0]
    assert len(empty) == 2 and all(b["data"].shape == (0, 0, LM.n_mels) for b in empty)
    assert loader.report().skipped == 2


def test_batches_are_identical_with_0_1_2_workers_and_after_fork_and_spawn(corpus):
    src = sl.AudioSource(corpus.oggzip, features=LM)
    src.read(0)  # the parent opened the zip: forked workers must not reuse that handle

    def run(**workers):
        with sl.SeqLoader(src, ordering="laplace:.6", max_frames=600, seed=5, **workers) as ld:
            return [batch_record(b) for b in ld.epoch(2)]

    reference = run(num_workers=0)
    assert run(num_workers=1) == reference
    assert run(num_workers=2) == reference
    assert run(num_workers=1, multiprocessing_context="spawn") == reference


def test_source_pickles_without_open_handles(corpus):
    src = sl.AudioSource(corpus.oggzip, features=LM)
    first = src.read(1)
    clone = pickle.loads(pickle.dumps(src))
    assert clone.fingerprint() == src.fingerprint()
    assert clone.read(1)["data"].tobytes() == first["data"].tobytes()


def test_options_are_validated():
    with pytest.raises(sl.OptionError, match="on_error"):
        sl.AudioOptions(on_error="ignore")
    with pytest.raises(sl.OptionError, match="sample_rate=8000 differs"):
        sl.AudioOptions(sample_rate=8000, features=LM)
    with pytest.raises(sl.OptionError, match="unknown kind"):
        sl.AudioSource("corpus.csv")


def test_sentencepiece_vocabulary(corpus, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    (tmp_path / "texts.txt").write_text("\n".join(_texts(corpus) * 20) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "texts.txt"),
        model_prefix=str(tmp_path / "sp"),
        vocab_size=24,
        model_type="unigram",
        minloglevel=2,
    )
    vocab = sl.SentencePieceVocab(tmp_path / "sp.model")
    src = sl.AudioSource(corpus.jsonl, vocab=vocab, keys=("classes",))
    clone = pickle.loads(pickle.dumps(src))  # pickles the model bytes, not the path
    assert src.schema["classes"].vocab_size == len(vocab) == 24
    for i, text in enumerate(_texts(corpus)):
        ids = clone.read(i)["classes"]
        assert len(ids) == src.lengths("classes")[i]
        assert vocab._sp.decode(ids.tolist()) == text
