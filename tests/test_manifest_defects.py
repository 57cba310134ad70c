"""Hostile manifests fail at open, naming the file, the line and the fix, in every manifest reader:
JSON lines, OggZip listings (inside the zip, or a separate ``.txt.gz``) and Lhotse cuts manifests.

The attack: a non-UTF-8 byte raised a bare ``UnicodeDecodeError`` with no path or line; a
``"duration": NaN`` was accepted at open and planned as a length of -2^63, failing only at read
time (or skipped under ``on_error="skip"`` as a read error instead of reported as a manifest
defect). Each defect here is injected at a random line of an otherwise good manifest.
"""

from __future__ import annotations

import gzip
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.audio.manifest import OggZip
from seqloader.errors import DataError

GOOD = '{"audio": "a%d.wav", "duration": 1.5, "text": "hi"}'
# defect -> (the line, what the message must say besides file, line and "Fix:")
JSONL_DEFECTS: dict[str, tuple[bytes, str]] = {
    "non-UTF-8 byte": (b'{"audio": "caf\xe9.wav", "duration": 1.0, "text": "x"}', "not UTF-8"),
    "NaN": (b'{"audio": "n.wav", "duration": NaN, "text": "x"}', "NaN is not a JSON number"),
    "Infinity": (b'{"audio": "n.wav", "duration": Infinity, "text": "x"}', "Infinity"),
    "negative": (b'{"audio": "n.wav", "duration": -3.0, "text": "x"}', "'duration' got -3.0"),
    "string": (b'{"audio": "n.wav", "duration": "0.5", "text": "x"}', "as a number, not a str"),
    "bool": (b'{"audio": "n.wav", "duration": true, "text": "x"}', "'duration' got bool"),
    "missing": (b'{"audio": "n.wav", "text": "x"}', "no 'duration'"),
    "huge": (b'{"audio": "n.wav", "duration": 1e999, "text": "x"}', "'duration' got inf"),
    "not JSON": (b'{"audio": "n.wav", "duration": 1.0,', "not valid JSON"),
    "not an object": (b'["n.wav", 1.0]', "got a JSON list"),
    "no audio": (b'{"duration": 1.0, "text": "x"}', "missing 'audio'"),
}


def check_named(err: pytest.ExceptionInfo, file: str, line: int, what: str) -> None:
    message = str(err.value)
    assert re.search(rf"{re.escape(file)} line {line}\b", message), message
    assert what in message and "Fix: " in message, message


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(sorted(JSONL_DEFECTS)),
    st.integers(0, 30),
    st.integers(0, 30),
    st.sampled_from(["raise", "skip"]),
)
def test_jsonl_defect_named_at_open(
    tmp_path: Path, defect: str, before: int, after: int, on_error: str
) -> None:
    bad, what = JSONL_DEFECTS[defect]
    lines = [(GOOD % i).encode() for i in range(before)] + [bad]
    lines += [(GOOD % i).encode() for i in range(before, before + after)]
    path = tmp_path / f"m-{defect.replace(' ', '_')}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError) as err:  # at open, whatever on_error says about reads
        sl.AudioSource(path, on_error=on_error)
    check_named(err, path.name, before + 1, what)


def oggzip(tmp_path: Path, name: str, entry: bytes, before: int) -> Path:
    rows = [f"{{'file': 'u{i}.ogg', 'duration': 2.0, 'text': 'x', 'seq_name': 's{i}'}},".encode()
            for i in range(before)]  # fmt: skip
    listing = b"[\n" + b"\n".join([*rows, entry + b","]) + b"\n]\n"
    path = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.txt", listing)
    return path


OGGZIP_DEFECTS: dict[str, tuple[bytes, str]] = {
    "non-UTF-8 byte": (b"{'file': 'caf\xe9.ogg', 'duration': 1.0, 'text': 'x'}", "not UTF-8"),
    "huge": (b"{'file': 'n.ogg', 'duration': 1e999, 'text': 'x'}", "'duration' got inf"),
    "negative": (b"{'file': 'n.ogg', 'duration': -3.0, 'text': 'x'}", "'duration' got -3.0"),
    "string": (b"{'file': 'n.ogg', 'duration': '0.5', 'text': 'x'}", "not a string"),
    "None": (b"{'file': 'n.ogg', 'duration': None, 'text': 'x'}", "no 'duration'"),
    "call": (b"{'file': 'n.ogg', 'duration': float('nan'), 'text': 'x'}", "not a literal"),
}


@pytest.mark.parametrize("defect", sorted(OGGZIP_DEFECTS))
@pytest.mark.parametrize("before", [0, 3])
def test_oggzip_listing_defect_named_at_open(tmp_path: Path, defect: str, before: int) -> None:
    entry, what = OGGZIP_DEFECTS[defect]
    path = oggzip(tmp_path, "corpus", entry, before)
    with pytest.raises(DataError) as err:
        sl.AudioSource(path, on_error="skip")
    check_named(err, "corpus.zip:corpus.txt", before + 2, what)  # line 1 is "["


def test_separate_gz_listing_non_utf8_named(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "dev.zip", "w") as z:
        z.writestr("a.ogg", b"")
    listing = b"[\n{'file': 'a.ogg', 'duration': 1.0, 'text': 'ok'},\n{'file': 'b.ogg', " \
              b"'duration': 1.0, 'text': 'na\xefve'},\n]\n"  # fmt: skip
    with gzip.open(tmp_path / "dev.txt.gz", "wb") as f:
        f.write(listing)
    corpus = OggZip(str(tmp_path / "dev.zip"), listing=str(tmp_path / "dev.txt.gz"),
                       name_as_prefix=False)  # fmt: skip
    with pytest.raises(DataError) as err:
        sl.AudioSource(corpus)
    check_named(err, "dev.txt.gz", 3, "byte ef at column 47 is not UTF-8")


