"""``ShardSource`` reads the peers' own conventions as the peers read them, on corpora written by
their own writers where they install (Lhotse's ``CutSet.to_shar``, ``webdataset.ShardWriter``)
and by ``nemo_convert`` (NeMo's ``convert_to_tarred_audio_dataset.py`` re-implemented,
``tests/shard_corpora.py``):

- NeMo: every path form its ``expand_sharded_filepaths`` accepts (checked against
  ``nemo_expand_sharded_filepaths``, its re-implementation), comma-separated lists, bucket lists
  in both forms, ``shard_id`` matched by the number in the tar's name, long-form manifests
  (``-subN`` entries with ``offset`` + ``duration``: ``audio[offset : offset + duration]``, as
  NeMo's reader cuts them with Lhotse).
- WebDataset: upper-case extensions (WebDataset lower-cases them), the rate always the audio's.
- Lhotse: an unsharded Shar folder (``shard_size=None``).
- Every corpus that opens delivers each utterance exactly once over 2 ranks x 2 workers.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.shards import ShardSource
from seqloader.shards.index import header_rate
from seqloader.shards.layouts import nemo_paths, webdataset_layout
from shard_corpora import (
    long_recordings,
    nemo_convert,
    nemo_expand_sharded_filepaths,
    tar_of,
    wav,
)

lhotse = pytest.importorskip("lhotse")
wds = pytest.importorskip("webdataset")

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def short_manifest(folder: Path, n: int) -> Path:
    """``n`` short utterances (0.2-0.5 s) as a NeMo manifest of wav files."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        seconds = 0.2 + 0.1 * (i % 4)
        (folder / f"utt{i}.wav").write_bytes(wav(seconds, value=0.001 * (i + 1)))
        lines.append({"audio_filepath": f"utt{i}.wav", "duration": seconds, "text": f"t{i}"})
    path = folder / "manifest.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


@pytest.fixture(scope="module")
def nemo12(tmp_path_factory) -> Path:
    """36 utterances in 12 NeMo shards (audio_0.tar ... audio_11.tar)."""
    root = tmp_path_factory.mktemp("nemo12")
    nemo_convert(short_manifest(root / "wavs", 36), root / "tarred", 12)
    return root / "tarred"


def values(src: ShardSource) -> dict[str, float]:
    """Each sequence's first sample by tag (the short utterances' level says which one it is)."""
    return {src.tags[i]: float(src.read(i)["audio"][0]) for i in range(len(src))}


# ---- 1. NeMo's path forms ----
RANGE_FORMS = [("{", "}"), ("_OP_", "_CL_"), ("[", "]"), ("(", ")"), ("<", ">")]


@settings(max_examples=150, deadline=None)
@given(
    form=st.sampled_from(RANGE_FORMS),
    lo=st.integers(0, 30),
    span=st.integers(0, 12),
    pad=st.integers(0, 3),
    prefix=st.sampled_from(["audio_", "data/audio_", "manifest__", "s-"]),
    choice=st.booleans(),
)
def test_every_nemo_path_form_expands_as_nemo(form, lo, span, pad, prefix, choice) -> None:
    """Ranges (zero-padded or not, descending too) in all five spellings, and brace lists, give
    exactly NeMo's list, never glob classes."""
    a, b = str(lo).zfill(pad + 1), str(lo + span).zfill(pad + 1)
    if choice:
        a, b = b, a
    o, c = form
    pattern = f"{prefix}{o}{a}..{b}{c}.tar"
    assert nemo_paths(pattern) == nemo_expand_sharded_filepaths(pattern)
    listed = f"{prefix}{o}x,y{o}1..2{c}{c}.json"
    assert nemo_paths(listed) == nemo_expand_sharded_filepaths(listed)


