"""A keyed random interleaving of a rank's batches whose every prefix is counted without listing it.

``distribution="files"`` with ``buckets:N`` puts a rank's batches in a random order; the ``t``-th
occurrence of a unit (a run of one batch size) holds that unit's ``t``-th batch, so the order is
the sequence of units along the positions: a random interleaving of ``nb_u`` copies of each unit
``u``. An elastic replay needs, for every old rank, how many batches of each unit its first steps
hold; a shuffle (or a bijection over positions) answers only by listing those positions, O(steps)
per rank.

Here every batch gets a uniform key in ``[0, 1)`` and the order is by key. The keys are never
drawn one by one: they are refined over dyadic intervals. The ``c`` keys of unit ``u`` in an
interval (level ``l``, index ``i``) fall into its left half as ``Binomial(c, 1/2)``, the count of
ones among ``c`` keyed random bits (``halves``: a 64-bit mix of the rank's key, the unit, the
interval and the word). Since the bits are independent fair coins, the keys are i.i.d. uniform, so
the interleaving is uniformly random, as a shuffle's. Any interval's count per unit follows from
its parent's alone, so:

- **a rank's order** (``interleave``) splits every interval holding two or more keys until each
  holds one (O(batches) splits, level by level, vectorised);
- **a prefix** (``seqloader.plan.indexed.replay.buckets_consumed``) descends from ``[0, 1)`` to
  the interval where the prefix ends, one split of each unit per level: O(units x levels) per
  rank, however long the prefix.

Intervals of at most ``SMALL`` keys, and those at level ``MAX_LEVEL`` (keys that close together: a
chance of about ``batches**2 / 2**57``), are not split: their batches, listed unit after unit, are
put in a keyed random order (``in_node_keys``), in both.
"""

from __future__ import annotations

import numpy as np

from seqloader.plan.variants import splitmix64

#: the deepest interval level (interval indices stay below 2**56, so (index, level) packs in 62 bits)
MAX_LEVEL = 56
#: an interval with at most this many keys is not split further: its batches are put in a keyed
#: random order (``in_node_keys``), which is what splitting on would give in distribution (the
#: keys in an interval are i.i.d. uniform on it), for fewer levels to walk
SMALL = 16
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_LISTED = np.uint64(1 << 63)  # marks the in-interval keys' words apart from the halves'


