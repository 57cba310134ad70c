"""How many near-equal contiguous pieces each batch is cut into so that there are ``target``.

The rule (``uneven="split"``): while there are fewer pieces than ``target``, the batch whose
pieces are largest (``ceil(size / pieces)``; ties: the latest batch) gets one piece more, until
every piece is one sequence. Run as a heap that is one Python step per extra piece, which a
replay of every rank's split (an elastic resume of ``distribution="files"`` over 1,024 ranks)
cannot afford. Each batch's increments have non-increasing keys, so the heap pops them in one
global sorted order: the first ``need`` increments are those of value above a level ``t``, plus
the latest batches' increments of value exactly ``t``. ``split_pieces`` finds ``t`` by bisection
(``O(batches * log(size))``, vectorised) and gives the heap's result exactly.
"""

from __future__ import annotations

import numpy as np


def split_pieces(sizes: np.ndarray, target: int) -> np.ndarray:
    """Pieces per batch (``sizes`` int ``[t]``, each >= 1) so that there are ``target`` (or every
    piece is one sequence), by the rule above -> int64 ``[t]``.

    >>> split_pieces(np.array([4, 9, 2]), 6).tolist()
    [2, 3, 1]
    """
    s = np.maximum(np.asarray(sizes, dtype=np.int64), 1)
    n = len(s)
    need = int(target) - n
    if need <= 0 or n == 0:
        return np.ones(n, dtype=np.int64)
    if need >= int(s.sum()) - n:  # every piece one sequence
        return s.copy()

    counts = np.bincount(s) if int(s.max()) <= 4 * n else None  # few distinct sizes: by size
    values = s if counts is None else np.flatnonzero(counts)
    weight = 1 if counts is None else counts[values]

    def above(t: int) -> int:  # increments of value > t: ceil(s / t) - 1 per batch
        return int((((values + t - 1) // t) * weight).sum()) - n

    lo, hi = 1, int(s.max())  # above(lo) > need >= above(hi) == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if above(mid) <= need:
            hi = mid
        else:
            lo = mid
    pieces = (s + hi - 1) // hi  # every increment of value > hi
    rest = need - (int(pieces.sum()) - n)
    if rest:  # increments of value exactly hi: the latest batches first, each all of its own
        ties = (s + hi - 2) // (hi - 1) - pieces  # [t]
        back = np.cumsum(ties[::-1])
        full = int(np.searchsorted(back, rest, side="right"))  # batches (from the end) taken whole
        extra = np.zeros(n, dtype=np.int64)
        extra[n - full :] = ties[n - full :]
        if full < n:
            extra[n - 1 - full] = rest - (int(back[full - 1]) if full else 0)
        pieces += extra
    return pieces
