"""``ShardSource.read_into``: members decoded straight into the padded batch (only the planned
span of each) give the same bytes as the general read (``read_batch`` then padding), for every
case the general read handles: FLAC and WAV, NeMo segments by offset (seeked into), durations a
little off the audio (cropped / zero-padded), stereo and other-rate members (read the general
way), ``KaldiFbank`` / ``LogMel`` features, texts; a broken member is named, or skipped and
counted, as before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import DataError, DataWarning
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import pad_batch
from seqloader.loading.direct import read_padded, reads_into
from seqloader.shards import ShardSource
from seqloader.sources.base import read_batch
from shard_corpora import nemo_convert

RATE = 16000


def ramp(seconds: float, rate: int, i: int, channels: int = 1) -> np.ndarray:
    """A signal whose samples say where they are (so a span read from the wrong place shows)."""
    t = np.arange(round(seconds * rate))
    one = ((t % 997) / 997.0 - 0.5 + 0.05 * i).astype(np.float32) * 0.5
    return one if channels == 1 else np.stack([one, -one], axis=1)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """NeMo tarred audio (``nemo_convert``) over FLAC and WAV recordings, mono and stereo, at 16
    and 8 kHz; entries whole, a little longer or shorter than their audio, and segments by offset
    (one 1600.5 samples in, one ending just past its recording)."""
    root = tmp_path_factory.mktemp("read-into")
    recs = []
    for i, (ext, rate, channels) in enumerate(
        [
            ("flac", RATE, 1),
            ("wav", RATE, 1),
            ("flac", RATE, 2),
            ("wav", 8000, 1),
            ("flac", RATE, 1),
        ]
    ):
        path = root / f"rec{i}.{ext}"
        sf.write(path, ramp(2.0, rate, i, channels), rate)
        recs.append(path)
    entries = [
        (0, None, 2.0),
        (1, None, 2.01),  # zero-padded by 160 samples
        (2, None, 2.0),  # stereo: mixed to mono
        (3, None, 1.99),  # 8 kHz: resampled, cropped
        (4, 0.10003125, 0.5),  # 1600.5 samples in: rounded half up
        (4, 0.7, 0.6),
        (4, 1.9, 0.11),  # ends 0.01 s past the recording: zero-padded
        (0, 0.25, 1.0),
    ]
    lines = []
    for r, offset, duration in entries:
        e = {"audio_filepath": str(recs[r]), "duration": duration, "text": f"r{r} {offset}"}
        if offset is not None:
            e["offset"] = offset
        lines.append(json.dumps(e) + "\n")
    manifest = root / "m.json"
    manifest.write_text("".join(lines))
    nemo_convert(manifest, root / "tarred", 2, sort_in_shards=False)
    return root / "tarred"


def open_mixed(root: Path, index_dir: Path, **kwargs) -> ShardSource:
    return ShardSource.nemo(
        str(root / "sharded_manifests/manifest__OP_0..1_CL_.json"),
        str(root / "audio__OP_0..1_CL_.tar"),
        index_dir=index_dir,
        sample_rate=RATE,
        **kwargs,
    )


CONFIGS = [
    {"keys": ["audio"]},
    {"keys": ["audio", "text"]},
    {"keys": ["data"], "features": sl.KaldiFbank(n_mels=24)},
    {"keys": ["data", "audio", "text"], "features": sl.KaldiFbank()},
    {"keys": ["data"], "features": sl.LogMel(n_mels=20)},
]


def general(src: ShardSource, idx: np.ndarray) -> tuple[dict, dict]:
    return pad_batch(read_batch(src, idx))


def direct(src: ShardSource, idx: np.ndarray, screen: bool = False) -> tuple[dict, dict, list]:
    spec = BatchSpec(1, 0, idx, np.ones(len(idx), bool))
    return read_padded(src, spec, unwritten, screen)


def unwritten(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Memory that shows every value read_into leaves unwritten (NaN, or 0xAB bytes)."""
    out = np.empty(shape, dtype)
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(0xAB)
    return out