@pytest.mark.parametrize("form", RANGE_FORMS)
def test_no_shard_lost_to_a_path_form(nemo12, tmp_path, form) -> None:
    """The silent loss: ``[0..11]`` read as a glob class opened 2 of 12 shards; every spelling
    opens all 12 and all 36 utterances."""
    o, c = form
    src = ShardSource.nemo(
        str(nemo12 / f"sharded_manifests/manifest_{o}0..11{c}.json"),
        str(nemo12 / f"audio_{o}0..11{c}.tar"),
        index_dir=tmp_path,
    )
    assert len(src.layout.shards) == 12 and len(src) == 36
    assert sorted(t.rsplit("_", 1)[1] for t in src.tags) == sorted(f"utt{i}" for i in range(36))


def test_zero_padded_ranges_and_comma_lists(nemo12, tmp_path) -> None:
    padded = tmp_path / "padded"
    padded.mkdir()
    for k in range(12):
        shutil.copy(nemo12 / f"audio_{k}.tar", padded / f"audio_{k:03d}.tar")
    src = ShardSource.nemo(
        str(nemo12 / "tarred_audio_manifest.json"), str(padded / "audio_[000..011].tar"),
        index_dir=tmp_path / "i",
    )  # fmt: skip
    assert [s.number for s in src.layout.shards] == list(range(12)) and len(src) == 36
    manifests = ",".join(str(nemo12 / f"sharded_manifests/manifest_{k}.json") for k in (3, 4))
    comma = ShardSource.nemo(manifests, str(nemo12 / "audio_(3..4).tar"), index_dir=tmp_path / "i")
    assert sorted(comma.tags) == sorted(src.tags[9:15])
    with pytest.raises(DataError, match=r"audio_\[0..11\].tar' does not exist"):
        ShardSource.nemo(str(nemo12 / "tarred_audio_manifest.json"), [str(nemo12 / "audio_[0..11].tar"), str(nemo12 / "audio_0.tar")])  # fmt: skip


# ---- 3. shard_id by the number in the tar's name ----
def test_shard_id_is_the_number_in_the_tar_name(nemo12, tmp_path) -> None:
    """Tars listed in alphabetical order (audio_10.tar before audio_2.tar): the single manifest's
    entries go to the tar their shard_id names, and sharded manifests pair by number too."""
    tars = sorted(str(p) for p in nemo12.glob("audio_*.tar"))
    assert Path(tars[2]).name == "audio_10.tar"
    reference = ShardSource.nemo(
        str(nemo12 / "tarred_audio_manifest.json"), str(nemo12 / "audio_{0..11}.tar"),
        index_dir=tmp_path,
    )  # fmt: skip
    single = ShardSource.nemo(str(nemo12 / "tarred_audio_manifest.json"), tars, index_dir=tmp_path)
    manifests = sorted(str(p) for p in (nemo12 / "sharded_manifests").glob("*.json"))
    sharded = ShardSource.nemo(manifests, list(reversed(tars)), index_dir=tmp_path)
    assert values(single) == values(sharded) == values(reference)
    assert [s.number for s in single.layout.shards][:3] == [0, 1, 10]
    # a subset of the tars with the whole manifest: the other shards' entries are not silent
    with pytest.raises(DataError, match=r"shard_id 2; the tars given hold shards \[0, 1\].*Fix"):
        ShardSource.nemo(str(nemo12 / "tarred_audio_manifest.json"), tars[:2], index_dir=tmp_path)
    with pytest.warns(DataWarning, match="30 x entry of a shard not given"):
        part = ShardSource.nemo(
            str(nemo12 / "tarred_audio_manifest.json"), tars[:2], index_dir=tmp_path,
            on_error="skip",
        )  # fmt: skip
    assert len(part) == 6
    with pytest.raises(OptionError, match=r"shard ids \[0, 1\].*are not the tars' \[0, 10\]"):
        ShardSource.nemo(manifests[:2], [tars[0], tars[2]], index_dir=tmp_path)


