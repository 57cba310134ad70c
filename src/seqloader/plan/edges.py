"""Length buckets of about equal total cost, shared by both planners (``ordering="buckets:N"``
and indexed planning cut the admitted lengths at the same edges).
"""

from __future__ import annotations

import numpy as np

from seqloader.plan.ordering import argsort_by, unique_sorted

#: Within a bucket, sequences are sorted by length within windows of about this many batches.
WINDOW_BATCHES = 8


def bucket_edges(lengths: np.ndarray, costs: np.ndarray, n_buckets: int) -> np.ndarray:
    """Length edges of ``n_buckets`` buckets holding about equal total cost -> int64 ``[<= N-1]``.

    Bucket of length ``L`` = number of edges ``<= L`` (``bucket_of``). Equal lengths always share
    a bucket, so few distinct lengths give fewer (never empty) buckets.
    """
    if len(lengths) == 0 or n_buckets <= 1:
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo >= 0 and hi < max(HISTOGRAM_MAX, len(lengths)):
        values, cum = _length_histogram(lengths, costs, hi)  # [G] per distinct length
    else:
        by_len = argsort_by(lengths)
        values, cum = lengths[by_len], np.cumsum(costs[by_len])  # [n] per sequence
    total = int(cum[-1])
    targets = (total * np.arange(1, n_buckets, dtype=np.int64)) // n_buckets  # [N-1]
    idx = np.searchsorted(cum, targets, side="right")  # first length past each target
    edges = unique_sorted(values[np.minimum(idx, len(cum) - 1)]).astype(np.int64)
    return edges[edges > values[0]]  # a bucket below the shortest length would stay empty


#: ``bucket_edges`` works on a histogram of the lengths when the longest is below this (or below
#: the sequence count): linear time and a few MB instead of sorting every length.
HISTOGRAM_MAX = 1 << 24
_CHUNK = 1 << 22


def _length_histogram(
    lengths: np.ndarray, costs: np.ndarray, longest: int
) -> tuple[np.ndarray, np.ndarray]:
    """(distinct lengths ascending int64 ``[G]``, cumulative cost through each int64 ``[G]``): the
    sorted lengths' cumulative costs sampled at the end of each run of one length, which is all
    that ``bucket_edges`` reads of them (a cost is a function of the length). In chunks, so no
    copy of the lengths is made."""
    counts = np.zeros(longest + 1, dtype=np.int64)
    cost_of = np.zeros(longest + 1, dtype=np.int64)
    for a in range(0, len(lengths), _CHUNK):
        part = lengths[a : a + _CHUNK]
        counts += np.bincount(part, minlength=longest + 1)
        cost_of[part] = costs[a : a + _CHUNK]
    values = np.flatnonzero(counts)
    return values.astype(np.int64), np.cumsum(counts[values] * cost_of[values])


def bucket_of(lengths: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bucket index of each length -> int64 ``[n]``."""
    return np.searchsorted(edges, lengths, side="right").astype(np.int64)
