"""``BucketIndex``: the admitted sequences grouped by length bucket, the one corpus table indexed
planning (``seqloader.plan.indexed``) plans from. It lives in the shared core because it crosses
``plan/``'s face: a node builds it once, keeps it as memory-mapped columns
(``seqloader.loading.bucket_store``) and hands it to every rank's planner in ``PlanInputs.index``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BucketIndex:
    """The admitted sequences grouped by length bucket.

    - ``members``: uint32 (int64 past 2**32 sequences) ``[m]``: bucket 0's sequences ascending,
      then bucket 1's, ...
    - ``starts``: int64 ``[N + 1]``: bucket b is ``members[starts[b]:starts[b+1]]``.
    - ``longest``: int64 ``[N]``: the longest admitted length in each bucket (0 when empty).
    - ``edges``: int64 ``[N - 1]``: the bucket edges it was grouped by (bucket of length L =
      number of edges <= L).
    - ``file_counts``: int32 (int64 past 2**31) ``[F, N]`` admitted sequences per (file,
      bucket), or None.
    - ``file_frames``: int64 ``[F]`` admitted frames per file, or None.
    - ``cuts``/``cut_starts``: the fixed orderings' greedy batch bounds per sub-epoch part and
      where each part's start (``seqloader.plan.indexed.fixed.fixed_cuts``), or None.
    - ``cut_firsts``: chunked fixed orderings: each batch's first chunk as a code, laid out as
      ``cuts`` (``seqloader.plan.indexed.fixed_chunks.chunked_cuts``), or None.
    """

    members: np.ndarray
    starts: np.ndarray
    longest: np.ndarray
    edges: np.ndarray
    file_counts: np.ndarray | None = None
    file_frames: np.ndarray | None = None
    cuts: np.ndarray | None = None
    cut_starts: np.ndarray | None = None
    cut_firsts: np.ndarray | None = None

    @property
    def counts(self) -> np.ndarray:
        """Admitted sequences per bucket -> int64 ``[N]``."""
        return np.diff(self.starts)

    def bucket(self, b: int) -> np.ndarray:
        return self.members[self.starts[b] : self.starts[b + 1]]

    def columns(self) -> dict[str, np.ndarray]:
        """The arrays by name, for a column store (``from_columns`` reads them back)."""
        out = {"bucket.members": self.members, "bucket.starts": self.starts}
        out["bucket.longest"] = self.longest
        out["bucket.edges"] = self.edges
        if self.file_counts is not None and self.file_frames is not None:
            out["bucket.file_counts"] = self.file_counts
            out["bucket.file_frames"] = self.file_frames
        if self.cuts is not None and self.cut_starts is not None:
            out["bucket.cuts"] = self.cuts
            out["bucket.cut_starts"] = self.cut_starts
        if self.cut_firsts is not None:
            out["bucket.cut_firsts"] = self.cut_firsts
        return out

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> BucketIndex:
        """The index from ``columns()``'s arrays (e.g. memory-mapped views: not copied)."""
        return cls(
            columns["bucket.members"],
            columns["bucket.starts"],
            columns["bucket.longest"],
            columns["bucket.edges"],
            columns.get("bucket.file_counts"),
            columns.get("bucket.file_frames"),
            columns.get("bucket.cuts"),
            columns.get("bucket.cut_starts"),
            columns.get("bucket.cut_firsts"),
        )
