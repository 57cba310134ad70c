"""The bucket index of indexed planning as one memory-mapped file per corpus, options and node.

``planning="indexed"`` needs the admitted sequences grouped by length bucket
(``seqloader.plan.planners.BucketIndex``): O(n) to build, 4 bytes per sequence. Every rank of
a node needs the same one, so it is built once per node (``open_or_build``: one process builds under
the file's lock, the others wait and map it) into ``$XDG_CACHE_HOME/seqloader/buckets`` and mapped
by every rank, counted once. Keyed by the plan's algorithm id, the source's fingerprint (its
data), the options the index depends on (``index_key``: bucket count, cost, admission limits,
length key, per-file tables; not the seed, batch limits, ``partition_epoch``, ``uneven`` or
``mix``) and the length keys: another corpus or such options get another file.
Small corpora (below ``MIN_SEQUENCES``) are indexed in memory, without a file.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import cast

import numpy as np

from seqloader.plan.inputs import PlanInputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import (
    INDEXED_ALGORITHM,
    BucketIndex,
    index_key,
    index_sort_key,
    node_bucket_index,
)
from seqloader.sources.columns import ColumnStore, open_or_build
from seqloader.sources.node_cache import NodeStore, about, cache_dir, with_data_time

#: Corpora with fewer sequences build their index in memory (it takes milliseconds).
MIN_SEQUENCES = 1_000_000
#: what ``seqloader prepare`` calls this store
KIND = "bucket index"
#: the store's format (its columns, ``BucketIndex.columns``, of this algorithm's index), written
#: into its header: a store of another format is never read as data (``open_or_build``), and
#: ``seqloader cache --clean --superseded`` keeps this one over a newer store of another
FORMAT = f"{INDEXED_ALGORITHM} bucket-index/1"
#: the members column (4 bytes per sequence: most of the store)
MEMBERS = "bucket.members"


def default_bucket_dir() -> str:
    """``$XDG_CACHE_HOME/seqloader/buckets`` (else ``~/.cache/seqloader/buckets``)."""
    return cache_dir("buckets")


def bucket_index_path(
    lengths: Mapping[str, np.ndarray],
    options: PlanOptions,
    source_fingerprint: str,
    folder: str | None = None,
) -> tuple[str, str]:
    """(path, identity) of the node's bucket index file for these lengths, options and source
    (the one key of the file: ``shared_bucket_index`` and ``seqloader prepare`` both use it)."""
    h = hashlib.sha256()
    key = index_key(options)  # not the seed, batch limits, partition_epoch, uneven or mix
    for part in (INDEXED_ALGORITHM, source_fingerprint, key, repr(sorted(lengths))):
        h.update(part.encode())
        h.update(b"\0")
    identity = h.hexdigest()
    return os.path.join(
        folder or default_bucket_dir(), f"buckets-{identity[:24]}.seqcols"
    ), identity


def shared_bucket_index(
    inputs: PlanInputs,
    source_fingerprint: Callable[[], str],
    folder: str | None = None,
    stores: list[NodeStore] | None = None,
    data_time: float | None = None,
) -> BucketIndex | None:
    """The node's bucket index for these inputs (their lengths, options, files and filters),
    memory-mapped (built here if no process of the node has built it yet); None for global
    planning or a corpus below ``MIN_SEQUENCES`` (the planner then builds it in memory).
    ``source_fingerprint`` is called only when a file is used. ``inputs.origin`` (the source's
    description) goes into the file's header, to say what it belongs to, with ``data_time`` (the
    data files' newest modification time, where the source knows it); ``stores`` collects what
    was built or found."""
    lengths, options = inputs.lengths, inputs.options
    if options.planning != "indexed":
        if stores is not None:
            stores.append(NodeStore(KIND, None, False, 0.0, note="not used: planning='global'"))
        return None
    n = len(next(iter(lengths.values()))) if lengths else 0
    if inputs.variants is not None:  # the planner groups them by variant class itself
        if stores is not None:
            note = "not used: length variants (their classes are the index: variant classes)"
            stores.append(NodeStore(KIND, None, False, 0.0, note=note))
        return None
    if n < MIN_SEQUENCES:
        if stores is not None:
            note = f"kept in memory: {n} < {MIN_SEQUENCES} sequences (milliseconds to build)"
            stores.append(NodeStore(KIND, None, False, 0.0, note=note))
        return None
    options = replace(options, mix=None)  # the index does not depend on the mix's rates
    fingerprint = source_fingerprint()
    if own := index_sort_key(inputs):  # a sorted order's index built on the source's sort key
        fingerprint += f"\0order_lengths {own}"
    path, identity = bucket_index_path(lengths, options, fingerprint, folder)

    def build() -> tuple[dict[str, np.ndarray], dict[str, object]]:
        index = node_bucket_index(replace(inputs, options=options))
        owner = about(f"{inputs.origin} {index_key(options)} keys={sorted(lengths)}")
        return index.columns(), with_data_time({"sequences": n, "about": owner}, data_time)

    started = time.perf_counter()
    defer = deferred(options)
    store, built = open_or_build(path, identity, build, format=FORMAT, defer=defer)
    if stores is not None:
        stores.append(NodeStore.of(KIND, store, built, time.perf_counter() - started))
    return mapped_index(store, defer)


def deferred(options: PlanOptions) -> tuple[str, ...]:
    """The columns of the index whose checks wait for their first read: the members under
    ``distribution="files"``, whose planner draws a rank's sequences from its files' ranges and
    their lengths and reads no member (at 10^8 sequences 400 MB of the store's 480, hashed at
    every open of every rank for nothing). Every other planning reads members all over the
    column, so they are checked in full when mapped (a damaged store is then rebuilt at once)."""
    return (MEMBERS,) if options.distribution == "files" else ()


def mapped_index(store: ColumnStore, defer: tuple[str, ...] = ()) -> BucketIndex:
    """The index as views of ``store``'s columns (no copy): those of ``defer`` read through
    ``ColumnStore.rows``, each block checked before a value of it is served (never a changed
    byte: only when the check is paid changes); the others checked in full."""
    columns = {
        name: store.rows(name) if name in defer else store.column(name) for name in store.names
    }
    return BucketIndex.from_columns(cast(dict[str, np.ndarray], columns))
