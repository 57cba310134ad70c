"""The per-sequence metadata of ``HDFSource``'s files as one memory-mapped ``ColumnStore``.

Every rank and every DataLoader worker on a node needs every sequence's lengths, row offsets and
tag, and every file's bounds. Read from the files, these are private arrays of each process
(about 8 bytes per sequence and key twice, plus the tags); here they are read once per node, under
the store's lock, into one file keyed by the files' identity (path, size, ``mtime_ns``; URL, size,
version for remote files) and the key selection, and every later open maps it: the bytes sit once
in the page cache, and a source pickles the store's path, not the arrays.

Columns: ``len.<key>`` (int32 when every length fits, else int64 ``[n]``), ``start.<key>`` (int64,
each file's row offsets ``[n_f + 1]`` one after another, ``[n + F]``), ``tags`` (strings),
``tags.repeats`` (uint64: the tags' hash values, ``PackedTags.hashes``, that more than one tag
has, ascending, usually none: found as the tags are written, ``sources/repeats.py``, so the
duplicate-tag screen reads them instead of hashing and sorting ``n`` tags; the hashes themselves
are not kept: the screen needs them only where some repeat, and hashes the tags then) and
``bounds`` (int64 ``[F + 1]``). The header's meta holds the merged schema, the keys left out and
the warnings the files gave, so a mapped open says what a first open said.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqloader.errors import DataWarning
from seqloader.sources.base import KeySpec, fingerprint_of, hash_packed
from seqloader.sources.columns import (
    ChunkedColumn,
    Column,
    ColumnStore,
    FilledColumn,
    StringColumn,
    identity_of_files,
    narrow_lengths,
    open_or_build,
)
from seqloader.sources.hdf_layout import (
    INPUTS,
    TARGETS,
    FileLayout,
    FileScan,
    PackedTags,
    describe_file,
    native,
)
from seqloader.sources.node_cache import about, cache_dir, with_data_time
from seqloader.sources.read_ahead import read_ahead
from seqloader.sources.repeats import Repeats
from seqloader.sources.scratch import Scratch
from seqloader.sources.tag_hash import tag_hashes

#: the columns and meta below; a change of them changes it (2: ``tags.hashes`` added, 3:
#: ``tags.repeats`` instead of ``tags.hashes``, 4: ``tags.repeats`` of the word-wise tag hash,
#: ``sources/tag_hash.py``; a store of an earlier version has another identity, so it is not
#: found and is built again under its new name; the corpus fingerprint is the same digest)
#: (``hdf-meta5`` kept every 64th running sum of the lengths instead of the row offsets: a
#: reader's offsets of a batch then cost about 100 times a gather, so it was dropped; its stores
#: have another identity and are never read as these). Written into the header as the store's
#: format: ``seqloader cache --clean --superseded`` keeps this format's store over a newer one of
#: another, and a store of another format is never read as data (``open_or_build``)
STORE_VERSION = "hdf-meta4"
#: the tags' hash values (``PackedTags.hashes``) more than one tag has (``StoredStrings.repeats``)
REPEATS = "tags.repeats"
#: tag blocks read ahead of the one being written (``read_ahead``)
AHEAD = 1

#: a file as read for the store: its arrays (``FileLayout``: remote files), or its checked keys
#: and counts, the arrays read block by block as the store is written (``FileScan``: local files)
Layout = FileLayout | FileScan
#: the key -> (schema, skipped) merge of the files' layouts (``hdf._merge_schema``)
Merge = Callable[[list[Layout]], tuple[dict[str, KeySpec], dict[str, str]]]
#: what ``_build`` returns: the columns, and the meta (a function: called once the columns are
#: written, when the streamed build has hashed the fingerprint)
Built = tuple[dict[str, Column], "dict[str, Any] | Callable[[], dict[str, Any]]"]


def dataset_of(key: str) -> str:
    """The HDF dataset holding ``key`` (RETURNN: ``inputs`` for ``data``, else a target's)."""
    return INPUTS if key == "data" else f"{TARGETS}/data/{key}"


@dataclass(frozen=True)
class Metadata:
    """What ``HDFSource`` keeps about its files, as views of a store's columns (or, where no
    store could be written, of arrays in memory)."""

    schema: dict[str, KeySpec]
    skipped: dict[str, str]
    lengths: dict[str, np.ndarray]  # key -> int32/int64 [n], read-only when mapped
    starts: dict[str, np.ndarray]  # key -> int64 [n + F]
    bounds: np.ndarray  # int64 [F + 1]
    tags: PackedTags
    fingerprint: str
    store: ColumnStore | None  # None: held in memory (no writable index directory)


def default_index_dir() -> str:
    """``$XDG_CACHE_HOME/seqloader/hdf`` (else ``~/.cache/seqloader/hdf``)."""
    return cache_dir("hdf")


def identity_of(paths: Sequence[str], remote_keys: Sequence[str] | None, keys: object) -> str:
    """The store's identity: the files (local: path, size, ``mtime_ns``; remote: URL, size,
    version) and the key selection, which decides the schema."""
    extra = f"{STORE_VERSION}\0keys={json.dumps(keys)}"
    if remote_keys is None:
        return identity_of_files(paths, extra)
    h = hashlib.sha256(extra.encode())
    for k in remote_keys:
        h.update(f"{k}\0".encode())
    return h.hexdigest()[:32]


def open_metadata(
    identity: str,
    index_dir: str | os.PathLike | None,
    read_layouts: Callable[[], Sequence[Layout]],
    merge: Merge,
    origin: str = "",
    data_time: float | None = None,
) -> tuple[Metadata, bool]:
    """The files' metadata from the store of ``identity`` in ``index_dir``: mapped when it is
    there, else built from ``read_layouts()`` (once per node). Returns (metadata, built here).
    ``origin`` (the files, for a listing of the cache) and ``data_time`` (their newest
    modification time, local files) go into the store's header (``seqloader cache``).
    Where the store cannot be written (a read-only cache directory), the metadata is held in this
    process's memory, with a ``DataWarning`` naming the directory; so is that of files whose
    metadata datasets keep their values in other files (``FileScan.foreign``), whose identity
    cannot see those change (a ``DataWarning`` naming the file and dataset)."""
    directory = default_index_dir() if index_dir is None else os.fspath(index_dir)
    path = os.path.join(directory, f"hdf-{identity}.cols")
    try:
        store, built = open_or_build(
            path,
            identity,
            lambda: _build(read_layouts, merge, origin, data_time=data_time),
            lazy=("start.", "tags."),
            format=STORE_VERSION,
        )
    except OSError as e:  # the index directory (the files' own errors are DataErrors)
        warnings.warn(
            f"HDFSource: cannot write the metadata index {path!r} ({e}); the metadata is held "
            "in this process's memory (per rank and worker). Fix: pass index_dir=... a "
            "writable directory on local disk.",
            DataWarning,
            stacklevel=3,
        )
        return _in_memory(read_layouts, merge, origin), True
    except _KeptOutside as e:  # nothing was written: the next open reads the files again
        warnings.warn(
            "HDFSource: no metadata index is kept for "
            + "; ".join(f"HDF file {w}, dataset {d}" for w, d in e.foreign)
            + ": the files' identity cannot see a change there, so the metadata is read from the "
            "files on each open and held in this process's memory. Fix: copy those values into "
            "the file itself (h5py: values = f[name][()]; del f[name]; f[name] = values) to have "
            "the index kept.",
            DataWarning,
            stacklevel=3,
        )
        read = e.layouts
        return _in_memory(lambda: read, merge, origin), True
    _warn_again(store.meta)
    return metadata_of(store), built


class _KeptOutside(Exception):
    """Raised by ``_build`` before anything is written: the files' layouts (read already) and
    (file, dataset: where) of each metadata dataset kept outside its file."""

    def __init__(self, layouts: list[Layout], foreign: list[tuple[str, str]]) -> None:
        super().__init__(foreign)
        self.layouts, self.foreign = layouts, foreign


def _in_memory(read_layouts: Callable[[], Sequence[Layout]], merge: Merge, origin: str) -> Metadata:
    columns, meta = _build(read_layouts, merge, origin, in_memory=True)
    assert isinstance(meta, dict)  # in memory: the meta at once
    _warn_again(meta)
    return _from_columns(columns, meta, None)


def metadata_of(store: ColumnStore) -> Metadata:
    """The metadata as views of ``store``'s columns (no copy); the row offsets checked per block
    as files are read (``ColumnStore.rows``), the rest when the store was mapped."""
    columns = {
        name: store.rows(name) if name.startswith("start.") else store.column(name)
        for name in store.names
        if not name.startswith("tags.")
    }
    return _from_columns(columns, store.meta, store)


def _warn_again(meta: Mapping[str, Any]) -> None:
    """The files' warnings, on every open (a mapped open reads no file to find them)."""
    for message in meta["warnings"]:
        warnings.warn(message, DataWarning, stacklevel=4)


def _build(
    read_layouts: Callable[[], Sequence[Layout]],
    merge: Merge,
    origin: str = "",
    in_memory: bool = False,
    data_time: float | None = None,
) -> Built:
    """Columns and meta of the files' layouts. Scanned files (``FileScan``) stream into the
    store block by block, the fingerprint hashed as they go; ``in_memory`` (no store can be
    written) or files read whole (``FileLayout``) give arrays."""
    error: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            layouts = list(read_layouts())
            schema, skipped = merge(layouts)
        except BaseException as e:  # raised below, after the warnings, as without the store
            error = e
    if error is not None:
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        raise error
    foreign = [
        (describe_file(lay.path, lay.position), d)
        for lay in layouts
        if isinstance(lay, FileScan)
        for d in lay.foreign
    ]
    if foreign and not in_memory:  # the files' warnings come again: the rebuild reads the
        raise _KeptOutside(layouts, foreign)  # files whole (FileScan.layout) and merges again
    messages = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    for w in caught:  # others pass through as they came
        if not issubclass(w.category, DataWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    bounds = np.zeros(len(layouts) + 1, dtype=np.int64)
    np.cumsum([lay.num_seqs for lay in layouts], out=bounds[1:])
    meta = {
        "schema": {k: _spec_to_json(s) for k, s in schema.items()},
        "skipped": skipped,
        "warnings": messages,
        "sequences": int(bounds[-1]),
        "about": about(origin),
    }
    meta = with_data_time(meta, data_time)  # which of a source's stores is of the newest data
    scans = [lay for lay in layouts if isinstance(lay, FileScan)]
    if len(scans) == len(layouts) and not in_memory:
        return _streamed(scans, schema, bounds, meta)
    read = [lay.layout() if isinstance(lay, FileScan) else lay for lay in layouts]
    tags = read[0].tags if len(read) == 1 else PackedTags.concat([x.tags for x in read])
    columns: dict[str, Column] = {"bounds": bounds}
    lengths: dict[str, np.ndarray] = {}
    for key in schema:  # one file (one large corpus file, say): its arrays, not copies
        lengths[key] = narrow_lengths(_joined([np.diff(lay.starts[key]) for lay in read]))
        columns[f"len.{key}"] = lengths[key]
        columns[f"start.{key}"] = _joined([lay.starts[key] for lay in read])
    columns["tags"] = StringColumn(*tags.buffers())
    columns[REPEATS] = tags.repeats()
    meta["fingerprint"] = fingerprint_of(tags, lengths, schema, "hdf")
    return columns, meta


def _streamed(
    scans: list[FileScan], schema: dict[str, KeySpec], bounds: np.ndarray, meta: dict[str, Any]
) -> Built:
    """The store's columns as chunks read from the files while the store is written (the tags,
    then each key's lengths and row offsets, in ``fingerprint_of``'s order, hashed on the way):
    a block of rows in memory at a time, the next block of tags read in a thread meanwhile
    (``read_ahead``). The tags' offsets (``n + 1`` rows) and each key's row offsets (``n + F``)
    are of a size known ahead, so the writer keeps their place and they are written as each
    block of tag bytes, or of lengths, is read (``FilledColumn``): ``seqLengths`` is read once
    per key. Each block's tag hashes (``PackedTags.hashes``) go to ``Repeats`` (cut by
    their top bits as they come; in the reading thread, beside the fingerprint's SHA-256 and the
    writes), whose repeated values follow the tag bytes: the tags are read and hashed once, and
    the duplicate-tag screen's sort is done in cache-sized parts."""
    h = hashlib.sha256(str(int(bounds[-1])).encode())
    n = int(bounds[-1])
    offsets = FilledColumn(np.int64, n + 1)
    repeats = Repeats(expected=n)

    def hashed() -> Iterator[PackedTags]:
        """The tag blocks, each one's hashes added to ``repeats`` (in the reading thread: only
        it adds, and ``finish`` comes after the last block was taken; ``add`` copies them, so
        one array holds every block's)."""
        kept = Scratch()
        ring = AHEAD + 2  # blocks alive at once: the one written, those queued, the one read
        for block in itertools.chain.from_iterable(scan.tag_blocks(ring) for scan in scans):
            data, starts = block.buffers()
            repeats.add(tag_hashes(data, starts, out=kept.take("hashes", len(block), np.uint64)))
            yield block

    def tag_bytes() -> Iterator[np.ndarray]:
        total = 0
        offsets.write(np.zeros(1, dtype=np.int64))
        kept = Scratch()  # the fingerprint's temporaries, reused
        for block in read_ahead(hashed(), AHEAD):  # the next read while this one is written
            data, starts = block.buffers()
            hash_packed(h, data, starts, kept)
            ends = starts[1:]  # the block's own array, not used after: shifted in place
            ends += total
            offsets.write(ends)
            total += len(data)
            yield data

    def lengths_of(key: str, dtype: np.dtype, starts: FilledColumn) -> Iterator[np.ndarray]:
        """``key``'s lengths; its row offsets (each file's from 0, ``n_f + 1`` of them) written
        to ``starts`` from the same blocks: ``seqLengths`` read once per key."""
        h.update(f"{key}:{schema[key].describe()}".encode())
        kept = Scratch()  # the int64 copy and running sum of each block, reused
        for scan in scans:
            total = 0
            starts.write(np.zeros(1, dtype=np.int64))
            for block in scan.length_blocks(key):
                wide = kept.take("wide", len(block), np.int64)  # the digest hashes int64
                np.copyto(wide, block)
                h.update(wide.data)
                out = kept.take("sums", len(block), np.int64)
                np.cumsum(wide, out=out)
                out += total
                total = int(out[-1]) if len(out) else total
                starts.write(out)
                yield block.astype(dtype, copy=False)

    columns: dict[str, Column] = {"bounds": bounds}
    columns["tags.offsets"] = offsets
    columns["tags.bytes"] = ChunkedColumn(np.uint8, (), tag_bytes())
    # after the bytes: every hash added by then
    columns[REPEATS] = ChunkedColumn(np.uint64, (), (repeats.finish() for _ in range(1)))
    for key in sorted(schema):  # fingerprint_of hashes the keys in sorted order
        longest = max((scan.longest[key] for scan in scans), default=0)
        dtype = narrow_lengths(np.array([0, longest])).dtype
        starts = FilledColumn(np.int64, n + len(scans))  # reserved before the lengths
        columns[f"start.{key}"] = starts
        columns[f"len.{key}"] = ChunkedColumn(dtype, (), lengths_of(key, dtype, starts))

    def finished() -> dict[str, Any]:
        h.update(b"hdf")
        return {**meta, "fingerprint": h.hexdigest()[:32]}

    return columns, finished


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts concatenated; a single part as it is (no copy of one file's arrays)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _from_columns(
    columns: Mapping[str, Any], meta: Mapping[str, Any], store: ColumnStore | None
) -> Metadata:
    schema = {k: _spec_from_json(v) for k, v in meta["schema"].items()}
    if store is not None:
        tags: PackedTags = store.strings("tags")
    else:
        tag_column = columns["tags"]
        tags = PackedTags(tag_column.data, tag_column.offsets)
    return Metadata(
        schema=schema,
        skipped=dict(meta["skipped"]),
        lengths={k: columns[f"len.{k}"] for k in schema},
        starts={k: columns[f"start.{k}"] for k in schema},
        bounds=columns["bounds"],
        tags=tags,
        fingerprint=str(meta["fingerprint"]),
        store=store,
    )


def _spec_to_json(spec: KeySpec) -> list[Any]:
    return [np.dtype(spec.dtype).str, list(spec.feature_shape), spec.sparse, spec.vocab_size]


def _spec_from_json(value: list[Any]) -> KeySpec:
    dtype, shape, sparse, vocab = value
    # native: a store written before big-endian files were read in native order
    return KeySpec(native(dtype), tuple(int(d) for d in shape), bool(sparse), vocab)


class FileStarts(Sequence[dict[str, np.ndarray]]):
    """``starts[f][key]``: file ``f``'s row offsets of ``key`` (int64 ``[n_f + 1]``), a view of
    the concatenated column, made when asked: no object per file is kept (10^5 files)."""

    def __init__(self, starts: Mapping[str, np.ndarray], bounds: np.ndarray) -> None:
        self._starts, self._bounds = starts, bounds

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def __getitem__(self, f: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        if not 0 <= f < len(self):
            raise IndexError(f"file {f} out of range for {len(self)} files")
        a, b = int(self._bounds[f]) + f, int(self._bounds[f + 1]) + f + 1
        return {k: col[a:b] for k, col in self._starts.items()}
