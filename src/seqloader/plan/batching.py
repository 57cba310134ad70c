"""Greedy batching over an ordered list of lengths.

A batch holds at most ``max_seqs`` sequences and at most ``max_frames`` padded frames
(``n_seqs * max_len``). Greedy: a batch takes sequences of the order until the next one would break
a limit (RETURNN's rule). Batches are contiguous runs of the order, stored CSR-style as ``bounds``
(int64 ``[n_batches + 1]``), so a plan for millions of sequences is a few arrays.

Greedy batching is memoryless: restarting it at a batch boundary reproduces the remaining batches.
Resume relies on that.

Speed: the batch size at a start ``i`` is the largest ``c`` with ``c * max(lengths[i:i+c]) <=
max_frames`` (and ``c <= max_seqs``). That predicate is monotone in ``c``, so it is found for *all*
starts of a block at once by binary lifting over power-of-two range maxima (``log2(max_seqs)``
vectorised passes over small ints); a Python loop then only follows the chain of starts (one list
lookup per batch).
"""

from __future__ import annotations

import numpy as np

# Starts handled per vectorised block; bounds the working memory (~ levels * _BLOCK * 8 bytes).
_BLOCK = 1 << 18
# Largest batch size the binary lifting resolves; a batch reaching it is finished by a scan.
_LIFT_CAP = 4096


def greedy_bounds(lengths: np.ndarray, max_seqs: int | None, max_frames: int | None) -> np.ndarray:
    """Batch boundaries for ``lengths`` (int ``[n]``, in plan order) -> int64 ``[n_batches + 1]``.

    Every sequence should fit alone (``length <= max_frames``; the planner checks that first); one
    that does not becomes a batch of its own.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    seq_cap = n if max_seqs is None else min(max_seqs, n)
    if max_frames is None or seq_cap == 1:
        return np.append(np.arange(0, n, seq_cap, dtype=np.int64), np.int64(n))
    shortest = int(lengths.min())
    if shortest > 0:  # c sequences cost at least c * shortest frames
        seq_cap = max(1, min(seq_cap, max_frames // shortest))
    lift_cap = min(seq_cap, _LIFT_CAP)
    out: list[int] = [0]
    start = 0
    while start < n:
        base, block_end = start, min(n, start + _BLOCK)
        sizes = _sizes_by_lifting(lengths, base, block_end, lift_cap, max_frames).tolist()
        while start < block_end:
            size = sizes[start - base]
            if size == lift_cap < seq_cap:  # rare: a batch bigger than the lifting resolves
                size = _scan_one(lengths, start, seq_cap, max_frames)
            start += size
            out.append(start)
    return np.asarray(out, dtype=np.int64)


def _sizes_by_lifting(lengths: np.ndarray, a: int, b: int, cap: int, max_frames: int) -> np.ndarray:
    """Greedy batch size for every start in ``[a, b)`` -> int64 ``[b - a]``, at most ``cap``.

    Works on ``fit = max_frames // length`` (how many sequences of that length fit a batch, clipped
    to ``cap``): ``c`` sequences from ``i`` fit iff ``c <= min(fit[i:i+c])``, which also enforces
    ``max_seqs``. ``levels[k][p] = min(fit[p : p + 2**k])``; the size's bits are decided from the
    highest down (the predicate is monotone in ``c``). Past the data end ``fit`` is 0 (never fits).
    """
    n, m = len(lengths), b - a
    top = max(cap - 1, 0).bit_length()  # 2**top >= cap
    dtype = np.int16 if cap < 2**14 else np.int64
    seg = lengths[a : min(n, b + cap)]  # [w]
    fit = np.zeros(m + (2 << top), dtype=dtype)  # [m + 2**(top+1)], zero padding past the end
    whole = np.full(len(seg), cap, dtype=np.int64)  # empty sequences fit any number of times
    np.floor_divide(max_frames, seg, out=whole, where=seg > 0)
    fit[: len(seg)] = np.minimum(whole, cap)
    levels = [fit]
    for k in range(1, top + 1):
        half = 1 << (k - 1)
        prev = levels[-1]
        levels.append(np.minimum(prev[:-half], prev[half:]))
    starts = np.arange(m, dtype=np.int64)  # [m]
    size = np.zeros(m, dtype=dtype)  # [m] sequences taken so far
    low = np.full(m, cap, dtype=dtype)  # [m] min fit of those sequences
    got = np.empty(m, dtype=dtype)
    ok = np.empty(m, dtype=bool)
    for k in range(top, -1, -1):
        cand = size + dtype(1 << k)  # [m]
        np.take(levels[k], starts + size, out=got)  # min fit of the next 2**k sequences
        np.minimum(got, low, out=got)
        np.less_equal(cand, got, out=ok)
        np.copyto(size, cand, where=ok)
        np.copyto(low, got, where=ok)
    return np.maximum(size, 1).astype(np.int64)


def _scan_one(lengths: np.ndarray, start: int, seq_cap: int, max_frames: int) -> int:
    """Size of the greedy batch at ``start`` by a direct scan (for batches beyond the lifting cap)."""
    win = lengths[start : start + seq_cap]  # [w]
    cost = np.maximum.accumulate(win) * np.arange(1, len(win) + 1)  # padded frames of each prefix
    over = np.flatnonzero(cost > max_frames)
    return max(int(over[0]) if len(over) else len(win), 1)


def padded_frames(lengths: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Padded frames ``n_seqs * max_len`` of each batch -> int64 ``[n_batches]``."""
    if len(bounds) <= 1:
        return np.zeros(0, dtype=np.int64)
    sizes = np.diff(bounds)  # [n_batches]
    nonempty = sizes > 0
    maxes = np.zeros(len(sizes), dtype=np.int64)
    if nonempty.any():  # reduceat over strictly increasing starts: each range is one batch
        maxes[nonempty] = np.maximum.reduceat(lengths[: bounds[-1]], bounds[:-1][nonempty])
    return sizes * maxes
