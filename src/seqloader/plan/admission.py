"""Admission options beyond the length filters: a fixed random subset of the corpus, and filters
that depend on the epoch (curriculum learning). Both are RETURNN's, with RETURNN's draws.

- ``fixed_random_subset=N`` (an int >= 1) or ``=f`` (a fraction in (0, 1): ``int(n * f)``
  sequences): the corpus is shuffled once with ``numpy.random.RandomState(fixed_random_subset_seed)``
  (RETURNN's OggZip/LibriSpeech default seed: 42) and the first N are kept, *in that shuffled
  order*, which becomes the stored order every ordering starts from (RETURNN re-indexes its data
  the same way). N larger than the corpus means all of it (shuffled). The others are filtered,
  counted under "not in fixed_random_subset". It does not depend on the epoch.
- ``epoch_wise_filter={(first, last): {"max_mean_len": M}, ...}`` (RETURNN's ``EpochWiseFilter``;
  ``first``/``last`` inclusive, ``None`` (or -1 for ``last``) = open): in the epochs of a range,
  the sub-epoch keeps the shortest sequences (by the ordering lengths) whose mean length stays
  about ``M`` (RETURNN's binary search, exactly), in the sub-epoch's order; ranges that overlap
  apply one after the other, in sorted order. Applied after the sub-epoch is cut, as RETURNN
  does; every epoch's count is in that epoch's report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

import numpy as np

#: canonical epoch_wise_filter: ((first, last or None), max_mean_len), sorted
EpochFilter = tuple[tuple[int, int | None, float], ...]


def subset_order(n: int, subset: int | float, seed: int) -> np.ndarray:
    """RETURNN's fixed random subset of ``n`` sequences -> int64 ``[N]`` in its shuffled order:
    ``RandomState(seed).shuffle`` of the corpus, the first N kept (a fraction f: N = int(n * f))."""
    count = int(n * subset) if isinstance(subset, float) else int(subset)
    order = np.arange(n, dtype=np.int64)
    np.random.RandomState(seed).shuffle(order)
    return order[: min(count, n)]


def mean_len_selection(order: np.ndarray, lengths: np.ndarray, max_mean_len: float) -> np.ndarray:
    """RETURNN's ``EpochWiseFilter.filter_epoch`` with ``max_mean_len``: of ``order`` (int64
    ``[m]``), the ``num`` shortest (sorted by (length, index)) where a binary search over
    ``mean(shortest num) - M`` stops, kept in ``order``'s order -> bool mask ``[m]``. From the
    counts of each distinct length (``mean_len_cut``), not a sort of the pairs: every length
    below the cut's is kept, and of the cut's length the lowest indices.

    >>> mean_len_selection(np.array([4, 0, 3, 1, 2]), np.array([9, 1, 9, 1, 9]), 3.0).tolist()
    [False, True, True, True, False]
    """
    order = np.asarray(order)
    return mean_len_keep(np.asarray(lengths, dtype=np.int64)[order], order, max_mean_len)


def mean_len_keep(lens: np.ndarray, keys: np.ndarray, max_mean_len: float) -> np.ndarray:
    """``mean_len_selection`` of items given by their lengths ``lens`` and tie-breaking ``keys``
    (distinct, int ``[m]``: an item's place in (length, key) order) -> bool mask ``[m]``: for
    items that are not indices into one lengths array (a mix's (sequence, corpus epoch) slots).

    >>> mean_len_keep(np.array([9, 9, 1, 1, 9]), np.array([4, 0, 3, 1, 2]), 3.0).tolist()
    [False, True, True, True, False]
    """
    m = len(lens)
    if m == 0:
        return np.zeros(0, dtype=bool)
    lens = np.asarray(lens, dtype=np.int64)
    values, counts = _length_counts(lens)
    low = counted_cut(counts, values, max_mean_len)
    if low >= m:
        return np.ones(m, dtype=bool)
    g, inside = cut_class(counts, low)  # the length the cut falls in, how many of it it keeps
    keep = lens < values[g]
    ties = np.flatnonzero(lens == values[g])  # [t] of those, the lowest indices are kept
    keep[ties[np.argsort(np.asarray(keys)[ties], kind="stable")[:inside]]] = True
    return keep


def counted_cut(counts: np.ndarray, values: np.ndarray, max_mean_len: float) -> int:
    """``mean_len_cut`` on items counted per distinct length (``values`` ascending, ``counts``
    int64): how many of the shortest ``max_mean_len`` keeps, a class's sorted lengths its one
    value repeated (asked only for the class the cut falls in).

    >>> counted_cut(np.array([3, 3]), np.array([2, 9]), 3.0)  # all the 2s and one 9
    4
    """
    sums = counts * values
    return mean_len_cut(counts, sums, lambda g: np.full(counts[g], values[g]), max_mean_len)


def cut_class(counts: np.ndarray, low: int) -> tuple[int, int]:
    """Where a cut keeping the ``low`` shortest falls (``counts``: sequences per length class,
    ascending: a distinct length or a bucket; ``low`` < their sum) -> (the class it falls in,
    how many of that class it keeps): every class before it is kept whole, none after it.

    >>> cut_class(np.array([2, 0, 3, 1]), 4)
    (2, 2)
    """
    before = np.concatenate([[0], np.cumsum(counts)])  # sequences below each class
    g = int(np.searchsorted(before, low, side="right")) - 1
    return g, low - int(before[g])


def _length_counts(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct lengths ascending and how many have each -> int64 ``[G]`` twice: a count
    per length when their range is small (frames of a corpus), else ``np.unique``."""
    lo, hi = int(lens.min()), int(lens.max())
    if hi - lo > 4 * len(lens) + (1 << 16):
        values, counts = np.unique(lens, return_counts=True)
        return values.astype(np.int64), counts.astype(np.int64)
    per = np.bincount(lens - lo, minlength=hi - lo + 1)
    at = np.flatnonzero(per)
    return at.astype(np.int64) + lo, per[at].astype(np.int64)


def mean_len_cut(
    counts: np.ndarray, sums: np.ndarray, sorted_lengths: Callable[[int], np.ndarray], mean: float
) -> int:
    """How many of the shortest sequences RETURNN's binary search keeps for ``max_mean_len=mean``
    (``mean_len_selection``'s ``low``), from per-bucket ``counts`` and length ``sums`` (int64
    ``[N]``) and ``sorted_lengths(b)``: bucket b's lengths ascending (asked for the few buckets
    the search probes).

    RETURNN's search stops at the first ``num`` whose mean is over ``mean`` when the one below
    is within it, and keeps that many (here the means of 1..4 are 1, 1.5, 4.3, 10.75: it keeps
    4, as global planning's ``mean_len_selection`` does):

    >>> lens = {0: np.array([1, 2]), 1: np.array([10, 30])}
    >>> mean_len_cut(np.array([2, 2]), np.array([3, 40]), lens.__getitem__, 5.0)
    4
    """
    m = int(counts.sum())
    if m == 0:
        return 0
    before = np.concatenate([[0], np.cumsum(counts)])  # sequences below each bucket
    frames = np.concatenate([[0], np.cumsum(sums)])
    kept: dict[int, np.ndarray] = {}

    def mean_of(num: int) -> float:
        num = min(num, m)
        b = int(np.searchsorted(before, num, side="left")) - 1  # bucket holding the num-th
        if b not in kept:
            kept[b] = np.cumsum(sorted_lengths(b), dtype=np.int64)
        inside = num - int(before[b])
        total = int(frames[b]) + int(kept[b][inside - 1])
        return float(np.float64(total) / np.float64(num))  # numpy's cumsum / arange

    return min(mean_len_search(mean_of, m, mean), m)


def mean_len_search(mean_of: Callable[[int], float], m: int, max_mean_len: float) -> int:
    """RETURNN's ``binary_search_any(cmp=mean(lens[:num]) - M)`` over ``num`` in ``[1, m + 1]``
    (``mean_of(num)``: the mean of the ``num`` shortest) -> the ``num`` it stops at, exactly
    (on a tie it stops where it probes first)."""
    low, high = 1, m + 1
    while low < high:
        mid = (low + high) // 2
        r = mean_of(mid) - max_mean_len
        if r < 0:
            low = mid + 1
        elif r > 0:
            high = mid
        else:
            return mid
    return low


def epoch_filters(spec: EpochFilter | None, epoch: int) -> list[float]:
    """The ``max_mean_len`` values that apply in ``epoch`` (1-based), in RETURNN's order."""
    if not spec:
        return []
    return [m for first, last, m in spec if first <= epoch and (last is None or epoch <= last)]


def filter_reason(mean: float, epoch: int) -> str:
    """The report's reason for what ``max_mean_len=mean`` leaves out of ``epoch``."""
    return f"epoch_wise_filter max_mean_len={mean:g} (epoch {epoch})"


def filter_reasons(means: Sequence[float], epoch: int, dropped: Sequence[int]) -> dict[str, int]:
    """The report's counts of ``epoch``'s filters ``means`` (``dropped``: what each left out,
    applied in turn), by reason; a filter that left nothing out is not named.

    >>> filter_reasons([5, 3], 2, [0, 4])
    {'epoch_wise_filter max_mean_len=3 (epoch 2)': 4}
    """
    return {filter_reason(m, epoch): d for m, d in zip(means, dropped, strict=True) if d}


def counted_filters(
    part: np.ndarray, filters: Iterable[tuple[str, Callable[[np.ndarray], np.ndarray]]]
) -> tuple[np.ndarray, dict[str, int]]:
    """Filters in turn on a sub-epoch's order ``part``, each on what the ones before kept:
    ``(reason, keep)`` with ``keep(part)`` a bool mask -> (kept, in order; dropped per reason:
    nothing is dropped without a count in the epoch's report).

    >>> counted_filters(np.array([4, 5, 6]), [("odd", lambda p: p % 2 == 0)])
    (array([4, 6]), {'odd': 1})
    """
    counts: dict[str, int] = {}
    for reason, keep_of in filters:
        keep = keep_of(part)
        dropped = len(part) - int(np.count_nonzero(keep))
        if dropped:
            counts[reason] = counts.get(reason, 0) + dropped
        part = part[keep]
    return part, counts


def mean_filtered(
    spec: EpochFilter | None, epoch: int, part: np.ndarray, by: np.ndarray
) -> tuple[np.ndarray, dict[str, int]]:
    """``epoch_wise_filter``'s ``max_mean_len`` filters of ``epoch`` in turn on a sub-epoch's
    order ``part`` (``mean_len_selection`` by the lengths ``by``: the length key or a source's
    own sort key) -> (kept, in order; dropped per report reason). Both plannings' filter.

    >>> mean_filtered(((1, 1, 3.0),), 1, np.arange(6), np.array([1, 20, 2, 30, 3, 2]))
    (array([0, 1, 2, 4, 5]), {'epoch_wise_filter max_mean_len=3 (epoch 1)': 1})
    """
    means = epoch_filters(spec, epoch)
    return counted_filters(
        part,
        ((filter_reason(m, epoch), partial(_mean_keep, by, m)) for m in means),
    )


def _mean_keep(by: np.ndarray, max_mean: float, part: np.ndarray) -> np.ndarray:
    return mean_len_selection(part, by, max_mean)
