"""The kept set of ``epoch_wise_filter`` on a mix's sub-epoch, as a rule: every slot shorter
than a length, and of that length the lowest (sequence, corpus epoch) keys (RETURNN's binary
search on the slots counted per distinct length), found from counts and one length's keys.
Shared by ``mix_random_filter``, ``mix_sorted_filter`` and ``mix_chunks_filter``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.plan.admission import counted_cut, cut_class


@dataclass(frozen=True)
class KeepRule:
    """Which slots a filtered sub-epoch keeps: length below ``length``, or equal to it with
    ``seq * span + use <= key`` (``key`` -1: none of that length); ``length`` None: every slot.

    >>> rule = KeepRule(5, 7, 2)  # below 5, and of 5 the keys up to 7 (sequence 3, epoch 1)
    >>> rule.keeps(np.array([1, 3, 4, 2]), np.array([0, 1, 0, 0]), np.array([4, 5, 5, 9])).tolist()
    [True, True, False, False]
    """

    length: int | None
    key: int = -1
    span: int = 1

    def keeps(self, seqs: np.ndarray, uses: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Bool mask of the slots (``seqs``, ``uses``; ``lens``: their lengths) kept."""
        if self.length is None:
            return np.ones(len(seqs), dtype=bool)
        keep = lens < self.length
        tie = np.flatnonzero(lens == self.length)
        if len(tie):
            keys = seqs[tie] * self.span + uses[tie].astype(np.int64)
            keep[tie[keys <= self.key]] = True
        return keep


def counted_filter(count: np.ndarray, values: np.ndarray, mean: float) -> tuple[int, int | None]:
    """One ``max_mean_len`` filter on items counted per distinct length (``values`` ascending,
    ``count`` int64, cut in place: the class the cut falls in keeps its share, those above it
    none) -> (items it dropped, the class it cut inside or None).

    >>> count = np.array([3, 3, 2]); counted_filter(count, np.array([2, 9, 12]), 3.0), count.tolist()
    ((4, 1), [3, 1, 0])
    """
    low = counted_cut(count, values, mean)
    total = int(count.sum())
    if low >= total:
        return 0, None
    g, inside = cut_class(count, low)
    count[g], count[g + 1 :] = inside, 0
    return total - low, g


def rule_of(
    values: np.ndarray,
    counts: np.ndarray,
    means: Sequence[float],
    key_at: Callable[[int, int], tuple[int, int]],
) -> tuple[KeepRule, list[int], int | None]:
    """The ``max_mean_len`` filters ``means`` (each on what the ones before kept, as
    ``epoch_filtered``) on slots counted per distinct length (``values`` ascending, ``counts``
    int64) -> (the kept set's rule, slots each filter dropped, the class cut inside or None).
    ``key_at(g, inside)``: the ``inside``-th smallest (sequence, corpus epoch) key of class
    ``g``'s slots and the key's span, asked once, only where a filter cuts inside a class.

    >>> rule_of(np.array([2, 9]), np.array([3, 3]), [3.0], lambda g, i: (10 * i, 1))  # 1 of 9
    (KeepRule(length=9, key=10, span=1), [2], 1)
    """
    count = np.asarray(counts, dtype=np.int64).copy()
    dropped, cut = [], None
    for mean in means:
        out, g = counted_filter(count, values, mean)
        dropped.append(out)
        cut = cut if g is None else g
    if cut is None:
        return KeepRule(None), dropped, None
    inside = int(count[cut])
    key, span = key_at(cut, inside) if inside else (-1, 1)
    return KeepRule(int(values[cut]), key, span), dropped, cut
