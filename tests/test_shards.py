"""``ShardSource`` over the three tar-shard layouts, against the tools' own readers and writers:
Lhotse's ``SharWriter`` / ``CutSet.from_shar`` / ``load_features``, NeMo's manifest schema, and
WebDataset tars written with ``tarfile``. Bad shards are named, or skipped and counted."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import seqloader as sl
from conftest import batch_record
from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.shards import ShardSource
from seqloader.shards.layouts import expand_braces, nemo_paths
from seqloader.sources.tar_index import scan_tar
from shard_corpora import audio_corpus, tar_of, wav

lhotse = pytest.importorskip("lhotse")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("shards")
    out = audio_corpus(root)
    out["root"] = root
    return out


@pytest.fixture(scope="module")
def lhotse_shar(tmp_path_factory) -> Path:
    """Audio cuts with Fbank features (lilcom), written by Lhotse's own SharWriter."""
    from lhotse import CutSet, Fbank, Recording, RecordingSet, SupervisionSegment
    from lhotse.shar import SharWriter

    root = tmp_path_factory.mktemp("lhotse-shar")
    c = audio_corpus(root / "src", n=6)
    jsonl = Path(str(c["jsonl"]))
    recs, sups = [], []
    for i, line in enumerate(jsonl.read_text().splitlines()):
        entry = json.loads(line)
        rec = Recording.from_file(jsonl.parent / entry["audio"], recording_id=entry["id"])
        recs.append(rec)
        sups.append(SupervisionSegment(f"s{i}", rec.id, 0.0, rec.duration, text=entry["text"]))
    cuts = CutSet.from_manifests(
        recordings=RecordingSet.from_recordings(recs),
        supervisions=lhotse.SupervisionSet.from_segments(sups),
    )
    cuts = cuts.compute_and_store_features(Fbank(), storage_path=root / "feats", num_jobs=1)
    out = root / "shar"
    out.mkdir()
    with SharWriter(out, fields={"recording": "flac", "features": "lilcom"}, shard_size=4) as w:
        for cut in cuts:
            w.write(cut)
    return out


def test_lhotse_features_are_bit_exact_and_audio_equal(lhotse_shar, tmp_path) -> None:
    feats = ShardSource.lhotse_shar(lhotse_shar, index_dir=tmp_path)
    audio = ShardSource.lhotse_shar(lhotse_shar, field="recording", index_dir=tmp_path)
    assert feats.keys == ("data", "text") and audio.keys == ("audio", "text")
    cuts = list(lhotse.CutSet.from_shar(in_dir=lhotse_shar))
    assert list(feats.tags) == [c.id for c in cuts] == list(audio.tags)
    assert feats.file_layout().tolist() == [0, 4, 6]
    for i, cut in enumerate(cuts):
        ref = cut.load_features()
        got = feats.read(i)
        assert got["data"].dtype == ref.dtype and np.array_equal(got["data"], ref)  # bit-exact
        assert feats.lengths("data")[i] == cut.num_frames
        np.testing.assert_array_equal(audio.read(i)["audio"], cut.load_audio()[0])
        assert bytes(got["text"]).decode() == cut.supervisions[0].text


def test_written_shar_is_read_by_lhotse(corpus) -> None:
    src: sl.AudioSource = corpus["source"]
    cuts = list(lhotse.CutSet.from_shar(in_dir=corpus["root"] / "shar"))
    assert [c.id for c in cuts] == list(src.tags)
    for i, cut in enumerate(cuts):
        seq = src.read(i)
        np.testing.assert_array_equal(cut.load_audio()[0], seq["audio"])
        assert cut.supervisions[0].text == bytes(seq["text"]).decode()
        assert cut.num_samples == len(seq["audio"])


