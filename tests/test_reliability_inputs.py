"""Bad input, one case per test: every one fails (or warns) with a seqloader error that names the
file, the sequence (index and tag) and the fix — in the trainer, also when it happened in a worker.

Cases covered next to their module instead (see docs/reliability.md): missing file among several,
not-HDF / truncated file, seqLengths disagreeing with the data, tag count, column count, damaged after
open (tests/test_hdf.py); manifest line without duration, unreadable audio with num_workers=0
(tests/test_audio.py); random byte flips, removed and resized datasets (tests/test_fuzz_hdf.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import h5py
import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.trainer.checks import CheckOptions


def write(path, n=6, dim=2, dtype=np.float32, prefix="u", lengths=None) -> str:
    rng = np.random.default_rng(len(str(path)))
    lengths = lengths if lengths is not None else rng.integers(1, 9, size=n)
    data = [rng.standard_normal((int(t), dim)).astype(dtype) for t in lengths]
    src = sl.MemorySource({"data": data}, tags=[f"{prefix}/{i}" for i in range(len(data))])
    sl.write_hdf(str(path), src)
    return str(path)


# ---- options ----
BAD_OPTIONS = [
    ({"max_seqs": 0}, "max_seqs: got 0, expected an int >= 1"),
    ({"max_frames": -5}, "max_frames: got -5, expected an int >= 1"),
    ({"max_seq_length": {"nope": 3}}, "max_seq_length: key 'nope' is not in the data"),
    ({"min_seq_length": -1}, "min_seq_length: got -1, expected an int >= 0"),
    ({"ordering": "laplace:x"}, "ordering: got 'laplace:x', expected one of"),
    ({"ordering": "shuffle"}, "ordering: got 'shuffle'"),
    ({"partition_epoch": 0}, "partition_epoch: got 0, expected an int >= 1"),
    ({"distribution": "ddp"}, "distribution: got 'ddp', expected one of"),
    ({"uneven": "repeat"}, "uneven: got 'repeat', expected one of"),
    ({"seed": -1}, "seed: got -1, expected an int >= 0"),
    ({"length_key": "nope"}, "length_key: got 'nope', expected one of ['data']"),
    ({"num_workers": -1}, "num_workers: got -1, expected an int >= 0"),
    ({"prefetch_factor": 0}, "prefetch_factor: got 0, expected an int >= 1"),
    ({"multiprocessing_context": "thread"}, "multiprocessing_context: got 'thread'"),
    ({"timeout": -1}, "timeout: got -1, expected seconds >= 0"),
    ({"pin_memory": "yes"}, "pin_memory: got 'yes', expected True or False"),
    ({"rank": 2, "world_size": 2}, "rank: got 2, expected 0 <= rank < world_size=2"),
    ({"rank": 0}, "rank and world_size go together"),
    ({"audit": "maybe"}, "audit: got 'maybe', expected True, False or one of"),
    ({"max_seq": 3}, "unknown option(s) ['max_seq']; expected options of PlanOptions"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=lambda x: str(x)[:40])
def test_bad_option_is_an_option_error_naming_it(options, message):
    with pytest.raises(OptionError) as err:
        sl.SeqLoader(index_corpus(5), **options)
    assert message in str(err.value)


def test_bad_check_policy_and_epoch_numbers():
    with pytest.raises(OptionError, match=r"checks\.nonfinite: got 'ignore', expected one of"):
        CheckOptions(nonfinite="ignore")
    loader = sl.SeqLoader(index_corpus(5))
    for epoch in (0, -1, 1.5, True):
        with pytest.raises(OptionError, match=r"epoch: got .*, expected an int >= 1"):
            loader.epoch(epoch)


# ---- duplicate tags ----
def test_same_file_twice_is_an_error_naming_both_positions(tmp_path):
    path = write(tmp_path / "train.hdf")
    src = sl.HDFSource([path, path])
    with pytest.raises(DataError) as err:
        sl.SeqLoader(src)
    message = str(err.value)
    assert "6 sequence(s) repeat a tag" in message
    assert "tag 'u/0' at sequences [0, 6]" in message
    assert "train.hdf' (sequence 0 of that file) and file" in message
    assert "remove the duplicate file" in message and "duplicate_tags='warn'" in message


def test_duplicate_tags_policies(tmp_path):
    src = index_corpus(8, tags=["a", "b", "c", "a", "d", "e", "c", "f"])
    with pytest.raises(DataError, match=r"2 sequence\(s\) repeat a tag.*'a' at sequences \[0, 3\]"):
        sl.SeqLoader(src)
    with pytest.warns(DataWarning, match=r"tag 'c' at sequences \[2, 6\]"):
        loader = sl.SeqLoader(src, checks=CheckOptions(duplicate_tags="warn"))
    assert sorted(i for b in loader.epoch(1) for i in b.seq_indices.tolist()) == list(range(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sl.SeqLoader(src, checks=CheckOptions(duplicate_tags="off"))


# ---- wrong dtypes ----
def test_files_disagreeing_on_dtype(tmp_path):
    a = write(tmp_path / "a.hdf", dtype=np.float32)
    b = write(tmp_path / "b.hdf", dtype=np.float64, prefix="v")
    with pytest.raises(DataError, match=r"b\.hdf' \(file 2 of 2\): key 'data' is float64.*float32"):
        sl.HDFSource([a, b])


def test_float_seq_lengths(tmp_path):
    path = write(tmp_path / "f.hdf")
    with h5py.File(path, "r+") as f:
        lengths = f["seqLengths"][()]
        del f["seqLengths"]
        f["seqLengths"] = lengths.astype(np.float32)
    with pytest.raises(DataError, match=r"f\.hdf.*seqLengths has dtype float32, expected ints"):
        sl.HDFSource(path)


def test_negative_seq_lengths_name_the_sequence_and_the_fix(tmp_path):
    path = write(tmp_path / "neg.hdf")
    with h5py.File(path, "r+") as f:
        lengths = f["seqLengths"][()]
        lengths[3] = -lengths[3]
        f["seqLengths"][...] = lengths
    with pytest.raises(
        DataError, match=r"neg\.hdf.*seqLengths row 3 \(sequence 3, tag 'u/3'\) is negative.*Fix: "
    ):
        sl.HDFSource(path)


@pytest.mark.parametrize("rows, cols", [(2**31, 2), (6, 3_000_000)])
def test_damaged_seq_lengths_shape_is_refused_before_reading(tmp_path, rows, cols):
    """A damaged header can claim billions of rows (found by tests/test_fuzz_hdf): the shape is
    checked against the columns and the tag count from the metadata, so the reader never tries to
    read (or allocate) what the header claims."""
    path = write(tmp_path / "huge.hdf")
    with h5py.File(path, "r+") as f:
        del f["seqLengths"]
        f.create_dataset(
            "seqLengths", shape=(rows, cols), dtype=np.int32, chunks=(min(rows, 1024), 1)
        )
    with pytest.raises(
        DataError,
        match=r"huge\.hdf.*(seqTags has 6 tags but seqLengths has|"
        r"seqLengths has shape \[6, 3000000\])",
    ):
        sl.HDFSource(path)


class DropsAKey(sl.MemorySource):
    """A source whose read() forgets a key it plans (a bug in a user's Source)."""

    def read(self, index):
        out = super().read(index)
        if index == 4:
            del out["classes"]
        return out


@pytest.mark.parametrize("num_workers", [0, 1])
def test_sequence_missing_a_planned_key_names_it(num_workers):
    data = [np.full((3, 2), i, np.float32) for i in range(6)]
    classes = [np.full(2, i, np.int32) for i in range(6)]
    src = DropsAKey({"data": data, "classes": classes}, tags=[f"s/{i}" for i in range(6)])
    with (
        sl.SeqLoader(src, max_seqs=2, num_workers=num_workers) as loader,
        pytest.raises(
            DataError,
            match=r"sequence 4 \(tag 's/4'\) has no key\(s\) \['classes'\] "
            r"as read; the source plans keys \['classes', 'data'\]",
        ),
    ):
        list(loader.epoch(1))


# ---- empty sequences ----
def test_empty_sequences_warn_error_or_are_filtered(tmp_path):
    path = write(tmp_path / "e.hdf", lengths=[3, 0, 4, 0, 2])
    src = sl.HDFSource(path)
    with pytest.warns(DataWarning, match=r"2 admitted sequence\(s\) have 0 frames of 'data'"):
        loader = sl.SeqLoader(src)
    rows = [int(n) for b in loader.epoch(1) for n in b.lengths["data"]]
    assert sorted(rows) == [0, 0, 2, 3, 4]  # delivered, as warned
    with pytest.raises(DataError) as err:
        sl.SeqLoader(src, checks=CheckOptions(empty="error"))
    message = str(err.value)
    assert "sequence 1 (tag 'u/1') in file" in message and "e.hdf' (sequence 1 of that" in message
    assert "min_seq_length=1" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        filtered = sl.SeqLoader(src, min_seq_length=1)
    report = (list(filtered.epoch(1)), filtered.report())[1]
    assert report.seqs == 3 and sum(report.filtered.values()) == 2


# ---- NaN / Inf ----
def nan_corpus() -> sl.MemorySource:
    base = index_corpus(12)
    data = [base.read(i)["data"].copy() for i in range(12)]
    data[4][1, 0] = np.nan
    data[9][0, 1] = np.inf
    data[9][2, 1] = -np.inf
    return sl.MemorySource({"data": data}, tags=[f"utt-{i}" for i in range(12)])


def test_nonfinite_features_are_reported_by_default():
    loader = sl.SeqLoader(nan_corpus(), max_seqs=4, num_workers=1)
    with loader, pytest.warns(DataWarning) as caught:
        list(loader.epoch(1))
    messages = [str(w.message) for w in caught]
    assert any(
        "sequence 4 (tag 'utt-4')" in m and "1 NaN/Inf value(s), first at frame 1" in m
        for m in messages
    )
    assert any("sequence 9 (tag 'utt-9')" in m and "2 NaN/Inf" in m for m in messages)
    report = loader.report()
    assert report.nonfinite == 2 and "NaN/Inf in 2 seqs" in report.format()


def test_nonfinite_features_fail_when_asked_naming_file_and_frame(tmp_path):
    data = [np.ones((5, 2), np.float32) for _ in range(6)]
    data[3][4, 1] = np.nan
    path = str(tmp_path / "nan.hdf")
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=[f"x/{i}" for i in range(6)]))
    loader = sl.SeqLoader(
        sl.HDFSource(path), max_seqs=2, num_workers=1, checks=CheckOptions(nonfinite="error")
    )
    got = []
    with loader, pytest.raises(DataError) as err:
        got.extend(b.step for b in loader.epoch(1))
    message = str(err.value)
    assert "sequence 3 (tag 'x/3') in file" in message and "nan.hdf' (sequence 3 of" in message
    assert "key 'data' has 1 NaN/Inf value(s), first at frame 4 (epoch 1 step 1)" in message
    assert "nonfinite='warn'" in message
    assert got == [0] and loader.state_dict()["steps"] == 1  # the bad batch is not consumed


