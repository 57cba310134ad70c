"""Variable-length tags read from the HDF5 global heap directly (``hdf_vlen.VlenStrings``) are
exactly what h5py reads, or the reader says it cannot tell (None) and h5py reads the block."""

from __future__ import annotations

import itertools
import os
import tempfile

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.sources import hdf_vlen
from seqloader.sources.hdf_vlen import VlenStrings

#: ASCII, two-byte utf-8 and bytes that are no utf-8 (h5py writes no NUL into a vlen string)
TAG = st.lists(st.sampled_from([b"a", b"/", b"7", "é".encode(), b"\xff"]), max_size=9).map(b"".join)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tags=st.lists(TAG, min_size=1, max_size=40),
    writes=st.integers(1, 3),
    rewrite=st.booleans(),
    userblock=st.sampled_from([0, 512]),
    before=st.integers(0, 9),
    data=st.data(),
)
def test_heap_reads_equal_h5py(
    tags: list[bytes],
    writes: int,
    rewrite: bool,
    userblock: int,
    before: int,
    data: st.DataObject,
) -> None:
    """Property: for tags written in one or several slices (some written twice, leaving dead
    objects in the heap), with or without a user block, after ``before`` bytes of other data (so
    the heap may lie at any address, not only 8-aligned ones), any block ``[a, b)`` read from the
    heap is h5py's tags joined with their offsets, copied by strided segments or by one mask."""
    path = os.path.join(tempfile.mkdtemp(prefix="vlen-"), "t.hdf")
    n = len(tags)
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f.create_dataset("before", data=np.zeros(before, np.int8))
        dset = f.create_dataset("seqTags", shape=(n,), dtype=h5py.string_dtype())
        cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=writes - 1))})
        for x, y in itertools.pairwise(cuts):
            dset[x:y] = np.array(tags[x:y], object)
        if rewrite:
            dset[: n // 2] = np.array(tags[: n // 2], object)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    with h5py.File(path, "r") as f:
        dset = f["seqTags"]
        reader = VlenStrings.open(f, dset)
        assert reader is not None
        want = list(dset[a:b])
        with reader, pytest.MonkeyPatch.context() as mp:
            assert reader.block(0, n) is not None  # a block first: the reads below reuse its arrays
            for segments in (hdf_vlen.SEGMENTS, 0):  # strided segments, then one mask
                mp.setattr(hdf_vlen, "SEGMENTS", segments)
                got = reader.block(a, b)
                assert got is not None  # every heap h5py writes is read (dead objects: walked)
                buf, offsets = got
                assert [buf[x:y].tobytes() for x, y in itertools.pairwise(offsets)] == want


def test_a_ring_reuses_each_pair_of_arrays_a_ring_later(tmp_path) -> None:
    """With ``ring=3`` block ``j`` is written into the arrays of block ``j - 3`` (no fresh pages
    per block), with the same strings as new arrays give; the blocks between stay intact."""
    path = tmp_path / "t.hdf"
    tags = [f"corpus/rec{i}/seg{i % 7}".encode() for i in range(40)]
    with h5py.File(path, "w") as f:
        f.create_dataset("seqTags", data=np.array(tags, object), dtype=h5py.string_dtype())
    spans = [(a, a + 8) for a in range(0, 40, 8)]
    with h5py.File(path, "r") as f:
        plain, ringed = VlenStrings.open(f, f["seqTags"]), VlenStrings.open(f, f["seqTags"], 3)
        assert plain is not None and ringed is not None
        with plain, ringed:
            got = [ringed.block(a, b) for a, b in spans[:3]]
            kept = [(data.copy(), offsets.copy()) for data, offsets in got]
            fourth = ringed.block(*spans[3])
            assert fourth is not None and np.shares_memory(fourth[0], got[0][0])
            assert np.shares_memory(fourth[1], got[0][1])
            for (data, offsets), (a, b), (was_data, was_offsets) in zip(
                got[1:], spans[1:3], kept[1:]
            ):
                assert (
                    data.tobytes() == was_data.tobytes()
                    and offsets.tolist() == was_offsets.tolist()
                )
                assert [data[x:y].tobytes() for x, y in itertools.pairwise(offsets)] == tags[a:b]
            for a, b in spans:
                want = plain.block(a, b)
                assert want is not None and not np.shares_memory(want[0], fourth[0])
            data, offsets = fourth
            assert [data[x:y].tobytes() for x, y in itertools.pairwise(offsets)] == tags[24:32]


def test_other_layouts_are_left_to_h5py(tmp_path) -> None:
    """Chunked or compressed tags, and fixed-size ones, are not read from the heap."""
    path = str(tmp_path / "t.hdf")
    tags = np.array([b"x", b"yy"], object)
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=tags, dtype=h5py.string_dtype(), chunks=(1,))
        f.create_dataset("packed", data=tags, dtype=h5py.string_dtype(), compression="gzip")
        f.create_dataset("fixed", data=np.array([b"x", b"yy"], "S2"))
    with h5py.File(path, "r") as f:
        assert all(VlenStrings.open(f, f[k]) is None for k in ("chunked", "packed", "fixed"))


def test_tags_reached_through_an_external_link_are_read_from_their_own_file(tmp_path) -> None:
    """``seqTags`` an external link to another file's vlen tags: their offset is one in that
    file, so they are not read from the heap of the opened file (which once gave a short read,
    reported as a damaged file, or that file's bytes there); the source lists the linked tags."""
    n, other, path = 40, str(tmp_path / "tags.hdf"), str(tmp_path / "c.hdf")
    tags = [f"linked-{i:02d}".encode() for i in range(n)]
    with h5py.File(other, "w") as f:
        f.create_dataset("pad", data=np.zeros(4096, np.uint8))  # the tags lie past c.hdf's end
        f.create_dataset("seqTags", data=np.array(tags, object), dtype=h5py.string_dtype())
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.zeros((n, 2), "<f4"))
        f.create_dataset("seqLengths", data=np.ones((n, 2), np.int32))
        f["seqTags"] = h5py.ExternalLink(other, "seqTags")
    with h5py.File(path, "r") as f:
        assert VlenStrings.open(f, f["seqTags"]) is None
    with (
        pytest.warns(sl.DataWarning, match="no metadata index is kept"),  # linked metadata
        sl.HDFSource(path, index_dir=tmp_path / "idx") as source,
    ):
        assert list(source.tags) == [t.decode() for t in tags]