def test_written_features_shar_is_read_by_lhotse(tmp_path) -> None:
    from seqloader.shards import write_shards

    frames = [
        np.random.default_rng(i).standard_normal((5 + i, 3)).astype(np.float32) for i in range(4)
    ]
    src = sl.MemorySource({"data": frames}, tags=["a", "b", "c", "d"])
    for fmt in ("lilcom", "numpy"):
        write_shards(src, tmp_path / fmt, "shar", shard_size=3, feature_format=fmt)
        cuts = list(lhotse.CutSet.from_shar(in_dir=tmp_path / fmt))
        back = ShardSource.lhotse_shar(tmp_path / fmt, index_dir=tmp_path / "idx")
        for i, cut in enumerate(cuts):
            ref = cut.load_features()
            np.testing.assert_array_equal(back.read(i)["data"], ref)
            if fmt == "numpy":
                np.testing.assert_array_equal(ref, frames[i])


def test_nemo_manifest_schema_and_patterns(corpus, tmp_path) -> None:
    root, src = corpus["root"] / "nemo", corpus["source"]
    for number, line in enumerate((root / "tarred_audio_manifest.json").read_text().splitlines()):
        entry = json.loads(line)  # NeMo's documented tarred manifest fields
        assert set(entry) == {"audio_filepath", "duration", "text", "shard_id"}
        assert isinstance(entry["duration"], float) and entry["shard_id"] == number // 3
        assert "/" not in entry["audio_filepath"]
    sharded = ShardSource.nemo(
        str(root / "sharded_manifests/manifest__OP_0..2_CL_.json"),
        str(root / "audio__OP_0..2_CL_.tar"),
        index_dir=tmp_path,
    )
    single = ShardSource.nemo(
        str(root / "tarred_audio_manifest.json"), str(root / "audio_{0..2}.tar"), index_dir=tmp_path
    )
    assert sharded.fingerprint() == single.fingerprint()
    assert list(sharded.tags) == list(src.tags)
    for i in range(len(src)):
        np.testing.assert_array_equal(sharded.read(i)["audio"], src.read(i)["audio"])
        assert bytes(single.read(i)["text"]) == bytes(src.read(i)["text"])


def test_brace_patterns() -> None:
    assert nemo_paths("a__OP_0..2_CL_.tar") == ["a_0.tar", "a_1.tar", "a_2.tar"]
    assert expand_braces("s-{008..010}.tar") == ["s-008.tar", "s-009.tar", "s-010.tar"]
    assert expand_braces("{x,y}/{1..2}") == ["x/1", "x/2", "y/1", "y/2"]


def test_webdataset_and_lengths_without_decoding(corpus, tmp_path) -> None:
    src = corpus["source"]
    wds = ShardSource.webdataset(
        str(corpus["root"] / "webdataset/shard-{000000..000002}.tar"), index_dir=tmp_path
    )
    np.testing.assert_array_equal(wds.lengths("audio"), src.lengths("audio"))
    np.testing.assert_array_equal(wds.lengths("text"), src.lengths("text"))
    for i in range(len(src)):
        np.testing.assert_array_equal(wds.read(i)["audio"], src.read(i)["audio"])
    # no json: durations from the audio header (soundfile's info), text from KEY.txt
    tar = tar_of(
        tmp_path / "plain.tar", [("k1.wav", wav(0.25)), ("k1.txt", b"hello"), ("k2.wav", wav(0.5))]
    )
    plain = ShardSource.webdataset(str(tar), index_dir=tmp_path, keys=["audio"])
    assert plain.lengths("audio").tolist() == [4000, 8000]


def test_audio_at_two_rates_needs_a_sample_rate(tmp_path) -> None:
    members = [("k1.wav", wav(0.25)), ("k2.wav", wav(0.25, rate=8000)), ("k3.wav", wav(0.5))]
    tar = tar_of(tmp_path / "two-rates.tar", members)
    with pytest.raises(OptionError, match=r"at \[8000, 16000\] Hz; pass sample_rate"):
        ShardSource.webdataset(str(tar), index_dir=tmp_path / "a", keys=["audio"])
    one = ShardSource.webdataset(
        str(tar), index_dir=tmp_path / "b", keys=["audio"], sample_rate=8000
    )
    assert one.lengths("audio").tolist() == [2000, 2000, 4000]