# ---- audio that fails to decode, in a worker ----
def test_audio_decode_failure_in_a_worker_names_the_manifest_line(tmp_path):
    sf = pytest.importorskip("soundfile")
    rows = []
    for i in range(4):
        wav = tmp_path / f"a{i}.wav"
        sf.write(str(wav), np.full(800, 0.1 * i, np.float32), 16000)
        rows.append({"audio": str(wav), "duration": 0.05, "id": f"spk/{i}"})
    (tmp_path / "bad.flac").write_bytes(b"fLaC" + bytes(200))
    rows[2]["audio"] = str(tmp_path / "bad.flac")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loader = sl.SeqLoader(sl.AudioSource(manifest, keys=("audio",)), max_seqs=2, num_workers=1)
    with loader, pytest.raises(DataError) as err:
        list(loader.epoch(1))
    message = str(err.value)
    # the library's message comes first; the worker's traceback is kept as the cause
    assert message.startswith("sequence 2 (tag 'spk/2')")
    assert "m.jsonl line 3" in message and "bad.flac" in message
    assert err.value.__cause__ is not None


# ---- interrupted write ----
_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import seqloader as sl

    class Stalls(sl.MemorySource):
        def read(self, index):
            if index == 50:  # mid-way through the file: say so, then wait to be killed
                print("writing", flush=True)
                sys.stdin.read()
            return super().read(index)

    data = [np.full((50, 4), i, np.float32) for i in range(200)]
    sl.write_hdf(sys.argv[1], Stalls({"data": data}))
    """
)


def test_write_killed_midway_never_leaves_a_half_file_under_the_name(tmp_path):
    dest = tmp_path / "out.hdf"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(dest)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:  # the writer says when it is mid-way (an event, not a time)
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n", "no write"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert not dest.exists()
    leftovers = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert leftovers and all(p.startswith(".out.hdf.") for p in leftovers)  # hidden, named
    with pytest.raises(DataError, match=r"\.out\.hdf\..*\.tmp"):  # and never read as data
        sl.HDFSource(str(tmp_path / leftovers[0]))


def test_a_missing_key_and_a_failed_transform_name_the_file_and_the_fix(tmp_path):
    """Both errors name where the sequence lives (the HDF file and its place in it, through
    ``where``) and a fix, besides its index and tag."""
    path = tmp_path / "c.hdf"
    data = [np.full((3, 2), i, np.float32) for i in range(6)]
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=[f"s/{i}" for i in range(6)]))

    def fails_on_4(seq, rng):
        if seq["data"][0, 0] == 4:
            raise ValueError("bad")
        return seq

    src = sl.HDFSource(path, index_dir=str(tmp_path / "idx"))
    with (
        sl.SeqLoader(src, max_seqs=2, transform=fails_on_4) as loader,
        pytest.raises(DataError) as err,
    ):
        list(loader.epoch(1))
    message = str(err.value)
    assert message.startswith("transform failed on sequence 4 (tag 's/4'): ValueError: bad")
    assert f"{str(path)!r} (sequence 4 of that file)" in message and "Fix: " in message, message
    src.close()
    drops = DropsAKey({"data": data, "classes": [np.zeros(2, np.int32)] * 6})
    with sl.SeqLoader(drops, max_seqs=2) as loader, pytest.raises(DataError) as err:
        list(loader.epoch(1))
    assert repr(drops) in str(err.value) and "Fix: " in str(err.value), str(err.value)


def test_a_chunk_past_its_sequences_end_names_the_file_and_the_fix(tmp_path):
    """A transform that shortens a chunked key leaves a planned chunk starting past the end:
    the error names the sequence's file and place in it, and the fix, as the others do."""
    path = tmp_path / "c.hdf"
    data = [np.full((10, 2), i, np.float32) for i in range(4)]
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=[f"s/{i}" for i in range(4)]))

    def halves(seq, rng):
        return {"data": seq["data"][: len(seq["data"]) // 2]}

    src = sl.HDFSource(path, index_dir=str(tmp_path / "idx"))
    with (
        sl.SeqLoader(src, chunking="4:4", max_seqs=8, transform=halves) as loader,
        pytest.raises(DataError) as err,
    ):
        list(loader.epoch(1))
    message = str(err.value)
    assert "chunk 2 of 'data' starts at frame 8, but the sequence has 5 frames" in message
    assert "(sequence " in message and f"{str(path)!r}" in message, message
    assert "Fix: a transform must keep a chunked key's length" in message, message
    src.close()
