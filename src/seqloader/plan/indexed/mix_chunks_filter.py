"""``epoch_wise_filter`` with a chunked mix under ``laplace``/``buckets:N`` (``ChunkedBucketMix``).

The meaning is the unchunked mix's (``mix_filter``): sub-epoch ``e``'s ``(sequence, corpus
epoch)`` slots are filtered once, as one set, for every rank and world size; each
``max_mean_len`` of the epoch keeps, in turn, the shortest slots by (length, sequence, corpus
epoch) whose mean stays about ``M`` (RETURNN's binary search), and every chunk of a kept slot is
planned. A filtered slot is lost for the sub-epoch (the streams move on as without the filter)
and counted in ``filtered(epoch)``.

Why not by the chunk buckets: a slot's chunks fall into several buckets by their windows, so the
kept set is no count per chunk bucket. It is one per length class (the mix's buckets here: one
per admitted length, or per (length, chunk count) with the length key unchunked): every class
below one length is kept whole, of that length the lowest (sequence, corpus epoch) over its
classes, nothing above; the kept classes' counts give the chunks per chunk bucket as unfiltered
(``ChunkBuckets.kept``). The search runs on the slots per length (``rule_of``: the unchunked
mixes' rule); only the keys of the one length cut inside are looked at.

Cost: the sub-epoch's slots are listed grouped by class (``mix_cuts.part_slots``, as the chunked
mix lists them to plan anyway): O(slots) time and memory per rank in a filtered sub-epoch, the
keys of the length cut inside partitioned; other epochs are planned as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.plan.indexed.keep_rule import rule_of


class ClassSlots:
    """A sub-epoch's slots grouped by length class: ``seqs``, ``uses`` class after class,
    ``starts`` int64 ``[G + 1]`` where each class's begin; a ``Draw`` of the classes' lists
    (bucket: class, position: its place in the class's list)."""

    def __init__(self, seqs: np.ndarray, uses: np.ndarray, starts: np.ndarray) -> None:
        self.seqs, self.uses, self.starts = seqs, uses, starts

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.starts)

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = self.starts[np.asarray(bucket, dtype=np.int64)] + pos
        return self.seqs[at], self.uses[at]

    def take(self, keep: np.ndarray) -> ClassSlots:
        """The slots ``keep`` (bool) marks, in their classes' order."""
        return ClassSlots(self.seqs[keep], self.uses[keep], _kept_before(keep, self.starts))


def _kept_before(keep: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Marked slots before each class start -> int64 ``[G + 1]``."""
    before = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=before[1:])
    return before[starts]


def kept_slots(
    listed: ClassSlots, value: np.ndarray, means: Sequence[float]
) -> tuple[np.ndarray, list[int]]:
    """``means`` (an epoch's ``max_mean_len`` values, one after the other) on the sub-epoch's
    slots ``listed`` by class (``value``: int64 ``[G]`` each class's length, ascending) -> (bool
    ``[slots]``: the kept ones, slots each filter dropped). The classes of one length are
    counted as one, and the kept set is the unchunked mixes' rule (``rule_of``): every length
    below one, of that length the lowest (sequence, corpus epoch) keys.

    >>> listed = ClassSlots(np.array([5, 1, 3, 2, 0]), np.array([0, 0, 1, 0, 0]),
    ...                     np.array([0, 1, 3, 5]))  # classes of lengths 1, 4 and 4
    >>> keep, dropped = kept_slots(listed, np.array([1, 4, 4]), [3])
    >>> keep.tolist(), dropped  # 1, 4, 4 kept: length 4's lowest sequences over both classes
    ([True, True, False, False, True], [2])
    """
    value = np.asarray(value, dtype=np.int64)
    values, inverse = np.unique(value, return_inverse=True)  # the distinct lengths
    counts = np.bincount(inverse, weights=listed.counts, minlength=len(values)).astype(np.int64)
    seqs = np.asarray(listed.seqs, dtype=np.int64)
    lens = np.repeat(value, listed.counts)  # each slot's length

    def key_at(g: int, inside: int) -> tuple[int, int]:
        tie = np.flatnonzero(lens == values[g])
        uses = np.asarray(listed.uses[tie], dtype=np.int64)
        span = int(uses.max(initial=0)) + 1
        keys = seqs[tie] * span + uses
        return int(np.partition(keys, inside - 1)[inside - 1]), span

    rule, dropped, _ = rule_of(values, counts, means, key_at)
    return rule.keeps(seqs, listed.uses, lens), dropped