@pytest.mark.parametrize("features", [sl.LogMel(n_mels=20), sl.KaldiFbank(n_mels=24)])
def test_log_mel_and_kaldi_fbank_from_shards(corpus, tmp_path, features) -> None:
    src = corpus["source"]
    a = sl.AudioSource(corpus["jsonl"], features=features, keys=["data"])
    b = ShardSource.lhotse_shar(
        corpus["root"] / "shar", features=features, keys=["data"], index_dir=tmp_path
    )
    np.testing.assert_array_equal(a.lengths("data"), b.lengths("data"))
    for i in range(len(src)):
        np.testing.assert_array_equal(a.read(i)["data"], b.read(i)["data"])
    # a batch read together (KaldiFbank: one kernel call for all) equals its sequences one by one
    c = ShardSource.lhotse_shar(
        corpus["root"] / "shar",
        features=features,
        keys=["data", "audio", "text"],
        index_dir=tmp_path,
    )
    order = np.random.default_rng(0).permutation(len(src))
    for i, got in zip(order, c.read_many(order)):
        one = c.read(int(i))
        assert got.keys() == one.keys() == {"data", "audio", "text"}
        np.testing.assert_allclose(got["data"], one["data"], atol=1e-5, rtol=0)
        np.testing.assert_array_equal(got["audio"], one["audio"])
        np.testing.assert_array_equal(got["text"], one["text"])


def test_second_open_reads_no_shard(corpus, tmp_path, monkeypatch) -> None:
    shar = corpus["root"] / "shar"
    first = ShardSource.lhotse_shar(shar, index_dir=tmp_path)
    assert first.index_built

    def no(*a, **k):
        raise AssertionError("read a shard or a listing at the second open")

    monkeypatch.setattr("seqloader.shards.index.scan_tar", no)
    monkeypatch.setattr("seqloader.shards.index.json_lines", no)
    again = ShardSource.lhotse_shar(shar, index_dir=tmp_path)
    assert not again.index_built and again.fingerprint() == first.fingerprint()


def test_default_index_lives_in_the_user_cache(corpus, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ShardSource.lhotse_shar(corpus["root"] / "shar")
    # the index and the lengths planned from it, each with its lock
    assert len(os.listdir(tmp_path / "seqloader" / "shards")) == 4
    assert not any(p.startswith(".") for p in os.listdir(corpus["root"] / "shar"))


def test_lhotse_index_is_used_when_present(corpus, tmp_path, monkeypatch) -> None:
    shar = tmp_path / "shar"
    shutil.copytree(corpus["root"] / "shar", shar)
    reference = ShardSource.lhotse_shar(shar, index_dir=tmp_path / "a")
    for tar in sorted(shar.glob("recording.*.tar")):  # Lhotse's .idx: each pair's first header
        members = scan_tar(str(tar))
        pairs = [*members.header[::2].tolist(), os.path.getsize(tar)]
        np.asarray(pairs, dtype="<u8").tofile(str(tar) + ".idx")

    def no(*a, **k):
        raise AssertionError("scanned a tar that has Lhotse's index")

    monkeypatch.setattr("seqloader.shards.index.scan_tar", no)
    indexed = ShardSource.lhotse_shar(shar, index_dir=tmp_path / "b")
    assert indexed.index_built
    for i in range(len(indexed)):
        np.testing.assert_array_equal(indexed.read(i)["audio"], reference.read(i)["audio"])


def test_pickles_small_and_reads_in_a_new_process(corpus, tmp_path) -> None:
    import pickle

    src = ShardSource.lhotse_shar(corpus["root"] / "shar", index_dir=tmp_path)
    blob = pickle.dumps(src)
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back.read(3)["audio"], src.read(3)["audio"])
    assert back.fingerprint() == src.fingerprint()


