"""``epoch_wise_filter`` under indexed planning: RETURNN's ``max_mean_len`` selection on counts.

The filter keeps a sub-epoch's shortest sequences (sorted by (length, index)) whose mean length
stays about ``M``, by RETURNN's binary search (``seqloader.plan.admission.mean_len_selection``).
Length buckets are length ranges and equal lengths share a bucket, so the (length, index) order
is bucket-major: the kept set is every bucket below one bucket ``b*``, the shortest ``j`` of
``b*``'s sub-epoch list, and nothing above. The search needs the mean of the ``num`` shortest
for the ``num`` it probes: the buckets' length sums below (``sums``) and the sorted lengths of
the one bucket ``num`` falls in. Only ``b*``'s kept members are listed (``FilteredDraw``); every
other position is the unfiltered draw's, so a plan's batches still come from counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.plan.admission import cut_class, mean_len_cut
from seqloader.plan.indexed.bijection import Bijection
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.ordering import unique_sorted


class FilteredDraw:
    """A ``Draw`` whose buckets ``explicit`` holds are lists of their own (the members an epoch
    filter kept, in the unfiltered list's order); other buckets draw from ``base``."""

    def __init__(self, base: Draw, explicit: dict[int, np.ndarray]) -> None:
        self.base, self.explicit = base, explicit

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, None]:
        out = np.empty(len(pos), dtype=np.int64)
        listed = np.isin(bucket, np.fromiter(self.explicit, dtype=np.int64))
        if (~listed).any():
            out[~listed] = self.base.slots(bucket[~listed], pos[~listed])[0]
        for b, members in self.explicit.items():
            at = bucket == b
            out[at] = members[pos[at]]
        return out, None


class RankOrderDraw:
    """A ``Draw`` that lists each bucket's sub-epoch list (``counts[b]`` slots of ``base``) in an
    order keyed by ``words`` (a rank's own): ``random_seed_offset`` with ``epoch_wise_filter``
    and sub-epochs, where every rank's sub-epoch holds one shared (filtered) set, so the filter
    keeps the same counts on every rank (equal steps), and each rank orders it its own way.

    >>> class Listed:
    ...     def slots(self, bucket, pos):
    ...         return pos * 10 + bucket, None
    >>> draw = RankOrderDraw(Listed(), np.array([4]), (1, 2))
    >>> sorted(draw.slots(np.zeros(4, dtype=np.int64), np.arange(4))[0].tolist())
    [0, 10, 20, 30]
    """

    def __init__(self, base: Draw, counts: np.ndarray, words: tuple[int, ...]) -> None:
        self.base, self.counts, self.words = base, np.asarray(counts, dtype=np.int64), words
        self._bijections: dict[int, Bijection] = {}

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        at = np.empty(len(pos), dtype=np.int64)
        for b in unique_sorted(bucket).tolist():
            pi = self._bijections.get(b)
            if pi is None:
                pi = self._bijections[b] = Bijection(int(self.counts[b]), (*self.words, b))
            here = bucket == b
            at[here] = pi(pos[here]).astype(np.int64)
        return self.base.slots(bucket, at)


def selected(counts: np.ndarray, base: Draw, keep: np.ndarray) -> tuple[np.ndarray, Draw, int]:
    """An epoch selection (``keep``: bool ``[n]``, ``seqloader.plan.selections``) on a sub-epoch
    of ``counts`` per bucket drawn by ``base`` -> (kept counts ``[N]``, the draw of the kept
    lists, in the unfiltered lists' order, and how many it left out). Lists every bucket's
    sub-epoch list: O(sub-epoch) per rank, as RETURNN filters the sub-epoch's order.

    >>> class Listed:
    ...     def slots(self, bucket, pos):
    ...         return pos + 3 * bucket, None
    >>> counts, draw, out = selected(np.array([3, 2]), Listed(), np.arange(6) % 2 == 0)
    >>> counts.tolist(), draw.slots(np.array([0, 0, 1]), np.array([0, 1, 0]))[0].tolist(), out
    ([2, 1], [0, 2, 4], 2)
    """
    counts = np.asarray(counts, dtype=np.int64).copy()
    explicit: dict[int, np.ndarray] = {}
    left_out = 0
    for b in np.flatnonzero(counts).tolist():
        pos = np.arange(int(counts[b]), dtype=np.int64)
        members = base.slots(np.full(len(pos), b, dtype=np.int64), pos)[0]
        kept = members[keep[members]]
        left_out += len(members) - len(kept)
        explicit[b], counts[b] = kept, len(kept)
    return counts, FilteredDraw(base, explicit), left_out


def epoch_filtered(
    counts: np.ndarray,
    base: Draw,
    lengths: np.ndarray,
    means: Sequence[float],
    sums: np.ndarray | None = None,
) -> tuple[np.ndarray, Draw, list[int]]:
    """``means`` (the epoch's ``max_mean_len`` values, applied one after the other) on a
    sub-epoch of ``counts`` per bucket drawn by ``base`` -> (kept counts ``[N]``, the draw of the
    kept lists, sequences each filter dropped). ``sums``: the buckets' length sums when known
    (``partition_epoch=1``: the whole buckets'), else drawn here."""
    counts = np.asarray(counts, dtype=np.int64).copy()
    explicit: dict[int, np.ndarray] = {}

    def listed(b: int) -> np.ndarray:
        if b in explicit:
            return explicit[b]
        pos = np.arange(int(counts[b]), dtype=np.int64)
        return base.slots(np.full(len(pos), b, dtype=np.int64), pos)[0]

    if sums is None:
        sums = np.array(
            [int(np.asarray(lengths[listed(b)], dtype=np.int64).sum()) for b in range(len(counts))],
            dtype=np.int64,
        )
    sums = np.asarray(sums, dtype=np.int64).copy()
    dropped = []
    for mean in means:

        def sorted_lengths(b: int) -> np.ndarray:
            return np.sort(np.asarray(lengths[listed(b)], dtype=np.int64))

        low = mean_len_cut(counts, sums, sorted_lengths, mean)
        total = int(counts.sum())
        dropped.append(total - low)
        if low < total:
            b, j = cut_class(counts, low)  # the bucket cut inside, its shortest j kept
            members = listed(b) if j else np.zeros(0, dtype=np.int64)
            lens = np.asarray(lengths[members], dtype=np.int64)
            keep = np.zeros(len(members), dtype=bool)
            keep[np.lexsort((members, lens))[:j]] = True  # the j shortest by (length, index)
            explicit[b] = members[keep]
            counts[b] = j
            sums[b] = int(lens[keep].sum())
            counts[b + 1 :] = 0
            sums[b + 1 :] = 0
            for later in [k for k in explicit if k > b]:
                del explicit[later]
    draw: Draw = FilteredDraw(base, explicit) if explicit else base
    return counts, draw, dropped