@settings(max_examples=40, deadline=None)
@given(
    config=st.sampled_from(range(len(CONFIGS))),
    picks=st.lists(st.integers(0, 7), min_size=1, max_size=8),
)
def test_read_into_equals_the_general_read(mixed, tmp_path_factory, config, picks) -> None:
    src = open_mixed(mixed, tmp_path_factory.getbasetemp() / "index", **CONFIGS[config])
    assert reads_into(src)
    idx = np.array(picks, dtype=np.int64)
    want_data, want_lengths = general(src, idx)
    data, lengths, suspects = direct(src, idx, screen=True)  # NaN-filled: every value written
    assert suspects == []
    assert data.keys() == want_data.keys()
    for key in data:
        np.testing.assert_array_equal(lengths[key], want_lengths[key])
        assert data[key].shape == want_data[key].shape
        np.testing.assert_array_equal(data[key], want_data[key])


def test_segments_and_fallbacks_hold_the_planned_audio(mixed, tmp_path) -> None:
    """The cases the direct decode must hand over or get right, one by one: each row, and
    ``read``, equal the whole member decoded, mixed to mono, cut to its segment, resampled and
    fitted to the plan (``_wave``: segments, crop, pad, stereo, resampled)."""
    src = open_mixed(mixed, tmp_path, keys=["audio"])
    idx = np.arange(len(src))
    data, lengths, _ = direct(src, idx)
    for j, i in enumerate(idx.tolist()):
        one = src._wave(i, *src._member(i, src.shard_of(i)))
        np.testing.assert_array_equal(src.read(i)["audio"], one)
        assert lengths["audio"][j] == len(one) == src.lengths("audio")[i]
        np.testing.assert_array_equal(data["audio"][j, : len(one)], one)
        assert not data["audio"][j, len(one) :].any()


def test_loader_batches_equal_the_general_path_and_speed_plans_fall_back(mixed, tmp_path) -> None:
    """Through the loader: the same batches with and without an (identity) transform, which takes
    the general path; a source planned for speed perturbation does not read into batches (its
    planned lengths are bounds)."""
    src = open_mixed(mixed, tmp_path, features=sl.KaldiFbank(n_mels=24), keys=["data", "text"])

    def run(transform) -> list:
        with sl.SeqLoader(src, max_seqs=3, seed=2, transform=transform) as loader:
            return [
                (b.seq_tags, {k: (b[k].numpy().copy(), b.lengths[k].tolist()) for k in b})
                for b in loader.epoch(1)
            ]

    fast, slow = run(None), run(lambda seq, rng: seq)
    assert [tags for tags, _ in fast] == [tags for tags, _ in slow]
    for (_, a), (_, b) in zip(fast, slow):
        for key in a:
            np.testing.assert_array_equal(a[key][0], b[key][0])
            assert a[key][1] == b[key][1]
    assert not reads_into(open_mixed(mixed, tmp_path, keys=["audio"], min_speed=0.9))


