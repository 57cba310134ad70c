"""``BatchList``: a list of batches as flat arrays (CSR), cheap to slice, pickle and share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchList:
    """Batches as flat arrays.

    - ``seqs``: int64 ``[slots]`` sequence indices, batch after batch.
    - ``bounds``: int64 ``[n_batches + 1]``; batch k is ``seqs[bounds[k]:bounds[k+1]]``.
    - ``real``: bool ``[slots]``; False marks a repeat that only fills a slot (``uneven="pad"`` or an
      infeasible ``split``): the loss should ignore it, and it is not a use of the sequence.
    - ``uses``: int64 ``[slots]`` or None. Only in mixed epochs (``seqloader.plan.mix``), where one
      sequence can be planned more than once: the corpus epoch each slot belongs to, so every use
      of a sequence is told apart (its transform RNG is keyed by it). It travels with ``seqs``
      through every slice.
    - ``chunks``: int64 ``[slots]`` or None. Only in chunked plans (``seqloader.plan.chunks``): the
      chunk of its sequence each slot holds (a sequence fills one slot per chunk). It travels
      with ``seqs`` like ``uses``.
    - ``variants``: int64 ``[slots]`` or None. Only in indexed plans with length variants
      (``seqloader.plan.indexed.variants``): the variant each slot was planned (and is read) in.
      It travels with ``seqs`` like ``uses``.
    """

    seqs: np.ndarray
    bounds: np.ndarray
    real: np.ndarray
    uses: np.ndarray | None = None
    chunks: np.ndarray | None = None
    variants: np.ndarray | None = None

    @classmethod
    def empty(cls) -> BatchList:
        return cls(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, bool))

    @classmethod
    def from_bounds(
        cls,
        seqs: np.ndarray,
        bounds: np.ndarray,
        uses: np.ndarray | None = None,
        chunks: np.ndarray | None = None,
    ) -> BatchList:
        real = np.ones(len(seqs), dtype=bool)
        return cls(seqs.astype(np.int64, copy=False), bounds, real, uses, chunks)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence indices, real mask) of batch ``k``."""
        a, b = self.bounds[k], self.bounds[k + 1]
        return self.seqs[a:b], self.real[a:b]

    def uses_of(self, k: int) -> np.ndarray | None:
        """``uses`` of batch ``k`` (None in unmixed plans)."""
        if self.uses is None:
            return None
        return self.uses[self.bounds[k] : self.bounds[k + 1]]

    def chunks_of(self, k: int) -> np.ndarray | None:
        """``chunks`` of batch ``k`` (None in unchunked plans)."""
        if self.chunks is None:
            return None
        return self.chunks[self.bounds[k] : self.bounds[k + 1]]

    def variants_of(self, k: int) -> np.ndarray | None:
        """``variants`` of batch ``k`` (None without planned variants)."""
        if self.variants is None:
            return None
        return self.variants[self.bounds[k] : self.bounds[k + 1]]

    def first(self, n_batches: int) -> BatchList:
        """The first ``n_batches`` batches, as views (no copy)."""
        end = self.bounds[n_batches]
        uses = None if self.uses is None else self.uses[:end]
        chunks = None if self.chunks is None else self.chunks[:end]
        variants = None if self.variants is None else self.variants[:end]
        return BatchList(
            self.seqs[:end], self.bounds[: n_batches + 1], self.real[:end], uses, chunks, variants
        )

    def take(self, batch_ids: np.ndarray) -> BatchList:
        """The batches ``batch_ids`` (int ``[m]``), in that order."""
        batch_ids = np.asarray(batch_ids, dtype=np.int64)
        sizes = self.sizes[batch_ids]  # [m]
        bounds = np.zeros(len(batch_ids) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        # slot index of every element: start of its batch + offset within the batch
        starts = np.repeat(self.bounds[:-1][batch_ids], sizes)  # [slots]
        within = np.arange(bounds[-1], dtype=np.int64) - np.repeat(bounds[:-1], sizes)
        idx = starts + within
        uses = None if self.uses is None else self.uses[idx]
        chunks = None if self.chunks is None else self.chunks[idx]
        variants = None if self.variants is None else self.variants[idx]
        return BatchList(self.seqs[idx], bounds, self.real[idx], uses, chunks, variants)

    def concat(self, other: BatchList) -> BatchList:
        bounds = np.concatenate([self.bounds, other.bounds[1:] + self.bounds[-1]])
        if (self.uses is None) != (other.uses is None):
            raise ValueError("BatchList.concat: one list has uses (a mixed plan), the other not")
        if (self.chunks is None) != (other.chunks is None):
            raise ValueError(
                "BatchList.concat: one list has chunks (a chunked plan), the other not"
            )
        if (self.variants is None) != (other.variants is None):
            raise ValueError("BatchList.concat: one list has variants, the other not")
        uses = None if self.uses is None else np.concatenate([self.uses, other.uses])
        chunks = None if self.chunks is None else np.concatenate([self.chunks, other.chunks])
        variants = (
            None if self.variants is None else np.concatenate([self.variants, other.variants])
        )
        return BatchList(
            np.concatenate([self.seqs, other.seqs]),
            bounds,
            np.concatenate([self.real, other.real]),
            uses,
            chunks,
            variants,
        )

    def with_real(self, real: np.ndarray) -> BatchList:
        """The same slots with another ``real`` mask (e.g. all False for filler copies)."""
        return BatchList(self.seqs, self.bounds, real, self.uses, self.chunks, self.variants)

    def real_count(self, n_batches: int | None = None) -> int:
        """Real (not repeat) sequences in the first ``n_batches`` batches (all by default)."""
        end = self.bounds[-1] if n_batches is None else self.bounds[min(n_batches, len(self))]
        return int(np.count_nonzero(self.real[:end]))
