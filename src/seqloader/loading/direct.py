"""One copy from file to batch: executing a planned batch with a source that reads straight into
the padded arrays (``read_into``), when no transform needs each sequence on its own.

The general path (``execute``) materialises every sequence (``read``: a copy out of the file),
pads it (a second copy) and screens it for NaN/Inf (a third pass). Here the padded arrays are
allocated first from the lengths known at open, the source copies each sequence's rows into its
row of the batch (from the memory map or the file's chunks), the tails are zeroed, and each
float row is screened for NaN/Inf right after its copy (``sources.padded_rows.RowScreen``); only
the rows that fail it get the exact per-sequence check, so the messages name the same sequences
as before. Batches are
byte-identical to the general path's (tests compare both with h5py).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from seqloader.loading.arena import BatchBlock
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import Alloc
from seqloader.sources.base import ReadsInto, ReadsIntoWhen, Source, declares


def reads_into(source: Source) -> bool:
    """Whether ``source`` can write sequences straight into a padded batch (``ReadsInto``, and
    ``ReadsIntoWhen`` where declared)."""
    if not declares(source, ReadsInto):
        return False
    return not declares(source, ReadsIntoWhen) or cast(ReadsIntoWhen, source).can_read_into()


def read_padded(
    source: Source, spec: BatchSpec, alloc: Alloc, screen: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[int]]:
    """({key: padded [B, T_max, *feat]}, {key: lengths int64 [B]}, rows that may hold NaN/Inf)
    of ``spec``'s sequences, each copied once from the source into its row (and screened there
    with ``screen``); zeros after each sequence's end."""
    seqs = spec.seqs
    lengths: dict[str, np.ndarray] = {}
    shapes: list[tuple[tuple[int, ...], np.dtype]] = []
    for key, spec_k in source.schema.items():  # each key's lengths, kept for the batch
        lens = np.ascontiguousarray(source.lengths(key)[seqs], dtype=np.int64)
        t_max = max(lens.tolist(), default=0)  # a batch's few lengths: no numpy reduction
        shapes.append(((len(seqs), t_max, *spec_k.feature_shape), np.dtype(spec_k.dtype)))
        lengths[key] = lens
    if isinstance(alloc, BatchBlock):  # the batch's block, lent now that its size is known
        alloc.reserve(shapes)
    data = {key: alloc(*shape) for key, shape in zip(lengths, shapes)}
    suspects = cast(ReadsInto, source).read_into(seqs, data, screen)
    return data, lengths, suspects