# ---- bad shards ----
def nemo_dir(
    tmp_path: Path, members: list[tuple[str, bytes]], entries: list[dict]
) -> tuple[str, str]:
    tar = tar_of(tmp_path / "audio_0.tar", members)
    manifest = tmp_path / "manifest_0.json"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return str(manifest), str(tar)


ENTRY = {"duration": 0.2, "text": "x"}


@pytest.mark.parametrize(
    ("members", "names", "problem"),
    [
        ([("a.wav", wav()), ("b.wav", wav())], ["a.wav"], "member without entry"),
        ([("a.wav", wav())], ["a.wav", "b.wav"], "entry without member"),
        ([("a.wav", wav())], ["a.wav", "a.wav"], "duplicate key"),
        ([("a.wav", wav()), ("a.wav", wav())], ["a.wav"], "duplicate member"),
    ],
)
def test_listing_and_tar_disagree(tmp_path, members, names, problem) -> None:
    manifest, tar = nemo_dir(tmp_path, members, [{"audio_filepath": n, **ENTRY} for n in names])
    with pytest.raises(DataError, match=f"{tar}.*{problem}. Fix: .*on_error='skip'"):
        ShardSource.nemo(manifest, tar, index_dir=tmp_path / "i1")
    with pytest.warns(DataWarning, match=f"1 x {problem}"):
        src = ShardSource.nemo(manifest, tar, index_dir=tmp_path / "i2", on_error="skip")
    assert src.problems == {problem: 1}
    if problem in ("entry without member", "duplicate key"):
        with pytest.raises(sl.SequenceSkipped, match="no member"):
            src.read(1)
    if problem == "entry without member":  # the loader counts it (a duplicate tag it refuses)
        with sl.SeqLoader(src, max_seqs=2) as loader:
            delivered = [t for batch in loader.epoch(1) for t in batch.seq_tags]
            report = loader.report()
        assert delivered == ["a"] and report is not None and report.skipped == 1


def test_truncated_tar_names_shard_and_member(tmp_path) -> None:
    """Cut inside a member's data, inside the next header, or exactly between two members (no
    end-of-archive blocks, which tarfile passes over quietly): each names the shard and the member
    cut (or the last one whole); the cut between members is counted under on_error='skip'."""
    entries = [{"audio_filepath": n, **ENTRY} for n in ("a.wav", "b.wav")]
    manifest, tar = nemo_dir(tmp_path, [("a.wav", wav()), ("b.wav", wav(0.5))], entries)
    data = Path(tar).read_bytes()
    b_header = scan_tar(tar).header[1]  # a.wav's data ends in the block before
    cuts = {
        512 * 3 + 1000: r"truncated inside member 'a.wav' \(it is cut off\)",
        b_header + 100: r"truncated after member 'a.wav' \(the next header is cut off\)",
        b_header: r"ends after member 'a.wav': tar cut off between members. Fix: copy or upload",
    }
    for n, (cut, message) in enumerate(cuts.items()):
        Path(tar).write_bytes(data[:cut])
        with pytest.raises(DataError, match=rf"audio_0.tar'? .*{message}"):
            ShardSource.nemo(manifest, tar, index_dir=tmp_path / f"i{n}")
    with pytest.warns(DataWarning, match="1 x tar cut off between members"):
        src = ShardSource.nemo(manifest, tar, index_dir=tmp_path / "skip", on_error="skip")
    assert src.problems == {"tar cut off between members": 1, "entry without member": 1}


