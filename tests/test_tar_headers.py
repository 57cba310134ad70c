"""The seeking header reader (``sources/tar_headers.py``) finds exactly what ``tarfile`` finds:
names, data offsets and sizes of the regular members, over tars written by ``tarfile`` in every
format, with long and non-ASCII names, pax-forcing fields, links and directories; and it hands
damaged or unusual tars to ``tarfile`` (same errors as before)."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqloader.errors import DataError
from seqloader.sources import tar_index
from seqloader.sources.tar_headers import read_headers
from seqloader.sources.tar_index import scan_pairs, scan_tar

FORMATS = [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]
_name_part = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\0", exclude_categories=("Cs",)),
    min_size=1,
    max_size=70,
)
member = st.tuples(
    st.lists(_name_part, min_size=1, max_size=4).map("/".join),
    st.sampled_from(["file", "file", "file", "dir", "symlink"]),
    st.integers(0, 3000),
    st.booleans(),  # a float mtime (a pax header in PAX_FORMAT)
)


def _by_tarfile(path: str) -> tuple[list[str], list[int], list[int]]:
    names, offsets, sizes = [], [], []
    with tarfile.open(path, "r:") as tar:
        for info in tar:
            if info.isfile():
                names.append(info.name)
                offsets.append(info.offset_data)
                sizes.append(info.size)
    return names, offsets, sizes


def _write(path: str, fmt: int, members: list[tuple[str, str, int, bool]]) -> None:
    with tarfile.open(path, "w", format=fmt) as tar:
        for k, (name, kind, size, float_mtime) in enumerate(members):
            info = tarfile.TarInfo(f"{k}-{name}")
            info.mtime = 1.5e9 + 0.25 if float_mtime else 1_500_000_000
            if kind == "file":
                info.size = size
                tar.addfile(info, io.BytesIO(bytes([k % 251]) * size))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE
                info.linkname = name
                tar.addfile(info)


def _outcome(path: str, fast: bool, monkeypatch: pytest.MonkeyPatch):
    """scan_tar's members (or its error's text) with or without the seeking reader."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(tar_index, "read_headers", lambda _path: None)
        try:
            got = scan_tar(path)
        except DataError as e:
            return str(e)
    return got.names, got.header.tolist(), got.offset.tolist(), got.size.tolist(), got.ended


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    fmt=st.sampled_from(FORMATS),
    members=st.lists(member, min_size=0, max_size=12),
    cut=st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_same_members_as_tarfile(
    fmt: int,
    members: list[tuple[str, str, int, bool]],
    cut: float | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.tar")
        try:
            _write(path, fmt, members)
        except ValueError:  # a name this format cannot store: tarfile refuses to write it
            return
        if cut is not None:  # a shard cut anywhere (also between members, inside a header)
            with open(path, "r+b") as fh:
                fh.truncate(int(cut * os.path.getsize(path)))
        else:
            expected = _by_tarfile(path)
            found = read_headers(path)
            if found is not None:  # None: unusual headers, read by tarfile
                assert found == (*expected, True)
        assert _outcome(path, True, monkeypatch) == _outcome(path, False, monkeypatch)


def test_plain_shards_take_the_seeking_path(tmp_path) -> None:
    path = str(tmp_path / "s.tar")
    _write(
        path, tarfile.PAX_FORMAT, [("a" * 150, "file", 10, True), ("b.flac", "file", 700, False)]
    )
    assert read_headers(path) == (*_by_tarfile(path), True)


def test_damaged_header_goes_to_tarfile_and_its_error(tmp_path) -> None:
    path = str(tmp_path / "s.tar")
    _write(path, tarfile.USTAR_FORMAT, [("a.flac", "file", 10, False)])
    with open(path, "r+b") as fh:  # break the first header's checksum
        fh.seek(0)
        fh.write(b"X")
    assert read_headers(path) is None
    with pytest.raises(DataError, match="damaged or truncated"):
        scan_tar(path)


def test_truncated_member_is_named(tmp_path) -> None:
    path = str(tmp_path / "s.tar")
    _write(
        path, tarfile.USTAR_FORMAT, [("a.flac", "file", 10, False), ("b.flac", "file", 4000, False)]
    )
    with open(path, "r+b") as fh:
        fh.truncate(512 * 3 + 1000)
    with pytest.raises(DataError, match=r"b\.flac"):
        scan_tar(path)


def test_pairs_from_an_index(tmp_path) -> None:
    path = str(tmp_path / "s.tar")
    _write(
        path,
        tarfile.GNU_FORMAT,
        [("x" * 120 + ".flac", "file", 100, False), ("y.flac", "file", 5, False)],
    )
    with tarfile.open(path) as tar:
        starts = [info.offset for info in tar] + [os.path.getsize(path)]
    got = scan_pairs(path, np.asarray(starts, dtype=np.int64))
    expected = _by_tarfile(path)
    assert got.names == expected[0]
    assert got.offset.tolist() == expected[1]
