"""Orderings of one (full) epoch: RETURNN's ``seq_ordering`` methods, vectorised with numpy."""

from __future__ import annotations

import numpy as np

from seqloader.plan.options import Ordering

#: The sequence-order RNG: numpy's Generator, or RETURNN's legacy RandomState (seeding="returnn")
Rng = np.random.Generator | np.random.RandomState


def order_sequences(lengths: np.ndarray, ordering: Ordering, rng: Rng) -> np.ndarray:
    """Return a permutation ``[n]`` (int64) of ``range(len(lengths))``.

    ``lengths``: int64 ``[n]``. Sorting is stable, so equal lengths keep their prior order and the
    result is fully deterministic given ``rng``'s seed.
    """
    n = len(lengths)
    kind = ordering.kind
    if kind == "default":
        return np.arange(n, dtype=np.int64)
    if kind == "reverse":
        return np.arange(n - 1, -1, -1, dtype=np.int64)
    if kind in ("random", "buckets"):  # buckets: a random subset per sub-epoch, arranged later
        return rng.permutation(n).astype(np.int64)
    if kind == "sorted":
        return argsort_by(lengths)
    if kind == "sorted_reverse":
        return argsort_by(-lengths)
    bins = ordering.num_bins(n)
    if kind == "laplace":
        return _laplace(lengths, bins, rng)
    return _sort_bin_shuffle(lengths, bins, rng, shuffle_within=kind.endswith("_x2"))


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (ascending, flattened) by a sort and a neighbour compare: numpy 2's
    ``np.unique`` asks ``np.ma.is_masked``, whose first use imports ``numpy.ma`` (about 40 ms,
    once per process: a planner's first plan paid it).

    >>> unique_sorted(np.array([3, 1, 3, 2, 1])).tolist()
    [1, 2, 3]
    """
    v = np.sort(np.asarray(values).ravel())
    if len(v) <= 1:
        return v
    return v[np.concatenate(([True], v[1:] != v[:-1]))]


def argsort_by(minor: np.ndarray, major: np.ndarray | None = None) -> np.ndarray:
    """Indices that sort by (``major``, ``minor``), ties kept in position order -> int64 ``[n]``.

    A stable sort has one exact answer on every machine. Keys whose packed range fits 16 or 32 bits
    are sorted so (numpy sorts 16-bit keys by radix, in linear time: a length histogram's worth of
    work); wider ones are packed with the position into one unique int64, so numpy's fastest
    (unstable, possibly SIMD and CPU-dependent) sort still gives that answer; otherwise a stable
    sort of the wide keys does the same, slower.
    """
    n = len(minor)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lo = int(minor.min())
    span_minor = int(minor.max()) - lo + 1
    span_major = 1 if major is None else int(major.max()) + 1
    span = span_major * span_minor
    if span >= 2**62:
        keys = (minor,) if major is None else (minor, major)
        return np.lexsort(keys).astype(np.int64)
    if span <= 2**32:  # a stable sort of narrow keys: radix (16 bits) or timsort, no position
        narrow = np.uint16 if span <= 2**16 else np.uint32
        key = np.subtract(minor, lo, dtype=np.int64).astype(narrow)  # [n] (major, minor) packed
        if major is not None:
            key += np.asarray(major).astype(narrow) * narrow(span_minor)
        return np.argsort(key, kind="stable").astype(np.int64, copy=False)
    key = minor.astype(np.int64)  # [n] a copy, built up in place
    key -= lo
    if major is not None:
        key += major.astype(np.int64, copy=False) * span_minor
    if span_major * span_minor * n >= 2**62:
        return np.argsort(key, kind="stable")
    key *= n
    key += np.arange(n, dtype=np.int64)  # unique keys: position breaks ties
    return np.argsort(key)


def _bin_ids(n: int, bins: int) -> np.ndarray:
    """Bin of each position when ``n`` items are cut into ``bins`` contiguous parts
    (RETURNN: part i is ``[i*n//bins, (i+1)*n//bins)``)."""
    starts = (np.arange(bins + 1, dtype=np.int64) * n) // bins  # [bins+1]
    narrow = np.min_scalar_type(max(bins - 1, 0))  # uint8 for a few bins: 1 byte per sequence
    return np.repeat(np.arange(bins, dtype=narrow), np.diff(starts))  # [n]


def _laplace(lengths: np.ndarray, bins: int, rng: Rng) -> np.ndarray:
    """Random permutation cut into bins; each bin sorted by length, ascending in even bins and
    descending in odd ones, so lengths rise and fall like a Laplace curve across the epoch."""
    perm = rng.permutation(len(lengths)).astype(np.int64)  # [n]
    bin_of = _bin_ids(len(perm), bins)  # [n]
    key = lengths[perm]  # [n]
    np.negative(key, out=key, where=bin_of % 2 == 1)  # descending in odd bins
    return perm[argsort_by(key, bin_of)]  # ties keep the random order


def _sort_bin_shuffle(lengths: np.ndarray, bins: int, rng: Rng, shuffle_within: bool) -> np.ndarray:
    """Shuffle, sort by length, cut into bins, emit the bins in random order (and, ``_x2``, shuffle
    within each bin). The random draws are RETURNN's, in RETURNN's order."""
    n = len(lengths)
    perm = rng.permutation(n).astype(np.int64)  # [n]
    by_len = perm[argsort_by(lengths[perm])]  # [n] shortest first, ties in random order
    starts = (np.arange(bins + 1, dtype=np.int64) * n) // bins  # [bins+1]
    emit = rng.permutation(bins)  # [bins] the bins in output order
    if shuffle_within:
        for b in emit.tolist():
            rng.shuffle(by_len[starts[b] : starts[b + 1]])  # in place, one bin
    sizes = np.diff(starts)[emit]  # [bins] in output order
    out_starts = np.cumsum(sizes) - sizes  # [bins]
    offset = np.repeat(starts[emit] - out_starts, sizes)  # [n] source minus target position
    return by_len[np.arange(n, dtype=np.int64) + offset]