def _hash(key: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A keyed 64-bit hash of three uint64 words (uint64 arrays, one per entry)."""
    h = splitmix64(key + a * _GOLD)
    h += b * _GOLD
    h = splitmix64(h)
    h += c * _GOLD
    return splitmix64(h)


def interval_word(node: np.ndarray, level: int | np.ndarray) -> np.ndarray:
    """An interval's (index, level) as one word -> uint64."""
    return (np.asarray(node, dtype=np.uint64) << np.uint64(6)) | np.asarray(level, np.uint64)


def interval_mix(node: np.ndarray, level: int | np.ndarray) -> np.ndarray:
    """What ``halves`` adds to a unit's base for interval (``node``, ``level``) -> uint64: one
    word per interval, added to each of its units' bases by a caller that draws many at once.

    >>> int(interval_mix(np.array([0], np.uint64), 0)[0])  # the whole range [0, 1)
    0
    """
    return interval_word(node, level) * _GOLD


def unit_base(key: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """The first hash of each (rank key, unit) entry, which every split of the unit's keys
    starts from (``halves``) -> uint64."""
    return splitmix64(np.asarray(key, dtype=np.uint64) + np.asarray(unit).astype(np.uint64) * _GOLD)


def halves(base: np.ndarray, where: np.ndarray, count: np.ndarray) -> np.ndarray:
    """How many of ``count`` keys (each ``>= 1``) of a unit (``base``: ``unit_base`` of its rank
    and unit) in interval ``where`` (``interval_word``) fall into its left half -> int64, one per
    entry: the ones among ``count`` keyed random bits, 64 a word (the last word of a unit its top bits).

    >>> base, where = unit_base(np.array([7, 7], np.uint64), np.array([0, 1])), np.zeros(2, np.uint64)
    >>> left = halves(base, where, np.array([100, 3]))
    >>> bool(left[0] <= 100 and left[1] <= 3)
    True
    """
    return keyed_ones(base + where * _GOLD, count)


def keyed_ones(h: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``halves`` from ``h = base + interval_mix(...)`` (uint64, overwritten), for callers that
    add a per-interval word to many units at once -> int64. A count of at most 64 takes one
    word, its top bits; only the larger ones take the several-word path (the same bits).

    >>> base = unit_base(np.array([7, 7], np.uint64), np.array([0, 1]))
    >>> node, count = np.array([5, 5], np.uint64), np.array([100, 3])
    >>> got = keyed_ones(base + interval_mix(node, 3), count)
    >>> got.tolist() == halves(base, interval_word(node, 3), count).tolist()
    True
    """
    count = np.asarray(count, dtype=np.int64)
    h = splitmix64(h)
    wide = np.flatnonzero(count > 64) if len(count) else count
    if len(wide):
        out = np.empty(len(count), dtype=np.int64)
        out[wide] = _ones_of_words(h[wide], count[wide])
        one = np.flatnonzero(count <= 64)
        out[one] = _ones_of_word(h[one], count[one])
        return out
    return _ones_of_word(h, count)


def _ones_of_word(h: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Ones among the top ``count`` (1..64) bits of the next hash of ``h`` -> int64."""
    h = splitmix64(h)
    h >>= np.subtract(64, count, dtype=np.uint64, casting="unsafe")  # count <= 64: no wrap
    return np.bitwise_count(h).astype(np.int64)


def _ones_of_words(h: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Ones among ``count`` bits of the hashes of ``h`` and a word number, 64 a word (the last
    word its top bits) -> int64."""
    words = (count + 63) >> 6
    entry = np.repeat(np.arange(len(count)), words)
    starts = np.cumsum(words) - words
    w = np.arange(len(entry), dtype=np.int64) - starts[entry]
    hw = h[entry] + w.astype(np.uint64) * _GOLD
    hw = splitmix64(hw)
    hw >>= (64 - np.minimum(count[entry] - (w << 6), 64)).astype(np.uint64)  # the last: fewer
    return np.add.reduceat(np.bitwise_count(hw).astype(np.int64), starts)


def in_node_keys(key: np.ndarray, where: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The sort keys of the batches of a small interval (``where``: ``interval_word``), listed
    unit after unit (``j``: the place in that listing) -> uint64: the interval's order is by
    (key, j), a keyed random order."""
    return _hash(key, np.asarray(j).astype(np.uint64) | _LISTED, where, np.zeros(len(j), np.uint64))


def split_sorted(
    node: np.ndarray, unit: np.ndarray, count: np.ndarray, left: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The children of intervals ``node`` (entries sorted by interval, units ascending within)
    whose left halves hold ``left`` of ``count`` keys -> (child interval, unit, count), sorted
    the same way, without empty entries."""
    n = len(node)
    first = np.ones(n, dtype=bool)
    first[1:] = node[1:] != node[:-1]
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, n))
    own = np.repeat(starts, sizes)  # each entry's interval's first entry
    at = np.arange(n) + own  # left child entries: 2 * start + i; right ones after them
    out_node = np.empty(2 * n, dtype=np.uint64)
    out_unit = np.empty(2 * n, dtype=np.int64)
    out_count = np.empty(2 * n, dtype=np.int64)
    right = at + np.repeat(sizes, sizes)
    out_node[at], out_node[right] = node << np.uint64(1), (node << np.uint64(1)) | np.uint64(1)
    out_unit[at], out_unit[right] = unit, unit
    out_count[at], out_count[right] = left, count - left
    live = out_count > 0
    return out_node[live], out_unit[live], out_count[live]


def interleave(nb: np.ndarray, key: int) -> np.ndarray:
    """The rank's order: the unit (an index into ``nb``, batches per unit) at every position ->
    int64 ``[nb.sum()]``, each unit ``nb[u]`` times.

    >>> order = interleave(np.array([3, 0, 2]), 12345)
    >>> sorted(order.tolist()), order.tolist() == interleave(np.array([3, 0, 2]), 12345).tolist()
    ([0, 0, 0, 2, 2], True)
    """
    nb = np.asarray(nb, dtype=np.int64)
    unit = np.flatnonzero(nb > 0)
    count = nb[unit]
    node = np.zeros(len(unit), dtype=np.uint64)  # (interval, unit) entries, sorted by interval
    placed: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
    k = np.array([key], dtype=np.uint64)
    base = unit_base(np.repeat(k, len(nb)), np.arange(len(nb)))
    level = 0
    while len(unit):
        first = np.ones(len(node), dtype=bool)
        first[1:] = node[1:] != node[:-1]
        group = np.cumsum(first) - 1
        total = np.bincount(group, weights=count).astype(np.int64)
        small = total[group] <= SMALL
        if level == MAX_LEVEL:
            small[:] = True
        if small.any():  # small intervals: placed, ordered within below
            placed.append((node[small], unit[small], count[small], level))
            node, unit, count = node[~small], unit[~small], count[~small]
        if not len(unit):
            break
        left = halves(base[unit], interval_word(node, level), count)
        node, unit, count = split_sorted(node, unit, count, left)
        level += 1
    if not placed:
        return np.zeros(0, dtype=np.int64)
    node = np.concatenate([p[0] for p in placed])
    unit = np.concatenate([p[1] for p in placed])
    count = np.concatenate([p[2] for p in placed])
    levels = np.concatenate([np.full(len(p[0]), p[3], dtype=np.int64) for p in placed])
    start = node << (np.uint64(MAX_LEVEL) - levels.astype(np.uint64))  # disjoint intervals
    batch = np.repeat(np.arange(len(unit)), count)
    first = np.ones(len(node), dtype=bool)  # an interval's entries are consecutive
    first[1:] = (node[1:] != node[:-1]) | (levels[1:] != levels[:-1])
    lead = np.maximum.accumulate(np.where(first, np.arange(len(node)), 0))
    base = np.cumsum(count) - count  # each entry's first batch
    j = np.arange(len(batch), dtype=np.int64) - base[lead][batch]  # place in its interval
    where = interval_word(node, levels)[batch]
    sort_key = in_node_keys(np.repeat(k, len(batch)), where, j)
    order = np.lexsort((j, sort_key, start[batch]))
    return unit[batch[order]]
