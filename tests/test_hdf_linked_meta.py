"""The node's HDF metadata store is keyed by the files' identity (path, size, mtime): it cannot
see a change of ``seqLengths``/``seqTags`` whose values live in another file (an external link,
a virtual dataset, external raw storage). No store is kept for such a file: its metadata is read
on each open (and said so by name), so changed lengths are served as they now are."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import seqloader as sl
from hdf_files import keep_outside
from seqloader.errors import DataWarning


def _linked_lengths(folder: Path, how: str, lengths: np.ndarray) -> tuple[Path, Path]:
    """``c.hdf`` with 12 rows of ``inputs`` whose ``seqLengths`` are ``lengths`` kept outside it
    (``how``); returns (the file, where the lengths are)."""
    path, other = folder / "c.hdf", folder / ("l.raw" if how == "external" else "l.hdf")
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.arange(24, dtype="<f4").reshape(12, 2))
        f.create_dataset("seqTags", data=np.array([b"a", b"b"], object), dtype=h5py.string_dtype())
        keep_outside(f, "seqLengths", lengths, str(other), how)
    return path, other


@pytest.mark.parametrize("how", ["link", "virtual", "external"])
def test_lengths_kept_in_another_file_are_read_again_on_each_open(tmp_path, how) -> None:
    """Lengths [4, 8] -> [6, 6] in the other file (``c.hdf`` itself untouched): the second open
    serves [6, 6] and sequence 0's six rows; each open names the file and ``seqLengths``."""
    first = np.array([[4, 4], [8, 8]], "<i4")
    path, other = _linked_lengths(tmp_path, how, first)
    index = tmp_path / "idx"
    with (
        pytest.warns(DataWarning, match=r"no metadata index is kept for HDF file .*c\.hdf"),
        sl.HDFSource(path, index_dir=index) as src,
    ):
        assert src.lengths("data").tolist() == [4, 8]
    stamp = path.stat().st_mtime_ns
    now = np.array([[6, 6], [6, 6]], "<i4")
    if how == "external":
        now.tofile(other)
    else:
        with h5py.File(other, "r+") as v:
            v["x"][...] = now
    assert path.stat().st_mtime_ns == stamp  # the file's own identity did not change
    with (
        pytest.warns(DataWarning, match=r"dataset 'seqLengths': it (is|keeps)") as caught,
        sl.HDFSource(path, index_dir=index) as src,
    ):
        assert src.lengths("data").tolist() == [6, 6]
        assert src.read(0)["data"].tolist() == np.arange(12).reshape(6, 2).tolist()
    (warned,) = [w for w in caught if "no metadata index" in str(w.message)]  # said once
    assert str(other.name) in str(warned.message)
    assert not list(index.glob("hdf-*.cols"))


def test_tags_reached_through_a_link_are_read_again_on_each_open(tmp_path) -> None:
    """``seqTags`` linked from another file: tags renamed there are the tags of the next open."""
    path, other = tmp_path / "c.hdf", tmp_path / "t.hdf"
    with h5py.File(other, "w") as v:
        v.create_dataset("t", data=np.array([b"a", b"b"], object), dtype=h5py.string_dtype())
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.zeros((5, 2), "<f4"))
        f.create_dataset("seqLengths", data=np.array([[2, 2], [3, 3]], "<i4"))
        f["seqTags"] = h5py.ExternalLink(str(other), "t")
    index = tmp_path / "idx"
    for tags in ([b"a", b"b"], [b"x", b"y"]):
        with h5py.File(other, "r+") as v:
            v["t"][...] = np.array(tags, object)
        with (
            pytest.warns(DataWarning, match=r"dataset 'seqTags': it is reached through an ext"),
            sl.HDFSource(path, index_dir=index) as src,
        ):
            assert list(src.tags) == [t.decode() for t in tags]
