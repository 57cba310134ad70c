"""LPT assignment of units to ranks: largest first, each to the least loaded rank.

The rule is sequential (each unit goes to the rank with the least weight so far; ties: fewer
units, then the lower rank), which a heap does one Python step per unit: 10^5 files take
~0.07 s, a quarter of an elastic resume of ``distribution="files"``. The units come largest
first, so a run of them can be placed at once: with the ranks sorted by (load, units, rank),
the next ``k`` units go to the ``k`` least loaded ranks in that order as long as each of those
ranks is still below every load the run has already raised (``load[i] < min_{j<i} load[j] +
w[j]``, strictly, so no tie is decided otherwise than the heap would). Files of similar size
(the usual corpus) are placed a round of ``world_size`` units per numpy step. Where the runs
get short (very unequal or zero weights) a stretch is placed by the heap itself. The result is
the heap's, exactly (tests compare the two on drawn weights).
"""

from __future__ import annotations

import heapq

import numpy as np

from seqloader.plan.ordering import argsort_by

#: a run shorter than this is not worth a numpy step: the next stretch goes through the heap
_MIN_RUN = 48
#: units the heap places before the runs are tried again (its set-up costs ~world_size steps)
_STRETCH = 2048


def assign_lpt(weights: np.ndarray, world_size: int) -> np.ndarray:
    """Rank of each unit -> int64 ``[u]``: largest weight first (ties: the earlier unit), each to
    the rank with the least weight so far (ties: fewer units, then the lower rank)."""
    w = np.asarray(weights, dtype=np.int64)
    n = len(w)
    if not n:
        return np.zeros(0, dtype=np.int64)
    by = argsort_by(-w)
    v = w[by]  # the weights in the order they are placed
    placed = np.empty(n, dtype=np.int64)  # rank of the i-th placed unit
    load = np.zeros(world_size, dtype=np.int64)
    count = np.zeros(world_size, dtype=np.int64)
    order = np.arange(world_size, dtype=np.int64)  # ranks by (load, count, rank)
    p = 0
    while p < n:
        k = min(world_size, n - p)
        run = _run(load[order[:k]], v[p : p + k]) if k >= _MIN_RUN else 0
        if run >= _MIN_RUN:
            ranks = order[:run]
            placed[p : p + run] = ranks
            load[ranks] += v[p : p + run]
            count[ranks] += 1
            p += run
        else:
            m = min(n - p, _STRETCH)
            placed[p : p + m] = _heap_stretch(load, count, order, v[p : p + m])
            p += m
        order = np.lexsort((count, load))  # stable: equal (load, count) stay in rank order
    out = np.empty(n, dtype=np.int64)
    out[by] = placed
    return out


def _run(low: np.ndarray, v: np.ndarray) -> int:
    """How many of the next units (weights ``v``) go one each to the ranks of loads ``low``
    (the least loaded first) as the heap would place them."""
    raised = np.minimum.accumulate(low + v)[:-1]
    bad = np.flatnonzero(low[1:] >= raised)
    return int(bad[0]) + 1 if len(bad) else len(low)


def _heap_stretch(
    load: np.ndarray, count: np.ndarray, order: np.ndarray, v: np.ndarray
) -> np.ndarray:
    """Place units of weights ``v`` by the heap (``load`` and ``count`` updated in place) ->
    their ranks. A rank's (load, units, rank) is one Python int, compared as the tuple."""
    world_size = len(load)
    rank_bits = max(world_size - 1, 1).bit_length()
    count_bits = (int(count.max()) + len(v)).bit_length()
    shift = rank_bits + count_bits
    one = 1 << rank_bits
    heap = [
        (int(load[r]) << shift) + (int(count[r]) << rank_bits) + r for r in order.tolist()
    ]  # sorted by the tuple: a heap already
    ranks: list[int] = []
    keep, replace = ranks.append, heapq.heapreplace
    for x in v.tolist():
        key = heap[0]
        keep(key)
        replace(heap, key + (x << shift) + one)
    for key in heap:
        r = key & (one - 1)
        load[r] = key >> shift
        count[r] = (key >> rank_bits) & ((1 << count_bits) - 1)
    return np.array([key & (one - 1) for key in ranks], dtype=np.int64)
