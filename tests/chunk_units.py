"""Chunk numbers of planned slots, for the chunked-planning contract tests (plain, buckets, files)."""

from __future__ import annotations

import numpy as np

from seqloader.plan import Planner


def chunk_ids(planner: Planner, seqs: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
    """Chunk numbers (``ChunkTable.unit_ids``) of slots (sequence, chunk index)."""
    assert planner.chunks is not None and chunks is not None
    return planner.chunks.unit_ids(seqs, chunks)


def sub_epoch_chunks(planner: Planner, epoch: int) -> np.ndarray:
    """Chunk numbers of the sub-epoch's slots, in plan order."""
    sub = planner.sub_epoch_units(epoch)
    return chunk_ids(planner, sub.seqs, sub.chunks)