def test_a_broken_member_is_named_or_skipped_and_counted(mixed, tmp_path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in mixed.rglob("*"):
        if f.is_file():
            dest = copy / f.relative_to(mixed)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(f.read_bytes())
    tar = copy / "audio_0.tar"
    raw = bytearray(tar.read_bytes())
    at = raw.index(b"fLaC")  # the first FLAC member: its frames damaged, its header intact
    raw[at + 2000 : at + 3000] = b"\xff" * 1000
    tar.write_bytes(bytes(raw))
    strict = open_mixed(copy, tmp_path / "i1", keys=["audio"])
    with pytest.raises(DataError, match=r"cannot decode member .*\.flac.*Fix: repair"):
        direct(strict, np.arange(len(strict)))
    lenient = open_mixed(copy, tmp_path / "i2", keys=["audio"], on_error="skip")
    with sl.SeqLoader(lenient, max_seqs=8, seed=0) as loader:
        batches = list(loader.epoch(1))
        report = loader.report()
    assert sum(len(b.skipped) for b in batches) == 1
    assert sum(int(b.mask.sum()) for b in batches) == len(lenient) - 1
    assert report.to_dict()["skipped"] == 1


def test_mp3_members_read_as_the_whole_decode(tmp_path) -> None:
    """libsndfile's MP3 seek is not sample-exact (the bit reservoir of the frames before the seek
    point is missing), and even an unseeked read differs in the last bit from a read after the
    whole-file decode's seek to 0: MP3 members must be decoded whole, then cut, as the general
    read does (rows equal ``_wave`` to the bit, for segments and whole entries)."""
    rng = np.random.default_rng(0)
    rec = tmp_path / "rec.mp3"
    sf.write(rec, (rng.standard_normal(RATE * 4) * 0.1).astype(np.float32), RATE)
    with sf.SoundFile(rec) as snd:
        seconds = snd.frames / RATE
    spans = [(None, seconds), (0.5, 1.0), (1.2345, 0.7), (2.0, 1.5)]
    lines = []
    for offset, duration in spans:
        e = {"audio_filepath": str(rec), "duration": duration, "text": f"{offset}"}
        if offset is not None:
            e["offset"] = offset
        lines.append(json.dumps(e) + "\n")
    manifest = tmp_path / "m.json"
    manifest.write_text("".join(lines))
    nemo_convert(manifest, tmp_path / "tarred", 2, sort_in_shards=False)
    src = open_mixed(tmp_path / "tarred", tmp_path / "index", keys=["audio"])
    idx = np.arange(len(src))
    data, lengths, _ = direct(src, idx)
    for j, i in enumerate(idx.tolist()):
        one = src._wave(i, *src._member(i, src.shard_of(i)))
        np.testing.assert_array_equal(src.read(i)["audio"], one)
        np.testing.assert_array_equal(data["audio"][j, : lengths["audio"][j]], one)


def test_the_screen_finds_nan_in_float_members_and_skips_flac_rows(tmp_path) -> None:
    """Rows a FLAC stream filled hold integer samples scaled by a power of two (never NaN/Inf)
    and are not screened; rows of any other member still are: a float WAV holding NaN is found,
    and the loader's batch names its sequence. An index outside the corpus is an ``IndexError``."""
    bad = ramp(1.0, RATE, 0)
    bad[100] = np.nan
    recs = []
    for i, (ext, wave, subtype) in enumerate(
        [
            ("flac", ramp(1.0, RATE, 1), None),
            ("wav", bad, "FLOAT"),
            ("wav", ramp(1.0, RATE, 2), "FLOAT"),
        ]
    ):
        path = tmp_path / f"rec{i}.{ext}"
        sf.write(path, wave, RATE, subtype=subtype)
        recs.append(path)
    manifest = tmp_path / "m.json"
    manifest.write_text(
        "".join(
            json.dumps({"audio_filepath": str(r), "duration": 1.0, "text": "x"}) + "\n"
            for r in recs
        )
    )
    nemo_convert(manifest, tmp_path / "tarred", 1, sort_in_shards=False)
    src = ShardSource.nemo(
        str(tmp_path / "tarred" / "tarred_audio_manifest.json"),
        str(tmp_path / "tarred" / "audio_0.tar"),
        index_dir=tmp_path / "index",
        keys=["audio"],
    )
    idx = np.array([2, 1, 0], dtype=np.int64)  # a clean WAV, the WAV holding NaN, the FLAC
    _, flac_rows = src._waves_into(idx, np.zeros((3, RATE), np.float32))
    assert flac_rows == [False, False, True]
    _, _, suspects = direct(src, idx, screen=True)
    assert suspects == [1]
    with sl.SeqLoader(src, max_seqs=3, seed=0) as loader, pytest.warns(DataWarning, match="NaN"):
        (batch,) = list(loader.epoch(1))
    assert len(batch.nonfinite) == 1 and src.tag(1) in batch.nonfinite[0]
    for bad in (3, -1):  # not read from the wrong place: numpy's, or the source's own error
        with pytest.raises(IndexError, match=r"out of bounds|sequence -1 out of range"):
            src.read_into(np.array([0, bad]), {"audio": np.zeros((2, RATE), np.float32)})