def test_single_manifest_errors_name_the_fix(tmp_path) -> None:
    (tmp_path / "m.json").write_text(
        json.dumps({"audio_filepath": "a.wav", "duration": 0.2, "shard_id": 0}) + "\n"
        + json.dumps({"audio_filepath": "b.wav", "duration": 0.2}) + "\n"
    )  # fmt: skip
    tar_of(tmp_path / "audio_0.tar", [("a.wav", wav())])
    tar_of(tmp_path / "audio_1.tar", [("b.wav", wav())])
    with pytest.raises(DataError, match=r"m.json line 2: no shard_id.*one of \[0, 1\]"):
        ShardSource.nemo(str(tmp_path / "m.json"), str(tmp_path / "audio_{0..1}.tar"))


def test_skipme_entries_are_left_out_as_nemo_leaves_them_and_counted(tmp_path) -> None:
    tar_of(tmp_path / "audio_0.tar", [("a.wav", wav()), ("b.wav", wav()), ("c.wav", wav())])
    lines = [
        {"audio_filepath": "a.wav", "duration": 0.2},
        {"audio_filepath": "b.wav", "duration": 0.2, "_skipme": True},
        {"audio_filepath": "c.wav", "duration": 0.2, "_skipme": False},
    ]
    (tmp_path / "manifest_0.json").write_text("".join(json.dumps(e) + "\n" for e in lines))
    with pytest.warns(DataWarning, match=r"1 x entry marked _skipme .*manifest_0.json line 2"):
        src = ShardSource.nemo(
            str(tmp_path / "manifest_0.json"), str(tmp_path / "audio_0.tar"), index_dir=tmp_path
        )  # not on_error='skip': the convention, not a problem (b.wav has its entry)
    assert list(src.tags) == ["a", "c"]


# ---- 4. buckets ----
@pytest.fixture(scope="module")
def buckets(tmp_path_factory) -> Path:
    """Two NeMo buckets (bucket1/, bucket2/), each a tarred dataset of 2 shards."""
    root = tmp_path_factory.mktemp("buckets")
    for b in (1, 2):
        nemo_convert(short_manifest(root / f"wavs{b}", 4 * b), root / f"bucket{b}", 2)
    return root


def test_bucket_lists_in_both_forms(buckets, tmp_path) -> None:
    b1, b2 = buckets / "bucket1", buckets / "bucket2"
    nested = ShardSource.nemo(
        [[str(b1 / "tarred_audio_manifest.json")], [str(b2 / "tarred_audio_manifest.json")]],
        [[str(b1 / "audio__OP_0..1_CL_.tar")], [str(b2 / "audio__OP_0..1_CL_.tar")]],
        index_dir=tmp_path,
    )
    text = ShardSource.nemo(
        f"[[{b1}/sharded_manifests/manifest_[0..1].json],[{b2}/tarred_audio_manifest.json]]",
        f"[[{b1}/audio_[0..1].tar],[{b2}/audio_[0..1].tar]]",
        index_dir=tmp_path,
    )
    assert len(nested.layout.shards) == len(text.layout.shards) == 4 and len(nested) == 12
    assert values(nested) == values(text)
    with pytest.raises(OptionError, match=r"1 bucket.*2.*one inner list per bucket"):
        ShardSource.nemo(str(b1 / "tarred_audio_manifest.json"), [[str(b1)], [str(b2)]])


# ---- 2. long-form manifests ----
@pytest.fixture(scope="module")
def long_form(tmp_path_factory) -> dict:
    """3 recordings of 3 s, cut into 8 segments by offset + duration (one whole, without
    offset), converted by ``nemo_convert`` into 2 shards: later segments become ``-subN``."""
    root = tmp_path_factory.mktemp("long")
    recs = long_recordings(root / "wavs", 3)
    segments = [(0, 0.0, 1.0), (0, 1.0, 0.75), (0, 2.0, 1.0), (1, 0.5, 0.5), (1, 1.25, 1.5)]
    segments += [(1, 0.10003125, 0.2), (2, 0.5, 1.0)]  # 1600.5 samples in: rounded half up
    lines = [
        {"audio_filepath": str(recs[r]), "offset": o, "duration": d, "text": f"r{r} at {o}"}
        for r, o, d in segments
    ]
    lines.append({"audio_filepath": str(recs[2]), "duration": 3.0, "text": "whole"})
    manifest = root / "long.json"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in lines))
    nemo_convert(manifest, root / "tarred", 2)
    return {"root": root / "tarred", "recs": recs}


