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
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.ordering import unique_sorted


class FilteredDraw:
    """A ``Draw`` whose buckets ``explicit`` holds are lists of their own (the members an epoch
    filter kept, in the unfiltered list's order); other buckets draw from ``base``. ``uses``: a
    mix's corpus epoch of each listed member (None: unmixed, no corpus epochs)."""

    def __init__(
        self,
        base: Draw,
        explicit: dict[int, np.ndarray],
        uses: dict[int, np.ndarray] | None = None,
    ) -> None:
        self.base, self.explicit, self.uses = base, explicit, uses

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        out = np.empty(len(pos), dtype=np.int64)
        used = None if self.uses is None else np.empty(len(pos), dtype=USES_DTYPE)
        listed = np.isin(bucket, np.fromiter(self.explicit, dtype=np.int64))
        if (~listed).any():
            seqs, k = self.base.slots(bucket[~listed], pos[~listed])
            out[~listed] = seqs
            if used is not None and k is not None:
                used[~listed] = k
        for b, members in self.explicit.items():
            at = bucket == b
            out[at] = members[pos[at]]
            if used is not None and self.uses is not None:
                used[at] = self.uses[b][pos[at]]
        return out, used


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


class _Lists:
    """A sub-epoch's bucket lists as ``epoch_filtered`` cuts them: ``explicit`` the buckets cut
    inside (their kept members, ``uses`` their corpus epochs where the draw is a mix's)."""

    def __init__(self, base: Draw, counts: np.ndarray) -> None:
        self.base, self.counts = base, counts
        self.explicit: dict[int, np.ndarray] = {}
        self.uses: dict[int, np.ndarray] = {}
        self.mixed = False

    def listed(self, b: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Bucket ``b``'s list: (members, corpus epochs or None)."""
        if b in self.explicit:
            return self.explicit[b], self.uses.get(b)
        pos = np.arange(int(self.counts[b]), dtype=np.int64)
        seqs, uses = self.base.slots(np.full(len(pos), b, dtype=np.int64), pos)
        self.mixed = self.mixed or uses is not None
        return seqs, uses

    def keep_shortest(self, b: int, j: int, lengths: np.ndarray) -> int:
        """Keep the ``j`` shortest of bucket ``b`` by (length, index[, corpus epoch]) and
        nothing above it -> their length sum."""
        members, uses = self.listed(b) if j else (np.zeros(0, np.int64), np.zeros(0, USES_DTYPE))
        lens = np.asarray(lengths[members], dtype=np.int64)
        keep = np.zeros(len(members), dtype=bool)
        keys = (members, lens) if uses is None else (uses, members, lens)
        keep[np.lexsort(keys)[:j]] = True
        self.explicit[b] = members[keep]
        if uses is not None:
            self.uses[b] = uses[keep]
        self.counts[b] = j
        self.counts[b + 1 :] = 0
        for later in [k for k in self.explicit if k > b]:
            del self.explicit[later]
            self.uses.pop(later, None)
        return int(lens[keep].sum())

    def draw(self) -> Draw:
        """The draw of the kept lists."""
        if not self.explicit:
            return self.base
        return FilteredDraw(self.base, self.explicit, self.uses if self.mixed else None)


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
    (``partition_epoch=1``: the whole buckets'), else drawn here. A mix's draw (corpus epochs
    given): its slots, the shortest kept by (length, sequence, corpus epoch), the kept slots'
    corpus epochs carried by the draw.

    >>> class Mixed:  # bucket 0: slots (0, 0), (1, 0), (0, 1); bucket 1: (2, 0)
    ...     def slots(self, bucket, pos):
    ...         return np.array([[0, 1, 0], [2, 2, 2]])[bucket, pos], (pos == 2) * (1 - bucket)
    >>> counts, draw, dropped = epoch_filtered(np.array([3, 1]), Mixed(), np.array([2, 3, 9]), [2])
    >>> counts.tolist(), dropped, [a.tolist() for a in draw.slots(np.zeros(2, int), np.arange(2))]
    ([2, 0], [2], [[0, 0], [0, 1]])
    """
    lists = _Lists(base, np.asarray(counts, dtype=np.int64).copy())
    counts = lists.counts
    if sums is None:
        listed = (lists.listed(b)[0] for b in range(len(counts)))
        sums = np.array([int(np.asarray(lengths[m], np.int64).sum()) for m in listed], np.int64)
    sums = np.asarray(sums, dtype=np.int64).copy()
    dropped = []
    for mean in means:

        def sorted_lengths(b: int) -> np.ndarray:
            return np.sort(np.asarray(lengths[lists.listed(b)[0]], dtype=np.int64))

        low = mean_len_cut(counts, sums, sorted_lengths, mean)
        total = int(counts.sum())
        dropped.append(total - low)
        if low < total:
            b, j = cut_class(counts, low)  # the bucket cut inside, its shortest j kept
            sums[b] = lists.keep_shortest(b, j, lengths)
            sums[b + 1 :] = 0
    return counts, lists.draw(), dropped
