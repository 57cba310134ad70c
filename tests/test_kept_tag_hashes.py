"""An HDF file's metadata store keeps the tag hash values that more than one tag has
(``tags.repeats``), found once while the tags are written and hashed, and the duplicate-tag
screen reads them instead of hashing and sorting every tag again: the kept repeats are the
repeated values of the tags' hashes by their definition (variable-length and fixed-size
``seqTags``, empty tags, non-ASCII bytes, any block size), the verdict from them is the verdict
of a fresh pass, and a damaged block of them (or of the tags hashed where some repeat) is
refused, never served."""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_tags import plain_duplicates

import seqloader as sl
from seqloader.sources import hdf_layout
from seqloader.sources.base import hash_packed
from seqloader.sources.columns import DamagedStore
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.hdf_store import REPEATS
from seqloader.trainer import duplicate_store
from seqloader.trainer.checks import duplicate_tags

#: tag bytes: ASCII, two-byte utf-8 and bytes that are no utf-8 at all; no NUL (a tag ends there)
TAG = st.lists(st.sampled_from([b"a", b"/", b"0", "é".encode(), b"\xff"]), max_size=4).map(b"".join)


def reference_hash(tag: bytes) -> int:
    """``PackedTags.hashes``'s definition (``sources/tag_hash.py``), one tag at a time: the last
    eight bytes (or all, zero-padded) plus each full 8-byte word ``w_k`` times ``Q^(k+1)`` plus
    the length times ``G`` (mod 2^64), through MurmurHash3's fmix64."""
    q, g, mask = 0x9FB21C651E98DF25, 0x9E3779B97F4A7C15, (1 << 64) - 1
    m = len(tag)
    acc = int.from_bytes(tag[-8:] if m >= 8 else tag, "little")
    for k in range(max(m - 1, 0) // 8):
        acc += int.from_bytes(tag[8 * k : 8 * k + 8], "little") * pow(q, k + 1, 1 << 64)
    acc = (acc + m * g) & mask
    for c in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 1):
        acc ^= acc >> 33
        acc = (acc * c) & mask
    return acc


def write_hdf(path: str, tags: list[bytes], fixed: bool) -> None:
    """A RETURNN HDF file of one-frame sequences; ``seqTags`` fixed-size ``S<n>``
    (``HDFDatasetWriter``) or variable-length utf-8 (``SimpleHDFWriter``)."""
    n = len(tags)
    with h5py.File(path, "w") as f:
        if fixed:
            f.create_dataset(
                "seqTags", data=np.array(tags, dtype=f"S{max(map(len, tags), default=1) or 1}")
            )
        else:
            f.create_dataset("seqTags", data=np.array(tags, object), dtype=h5py.string_dtype())
        f.create_dataset("seqLengths", data=np.ones((n, 2), np.int32))
        f.create_dataset("inputs", data=np.zeros((n, 1), np.float32))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tags=st.lists(TAG, min_size=1, max_size=24), fixed=st.booleans(), block=st.integers(1, 9))
def test_kept_hashes_are_the_tags_hashes_and_give_the_same_verdict(
    tags: list[bytes], fixed: bool, block: int
) -> None:
    """Property: for any tags (repeats, empty tags, non-ASCII bytes), either kind of ``seqTags``
    and any block of tags read at once, the store's ``tags.repeats`` are the hash values (by
    their definition) that more than one tag has, the stored tags hash to the definition, and
    the duplicate verdict from them equals a plain pass over the tags."""
    folder = tempfile.mkdtemp(prefix="kept-hashes-")
    path = os.path.join(folder, "a.hdf")
    write_hdf(path, tags, fixed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hdf_layout, "TAG_BLOCK", block)
        source = sl.HDFSource(path, index_dir=os.path.join(folder, "index"))
    with source:
        assert source.index_built and source._store is not None
        assert source.tags.hashes().tolist() == [reference_hash(t) for t in tags]
        counts = collections.Counter(reference_hash(t) for t in tags)
        repeats = source.tags.repeats()
        assert repeats.tolist() == sorted(h for h, c in counts.items() if c > 1)
        assert repeats is source._store.column(REPEATS)  # kept, not found again
        decoded = [t.decode("utf-8", "surrogateescape") for t in tags]
        assert duplicate_tags(source.tags) == plain_duplicates(decoded)
        fresh = PackedTags.from_strings(decoded)  # no kept hashes: hashed here
        assert duplicate_tags(fresh) == duplicate_tags(source.tags)


def test_loader_refuses_repeated_tags_from_the_kept_hashes(tmp_path, monkeypatch) -> None:
    """A loader on a node whose verdict is built from the kept hashes names the file, the tag
    and the fix; another process (the verdict found) says the same."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(duplicate_store, "MIN_SEQUENCES", 4)
    path = str(tmp_path / "rep.hdf")
    write_hdf(path, [b"s0", b"s1", "s\u00e9".encode(), b"s3", b"s1"], fixed=False)
    messages = []
    for _ in range(2):
        source = sl.HDFSource(path, index_dir=tmp_path / "index")
        with source, pytest.raises(sl.DataError) as info:
            sl.SeqLoader(source, max_seqs=2)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "'s1'" in messages[0] and repr(path) in messages[0] and "Fix:" in messages[0]
    assert list((tmp_path / "cache" / "seqloader" / "checks").glob("*.seqcols"))


def test_a_damaged_repeats_block_is_refused(tmp_path) -> None:
    """One changed byte of the kept repeats, or of the tag bytes the screen hashes to find which
    tags carry a repeated value: the screen raises ``DamagedStore`` naming the column, and never
    screens with a changed value."""
    path = str(tmp_path / "a.hdf")
    write_hdf(path, [f"t{i % 30}".encode() for i in range(40)], fixed=True)  # 10 repeats
    sl.HDFSource(path, index_dir=tmp_path / "index").close()
    (store,) = (tmp_path / "index").glob("hdf-*.cols")
    pristine = store.read_bytes()
    for column in (REPEATS, "tags.bytes"):
        with sl.HDFSource(path, index_dir=tmp_path / "index") as source:
            offset, nbytes = source._store.byte_range(column)
        data = bytearray(pristine)
        data[offset + nbytes // 2] ^= 0x5A
        new = store.with_name(store.name + ".new")
        new.write_bytes(bytes(data))
        os.replace(new, store)
        source = sl.HDFSource(path, index_dir=tmp_path / "index")
        with source, pytest.raises(DamagedStore, match=rf"column '{column}'"):
            duplicate_tags(source.tags)


@settings(max_examples=30, deadline=None)
@given(
    runs=st.lists(st.tuples(TAG, st.integers(1, 200)), max_size=6),
    skip=st.integers(0, 3),
)
def test_tag_bytes_hashed_with_nuls_are_each_tag_and_a_nul(
    runs: list[tuple[bytes, int]], skip: int
) -> None:
    """Property: the bytes the corpus fingerprint hashes (``hash_packed``) are each tag followed
    by a NUL, whether its block is copied run by run (long runs of tags of one length, as ids of
    a fixed width) or through a byte mask (short runs), from any first tag of a buffer."""
    tags = [b"x" * k for k in range(skip)] + [t for t, count in runs for _ in range(count)]
    packed = PackedTags.from_array(np.array(tags, object))
    data, offsets = packed.buffers()
    expected = hashlib.sha256(b"".join(t + b"\0" for t in tags[skip:])).hexdigest()
    got = hashlib.sha256()
    hash_packed(got, data, offsets[skip:])
    assert got.hexdigest() == expected