def nemo_reference(tar: Path, entries: list[dict]) -> dict[str, np.ndarray]:
    """What NeMo's tarred reader gives for a shard: ``LazyNeMoTarredIterator`` groups the entries
    by member name (``-subN`` stripped), loads the member into an in-memory Lhotse recording and
    truncates a cut to ``offset`` + ``duration`` (Lhotse does the cutting here)."""
    from lhotse import AudioSource, Recording

    by_member: dict[str, list[dict]] = {}
    for e in entries:
        name = e["audio_filepath"]
        stem, ext = name.rsplit(".", 1)
        base = stem.rsplit("-sub", 1)[0] if "-sub" in stem else stem
        by_member.setdefault(f"{base}.{ext}", []).append(e)
    out = {}
    with tarfile.open(tar) as t:
        for info in t:
            raw = t.extractfile(info).read()
            meta = sf.info(io.BytesIO(raw))
            rec = Recording(
                id=info.name,
                sources=[AudioSource(type="memory", channels=[0], source=raw)],
                sampling_rate=meta.samplerate,
                num_samples=meta.frames,
                duration=meta.duration,
            )
            for e in by_member[info.name]:
                cut = rec.to_cut().truncate(offset=e.get("offset", 0.0), duration=e["duration"])
                out[segment_id(info.name, e)] = cut.load_audio()[0]
    return out


def segment_id(member: str, entry: dict) -> str:
    """NeMo's id of a segment (``LazyNeMoIterator``: the recording's id, then offset and duration
    in centiseconds); an entry without offset: its own name's stem."""
    if "offset" not in entry:
        return entry["audio_filepath"].rsplit(".", 1)[0]
    stem = member.rsplit(".", 1)[0]
    return f"{stem}-{round(entry['offset'] * 1e2):06d}-{round(entry['duration'] * 1e2):06d}"


def test_long_form_segments_read_as_nemo_reads_them(long_form, tmp_path) -> None:
    root = long_form["root"]
    src = ShardSource.nemo(
        str(root / "sharded_manifests/manifest__OP_0..1_CL_.json"),
        str(root / "audio__OP_0..1_CL_.tar"),
        index_dir=tmp_path,
    )
    assert len(src) == 8 and len(set(src.tags)) == 8  # rec1 and rec2 span both shards
    for k in range(2):
        entries = [json.loads(x) for x in (root / f"sharded_manifests/manifest_{k}.json").open()]
        want = nemo_reference(root / f"audio_{k}.tar", entries)
        for tag, audio in want.items():
            got = src.read(list(src.tags).index(tag))["audio"]
            np.testing.assert_array_equal(got, audio)
    manifest = [json.loads(x) for x in (root / "tarred_audio_manifest.json").open()]
    assert sum("-sub" in e["audio_filepath"] for e in manifest) == 4
    assert sorted(map(int, src.lengths("audio"))) == sorted(
        round(16000 * e["duration"]) for e in manifest
    )


