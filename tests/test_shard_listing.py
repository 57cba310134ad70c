"""The shard listings' fast reader (one JSON array per piece) accepts exactly what the careful
reader (one line at a time) accepts, with the same entries and line numbers; where the careful
one raises, ``json_lines`` raises the same error (file, line, fix)."""

from __future__ import annotations

import gzip
import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import DataError
from seqloader.shards import listing
from seqloader.shards.listing import _checked_lines, _fast_lines, _GiveUp, json_lines

# line fragments: good objects, blanks, and every defect the careful reader names; the split
# objects and the lines of two values together keep the count of values per line right
FRAGMENTS = [
    b'{"id": "a", "duration": 1.5, "supervisions": [{"text": "x y"}]}',
    b'{"id": "b\\u00e9", "recording": {"sampling_rate": 16000, "num_samples": 8}}',
    '{"id": "c", "text": "\u00fc [noise] {x}"}'.encode(),
    b"  {}\r",
    b"",
    b"   \t",
    b"\x0c",
    b'{"a": 1}, {"b": 2}',
    b'{"c": [{}',
    b"{}]}",
    b'{"c": [[{}',
    b'{}]], "d": {}}',
    b'{"a": 1}, "x", {"b": 2}',
    b"[1]",
    b"1",
    b'{"d": NaN}',
    b'{"d": Infinity}',
    "\ufeff{}".encode(),
    b'{"e": "\xff"}',
    b'{"f": 1',
    b"}",
    b"{} x",
]


def _read(path: str) -> tuple[str, object]:
    try:
        return "ok", list(_checked_lines(path, path, None))
    except DataError as e:
        return "error", str(e)


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(st.sampled_from(FRAGMENTS), max_size=12),
    newline_at_end=st.booleans(),
    gz=st.booleans(),
    piece=st.sampled_from([1, 7, 64, 1 << 20]),
    group=st.sampled_from([1, 40, 1 << 14]),
)
def test_fast_reader_accepts_what_the_careful_one_accepts(
    lines: list[bytes], newline_at_end: bool, gz: bool, piece: int, group: int
) -> None:
    body = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    fd, path = tempfile.mkstemp(suffix=".jsonl.gz" if gz else ".jsonl")
    with os.fdopen(fd, "wb") as fh:
        fh.write(gzip.compress(body) if gz else body)
    old = listing.PIECE, listing.GROUP
    listing.PIECE = piece  # pieces that end mid-line and mid-character
    listing.GROUP = group  # groups that end inside an object split over two lines
    try:
        careful = _read(path)
        try:
            fast: object = _fast_lines(path, None)
        except _GiveUp:
            fast = None
        if fast is not None:
            assert careful == ("ok", fast)
        try:
            got = ("ok", list(json_lines(path)))
        except DataError as e:
            got = ("error", str(e))
        assert got == careful
        with open(path, "rb") as fh:  # a remote listing's bytes
            data = fh.read()
        try:
            remote = ("ok", list(json_lines(path, path, data)))
        except DataError as e:
            remote = ("error", str(e))
        assert remote == careful
    finally:
        listing.PIECE, listing.GROUP = old
        os.unlink(path)


def test_the_error_names_the_line_after_a_fast_start(tmp_path) -> None:
    path = tmp_path / "cuts.000000.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": "b", "duration": NaN}\n')
    with pytest.raises(DataError, match=r"cuts.000000.jsonl line 3: NaN is not a JSON number"):
        list(json_lines(str(path)))


def test_a_good_listing_takes_the_fast_reader(tmp_path) -> None:
    path = tmp_path / "cuts.000000.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(FRAGMENTS[:4]) + b"\n\n"))
    got = _fast_lines(str(path), None)
    assert [n for n, _ in got] == [1, 2, 3, 4] and got == list(json_lines(str(path)))


def test_a_listing_is_parsed_a_piece_at_a_time(tmp_path, monkeypatch) -> None:
    """The entries are handed on piece by piece, not held for the whole listing (one manifest of
    a NeMo corpus for all its tars is every utterance: at 200,000 lines the whole list of entries
    held ~96 MiB, the careful reader 1.6 MiB); measured by tracemalloc, Python's allocations."""
    import tracemalloc

    path = tmp_path / "manifest.json"
    line = '{"audio_filepath": "utt_%06d.flac", "duration": 3.5, "text": "a few words", "shard_id": 3}\n'
    path.write_text("".join(line % i for i in range(20_000)))  # 2 MB, ~8 MiB of dicts
    monkeypatch.setattr(listing, "PIECE", 1 << 16)
    tracemalloc.start()
    try:
        count = sum(1 for _ in json_lines(str(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    assert peak < 2 << 20, peak


def test_entries_before_a_bad_line_in_a_later_piece_come_once(tmp_path, monkeypatch) -> None:
    """Pieces read fast are handed on; a bad line in a later piece: the careful reader goes on
    after them (no entry twice) and names the line."""
    path = tmp_path / "cuts.000000.jsonl"
    good = [f'{{"id": "c{i}"}}' for i in range(300)]
    path.write_text("\n".join([*good, '{"id": "bad", "duration": NaN}', '{"id": "after"}']) + "\n")
    monkeypatch.setattr(listing, "PIECE", 256)
    seen = []
    with pytest.raises(DataError, match=r"cuts.000000.jsonl line 301: NaN is not a JSON number"):
        for number, entry in json_lines(str(path)):
            seen.append((number, entry["id"]))
    assert seen == [(i + 1, f"c{i}") for i in range(300)]
