"""The length variants' classes of indexed planning as one memory-mapped file per corpus,
variants, options and node.

With length variants (``seqloader.plan.indexed.variants``) every rank's planner groups the
admitted sequences by the tuple of their variants' buckets: O(n F), most of a rank's planning
(the rest is O(n / P)), and the same on every rank. So a node builds them once
(``open_or_build``: one process under the file's lock, the others wait and map it) into
``$XDG_CACHE_HOME/seqloader/variants`` and every rank maps them, counted once
(``PlanInputs.variant_classes``: the plans are those of classes built in the rank). Keyed by the
plan's algorithm id, the source's fingerprint, the variants' labels and a digest of their lengths
(``variants_digest``: a source's fingerprint may cover only its own, the longest variant's,
lengths), the options the classes depend on (``index_key``: bucket count, batch and
admission limits, length key) and whether the ordering sorts (one bucket per length value).
Small corpora (below ``MIN_SEQUENCES``) build them in the planner, without a file.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable

import numpy as np
import xxhash

from seqloader.loading.bucket_store import MIN_SEQUENCES
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.planners import (
    INDEXED_ALGORITHM,
    VARIANT_CLASS_KINDS,
    index_key,
    node_variant_classes,
)
from seqloader.plan.variants import LengthVariants
from seqloader.sources.columns import open_or_build
from seqloader.sources.node_cache import NodeStore, about, cache_dir, with_data_time

#: what ``seqloader prepare`` and the stores' list call this store
KIND = "variant classes"
#: the store's format (``VariantClasses.columns`` of this algorithm), written into its header: a
#: store of another format is never read as data (``open_or_build``)
FORMAT = f"{INDEXED_ALGORITHM} variant-classes/1"


def variant_classes_path(inputs: PlanInputs, source_fingerprint: str) -> tuple[str, str]:
    """(path, identity) of the node's variant classes file for ``inputs`` and the source."""
    options, variants = inputs.options, inputs.variants
    assert variants is not None
    sorts = options.parsed_ordering.kind not in ("laplace", "buckets")  # one bucket per value
    h = hashlib.sha256()
    parts = (
        INDEXED_ALGORITHM,
        source_fingerprint,
        index_key(options),
        repr(variants.labels),
        variants_digest(variants),
    )
    for part in (*parts, repr(sorted(inputs.lengths)), f"sorts={sorts}"):
        h.update(part.encode())
        h.update(b"\0")
    identity = h.hexdigest()
    return os.path.join(cache_dir("variants"), f"variants-{identity[:24]}.seqcols"), identity


def variants_digest(variants: LengthVariants) -> str:
    """XXH3-128 of every varying key's lengths ``[F, n]`` as they lie (dtype and shape hashed
    too), a block of sequences at a time: the classes depend on every variant's lengths, which
    a source's fingerprint need not cover. O(F n) bytes at ~10 GB/s, of the table the rank holds
    anyway (its drawn lengths are read from it).

    >>> t = np.array([[3, 4], [2, 3]])
    >>> variants_digest(LengthVariants({"d": t}, ("a", "b"))) == variants_digest(
    ...     LengthVariants({"d": t + [[0, 0], [0, 1]]}, ("a", "b")))
    False
    """
    h = xxhash.xxh3_128()
    for key in sorted(variants.lengths):
        table = np.asarray(variants.lengths[key])
        h.update(f"{key}\0{table.dtype.str}\0{table.shape}\0".encode())
        for a in range(0, table.shape[1], _DIGEST_BLOCK):
            h.update(np.ascontiguousarray(table[:, a : a + _DIGEST_BLOCK]).data)
    return h.hexdigest()


#: sequences per block of ``variants_digest`` (bounds a non-contiguous table's temporary copy)
_DIGEST_BLOCK = 1 << 20


def shared_variant_classes(
    inputs: PlanInputs,
    source_fingerprint: Callable[[], str],
    stores: list[NodeStore] | None = None,
    data_time: float | None = None,
) -> dict[str, np.ndarray] | None:
    """The node's variant classes for ``inputs`` (resolved ``plan_inputs``), memory-mapped and
    checked in full when mapped (a damaged file is rebuilt with a ``DataWarning`` naming it,
    never served); None without length variants, for global planning, a corpus below
    ``MIN_SEQUENCES`` or an ordering that draws no classes (the planner then does what it
    does without the store). ``stores`` collects what was built or found."""
    variants, options = inputs.variants, inputs.options
    if variants is None or options.planning != "indexed" or inputs.index is not None:
        return None
    if options.parsed_ordering.kind not in VARIANT_CLASS_KINDS:  # drawn per sequence: no classes
        return None
    n = len(next(iter(inputs.lengths.values()))) if inputs.lengths else 0
    if n < MIN_SEQUENCES:
        if stores is not None:
            note = f"kept in memory: {n} < {MIN_SEQUENCES} sequences (milliseconds to build)"
            stores.append(NodeStore(KIND, None, False, 0.0, note=note))
        return None
    path, identity = variant_classes_path(inputs, source_fingerprint())

    def build() -> tuple[dict[str, np.ndarray], dict[str, object]]:
        columns = node_variant_classes(inputs)
        owner = about(f"{inputs.origin} {index_key(options)} variants={list(variants.labels)}")
        return columns, with_data_time({"sequences": n, "about": owner}, data_time)

    started = time.perf_counter()
    store, built = open_or_build(path, identity, build, format=FORMAT)
    if stores is not None:
        stores.append(NodeStore.of(KIND, store, built, time.perf_counter() - started))
    columns = {name: store.column(name) for name in store.names}
    return columns or None