def test_long_form_missing_member_and_past_the_end(long_form, tmp_path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(long_form["root"], root)
    entries = [json.loads(x) for x in (root / "sharded_manifests/manifest_0.json").open()]
    subs = [e for e in entries if "-sub" in e["audio_filepath"]]
    (root / "subs.json").write_text("".join(json.dumps(e) + "\n" for e in subs))
    member = subs[0]["audio_filepath"].replace("-sub1", "")
    with tarfile.open(root / "audio_0.tar") as t:
        kept = [(i.name, t.extractfile(i).read()) for i in t if i.name != member]
    tar_of(root / "audio_0.tar", kept)
    stem, tag = member.rsplit(".", 1)[0], segment_id(member, subs[0])
    with pytest.raises(
        DataError,
        match=rf"line 1, key '{tag}', its member '{stem}' \+ any audio extension\): entry without "
        r"member. Fix: restore the member in the tar",
    ):
        ShardSource.nemo(str(root / "subs.json"), str(root / "audio_0.tar"), index_dir=tmp_path)
    # an entry asking for seconds past its member's end
    past = [{**e, "offset": 2.5, "duration": 1.0} if e is entries[0] else e for e in entries]
    (root / "past.json").write_text("".join(json.dumps(e) + "\n" for e in past))
    shutil.copy(long_form["root"] / "audio_0.tar", root / "audio_0.tar")
    src = ShardSource.nemo(str(root / "past.json"), str(root / "audio_0.tar"), index_dir=tmp_path)
    k = list(src.tags).index(segment_id(entries[0]["audio_filepath"], past[0]))
    with pytest.raises(DataError, match=r"asks for seconds \[2.5, 3.5\) of member .* holds 3.000s"):
        src.read(k)


# ---- 5, 6. WebDataset: upper-case extensions, the rate from the audio ----
def write_wds(pattern: str, samples: list[dict], maxcount: int = 3) -> None:
    with wds.ShardWriter(pattern, maxcount=maxcount, verbose=0) as sink:
        for sample in samples:
            sink.write(sample)


@settings(max_examples=100, deadline=None)
@given(
    lo=st.integers(0, 20),
    span=st.integers(0, 5),
    pad=st.integers(1, 6),
    parts=st.integers(1, 3),
    escaped=st.booleans(),
)
def test_webdataset_urls_expand_as_webdataset(lo, span, pad, parts, escaped) -> None:
    from webdataset.shardlists import expand_urls

    one = f"s{{{str(lo).zfill(pad)}..{str(lo + span).zfill(pad)}}}" + ("\\{x\\}" if escaped else "")
    urls = "::".join(f"d{k}/{one}.tar" for k in range(parts))
    assert [s.tar for s in webdataset_layout(urls).shards] == expand_urls(urls)


def test_upper_case_extensions_read_as_webdataset_reads_them(tmp_path) -> None:
    samples = [
        {"__key__": f"SA{i}", "WAV": wav(0.2 + 0.05 * i, value=0.01 * (i + 1)), "TXT": f"text {i}"}
        for i in range(5)
    ]
    write_wds(str(tmp_path / "timit-%06d.tar"), samples)
    src = ShardSource.webdataset(str(tmp_path / "timit-{000000..000001}.tar"), index_dir=tmp_path)
    theirs = list(wds.WebDataset(str(tmp_path / "timit-{000000..000001}.tar"), shardshuffle=False))
    assert [s["__key__"] for s in theirs] == list(src.tags)
    for i, s in enumerate(theirs):
        assert set(s) >= {"wav", "txt"}  # webdataset lower-cases the extensions
        audio, _ = sf.read(io.BytesIO(s["wav"]), dtype="float32")
        np.testing.assert_array_equal(src.read(i)["audio"], audio)
        assert bytes(src.read(i)["text"]).decode() == s["txt"].decode()


def test_rate_is_the_audios_own_whatever_the_json_says(tmp_path) -> None:
    """8 kHz members, with and without a JSON duration, one JSON claiming 16 kHz: read at 8 kHz
    every time (as webdataset decodes them); resampled only when sample_rate= asks."""
    eight = [wav(0.5099, rate=8000, value=0.01 * (i + 1)) for i in range(4)]
    json_of = [{"duration": 0.5099}, {}, {"duration": 0.5099, "sampling_rate": 16000}, {"x": 1}]
    samples = [
        {"__key__": f"k{i}", "wav": w, "json": json.dumps(j).encode()}
        for i, (w, j) in enumerate(zip(eight, json_of))
    ]
    write_wds(str(tmp_path / "r-%06d.tar"), samples, maxcount=10)
    src = ShardSource.webdataset(str(tmp_path / "r-000000.tar"), index_dir=tmp_path, keys=["audio"])
    for i, s in enumerate(wds.WebDataset(str(tmp_path / "r-000000.tar"), shardshuffle=False)):
        audio, rate = sf.read(io.BytesIO(s["wav"]), dtype="float32")
        assert rate == 8000 and len(audio) == 4079
        np.testing.assert_array_equal(src.read(i)["audio"], audio)
    assert src.lengths("audio").tolist() == [4079] * 4
    asked = ShardSource.webdataset(
        str(tmp_path / "r-000000.tar"), index_dir=tmp_path, keys=["audio"], sample_rate=16000
    )
    assert asked.lengths("audio").tolist() == [8158] * 4 and len(asked.read(1)["audio"]) == 8158


@settings(max_examples=60, deadline=None)
@given(
    rate=st.sampled_from([8000, 11025, 16000, 22050, 44100, 48000, 96000]),
    kind=st.sampled_from(
        [("WAV", "PCM_16"), ("WAV", "FLOAT"), ("FLAC", "PCM_24"), ("OGG", "VORBIS")]
    ),
    frames=st.integers(1, 3000),
    title=st.booleans(),
)
def test_header_rate_is_soundfiles(rate, kind, frames, title) -> None:
    """The rate read from a FLAC / WAV header's first 4 KiB is soundfile's; other formats are
    left to soundfile (None)."""
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", rate, 1, subtype=kind[1], format=kind[0]) as f:
        if title:
            f.title = "a title chunk"
        f.write(np.zeros(frames, np.float32))
    want = sf.info(io.BytesIO(buf.getvalue())).samplerate
    got = header_rate(buf.getvalue()[:4096])
    assert got == (None if kind[0] == "OGG" else want)


def test_webdataset_tar_cut_between_members(tmp_path) -> None:
    write_wds(str(tmp_path / "c-%06d.tar"), [{"__key__": f"k{i}", "wav": wav()} for i in range(3)])
    tar = tmp_path / "c-000000.tar"
    with tarfile.open(tar) as t:
        last = t.getmembers()[-1]
    tar.write_bytes(tar.read_bytes()[: last.offset])  # k2.wav and the end blocks gone
    with pytest.raises(DataError, match=r"c-000000.tar' ends after member 'k1.wav': tar cut off"):
        ShardSource.webdataset(str(tar), index_dir=tmp_path)
    with pytest.warns(DataWarning, match="1 x tar cut off between members"):
        assert len(ShardSource.webdataset(str(tar), index_dir=tmp_path, on_error="skip")) == 2


# ---- 7. an unsharded Shar folder ----
@pytest.fixture(scope="module")
def unsharded_shar(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shar1")
    recs = [lhotse.Recording.from_file(p) for p in long_recordings(root / "wavs", 3, seconds=0.4)]
    cuts = lhotse.CutSet.from_manifests(recordings=lhotse.RecordingSet.from_recordings(recs))
    (root / "shar").mkdir()
    cuts.to_shar(root / "shar", fields={"recording": "flac"}, shard_size=None)
    assert sorted(p.name for p in (root / "shar").iterdir()) == ["cuts.jsonl.gz", "recording.tar"]
    return root / "shar"


def test_unsharded_shar_folder(unsharded_shar, tmp_path) -> None:
    src = ShardSource.lhotse_shar(unsharded_shar, index_dir=tmp_path)
    cuts = list(lhotse.CutSet.from_shar(in_dir=unsharded_shar))
    assert list(src.tags) == [c.id for c in cuts]
    for i, cut in enumerate(cuts):
        np.testing.assert_array_equal(src.read(i)["audio"], cut.load_audio()[0])


# ---- exactly once over 2 ranks x 2 workers ----
def corpora(nemo12, long_form, buckets, unsharded_shar, tmp_path) -> dict[str, ShardSource]:
    b1, b2 = buckets / "bucket1", buckets / "bucket2"
    up = tmp_path / "upper"
    up.mkdir()
    write_wds(
        str(up / "u-%06d.tar"),
        [{"__key__": f"U{i}", "FLAC": wav(0.2), "TXT": "x"} for i in range(7)],
    )
    idx = {"index_dir": tmp_path / "index"}
    return {
        "nemo [0..11]": ShardSource.nemo(
            str(nemo12 / "tarred_audio_manifest.json"), str(nemo12 / "audio_[0..11].tar"), **idx
        ),
        "nemo long-form": ShardSource.nemo(
            str(long_form["root"] / "tarred_audio_manifest.json"),
            str(long_form["root"] / "audio_<0..1>.tar"),
            **idx,
        ),
        "nemo buckets": ShardSource.nemo(
            [[str(b1 / "tarred_audio_manifest.json")], [str(b2 / "tarred_audio_manifest.json")]],
            [[str(b1 / "audio_(0..1).tar")], [str(b2 / "audio_(0..1).tar")]],
            **idx,
        ),
        "webdataset upper-case": ShardSource.webdataset(str(up / "u-{000000..000002}.tar"), **idx),
        "unsharded shar": ShardSource.lhotse_shar(unsharded_shar, **idx),
    }


def test_every_corpus_delivers_each_utterance_once(
    nemo12, long_form, buckets, unsharded_shar, tmp_path
) -> None:
    for name, src in corpora(nemo12, long_form, buckets, unsharded_shar, tmp_path).items():
        shards = len(src.layout.shards)
        for distribution in ("shard", "files") if shards >= 2 else ("shard",):
            seen: list[str] = []
            for rank in range(2):
                with sl.SeqLoader(
                    src, rank=rank, world_size=2, max_seqs=2, seed=1, distribution=distribution,
                    num_workers=2, multiprocessing_context="fork",
                ) as loader:  # fmt: skip
                    seen += [
                        src.tags[int(i)]
                        for b in loader.epoch(1)
                        for i, m in zip(b.seq_indices, b.mask)
                        if m
                    ]
            assert sorted(seen) == sorted(src.tags), (name, distribution)


@pytest.mark.parametrize("single", [False, True])
def test_a_skipme_entry_excuses_its_own_shards_member_only(tmp_path, single) -> None:
    """A member named as one a _skipme entry of another shard names (a recording split over two
    shards keeps its name in both) is still a member without entry in its own shard; with one
    manifest per tar and with one manifest split by shard_id."""
    tar_of(tmp_path / "audio_0.tar", [("a.wav", wav()), ("x.wav", wav())])
    tar_of(tmp_path / "audio_1.tar", [("b.wav", wav()), ("x.wav", wav())])
    for n, lines in enumerate(
        [
            [{"audio_filepath": "a.wav"}, {"audio_filepath": "x.wav", "_skipme": True}],
            [{"audio_filepath": "b.wav"}],
        ]
    ):
        text = "".join(json.dumps({**e, "duration": 0.2, "shard_id": n}) + "\n" for e in lines)
        with (tmp_path / ("manifest.json" if single else f"manifest_{n}.json")).open("a") as fh:
            fh.write(text)
    with pytest.raises(DataError, match=r"audio_1\.tar.*x\.wav.*member without entry"):
        ShardSource.nemo(
            str(tmp_path / ("manifest.json" if single else "manifest__OP_0..1_CL_.json")),
            str(tmp_path / "audio__OP_0..1_CL_.tar"),
            index_dir=tmp_path / "index",
        )
