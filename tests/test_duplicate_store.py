"""The duplicate-tag check of a large corpus, once per node: the verdict read back from the node's
file equals the check computed in memory, a loader refuses repeated tags naming them whether it
computed or read the verdict, and every later rank reads it instead of hashing every tag."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_tags import plain_duplicates

import seqloader as sl
from seqloader.errors import DataError
from seqloader.sources.hdf_layout import PackedTags
from seqloader.trainer import duplicate_store
from seqloader.trainer.checks import duplicate_tags
from seqloader.trainer.duplicate_store import node_duplicate_tags


@pytest.fixture
def small_min(monkeypatch):
    """Corpora of 3 sequences and more use the node's file (the threshold is a size, not a rule)."""
    monkeypatch.setattr(duplicate_store, "MIN_SEQUENCES", 3)


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, tags):
        self.calls += 1
        return duplicate_tags(tags)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tags=st.lists(st.text(alphabet=st.sampled_from("ab/é0"), max_size=4), min_size=3, max_size=60),
    packed=st.booleans(),
)
def test_node_verdict_equals_the_check_in_memory(tmp_path_factory, small_min, tags, packed):
    folder = str(tmp_path_factory.mktemp("checks"))
    container = PackedTags.from_strings(tags) if packed else tags
    find = Counting()
    fingerprint = sl.MemorySource({"x": [np.zeros((1, 1))] * len(tags)}, tags=tags).fingerprint
    first = node_duplicate_tags(container, fingerprint, find, folder)
    second = node_duplicate_tags(container, fingerprint, find, folder)  # another rank: reads it
    assert first == second == plain_duplicates(tags)
    assert find.calls == 1
    assert len(os.listdir(folder)) >= 1


def test_other_tags_get_their_own_verdict(tmp_path, small_min):
    find = Counting()
    a, b = ["x", "y", "x"], ["x", "y", "z"]
    fa = sl.MemorySource({"d": [np.zeros((1, 1))] * 3}, tags=a).fingerprint
    fb = sl.MemorySource({"d": [np.zeros((1, 1))] * 3}, tags=b).fingerprint
    assert node_duplicate_tags(a, fa, find, str(tmp_path)) == {"x": [0, 2]}
    assert node_duplicate_tags(b, fb, find, str(tmp_path)) == {}
    assert find.calls == 2


def test_unwritable_folder_checks_in_memory(tmp_path, small_min):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    find = Counting()
    tags = ["x", "y", "x"]
    got = node_duplicate_tags(tags, lambda: "fp", find, str(blocker / "checks"))
    assert got == {"x": [0, 2]} and find.calls == 1


def test_below_threshold_no_file(tmp_path):
    got = node_duplicate_tags(["x", "x"], lambda: "fp", duplicate_tags, str(tmp_path))
    assert got == {"x": [0, 1]} and os.listdir(tmp_path) == []


@pytest.mark.parametrize("planning", ["global", "indexed"])
def test_loader_refuses_repeated_tags_computed_or_read(tmp_path, monkeypatch, small_min, planning):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tags = [f"rec{i}" for i in range(40)]
    tags[31] = tags[7]
    src = sl.MemorySource(
        {"x": [np.zeros((i % 5 + 1, 2), "float32") for i in range(40)]}, tags=tags
    )
    messages = []
    for _ in range(2):  # first rank computes and stores the verdict, the second reads it
        with pytest.raises(DataError, match="repeat a tag") as err:
            sl.SeqLoader(
                src, max_seqs=4, ordering="laplace", planning=planning, rank=0, world_size=2
            )
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "'rec7'" in messages[0] and "[7, 31]" in messages[0]
    assert os.listdir(tmp_path / "seqloader" / "checks")
    loader = sl.SeqLoader(  # off: not checked at all
        src,
        max_seqs=4,
        ordering="laplace",
        planning=planning,
        checks=sl.CheckOptions(duplicate_tags="off"),
    )
    assert loader.steps(1) > 0


def test_empty_sequences_still_found_without_index_array(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = [np.zeros((i % 4, 2), "float32") for i in range(12)]  # 0-length at 0, 4, 8
    src = sl.MemorySource({"x": data})
    with pytest.warns(sl.DataWarning, match="3 admitted sequence"):
        sl.SeqLoader(src, max_seqs=4, planning="indexed", ordering="laplace")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", sl.DataWarning)
        sl.SeqLoader(src, max_seqs=4, planning="indexed", ordering="laplace", min_seq_length=1)


def test_hdf_file_listed_twice_refused_naming_tag_and_file(tmp_path, monkeypatch, small_min):
    """The usual cause: the same HDF file given twice. Every rank (here: two loaders, the second
    reading the node's verdict) refuses it naming a tag and both files' positions."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = [np.ones((i % 6 + 1, 3), "float32") for i in range(20)]
    tags = [f"corpus/seg{i}" for i in range(20)]
    path = tmp_path / "train.hdf"
    sl.write_hdf(path, sl.MemorySource({"data": data}, tags=tags))
    messages = []
    for _ in range(2):
        src = sl.HDFSource([path, path], index_dir=tmp_path / "index")
        with pytest.raises(DataError, match="repeat a tag") as err:
            sl.SeqLoader(src, max_seqs=4, ordering="laplace", planning="indexed")
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "'corpus/seg0'" in messages[0] and "train.hdf" in messages[0]
    assert "20 sequence(s)" in messages[0]
    assert len(os.listdir(tmp_path / "cache" / "seqloader" / "checks")) >= 1
