"""FLAC decoded by dr_flac (``seqloader.audio.flac``, the ``miniaudio`` package) gives soundfile's
samples to the bit, whole (``read_audio``) and as a planned span straight into a row
(``audio.decode.span_into``), over generated FLAC: 0, 1 and more samples, 1-3 channels, several
rates, 16 and 24 bit. A cut or damaged stream raises with either decoder, and both sources name
the file (``AudioSource``: manifest line and file) or the shard and member (``ShardSource``) and
the fix."""

from __future__ import annotations

import io
import json
from contextlib import contextmanager, nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.audio import flac
from seqloader.audio.decode import span_into
from seqloader.errors import DataError
from seqloader.shards import ShardSource
from shard_corpora import nemo_convert

RATES = [8000, 16000, 22050, 44100, 48000]


@contextmanager
def soundfile_only():
    """Decode as if miniaudio were not installed."""
    with mock.patch.object(flac, "_dr_flac", lambda: None):
        assert flac.flac_decoder() == "soundfile"
        yield


def signal(n: int, channels: int, seed: int) -> np.ndarray:
    """A tone plus noise near full scale (every bit of 24-bit samples in use), ``[n, channels]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None] * (1 + np.arange(channels))[None, :]
    x = 0.6 * np.sin(t / 9.0) + 0.35 * rng.uniform(-1, 1, (n, channels))
    return x.astype(np.float32)


def encoded(wave: np.ndarray, rate: int, subtype: str) -> bytes:
    """``wave`` as FLAC; with no samples, the stream's header alone (libsndfile writes nothing)."""
    buf = io.BytesIO()
    sf.write(
        buf,
        wave if len(wave) else np.zeros((1, *wave.shape[1:]), wave.dtype),
        rate,
        format="FLAC",
        subtype=subtype,
    )
    return buf.getvalue() if len(wave) else header_only(buf.getvalue())


def header_only(blob: bytes) -> bytes:
    """``fLaC`` and its metadata blocks, STREAMINFO's sample count set to 0, no frames."""
    out, at = bytearray(blob[:4]), 4
    while True:
        head, size = blob[at], int.from_bytes(blob[at + 1 : at + 4], "big")
        block = bytearray(blob[at : at + 4 + size])
        if head & 0x7F == 0:  # STREAMINFO: total samples are the low 36 bits of bytes 13-17
            block[4 + 13] &= 0xF0
            block[4 + 14 : 4 + 18] = bytes(4)
        out += block
        at += 4 + size
        if head & 0x80:
            return bytes(out)


def outcome(decode):
    """What ``decode()`` gives, or the kind of error it raises (compared across decoders)."""
    try:
        return decode()
    except Exception as e:  # soundfile raises several kinds
        return type(e).__name__


@settings(max_examples=30, deadline=None)
@given(
    n=st.sampled_from([0, 1, 2]) | st.integers(3, 5000),
    channels=st.integers(1, 3),
    rate=st.sampled_from(RATES),
    subtype=st.sampled_from(["PCM_16", "PCM_24"]),
    span=st.tuples(st.integers(0, 5100), st.integers(0, 5100)),
    want=st.integers(0, 5100),
    segmented=st.booleans(),
    seed=st.integers(0, 3),
)
def test_dr_flac_gives_soundfiles_samples(
    n, channels, rate, subtype, span, want, segmented, seed
) -> None:
    assert flac.flac_decoder() == "miniaudio"  # the dev extra installs it
    blob = encoded(signal(n, channels, seed), rate, subtype)
    got = outcome(lambda: flac.read_audio(blob))
    with soundfile_only():
        ref = outcome(lambda: flac.read_audio(blob))
    if n == 0:  # an empty stream: both refuse it as libsndfile does (its length is "unknown")
        assert isinstance(ref, str) and got == ref
        return
    assert isinstance(got, tuple), got
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[0].dtype == np.float32 and got[0].shape == (n, channels) and got[1] == rate
    if channels == 1:  # the span, straight into a row: the same samples, the same verdicts
        segment = span if segmented else None
        rows = []
        for decoder in (True, False):
            dst = np.full(want, np.nan, np.float32)
            with mock.patch.object(flac, "_dr_flac", flac._dr_flac if decoder else lambda: None):
                rows.append((span_into(blob, dst, rate, 0.01, segment), dst))
        assert rows[0][0] == rows[1][0]
        if rows[0][0] is not None:  # None: the general read overwrites the row
            np.testing.assert_array_equal(rows[0][1], rows[1][1])


def damaged(blob: bytes) -> bytes:
    """Bytes in the middle of the frames overwritten (the header intact)."""
    raw = bytearray(blob)
    at = len(raw) // 2
    raw[at : at + 40] = b"\x5a" * 40
    return bytes(raw)


def cut(blob: bytes) -> bytes:
    return blob[: len(blob) * 2 // 3]


@pytest.mark.parametrize("decoder", ["miniaudio", "soundfile"])
def test_a_cut_or_damaged_flac_is_named_with_either_decoder(decoder, tmp_path) -> None:
    rate = 16000
    good = encoded(signal(rate, 1, 0)[:, 0], rate, "PCM_16")
    blobs = {"good": good, "cut": cut(good), "damaged": damaged(good)}
    nemo, ours = [], []
    for name, blob in blobs.items():
        path = str(tmp_path / f"{name}.flac")
        Path(path).write_bytes(blob)
        nemo.append(json.dumps({"audio_filepath": path, "duration": 1.0}) + "\n")
        ours.append(json.dumps({"id": name, "audio": path, "duration": 1.0}) + "\n")
    (tmp_path / "m.json").write_text("".join(nemo))
    (tmp_path / "ours.jsonl").write_text("".join(ours))
    nemo_convert(tmp_path / "m.json", tmp_path / "tarred", 1, sort_in_shards=False)
    with nullcontext() if decoder == "miniaudio" else soundfile_only():
        assert flac.flac_decoder() == decoder
        for name in ("cut", "damaged"):
            error = flac.BrokenFlac if decoder == "miniaudio" else sf.LibsndfileError
            with pytest.raises(error):
                flac.read_audio(blobs[name])
            assert span_into(blobs[name], np.zeros(rate, np.float32), rate, 0.01) is None
        manifest = sl.AudioSource(tmp_path / "ours.jsonl", keys=["audio"])
        shards = ShardSource.nemo(
            str(tmp_path / "tarred/sharded_manifests/manifest__OP_0..0_CL_.json"),
            str(tmp_path / "tarred/audio__OP_0..0_CL_.tar"),
            index_dir=tmp_path / f"index-{decoder}",
            keys=["audio"],
        )
        want = sf.read(io.BytesIO(good), dtype="float32")[0]
        np.testing.assert_array_equal(manifest.read(0)["audio"], want)
        np.testing.assert_array_equal(shards.read(0)["audio"], want)
        for i, name in [(1, "cut"), (2, "damaged")]:
            with pytest.raises(
                DataError, match=rf"line {i + 1} \(audio .*{name}\.flac\).*Fix: repair"
            ):
                manifest.read(i)
            member = (
                rf"tar shard '.*audio_0\.tar' member '.*{name}\.flac'.*Fix: repair or re-create"
            )
            with pytest.raises(DataError, match=member):
                shards.read(i)
