"""Orderings of one (full) epoch: RETURNN's ``seq_ordering`` methods, vectorised with numpy."""

from __future__ import annotations

import numpy as np

from seqloader.plan.options import Ordering


def order_sequences(
    lengths: np.ndarray, ordering: Ordering, rng: np.random.Generator
) -> np.ndarray:
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
    if kind == "random":
        return rng.permutation(n).astype(np.int64)
    if kind == "sorted":
        return np.argsort(lengths, kind="stable").astype(np.int64)
    if kind == "sorted_reverse":
        return np.argsort(-lengths, kind="stable").astype(np.int64)
    bins = ordering.num_bins(n)
    if kind == "laplace":
        return _laplace(lengths, bins, rng)
    return _sort_bin_shuffle(lengths, bins, rng, shuffle_within=kind.endswith("_x2"))


def _bin_ids(n: int, bins: int) -> np.ndarray:
    """Bin of each position when ``n`` items are cut into ``bins`` contiguous parts
    (RETURNN: part i is ``[i*n//bins, (i+1)*n//bins)``)."""
    starts = (np.arange(bins + 1, dtype=np.int64) * n) // bins  # [bins+1]
    return np.repeat(np.arange(bins, dtype=np.int64), np.diff(starts))  # [n]


def _laplace(lengths: np.ndarray, bins: int, rng: np.random.Generator) -> np.ndarray:
    """Random permutation cut into bins; each bin sorted by length, ascending in even bins and
    descending in odd ones, so lengths rise and fall like a Laplace curve across the epoch."""
    perm = rng.permutation(len(lengths)).astype(np.int64)  # [n]
    bin_of = _bin_ids(len(perm), bins)  # [n]
    plen = lengths[perm]
    key = np.where(bin_of % 2 == 1, -plen, plen)  # [n] descending in odd bins
    return perm[np.lexsort((key, bin_of))]  # stable: ties keep the random order


def _sort_bin_shuffle(
    lengths: np.ndarray, bins: int, rng: np.random.Generator, shuffle_within: bool
) -> np.ndarray:
    """Shuffle, sort by length, cut into bins, shuffle the bins (and, ``_x2``, within each bin)."""
    perm = rng.permutation(len(lengths)).astype(np.int64)
    by_len = perm[np.argsort(lengths[perm], kind="stable")]  # [n] shortest first
    bin_of = _bin_ids(len(by_len), bins)
    bin_rank = rng.permutation(bins)  # new position of each bin
    tie = rng.random(len(by_len)) if shuffle_within else np.arange(len(by_len))
    return by_len[np.lexsort((tie, bin_rank[bin_of]))]
