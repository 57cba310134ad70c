"""Shard listings (``shards.listing.json_lines``): a listing read from its file, gzipped, or from
its bytes (a remote listing) gives the same entries and line numbers, or the same error naming the
file, the line and the fix; entries are handed on a line at a time."""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seqloader.errors import DataError
from seqloader.shards.listing import json_lines

# line fragments: good objects, blanks, and every defect the reader names
FRAGMENTS = [
    b'{"id": "a", "duration": 1.5, "supervisions": [{"text": "x y"}]}',
    b'{"id": "b\\u00e9", "recording": {"sampling_rate": 16000, "num_samples": 8}}',
    '{"id": "c", "text": "\u00fc [noise] {x}"}'.encode(),
    b"  {}\r",
    b"",
    b"   \t",
    b'{"a": 1}, {"b": 2}',
    b'{"c": [{}',
    b"[1]",
    b"1",
    b'{"d": NaN}',
    b'{"d": Infinity}',
    "\ufeff{}".encode(),
    b'{"e": "\xff"}',
    b"{} x",
]


def _read(path: str, data: bytes | None = None) -> tuple[str, object]:
    try:
        return "ok", list(json_lines(path, path, data))
    except DataError as e:
        return "error", str(e)


@settings(max_examples=40, deadline=None)
@given(
    lines=st.lists(st.sampled_from(FRAGMENTS), max_size=8),
    newline_at_end=st.booleans(),
    gz=st.booleans(),
)
def test_a_listing_reads_alike_from_its_file_and_its_bytes(
    lines: list[bytes], newline_at_end: bool, gz: bool
) -> None:
    body = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    fd, path = tempfile.mkstemp(suffix=".jsonl.gz" if gz else ".jsonl")
    data = gzip.compress(body) if gz else body
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    try:
        got = _read(path)
        assert _read(path, data) == got
        if got[0] == "ok":  # every non-blank line one JSON object, numbered from 1
            want = [(n, json.loads(x)) for n, x in enumerate(body.split(b"\n"), 1) if x.strip()]
            assert got[1] == want
        else:
            assert path in str(got[1]) and " line " in str(got[1]) and "Fix: " in str(got[1])
    finally:
        os.unlink(path)


def test_the_error_names_the_line(tmp_path) -> None:
    path = tmp_path / "cuts.000000.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": "b", "duration": NaN}\n')
    with pytest.raises(DataError, match=r"cuts.000000.jsonl line 3: NaN is not a JSON number"):
        list(json_lines(str(path)))


def test_a_listing_is_parsed_a_line_at_a_time(tmp_path) -> None:
    """The entries are handed on as they are parsed, not held for the whole listing (one
    manifest of a NeMo corpus for all its tars is every utterance); measured by tracemalloc,
    Python's allocations."""
    import tracemalloc

    path = tmp_path / "manifest.json"
    line = '{"audio_filepath": "utt_%06d.flac", "duration": 3.5, "text": "a few words", "shard_id": 3}\n'
    path.write_text("".join(line % i for i in range(20_000)))  # 2 MB, ~8 MiB of dicts
    tracemalloc.start()
    try:
        count = sum(1 for _ in json_lines(str(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    assert peak < 2 << 20, peak


@settings(max_examples=25, deadline=None)
@given(at=st.integers(0, 1 << 20), flip=st.integers(1, 255))
@example(at=40, flip=0xFF)  # inside the deflate stream: zlib's own error, not an OSError
def test_a_damaged_gzipped_listing_is_an_error_naming_it(tmp_path_factory, at, flip) -> None:
    """A byte changed anywhere in a gzipped listing (a Shar corpus's cuts.NNNNNN.jsonl.gz):
    the same entries (a header byte gzip does not read) or a DataError naming the file and the
    fix, read from the file or from its bytes (a remote listing); never a bare zlib.error."""
    body = b"\n".join(b'{"id": "c%d", "duration": 1.5}' % i for i in range(300))
    good = gzip.compress(body, mtime=0)
    want = list(json_lines("cuts.jsonl.gz", None, good))
    damaged = bytearray(good)
    damaged[at % len(good)] ^= flip
    path = tmp_path_factory.mktemp("gz") / "cuts.000000.jsonl.gz"
    path.write_bytes(bytes(damaged))
    for data in (None, bytes(damaged)):
        try:
            got = list(json_lines(str(path), None, data))
        except DataError as e:
            assert str(path) in str(e) and "Fix: " in str(e), str(e)
        else:
            assert got == want
