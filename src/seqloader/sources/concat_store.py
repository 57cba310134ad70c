"""The one index space of a ``ConcatSource`` of large corpora as one memory-mapped store per node.

``ConcatSource`` lays its corpora one after another, so it needs every key's lengths and every tag
as one array each. Concatenated in every process, that is a private copy per rank and DataLoader
worker (about 4 bytes per sequence and key plus the tags' bytes and 8-byte offsets: 440 MiB per
rank at 10^7 sequences, ~4.4 GiB at 10^8), whatever the corpora themselves keep mapped. From
``MIN_SEQUENCES`` sequences on, the concatenation is written once per node
(``columns.open_or_build``: one process builds under the file's lock, the others map it) into
``$XDG_CACHE_HOME/seqloader/concat``, keyed by the corpora's names, content fingerprints and the
keys; every later open maps it. A source pickles the store (its path), not the arrays.

Columns: ``len.<key>`` (the parts' lengths one after another, int32 where they are; checked in
full when a process maps the store) and ``tags`` (strings, checked per block as tags are read).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import DataWarning
from seqloader.sources.base import Source
from seqloader.sources.columns import ChunkedColumn, Column, ColumnStore, open_or_build
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.node_cache import about, cache_dir
from seqloader.sources.tag_join import packed

STORE_VERSION = "concat-meta1"  # the columns above; a change of them changes it
#: smaller concatenations are held in memory (milliseconds to build, a few MiB)
MIN_SEQUENCES = 1_000_000


@dataclass(frozen=True)
class ConcatMetadata:
    """The concatenated lengths (key -> ``[n]``) and tags, views of ``store`` when there is one
    (``built``: this call built the store)."""

    lengths: dict[str, np.ndarray]
    tags: PackedTags
    store: ColumnStore | None
    built: bool = False


def concat_metadata(
    names: Sequence[str],
    sources: Sequence[Source],
    keys: Sequence[str],
    folder: str | os.PathLike | None = None,
    origin: str = "",
) -> ConcatMetadata:
    """The corpora's lengths of ``keys`` and tags, one after another: mapped from the node's store
    from ``MIN_SEQUENCES`` sequences on (built here if no process of the node has), else in
    memory. A cache folder that cannot be written keeps them in memory, with a ``DataWarning``."""
    n = sum(len(s) for s in sources)
    if n < MIN_SEQUENCES:
        return in_memory(sources, keys)
    h = hashlib.sha256(f"{STORE_VERSION}\0{list(names)}\0{list(keys)}\0".encode())
    for src in sources:
        h.update(f"{src.fingerprint()}\0".encode())
    identity = h.hexdigest()[:32]
    path = os.path.join(folder or cache_dir("concat"), f"concat-{identity[:24]}.seqcols")
    try:
        store, built = open_or_build(
            path,
            identity,
            lambda: _build(sources, keys, origin),
            lazy=("tags.",),
            format=STORE_VERSION,
        )
    except OSError as e:
        warnings.warn(
            f"ConcatSource: cannot write the node's store {path!r} ({e}); the corpora's lengths "
            "and tags are concatenated in this process's memory (per rank and worker). Fix: set "
            "XDG_CACHE_HOME to a writable directory on local disk.",
            DataWarning,
            stacklevel=3,
        )
        return in_memory(sources, keys)
    found = mapped(store, keys)
    return ConcatMetadata(found.lengths, found.tags, store, built)


def mapped(store: ColumnStore, keys: Sequence[str]) -> ConcatMetadata:
    """The metadata as views of ``store`` (no copy)."""
    lengths = {k: store.column(f"len.{k}") for k in keys}
    return ConcatMetadata(lengths, store.strings("tags"), store)


def in_memory(sources: Sequence[Source], keys: Sequence[str]) -> ConcatMetadata:
    """One copy in this process, in the narrowest dtype of the parts (int32 views stay int32)."""
    lengths = {k: np.concatenate([np.asarray(s.lengths(k)) for s in sources]) for k in keys}
    return ConcatMetadata(lengths, PackedTags.concat([packed(s.tags) for s in sources]), None)


def _build(
    sources: Sequence[Source], keys: Sequence[str], origin: str
) -> tuple[dict[str, Column], dict[str, object]]:
    """The store's columns, written corpus after corpus (the building process never holds the
    concatenation; each corpus' tags are packed once more if they are not already), and meta."""
    columns: dict[str, Column] = {}
    for k in keys:
        dtype = np.result_type(*[np.asarray(s.lengths(k)).dtype for s in sources])
        columns[f"len.{k}"] = ChunkedColumn(dtype, (), (s.lengths(k) for s in sources))
    columns["tags.bytes"] = ChunkedColumn(np.uint8, (), (_tag_bytes(s) for s in sources))
    columns["tags.offsets"] = ChunkedColumn(np.int64, (), _tag_offsets(sources))
    return columns, {"sequences": sum(len(s) for s in sources), "about": about(origin)}


def _tag_bytes(source: Source) -> np.ndarray:
    buf, offsets = packed(source.tags).buffers()
    return buf[int(offsets[0]) : int(offsets[-1])]


def _tag_offsets(sources: Sequence[Source]) -> Iterator[np.ndarray]:
    """The concatenation's tag offsets ``[n + 1]``, corpus after corpus."""
    yield np.zeros(1, dtype=np.int64)
    base = 0
    for src in sources:
        offsets = packed(src.tags).buffers()[1]
        yield offsets[1:] - offsets[0] + base
        base += int(offsets[-1] - offsets[0])
