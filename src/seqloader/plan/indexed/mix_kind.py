"""What the indexed planner asks a mix over its units (``MixKind``), so that it holds no test of
the mix's kind: ``IndexedMix`` (per (corpus, bucket) streams: the shard distribution) plans from
per-bucket counts and draws; ``FilesMix`` (file pieces: ``distribution="files"``) lists its
slots from the pieces, and leaves the bucket counts and draws to the files distribution.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.mix import CorpusProgress, EpochMix


class MixKind(EpochMix, Protocol):
    """A mix as ``IndexedPlanner`` asks it (``EpochMix`` and the planner's questions)."""

    def bucket_counts(self, ep: EpochIndex, parts: int) -> np.ndarray | None:
        """Slots per bucket of sub-epoch ``ep`` -> int64 ``[N]``, every (bucket, corpus)
        segment cut on its own; None: the distribution's counts."""
        ...

    def bucket_draw(self, ep: EpochIndex, parts: int) -> Draw | None:
        """The slots of sub-epoch ``ep`` per bucket position; None: the distribution's draw."""
        ...

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(sequence, corpus epoch) of every slot of sub-epoch ``ep`` without planning it (O(n):
        for checks); None: listed from the plan's batches."""
        ...

    def corpus_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, list[CorpusProgress]]:
        """(slots per corpus in sub-epoch ``ep`` (all ranks) -> int64 ``[C]``, every corpus'
        progress at the sub-epoch's end), from the mix's counts."""
        ...