def test_separate_gz_listing_damaged_named(tmp_path: Path) -> None:
    """A damaged deflate stream in ``NAME.txt.gz`` (zlib's own error, not an OSError): a
    DataError naming the listing and the fix, not a bare zlib.error."""
    with zipfile.ZipFile(tmp_path / "dev.zip", "w") as z:
        z.writestr("a.ogg", b"")
    body = b"[\n" + b"{'file': 'a.ogg', 'duration': 1.0, 'text': 'x'},\n" * 200 + b"]\n"
    damaged = bytearray(gzip.compress(body, mtime=0))
    damaged[40] ^= 0xFF  # inside the deflate stream
    (tmp_path / "dev.txt.gz").write_bytes(bytes(damaged))
    corpus = OggZip(str(tmp_path / "dev.zip"), listing=str(tmp_path / "dev.txt.gz"),
                       name_as_prefix=False)  # fmt: skip
    with pytest.raises(DataError) as err:
        sl.AudioSource(corpus)
    assert "dev.txt.gz" in str(err.value) and "Fix: " in str(err.value), str(err.value)


def test_in_zip_listing_damaged_named(tmp_path: Path) -> None:
    """The same inside the zip (a deflated ``NAME.txt`` whose stream is damaged)."""
    body = b"[\n" + b"{'file': 'a.ogg', 'duration': 1.0, 'text': 'x'},\n" * 200 + b"]\n"
    path = tmp_path / "dev.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("dev.txt", body)
        z.writestr("dev/a.ogg", b"")
    damaged = bytearray(path.read_bytes())
    damaged[30 + len("dev.txt") + 3] ^= 0xFF  # inside dev.txt's deflate stream
    path.write_bytes(bytes(damaged))
    with pytest.raises(DataError) as err:
        sl.AudioSource(str(path))
    assert "dev.zip" in str(err.value) and "Fix: " in str(err.value), str(err.value)


# ---- Lhotse cuts manifests ----


@pytest.fixture(scope="module")
def cuts_lines(tmp_path_factory) -> list[str]:
    lhotse = pytest.importorskip("lhotse")
    sf = pytest.importorskip("soundfile")
    root = tmp_path_factory.mktemp("lhotse_defects")
    recordings = []
    for i in range(4):
        wav = root / f"u{i}.wav"
        sf.write(wav, np.zeros(1600 * (i + 1), np.float32), 16000)
        recordings.append(lhotse.Recording.from_file(wav, recording_id=f"r{i}"))
    cuts = lhotse.CutSet.from_manifests(recordings=lhotse.RecordingSet.from_recordings(recordings))
    path = root / "cuts.jsonl"
    cuts.to_file(path)
    return path.read_text().splitlines()


def lhotse_defect(line: str, defect: str) -> bytes:
    d = json.loads(line)
    if defect == "NaN":
        return json.dumps({**d, "duration": float("nan")}).encode()  # Python writes NaN
    if defect == "negative":
        return json.dumps({**d, "duration": -3.0}).encode()
    if defect == "non-UTF-8 byte":
        return json.dumps({**d, "id": "caf_"}).encode().replace(b"caf_", b"caf\xe9")
    if defect == "unbuildable":
        return json.dumps({**d, "type": "Bogus"}).encode()
    raise AssertionError(defect)


LHOTSE_DEFECTS = {
    "NaN": "NaN is not a JSON number",
    "negative": "'duration' got -3.0",
    "non-UTF-8 byte": "not UTF-8",
    "unbuildable": "Lhotse cannot build a cut from it",
}


@pytest.mark.parametrize("defect", sorted(LHOTSE_DEFECTS))
@pytest.mark.parametrize("at", [0, 2])
@pytest.mark.parametrize("gz", [False, True])
def test_lhotse_manifest_defect_named_at_open(
    tmp_path: Path, cuts_lines: list[str], defect: str, at: int, gz: bool
) -> None:
    lines = [line.encode() for line in cuts_lines]
    lines[at] = lhotse_defect(cuts_lines[at], defect)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("cuts.jsonl.gz" if gz else "cuts.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(DataError) as err:
        sl.LhotseSource(path, keys=["audio"])
    check_named(err, path.name, at + 1, LHOTSE_DEFECTS[defect])


def test_lhotse_cutset_with_negative_duration_named(cuts_lines: list[str]) -> None:
    lhotse = pytest.importorskip("lhotse")
    cuts = [lhotse.serialization.deserialize_item(json.loads(line)) for line in cuts_lines]
    cuts[1].duration = float("nan")
    with pytest.raises(DataError) as err:
        sl.LhotseSource(lhotse.CutSet.from_cuts(cuts), keys=["audio"])
    assert "cut 1 of the CutSet (cut 'r1" in str(err.value) and "Fix: " in str(err.value)


def test_good_manifests_still_open(tmp_path: Path, cuts_lines: list[str]) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(GOOD % i + "\n" for i in range(3)))
    assert len(sl.AudioSource(path)) == 3
    (tmp_path / "cuts.jsonl").write_text("\n".join(cuts_lines) + "\n")
    assert len(sl.LhotseSource(tmp_path / "cuts.jsonl", keys=["audio"])) == 4
