"""``BatchSpec``: what the main process sends a worker — the planned batch, nothing else.

Sending the plan's own index arrays (through the DataLoader's sampler) rather than an integer means
persistent workers need no per-epoch state: workers only hold the source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchSpec:
    epoch: int
    step: int  # this rank's step within the epoch (counting from the epoch start)
    seqs: np.ndarray  # int64 [B] sequence indices
    real: np.ndarray  # bool [B]; False marks a filler repeat
    uses: np.ndarray | None = None  # int64 [B] corpus epoch per slot (mixed plans only)
    chunks: np.ndarray | None = None  # int64 [B] chunk of its sequence per slot (chunked plans)
    variants: np.ndarray | None = None  # int64 [B] length variant per slot (indexed, variants)
