"""The bucket index of indexed planning as one memory-mapped file per corpus, options and node.

``planning="indexed"`` needs the admitted sequences grouped by length bucket
(``seqloader.plan.histogram.BucketIndex``): O(n) to build, 4 bytes per sequence. Every rank of a
node needs the same one, so it is built once per node (``open_or_build``: one process builds under
the file's lock, the others wait and map it) into ``$XDG_CACHE_HOME/seqloader/buckets`` and mapped
by every rank, counted once. Keyed by the plan's algorithm id, the source's fingerprint (its
data), the plan options and the length key: another corpus or other options get another file.
Small corpora (below ``MIN_SEQUENCES``) are indexed in memory, without a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping

import numpy as np

from seqloader.plan.histogram import BucketIndex
from seqloader.plan.indexed import INDEXED_ALGORITHM, IndexedPlanner
from seqloader.plan.options import PlanOptions
from seqloader.sources.columns import open_or_build

#: Corpora with fewer sequences build their index in memory (it takes milliseconds).
MIN_SEQUENCES = 1_000_000


def default_bucket_dir() -> str:
    """``$XDG_CACHE_HOME/seqloader/buckets`` (else ``~/.cache/seqloader/buckets``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "seqloader", "buckets")


def shared_bucket_index(
    lengths: Mapping[str, np.ndarray],
    options: PlanOptions,
    source_fingerprint: Callable[[], str],
    files: np.ndarray | None = None,
    excluded: Mapping[str, np.ndarray] | None = None,
    folder: str | None = None,
) -> BucketIndex | None:
    """The node's bucket index for these lengths and options, memory-mapped (built here if no
    process of the node has built it yet); None for global planning or a corpus below
    ``MIN_SEQUENCES`` (the planner then builds it in memory). ``source_fingerprint`` is called
    only when a file is used."""
    if options.planning != "indexed":
        return None
    n = len(next(iter(lengths.values()))) if lengths else 0
    if n < MIN_SEQUENCES:
        return None
    h = hashlib.sha256()
    for part in (INDEXED_ALGORITHM, source_fingerprint(), options.to_json(), repr(sorted(lengths))):
        h.update(part.encode())
        h.update(b"\0")
    identity = h.hexdigest()
    path = os.path.join(folder or default_bucket_dir(), f"buckets-{identity[:24]}.seqcols")

    def build() -> tuple[dict[str, np.ndarray], dict[str, object]]:
        planner = IndexedPlanner(lengths, options, files=files, excluded=excluded)
        return planner.index.columns(), {"sequences": n}

    store, _ = open_or_build(path, identity, build)
    return BucketIndex.from_columns({name: store.column(name) for name in store.names})