def test_shard_changed_after_indexing(tmp_path) -> None:
    entries = [{"audio_filepath": n, **ENTRY} for n in ("a.wav", "b.wav")]
    manifest, tar = nemo_dir(tmp_path, [("a.wav", wav()), ("b.wav", wav())], entries)
    src = ShardSource.nemo(manifest, tar, index_dir=tmp_path, keys=["audio"])
    src.read(0)
    src.close()
    tar_of(Path(tar), [("b.wav", wav()), ("a.wav", wav(value=0.3))])
    with pytest.raises(DataError, match=r"audio_0.tar' changed since its index was built.*Fix"):
        src.read(0)
    again = ShardSource.nemo(manifest, tar, index_dir=tmp_path, keys=["audio"])  # reindexed
    assert again.index_built and float(again.read(0)["audio"][0]) == pytest.approx(0.3, abs=1e-3)


def test_bad_arguments(tmp_path) -> None:
    with pytest.raises(OptionError, match="no 'cuts' shards"):
        ShardSource.lhotse_shar(tmp_path)
    with pytest.raises(OptionError, match="2 manifests for 3 tars"):
        ShardSource.nemo(["a", "b"], ["x", "y", "z"])
    manifest, tar = nemo_dir(tmp_path, [("a.wav", wav())], [{"audio_filepath": "a.wav"}])
    with pytest.raises(DataError, match=r"manifest_0.json line 1: no 'duration'"):
        ShardSource.nemo(manifest, tar, index_dir=tmp_path)
    (tmp_path / "bad.json").write_text('{"audio_filepath": "a.wav", "duration": 1}\nnot json\n')
    with pytest.raises(DataError, match=r"bad.json line 2: not valid JSON.*Fix"):
        ShardSource.nemo(str(tmp_path / "bad.json"), tar, index_dir=tmp_path)


def test_gzip_listing_line_numbers(tmp_path) -> None:
    cuts = tmp_path / "cuts.000000.jsonl.gz"
    cuts.write_bytes(gzip.compress(b'{"id": "a", "duration": 0.2}\n[1]\n'))
    tar_of(tmp_path / "recording.000000.tar", [("a.wav", wav())])
    with pytest.raises(DataError, match=r"cuts.000000.jsonl.gz line 2: got a JSON list"):
        ShardSource.lhotse_shar(tmp_path, index_dir=tmp_path / "i")


