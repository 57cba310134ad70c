"""A keyed stratified interleaving of a rank's batches whose every prefix is counted in closed form.

``distribution="files"`` with ``buckets:N`` puts a rank's batches in a random order; the ``t``-th
occurrence of a unit (a run of one batch size) holds that unit's ``t``-th batch, so the order is
the sequence of units along the positions: an interleaving of ``nb_u`` copies of each unit ``u``.
An elastic replay needs, for every old rank, how many batches of each unit its first steps hold;
a shuffle answers only by listing those positions (O(steps) per rank), and a key refined over
dyadic intervals by keyed halves (``seqloader-plan-indexed/8``) by one split per unit and level.

Here a rank's ``N`` batches fall into ``K = ceil(N / BLOCK)`` consecutive **blocks**. Unit ``u``
has a keyed phase ``p_u`` in ``[0, K)`` and puts its ``t``-th batch into block
``floor((t * K + p_u) / nb_u)``: its batches are spread evenly over the rank's blocks (one every
``K / nb_u`` blocks), shifted by a random part of that stride. Within a block the batches go in
the order of a keyed hash of (unit, batch). So:

- **a prefix of whole blocks** holds ``clip(ceil((k * nb_u - p_u) / K), 0, nb_u)`` batches of unit
  ``u`` in its first ``k`` blocks: a closed form per unit, no split, no walk
  (``seqloader.plan.indexed.replay.buckets_consumed`` finds the block where a rank's steps end by
  search over blocks, then orders that one block's few batches);
- **a rank's order** (``interleave``) is one sort of its batches by (block, hash).

What it draws and what it does not: each block's batches are in a uniformly random order, and
which block a unit's batches start in is random (a unit of one batch lands in any block alike),
but a unit's batches are *stratified*: a unit with ``nb_u`` batches has one in every
``K / nb_u`` blocks (within one block), never a clump of them at the start or the end of the
epoch as a shuffle may draw. A rank of at most ``BLOCK`` batches is one block: any arrangement.
"""

from __future__ import annotations

import numpy as np

from seqloader.plan.variants import splitmix64

#: the batches of a block on average: a rank of ``N`` batches has ``ceil(N / BLOCK)`` blocks
BLOCK = 16
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_PHASE = np.uint64(1 << 63)  # marks a unit's phase word apart from its batches' words


def num_blocks(batches: np.ndarray | int) -> np.ndarray:
    """Blocks of a rank of ``batches`` batches (``>= 1``) -> int64."""
    return np.maximum(-(-np.asarray(batches, dtype=np.int64) // BLOCK), 1)


def _hash(key: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A keyed 64-bit hash of two uint64 words (uint64 arrays, one per entry)."""
    h = splitmix64(key + a * _GOLD)
    h += b * _GOLD
    return splitmix64(h)


def phases(key: np.ndarray, unit: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Each unit's phase in ``[0, blocks)`` (``key``: its rank's order key; ``unit``: its place
    among the rank's units; ``blocks < 2**32``) -> int64: the top 32 bits of a keyed hash
    scaled to the range (multiply and shift, no division).

    >>> p = phases(np.array([7, 7], np.uint64), np.array([0, 1]), np.array([5, 5]))
    >>> bool(((p >= 0) & (p < 5)).all())
    True
    """
    h = np.asarray(unit).astype(np.uint64)
    h |= _PHASE
    h *= _GOLD
    h += np.asarray(key, dtype=np.uint64)
    h = splitmix64(h)
    h >>= np.uint64(32)
    h *= np.asarray(blocks).astype(np.uint64)
    h >>= np.uint64(32)
    return h.astype(np.int64)


def below(k: np.ndarray, nb: np.ndarray, phase: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Batches of each unit (``nb`` batches, ``phase``, its rank's ``blocks``) in its rank's first
    ``k`` blocks -> int64: ``clip(ceil((k * nb - phase) / blocks), 0, nb)``.

    >>> below(np.array([0, 1, 2, 3]), np.array([2] * 4), np.array([1] * 4), np.array([3] * 4))
    array([0, 1, 1, 2])
    """
    a = np.asarray(k, dtype=np.int64) * nb - phase
    return np.clip(-(-a // blocks), 0, nb)


def block_of(t: np.ndarray, nb: np.ndarray, phase: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The block of each unit's ``t``-th batch -> int64: ``floor((t * blocks + phase) / nb)``."""
    return (np.asarray(t, dtype=np.int64) * blocks + phase) // nb


def batch_keys(key: np.ndarray, unit: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The in-block sort keys of batches (unit's place among its rank's units, index ``t``
    within the unit) -> uint64: a block's order is by (key, unit, t), a keyed random order
    (ties, a chance of 2**-64 a pair, by unit and ``t``)."""
    return _hash(
        np.asarray(key, dtype=np.uint64),
        np.asarray(unit).astype(np.uint64),
        np.asarray(t).astype(np.uint64),
    )


def interleave(nb: np.ndarray, key: int) -> np.ndarray:
    """The rank's order: the unit (an index into ``nb``, batches per unit) at every position ->
    int64 ``[nb.sum()]``, each unit ``nb[u]`` times.

    >>> order = interleave(np.array([3, 0, 2]), 12345)
    >>> sorted(order.tolist()), order.tolist() == interleave(np.array([3, 0, 2]), 12345).tolist()
    ([0, 0, 0, 2, 2], True)
    """
    nb = np.asarray(nb, dtype=np.int64)
    total = int(nb.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    blocks = num_blocks(total)
    k = np.full(len(nb), key, dtype=np.uint64)
    phase = phases(k, np.arange(len(nb)), np.full(len(nb), blocks))
    unit = np.repeat(np.arange(len(nb), dtype=np.int64), nb)
    t = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(nb) - nb, nb)
    block = block_of(t, nb[unit], phase[unit], blocks)
    h = batch_keys(np.full(total, key, dtype=np.uint64), unit, t)
    return unit[np.lexsort((h, block))]  # stable: ties in the listing's (unit, t) order
