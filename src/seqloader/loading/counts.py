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
    padded_frames: int  # batch size x longest sequence


def count_key(lengths: np.ndarray, real: np.ndarray) -> KeyCounts:
    """``KeyCounts`` from int lengths ``[B]`` and the bool mask ``[B]``."""
    n_real = int(np.count_nonzero(real))
    if not len(lengths):
        return KeyCounts(n_real, len(real) - n_real, 0, 0)
    frames = int(lengths.sum()) if n_real == len(real) else int(lengths[real].sum())
    return KeyCounts(n_real, len(real) - n_real, frames, int(len(lengths) * lengths.max()))