def test_quiet_open_when_nothing_is_wrong(corpus, tmp_path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = ShardSource.lhotse_shar(corpus["root"] / "shar", index_dir=tmp_path, on_error="skip")
    assert src.problems == {}


def test_lhotse_source_hands_shar_over(lhotse_shar, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cuts = lhotse.CutSet.from_shar(in_dir=lhotse_shar)
    src = sl.LhotseSource(cuts)
    assert isinstance(src, ShardSource) and src.keys == ("data", "text")
    ref = list(cuts)
    np.testing.assert_array_equal(src.read(2)["data"], ref[2].load_features())
    fields = {
        "cuts": sorted(lhotse_shar.glob("cuts.*")),
        "recording": sorted(lhotse_shar.glob("recording.*")),
    }
    audio = sl.LhotseSource(fields, keys=["audio"])
    np.testing.assert_array_equal(audio.read(1)["audio"], ref[1].load_audio()[0])
    mel = sl.LhotseSource(cuts, features=sl.LogMel(n_mels=10))
    assert mel.schema["data"].feature_shape == (10,)
    with pytest.raises(
        OptionError, match=r"lazy LazyFilter steps.*Fix: give LhotseSource the Shar"
    ):
        sl.LhotseSource(cuts.filter(_keep))
    with sl.SeqLoader(src, max_seqs=2) as loader:
        assert sorted(t for b in loader.epoch(1) for t in b.seq_tags) == sorted(c.id for c in ref)


def _keep(cut) -> bool:
    return True


def test_convert_writes_every_layout(corpus, tmp_path) -> None:
    from seqloader.cli.main import main

    src = corpus["source"]
    for layout in ("shar", "nemo", "webdataset"):
        out = tmp_path / layout
        assert (
            main(
                [
                    "convert",
                    str(corpus["jsonl"]),
                    str(out),
                    "--to",
                    layout,
                    "--shard-size",
                    "4",
                    "--json",
                ]
            )
            == 0
        )
    back = ShardSource.lhotse_shar(tmp_path / "shar", index_dir=tmp_path / "i")
    assert list(back.tags) == list(src.tags) and back.file_layout().tolist() == [0, 4, 7]
    nemo = ShardSource.nemo(
        str(tmp_path / "nemo/tarred_audio_manifest.json"),
        str(tmp_path / "nemo/audio_{0..1}.tar"),
        index_dir=tmp_path / "i",
    )
    np.testing.assert_array_equal(nemo.read(5)["audio"], src.read(5)["audio"])
    # Lhotse cuts in, Shar out: read by Lhotse itself
    jsonl = Path(str(corpus["jsonl"]))
    recs = [
        lhotse.Recording.from_file(jsonl.parent / json.loads(line)["audio"], recording_id=f"r{i}")
        for i, line in enumerate(jsonl.read_text().splitlines())
    ]
    cuts = lhotse.CutSet.from_manifests(recordings=lhotse.RecordingSet.from_recordings(recs))
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    assert (
        main(
            [
                "convert",
                str(tmp_path / "cuts.jsonl.gz"),
                str(tmp_path / "from-cuts"),
                "--to",
                "shar",
                "--json",
            ]
        )
        == 0
    )
    for ref, got in zip(cuts, lhotse.CutSet.from_shar(in_dir=tmp_path / "from-cuts")):
        np.testing.assert_array_equal(got.load_audio(), ref.load_audio())
    hdf = tmp_path / "feats.hdf"
    assert main(["convert", str(corpus["jsonl"]), str(hdf), "--json"]) == 0
    assert main(["convert", str(hdf), str(tmp_path / "from-hdf"), "--to", "shar", "--json"]) == 0
    from_hdf = list(lhotse.CutSet.from_shar(in_dir=tmp_path / "from-hdf"))
    want = sl.HDFSource(hdf).read(2)["data"]  # lilcom: lossy, within its tick
    np.testing.assert_allclose(from_hdf[2].load_features(), want, atol=0.02)


def test_planned_lengths_are_mapped_not_copied(corpus, tmp_path) -> None:
    """Lengths, samples and class ids come from a store beside the index, mapped (read-only
    int32 lengths), and a pickled source carries the stores' paths, not their columns."""
    import pickle

    shar = corpus["root"] / "shar"
    first = ShardSource.lhotse_shar(shar, field="recording", keys=["audio"], index_dir=tmp_path)
    again = ShardSource.lhotse_shar(shar, field="recording", keys=["audio"], index_dir=tmp_path)
    for src in (first, again):
        got = src.lengths("audio")
        assert got.dtype == np.int32 and not got.flags.writeable
    np.testing.assert_array_equal(first.lengths("audio"), again.lengths("audio"))
    assert first.fingerprint() == again.fingerprint()
    back = pickle.loads(pickle.dumps(again))
    np.testing.assert_array_equal(back.lengths("audio"), again.lengths("audio"))
    assert back.read(0)["audio"].shape == again.read(0)["audio"].shape
    assert len(pickle.dumps(again)) < 8 * len(again) + 8192


@pytest.mark.slow
def test_kaldi_fbank_batches_are_the_same_bytes_for_any_num_workers(corpus, tmp_path) -> None:
    """C3 with features computed a batch at once: the trainer (several torch threads, reading with
    num_workers=0) and 2 DataLoader workers (one torch thread each) give the same tensor bytes."""
    src = ShardSource.lhotse_shar(
        corpus["root"] / "shar", features=sl.KaldiFbank(n_mels=24), index_dir=tmp_path
    )

    def run(**workers) -> list:
        with sl.SeqLoader(src, ordering="buckets:2", max_seqs=4, seed=3, **workers) as loader:
            return [batch_record(b) for b in loader.epoch(1)]

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = run(num_workers=0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert alone == run(num_workers=2, multiprocessing_context="fork")
