"""Lengths as read-only int32 views of memory-mapped metadata (the ``Source`` protocol allows it):
every consumer plans, counts and sums exactly as with int64 copies, also where the sums pass
2^31, and ``HDFSource`` maps its metadata from one file per node, built once."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest

import seqloader as sl
from seqloader.cli.main import main
from seqloader.plan.greedy.planner import Planner
from seqloader.sources.base import KeySpec, fingerprint_of
from seqloader.sources.hdf_layout import PackedTags

BIG = 2**31 - 1  # the longest length an int32 holds


def write_huge(path: Path, lengths: list[int]) -> list[str]:
    """A RETURNN HDF file whose sequences are ``lengths`` frames long, summing past 2^31, in a
    few KB: ``inputs`` is chunked and never written, so HDF5 allocates none of its chunks."""
    tags = [f"utt{i}" for i in range(len(lengths))]
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", shape=(sum(lengths), 1), dtype="float32", chunks=(1 << 16, 1))
        f.create_dataset("seqLengths", data=np.array(lengths, np.int64)[:, None])
        f.create_dataset("seqTags", data=np.array([t.encode() for t in tags], "S"))
        f.attrs["inputPattSize"] = 1
        f.create_group("targets/data")  # no targets: seqLengths has the one inputs column
        f.create_group("targets/size")
    return tags


@pytest.fixture
def huge(tmp_path: Path) -> tuple[Path, list[int]]:
    lengths = [BIG, 5, BIG, BIG - 7, 3, 2**30, BIG]
    write_huge(tmp_path / "huge.hdf", lengths)
    return tmp_path / "huge.hdf", lengths


def test_hdf_lengths_are_read_only_int32_views_of_the_store(huge, tmp_path):
    path, lengths = huge
    src = sl.HDFSource(path, index_dir=tmp_path / "idx")
    got = src.lengths("data")
    assert got.dtype == np.int32 and not got.flags.writeable
    assert got.tolist() == lengths
    assert src.store is not None and src.index_built
    assert np.shares_memory(got, src.store.column("len.data"))
    assert int(got.sum()) == sum(lengths) > 2**33  # numpy sums int32 in int64


def test_planner_and_admission_on_int32_views_equal_int64(huge, tmp_path):
    path, lengths = huge
    src = sl.HDFSource(path, index_dir=tmp_path / "idx")
    wide = np.array(lengths, np.int64)
    for options in (
        sl.PlanOptions(max_seqs=2, ordering="sorted", seed=3),
        sl.PlanOptions(max_seqs=3, max_frames=3 * BIG, ordering="laplace:2", seed=1),
        sl.PlanOptions(max_seqs=2, max_seq_length=BIG - 1, ordering="random", seed=2),
        sl.PlanOptions(max_seqs=2, distribution="files", ordering="random"),
    ):
        files = np.array([0, 3, 7])  # two files, for distribution="files"
        narrow_plan = Planner({"data": src.lengths("data")}, options, src.tags, "x", files=files)
        wide_plan = Planner({"data": wide}, options, list(src.tags), "x", files=files)
        assert narrow_plan.fingerprint("f") == wide_plan.fingerprint("f")
        assert narrow_plan.admission.filtered == wide_plan.admission.filtered
        for world in (1, 2):
            a, b = narrow_plan.global_plan(1, world), wide_plan.global_plan(1, world)
            assert a.batches.seqs.tolist() == b.batches.seqs.tolist()
            assert a.batches.bounds.tolist() == b.batches.bounds.tolist()


def test_stats_and_check_sum_past_2_31(huge, tmp_path, capsys, monkeypatch):
    path, lengths = huge
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["stats", str(path), "--max-seqs", "2", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["total_frames"] == sum(lengths)
    assert stats["keys"]["data"]["total_length"] == sum(lengths)
    assert main(["check", str(path), "--max-seqs", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sequences"] == len(lengths) if "sequences" in report else report


def test_fingerprint_of_packed_tags_and_int32_equals_the_plain_hash():
    tags = ["a", "", "ünïcode", "x" * 40, "", "zz"]
    schema = {"data": KeySpec(np.dtype("float32"), (2,))}
    lengths = np.array([1, 2, 3, 4, 5, BIG], np.int32)
    plain = fingerprint_of(tags, {"data": lengths.astype(np.int64)}, schema, "hdf")
    assert fingerprint_of(PackedTags.from_strings(tags), {"data": lengths}, schema, "hdf") == plain


def test_second_open_maps_and_pickles_carry_the_path(tmp_path):
    data = [np.full((n, 3), n, np.float32) for n in (4, 1, 7, 2)]
    tags = [f"s{i}" for i in range(4)]
    sl.write_hdf(tmp_path / "a.hdf", sl.MemorySource({"data": data}, tags=tags))
    sl.write_hdf(tmp_path / "b.hdf", sl.MemorySource({"data": data[::-1]}, tags=tags[::-1]))
    files = [tmp_path / "a.hdf", tmp_path / "b.hdf"]
    first = sl.HDFSource(files, index_dir=tmp_path / "idx")
    second = sl.HDFSource(files, index_dir=tmp_path / "idx")
    assert first.index_built and not second.index_built
    assert first.store.path == second.store.path
    assert len(os.listdir(tmp_path / "idx")) == 2  # the store and its lock
    assert second.fingerprint() == first.fingerprint()
    assert second.file_layout().tolist() == [0, 4, 8]
    assert list(second.tags) == tags + tags[::-1]
    blob = pickle.dumps(second)
    assert len(blob) < 4096  # the store's path, not its columns
    back = pickle.loads(blob)
    for i in range(8):
        np.testing.assert_array_equal(back.read(i)["data"], second.read(i)["data"])
    assert back.tags_at(np.array([7, 0])) == ["s0", "s0"]
    # other keys: another store; a file rewritten: another identity, rebuilt
    assert sl.HDFSource(files, keys=["data"], index_dir=tmp_path / "idx").index_built
    sl.write_hdf(tmp_path / "b.hdf", sl.MemorySource({"data": data[:2]}, tags=tags[:2]))
    changed = sl.HDFSource(files, index_dir=tmp_path / "idx")
    assert changed.index_built and len(changed) == 6


def test_the_fingerprint_is_the_one_computed_from_the_files(tmp_path):
    data = [np.ones((n, 2), np.float32) for n in (3, 5, 1)]
    tags = ["a", "b", "c"]
    sl.write_hdf(tmp_path / "x.hdf", sl.MemorySource({"data": data}, tags=tags))
    src = sl.HDFSource(tmp_path / "x.hdf", index_dir=tmp_path / "idx")
    lengths = {"data": np.array([3, 5, 1])}
    assert src.fingerprint() == fingerprint_of(tags, lengths, src.schema, "hdf")


def test_an_unwritable_index_dir_keeps_the_metadata_in_memory(tmp_path):
    data = [np.ones((n, 2), np.float32) for n in (3, 5)]
    sl.write_hdf(tmp_path / "x.hdf", sl.MemorySource({"data": data}))
    (tmp_path / "plain").write_text("a file, not a directory")
    with pytest.warns(sl.DataWarning, match="index_dir"):
        src = sl.HDFSource(tmp_path / "x.hdf", index_dir=tmp_path / "plain" / "idx")
    assert src.store is None and src.lengths("data").tolist() == [3, 5]
    assert pickle.loads(pickle.dumps(src)).lengths("data").tolist() == [3, 5]


def test_concat_of_mapped_sources_keeps_int32_in_one_copy(tmp_path):
    data = [np.full((n, 2), n, np.float32) for n in (4, 1, 7)]
    sl.write_hdf(tmp_path / "a.hdf", sl.MemorySource({"data": data}, tags=["a0", "a1", "a2"]))
    sl.write_hdf(tmp_path / "b.hdf", sl.MemorySource({"data": data[:2]}, tags=["b0", "b1"]))
    a = sl.HDFSource(tmp_path / "a.hdf", index_dir=tmp_path / "idx")
    b = sl.HDFSource(tmp_path / "b.hdf", index_dir=tmp_path / "idx")
    both = sl.ConcatSource({"a": a, "b": b})
    assert both.lengths("data").dtype == np.int32
    assert both.lengths("data").tolist() == [4, 1, 7, 4, 1]
    wide = sl.ConcatSource({"a": a, "m": sl.MemorySource({"data": data[:1]}, tags=["m0"])})
    assert wide.lengths("data").tolist() == [4, 1, 7, 4]


def _open_and_tell(args: tuple[str, str]) -> tuple[bool, str, list[int]]:
    path, index_dir = args
    src = sl.HDFSource(path, index_dir=index_dir)
    return src.index_built, src.fingerprint(), src.lengths("data").tolist()


@pytest.mark.slow
def test_ranks_racing_on_a_node_build_the_store_once(tmp_path):
    """Processes opening the same files at once (the ranks of a node): one builds the store
    under its lock, the others wait and map it; all see the same metadata."""
    import multiprocessing as mp

    data = [np.full((n, 2), n, np.float32) for n in range(1, 40)]
    sl.write_hdf(tmp_path / "x.hdf", sl.MemorySource({"data": data}))
    args = [(str(tmp_path / "x.hdf"), str(tmp_path / "idx"))] * 3
    with mp.get_context("spawn").Pool(3) as pool:
        got = pool.map(_open_and_tell, args)
    assert sum(built for built, _, _ in got) == 1
    assert len({fp for _, fp, _ in got}) == 1
    assert all(lengths == list(range(1, 40)) for _, _, lengths in got)
