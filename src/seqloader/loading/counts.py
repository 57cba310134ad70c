"""What the epoch report counts of each key of a batch, computed where the batch is built.

In a worker, or in the trainer's receiving thread, so the training thread does no array work per
batch for its bookkeeping (``seqloader.trainer.report.EpochMeter`` only adds these up).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KeyCounts:
    """What the epoch report counts of one key of a batch."""

    real_seqs: int  # sequences with mask True
    repeats: int  # filler slots (mask False)
    frames: int  # frames of the real sequences
    padded_frames: int  # frames delivered: batch size x longest sequence, or packed every row's


def count_key(
    lengths: np.ndarray, real: np.ndarray, packed: bool = False, n_real: int | None = None
) -> KeyCounts:
    """``KeyCounts`` from int lengths ``[B]`` and the bool mask ``[B]``. ``packed``: the batch is
    laid out packed (``layout="packed"``), so it delivers the sum of its rows' lengths, no
    padding (filler repeats still count as delivered, not as real frames). ``n_real``: the
    mask's True count where the caller has it (one count per batch, not per key)."""
    if n_real is None:
        n_real = int(np.count_nonzero(real))
    if not len(lengths):
        return KeyCounts(n_real, len(real) - n_real, 0, 0)
    # a batch's few lengths as Python ints: sum and max of a short list cost less than two numpy
    # reductions (this runs for every key of every batch, at 0 workers in the training thread)
    lens = lengths.tolist()
    total = sum(lens)
    frames = total if n_real == len(real) else int(lengths[real].sum())
    delivered = total if packed else len(lens) * max(lens)
    return KeyCounts(n_real, len(real) - n_real, frames, delivered)
