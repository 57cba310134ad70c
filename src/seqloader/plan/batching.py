"""Greedy batching over an ordered list of lengths.

A batch holds at most ``max_seqs`` sequences and at most ``max_frames`` padded frames
(``n_seqs * max_len``). Batches are contiguous runs of the order, stored CSR-style as ``bounds``
(int64 ``[n_batches + 1]``), so a plan for millions of sequences is a few arrays.

Greedy batching is memoryless: restarting it at a batch boundary reproduces the remaining batches.
Resume relies on that.
"""

from __future__ import annotations

import numpy as np


def greedy_bounds(lengths: np.ndarray, max_seqs: int | None, max_frames: int | None) -> np.ndarray:
    """Batch boundaries for ``lengths`` (int64 ``[n]``, in plan order) -> int64 ``[n_batches + 1]``.

    Every sequence must fit alone (``length <= max_frames``); the planner checks that first.
    Work is one small vectorised scan per batch, not per sequence.
    """
    n = len(lengths)
    seq_cap = n if max_seqs is None else max_seqs
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    if max_frames is None or seq_cap == 1:
        return np.append(np.arange(0, n, max(seq_cap, 1), dtype=np.int64), np.int64(n))
    bounds = [0]
    start = 0
    window = 64
    while start < n:
        while True:
            stop = min(n, start + min(window, seq_cap))
            win = lengths[start:stop]  # [w]
            cost = np.maximum.accumulate(win) * np.arange(1, len(win) + 1)  # padded frames
            over = cost > max_frames
            cut = int(np.argmax(over)) if over.any() else len(win)
            if cut < len(win) or stop == n or len(win) >= seq_cap:
                break
            window *= 2
        cut = max(cut, 1)
        start += cut
        bounds.append(start)
        window = max(64, 2 * cut)
    return np.asarray(bounds, dtype=np.int64)


def padded_frames(lengths: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Padded frames ``n_seqs * max_len`` of each batch -> int64 ``[n_batches]``."""
    if len(bounds) <= 1:
        return np.zeros(0, dtype=np.int64)
    sizes = np.diff(bounds)
    nonempty = sizes > 0
    maxes = np.zeros(len(sizes), dtype=np.int64)
    if len(lengths):
        red = np.maximum.reduceat(lengths, np.minimum(bounds[:-1], len(lengths) - 1))
        maxes[nonempty] = red[nonempty]
    return sizes * maxes
