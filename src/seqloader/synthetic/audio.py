"""Synthetic speech-like corpora for tests, demos and benchmarks: the same utterances written as
audio files (FLAC/WAV/OGG, any sample rate), a JSON-lines manifest and a RETURNN OggZip corpus.

The signal is a voiced-speech caricature: a slowly gliding pitch (90-250 Hz) with 1/k harmonics
shaped by two moving formant-like resonances, syllable-rate (~4 Hz) amplitude modulation, a little
breath noise, and short silences at both ends. Enough structure for features and resampling to do
real work; nothing here is meant to sound like a voice.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.audio.manifest import import_soundfile

WORDS = ("the", "a", "cat", "sat", "on", "mat", "speech", "data", "loader", "epoch", "batch", "oh")
FORMAT_SUBTYPES = {"flac": "PCM_16", "wav": "PCM_16", "ogg": "VORBIS"}


def speech_like(seconds: float, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """One utterance: float32 ``[round(seconds * sample_rate)]`` in about [-0.5, 0.5]."""
    n = round(seconds * sample_rate)
    t = np.arange(n) / sample_rate  # [n]
    f0 = rng.uniform(90, 250) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t))
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate  # [n]
    formants = (rng.uniform(300, 900), rng.uniform(1000, 2500))
    wave = np.zeros(n)
    for k in range(1, int(min(40, 0.45 * sample_rate / 250)) + 1):  # harmonics below Nyquist
        fk = k * f0
        gain = sum(np.exp(-(((fk - fm) / 300.0) ** 2)) for fm in formants) + 0.05
        wave += gain * np.sin(k * phase) / k
    syllables = 0.5 * (1 + np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 6.28)))
    wave = wave * syllables + 0.01 * rng.standard_normal(n)
    edge = min(n // 4, int(0.05 * sample_rate))  # short silences at both ends
    if edge:
        wave[:edge] *= 0.02
        wave[-edge:] *= 0.02
    peak = np.max(np.abs(wave)) if n else 1.0
    return (0.5 * wave / max(peak, 1e-9)).astype(np.float32)


def encode_audio(wave: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """``wave`` as the bytes of a FLAC/WAV/OGG file."""
    if fmt not in FORMAT_SUBTYPES:
        raise ValueError(f"format: got {fmt!r}, expected one of {sorted(FORMAT_SUBTYPES)}")
    buf = io.BytesIO()
    import_soundfile().write(
        buf, wave, sample_rate, format=fmt.upper(), subtype=FORMAT_SUBTYPES[fmt]
    )
    return buf.getvalue()


@dataclass(frozen=True)
class AudioCorpus:
    """Where ``write_audio_corpus`` put things (both manifests describe the same utterances)."""

    jsonl: str
    oggzip: str
    audio_dir: str
    files: tuple[str, ...]  # file names, relative to audio_dir


def write_audio_corpus(
    folder: str | os.PathLike,
    n: int,
    *,
    name: str = "corpus",
    formats: Sequence[str] = ("flac",),
    sample_rates: Sequence[int] = (16000,),
    seconds: tuple[float, float] = (0.5, 3.0),
    seed: int = 0,
) -> AudioCorpus:
    """Write ``n`` utterances; utterance ``i`` uses ``formats[i % len]`` and
    ``sample_rates[i % len]``. Durations in the manifests are exact (``samples / rate``)."""
    rng = np.random.default_rng(seed)
    folder = os.fspath(folder)
    audio_dir = os.path.join(folder, name)
    os.makedirs(audio_dir, exist_ok=True)
    entries, files, blobs = [], [], []
    for i in range(n):
        fmt, rate = formats[i % len(formats)], sample_rates[i % len(sample_rates)]
        wave = speech_like(rng.uniform(*seconds), rate, rng)
        file = f"utt{i:05d}.{fmt}"
        blob = encode_audio(wave, rate, fmt)
        with open(os.path.join(audio_dir, file), "wb") as f:
            f.write(blob)
        words = rng.choice(WORDS, size=int(rng.integers(1, 8)))
        entries.append(
            {"file": file, "duration": len(wave) / rate, "text": " ".join(words), "tag": f"u{i}"}
        )
        files.append(file)
        blobs.append(blob)
    jsonl = os.path.join(folder, f"{name}.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for e in entries:
            row = {"audio": f"{name}/{e['file']}", "duration": e["duration"], "text": e["text"]}
            f.write(json.dumps({**row, "id": e["tag"]}) + "\n")
    oggzip = os.path.join(folder, f"{name}.zip")
    listing = [
        {"file": e["file"], "duration": e["duration"], "text": e["text"], "seq_name": e["tag"]}
        for e in entries
    ]
    with zipfile.ZipFile(oggzip, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}.txt", "[\n" + "".join(f"{d!r},\n" for d in listing) + "]\n")
        for file, blob in zip(files, blobs):
            z.writestr(f"{name}/{file}", blob)
    return AudioCorpus(jsonl, oggzip, audio_dir, tuple(files))
