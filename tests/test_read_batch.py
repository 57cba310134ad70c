"""One fallback for batched reads: ``seqloader.sources.base.read_batch``. Every reader of batches
(the loader, ``write_hdf``, ``seqloader convert``, ``ZipSource``, ``ConcatSource``, ``ReturnnView``)
goes through it, so a broken sequence in an HDF file is named (file and tag) the same way
everywhere, after ``HDFSource.read_many`` (which has no fallback of its own) failed. The HDF files
are real: written with h5py, one sequence's compressed chunk overwritten."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import seqloader as sl
from hdf_files import write_with_broken_sequence
from seqloader.errors import DataError
from seqloader.returnn import ReturnnView
from seqloader.sources.base import read_batch
from test_cli_inprocess import run

BROKEN = 5
# what every caller's error must say: the sequence's tag and its file
NAMED = r"tag 'seq-5'; sequence 5 of file '.*broken\.hdf'"
ONE_PASS = r"\d+ sequences of file '.*broken\.hdf' in one pass"  # HDFSource.read_many's error


@pytest.fixture
def broken(tmp_path: Path) -> str:
    rng = np.random.default_rng(0)
    path = str(tmp_path / "broken.hdf")
    write_with_broken_sequence(
        path, [rng.standard_normal((6, 3)).astype("f4") for _ in range(9)], BROKEN
    )
    return path


def messages(e: BaseException | None) -> list[str]:
    """The error and the errors it was raised while handling (``__context__``), outermost first."""
    out = []
    while e is not None:
        out.append(str(e))
        e = e.__context__
    return out


def assert_named_after_read_many(err: pytest.ExceptionInfo) -> None:
    """Named (tag and file), and raised by the fallback after HDF's read_many failed."""
    chain = messages(err.value)
    assert isinstance(err.value, DataError)
    assert re.search(NAMED, chain[0]), chain
    assert any(re.search(ONE_PASS, m) for m in chain[1:]), chain


def test_the_file_is_broken_in_one_sequence_only(broken: str) -> None:
    src = sl.HDFSource(broken)
    for i in range(len(src)):
        if i != BROKEN:
            assert src.read(i)["data"].shape == (6, 3)
    with pytest.raises(DataError, match=NAMED):
        src.read(BROKEN)
    with pytest.raises(DataError, match=ONE_PASS):
        src.read_many(np.arange(9))  # no fallback of its own
    assert len(read_batch(src, np.array([0, 8, 4]))) == 3  # a batch without it reads in one pass


def test_read_batch_names_it(broken: str) -> None:
    with pytest.raises(DataError, match=NAMED) as err:
        read_batch(sl.HDFSource(broken), np.arange(9))
    assert_named_after_read_many(err)


def test_loader_names_it(broken: str) -> None:
    # a transform makes the loader read whole sequences (read_batch), not into the batch
    loader = sl.SeqLoader(sl.HDFSource(broken), max_seqs=9, transform=lambda seq, rng: seq)
    with loader, pytest.raises(DataError, match=NAMED) as err:
        list(loader.epoch(1))
    assert_named_after_read_many(err)


def test_write_hdf_names_it(broken: str, tmp_path: Path) -> None:
    out = tmp_path / "copy.hdf"
    with pytest.raises(DataError, match=NAMED) as err:
        sl.write_hdf(str(out), sl.HDFSource(broken))
    assert_named_after_read_many(err)
    assert not out.exists()  # nothing half-written


def test_convert_names_it(broken: str, tmp_path: Path, capsys) -> None:
    """``seqloader convert`` of a corpora config: CountingSource -> write_hdf -> ConcatSource ->
    HDFSource, each batch through read_batch."""
    config = tmp_path / "corpora.toml"
    config.write_text('[source.corpora.main]\nhdf = "broken.hdf"\n')
    code, _, err = run(capsys, "convert", config, tmp_path / "out.hdf", "--no-progress")
    assert code == 2
    assert re.search(NAMED, err), err
    assert not (tmp_path / "out.hdf").exists()


def test_zip_names_it(broken: str, tmp_path: Path) -> None:
    good = str(tmp_path / "good.hdf")
    tags = [f"seq-{i}" for i in range(9)]
    sl.write_hdf(good, sl.MemorySource({"classes": [np.arange(4, dtype="int32")] * 9}, tags))
    zipped = sl.ZipSource(
        {"feat": sl.HDFSource(broken), "align": sl.HDFSource(good)},
        data_map={"data": ("feat", "data"), "classes": ("align", "classes")},
        control="align",
    )
    with pytest.raises(DataError, match=NAMED) as err:
        zipped.read_many(np.arange(9))  # its read_many reads each source through read_batch
    assert_named_after_read_many(err)


def test_concat_names_it(broken: str, tmp_path: Path) -> None:
    other = sl.MemorySource({"data": [np.ones((6, 3), "f4")] * 4}, [f"other-{i}" for i in range(4)])
    concat = sl.ConcatSource({"other": other, "main": sl.HDFSource(broken)})
    with pytest.raises(DataError, match=NAMED) as err:
        concat.read_many(np.arange(13)[::-1])
    assert_named_after_read_many(err)


def test_returnn_view_names_it(broken: str) -> None:
    view = ReturnnView(sl.HDFSource(broken), indices=np.array([8, BROKEN, 0]))
    with pytest.raises(DataError, match=NAMED) as err:
        view.read_many(np.arange(3))
    assert_named_after_read_many(err)
    assert len(view.read_many(np.array([0, 2]))) == 2
