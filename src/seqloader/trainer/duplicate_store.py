"""The duplicate-tag check of a large corpus, computed once per node and kept in a small file.

Finding repeated tags needs every tag's hash and a sort of them: seconds and 16 bytes per
sequence at 10^7 sequences, on every rank that opens the corpus. Its answer depends only on the
tags, which the source's fingerprint hashes, so the first process of a node computes it
(``open_or_build``: one process builds under the file's lock, the others wait and map it) and
stores the groups of repeated tags (usually none) in ``$XDG_CACHE_HOME/seqloader/checks``, keyed
by the fingerprint and the number of sequences; every other rank and every later run reads the
verdict. Corpora below ``MIN_SEQUENCES`` are checked in memory (milliseconds); where the folder
cannot be written, each process checks in memory.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from seqloader.sources.columns import open_or_build
from seqloader.sources.node_cache import NodeStore, about, cache_dir, with_data_time

#: Corpora with fewer sequences are checked in memory, without a file.
MIN_SEQUENCES = 1_000_000
#: The check's version in the file's identity (a changed check gets a new file) and, as its
#: format, in its header (``seqloader cache --clean --superseded`` keeps this one).
CHECK_VERSION = "seqloader-duplicate-tags/1"
#: what ``seqloader prepare`` calls this store
KIND = "duplicate-tag verdict"


def default_check_dir() -> str:
    """``$XDG_CACHE_HOME/seqloader/checks`` (else ``~/.cache/seqloader/checks``)."""
    return cache_dir("checks")


def verdict_path(fingerprint: str, n: int, folder: str | None = None) -> tuple[str, str]:
    """(path, identity) of the node's verdict file for a source of this fingerprint and size."""
    h = hashlib.sha256()
    for part in (CHECK_VERSION, fingerprint, str(n)):
        h.update(part.encode())
        h.update(b"\0")
    identity = h.hexdigest()
    return os.path.join(folder or default_check_dir(), f"dups-{identity[:24]}.seqcols"), identity


def node_duplicate_tags(
    tags: Sequence[str],
    fingerprint: Callable[[], str],
    find: Callable[[Sequence[str]], dict[str, list[int]]],
    folder: str | None = None,
    origin: str = "",
    stores: list[NodeStore] | None = None,
    data_time: float | None = None,
) -> dict[str, list[int]]:
    """``find(tags)`` (repeated tag -> all its indices), computed once per node for a corpus of
    at least ``MIN_SEQUENCES`` and read back from the node's file after that. ``fingerprint``:
    the source's content hash (it covers the tags), called only when the file is used.
    ``origin`` (the source's description) and ``data_time`` (the data files' newest modification
    time, where the source knows it) go into the file's header; ``stores`` collects what was
    built or found."""
    n = len(tags)
    started = time.perf_counter()
    if n < MIN_SEQUENCES:
        found = find(tags)
        if stores is not None:
            note = f"checked in memory: {n} < {MIN_SEQUENCES} sequences"
            stores.append(NodeStore(KIND, None, True, time.perf_counter() - started, note=note))
        return found
    path, identity = verdict_path(fingerprint(), n, folder)

    def build() -> tuple[dict[str, np.ndarray], dict[str, object]]:
        groups = list(find(tags).values())
        starts = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum([len(g) for g in groups], out=starts[1:])
        indices = np.fromiter((i for g in groups for i in g), np.int64, count=int(starts[-1]))
        meta = with_data_time({"sequences": n, "about": about(origin)}, data_time)
        return {"indices": indices, "starts": starts}, meta

    try:
        store, built = open_or_build(path, identity, build, format=CHECK_VERSION)
    except OSError as e:  # the cache folder cannot be written: check here, as a small corpus is
        found = find(tags)
        if stores is not None:
            note = f"checked in memory: cannot write {path!r} ({e})"
            stores.append(NodeStore(KIND, None, True, time.perf_counter() - started, note=note))
        return found
    if stores is not None:
        stores.append(NodeStore.of(KIND, store, built, time.perf_counter() - started))
    indices, starts = store.column("indices"), store.column("starts")
    bounds = starts.tolist()
    return {tags[int(indices[a])]: indices[a:b].tolist() for a, b in itertools.pairwise(bounds)}
