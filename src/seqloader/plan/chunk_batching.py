"""Greedy batches over chunks without a length per chunk: the same bounds as
``seqloader.plan.batching.greedy_bounds`` over the chunks' windows, at a cost that follows the
sequences and batches more than the chunks.

Two facts make it cheap:

1. **Fits, not lengths.** Batching under one padded limit only needs ``fit[u] = F // cost(len[u])``
   (how many units like ``u`` fit a batch, clipped to the batch cap). A chunked key's full windows
   all have the same fit; only the partial windows at a sequence's end (at most
   ``ceil(size / step)`` per sequence) differ. So the fits are one ``full`` plus a scatter of the
   partial windows', in int16.
2. **Runs decided by the tightest unit.** With ``f = min(fit)``, every start ``i`` that has a unit
   of fit ``f`` in ``[i, i + f)`` takes exactly ``min(f, m - i)`` units: ``f`` always fit (every
   unit fits ``f`` times), ``f + 1`` would hold that unit. The full windows are the tightest units,
   so long runs of starts are decided at once and their batch starts are an ``arange``. Only
   the rest (runs of short sequences) goes through the binary lifting of ``greedy_bounds``, on
   the compacted runs alone, and a Python loop follows batch starts only there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.plan.chunks import ChunkTable
from seqloader.plan.limits import Batcher, lift

#: Largest batch cap handled here (int16 fits); beyond it callers use the general batcher.
MAX_CAP = 4096
#: Most windows a sequence's end may cut (``ceil(size / step)``) handled here.
MAX_CUT = 16


@dataclass(frozen=True)
class ChunkFits:
    """Each sequence's chunk fits under one padded limit, computed once per planner (they do not
    depend on the epoch): a chunk's fit is that of a full window, except for a sequence's last
    ``K = ceil(size / step)`` chunks (the windows the sequence's end can cut), kept per sequence.

    - ``full``: fit of a full window; ``top``: the cap fits are clipped to (the least of the batch
      cap and the largest fit: no batch is longer);
    - ``last``: int16 ``[K, n]``, the fit of each sequence's r-th last chunk in row ``r - 1`` (one
      row per r: a gather of rows of ``[n, K]`` costs far more than K gathers of one array); for
      the length key not chunked ``K = 1``: every chunk of a sequence has its fit.
    - ``tight``: int32 ``[n]`` (chunked key only), how many of a sequence's chunks have the full
      window's fit, the least there is: always its first ones (later windows only get shorter),
      so the batch starts they decide are found per sequence, not per chunk (``decided``).
    """

    full: int
    last: np.ndarray
    top: int
    chunked: bool
    tight: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        table: ChunkTable,
        key: str,
        budget: int,
        units: Callable[[np.ndarray], np.ndarray],
        cap: int,
    ) -> ChunkFits | None:
        """``budget``: cost units of ``key`` per batch; ``units``: a length's cost units;
        ``cap``: the most units a batch may hold. None when a batch could hold more than
        ``MAX_CAP`` chunks or a sequence's end cuts more than ``MAX_CUT`` windows (the general
        batcher then)."""
        whole = table.whole[key]  # [n]
        counts = table.counts.astype(np.int64)  # [n]
        if key not in table.spec:
            has = counts > 0
            fit = _fit(whole, budget, units, cap)  # [n]
            top = max(1, min(cap, int(fit[has].max()) if has.any() else 1))
            if top > MAX_CAP:
                return None
            return cls(top, np.minimum(fit, top).astype(np.int16)[None, :], top, False)
        size, step = table.spec[key]
        cut = -(-size // step)
        if cut > MAX_CUT:
            return None
        full = int(_fit(np.array([size]), budget, units, cap)[0])
        rows, top = [], full
        for r in range(1, cut + 1):  # one [n] row at a time: no [n, K] temporaries
            start = np.maximum(counts - r, 0) * step  # [n] start of the r-th last chunk
            fit = _fit(np.minimum(whole - start, size), budget, units, cap)  # [n]
            real = counts >= r  # [n] sequences that have an r-th last chunk
            if real.any():
                top = max(top, int(fit[real].max()))
            rows.append((fit, real))
        top = max(1, min(cap, top))
        if top > MAX_CAP:
            return None
        full = min(full, top)
        last = np.empty((cut, len(whole)), dtype=np.int16)
        tight = counts.astype(np.int32)  # [n] less each last chunk fitting more often than full
        for r, (fit, real) in enumerate(rows):
            np.minimum(fit, top, out=fit)
            last[r] = fit
            tight -= (real & (fit > full)).astype(np.int32)
        return cls(full, last, top, True, tight)

    def decided(
        self, order: np.ndarray, counts: np.ndarray, ends: np.ndarray, start: int = 0
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The runs ``[lo, hi)`` of batch starts (positions from chunk ``start`` on) that have a
        chunk of the least fit ``full`` within ``full`` chunks: each takes exactly that many
        (``greedy_from_fits``). Found per sequence: its tight chunks are its first ones. None
        when no chunk from ``start`` on has the least fit (then ``full`` is not the least)."""
        if self.tight is None or self.full < 1:
            return None
        f = self.full
        a = ends - counts  # [s] each sequence's first chunk
        b = a + self.tight[order]  # [s] end of its tight chunks
        np.maximum(a, start, out=a)
        keep = b > a
        if not keep.any():
            return None
        a, b = a[keep] - start, b[keep] - start
        lo = np.maximum(a - f + 1, 0)  # start i is decided iff i <= tight unit < i + f
        new = np.flatnonzero(lo[1:] > b[:-1]) + 1  # [g-1] a gap: a new run
        first = np.concatenate([[0], new])
        last = np.concatenate([new - 1, [len(b) - 1]])
        return lo[first], b[last]

    def fits(self, order: np.ndarray, counts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The fit of every chunk of ``order`` (sequences in plan order; ``counts`` their chunk
        counts, ``ends`` the cumulative sum) -> int16 ``[m]``."""
        m = int(ends[-1]) if len(ends) else 0
        if not self.chunked:
            return np.repeat(self.last[0][order], counts)
        out = np.full(m, self.full, dtype=np.int16)
        # from the K-th last chunk to the last: a sequence with fewer than r chunks writes into
        # an earlier sequence's chunk that a later round (smaller r) writes again
        for r in range(len(self.last), 0, -1):
            out[np.maximum(ends - r, 0)] = self.last[r - 1][order]
        return out


def _fit(
    lengths: np.ndarray, budget: int, units: Callable[[np.ndarray], np.ndarray], cap: int
) -> np.ndarray:
    """``budget // cost(length)`` clipped to ``cap`` (a free unit fits ``cap`` times) -> int64."""
    cost = units(np.asarray(lengths, dtype=np.int64))
    out = np.full(cost.shape, cap, dtype=np.int64)
    np.floor_divide(budget, cost, out=out, where=cost > 0)
    return np.minimum(out, cap, out=out)


def batcher_fits(table: ChunkTable, batcher: Batcher, cap: int) -> ChunkFits | int | None:
    """How ``table``'s chunks batch under ``batcher`` with at most ``cap`` per batch:
    ``ChunkFits`` under one padded limit of the length key, the batch size when only
    ``max_seqs`` limits, None for the general batcher (``Batcher.bounds_of`` over the windows).
    Global planning asks once per planner, indexed planning once per block of its order."""
    limits, key = batcher.limits, batcher.limits.length_key
    if not limits.plain:
        return None
    if batcher.budget is None or cap <= 1:
        return cap
    return ChunkFits.of(table, key, batcher.budget, lambda x: limits.units(key, x), cap)


def fit_bounds(
    fits: ChunkFits | int, order: np.ndarray, counts: np.ndarray, ends: np.ndarray, start: int
) -> np.ndarray:
    """Greedy batch bounds over the chunks of ``order`` (its sequences' ``counts`` and their
    cumulative sum ``ends``) from chunk position ``start`` on, by ``batcher_fits``' answer ->
    int64 ``[n_batches + 1]``, ``Batcher.bounds_of``'s bounds over the same chunks' windows.

    >>> from seqloader.plan.cost import BatchCost
    >>> from seqloader.plan.limits import BatchLimits
    >>> limits = BatchLimits.of(3, 10, None, BatchCost(), ["x"], "x")
    >>> whole = np.array([6, 3, 5])  # chunks 2:2 -> windows [2, 2, 2], [2, 1], [2, 2, 1]
    >>> counts = np.array([3, 2, 3], dtype=np.int32)
    >>> table = ChunkTable(np.array([0, 3, 5, 8]), {"x": (2, 2)}, {"x": whole}, counts)
    >>> fits = batcher_fits(table, Batcher(limits, {"x": whole}), 3)
    >>> order = np.array([2, 0])  # windows [2, 2, 1, 2, 2, 2]
    >>> fit_bounds(fits, order, counts[order], np.cumsum(counts[order]), 1).tolist()
    [0, 3, 5]
    """
    if isinstance(fits, int):  # max_seqs alone: batches of that many
        m = (int(ends[-1]) if len(ends) else 0) - start
        return np.append(np.arange(0, m, fits, dtype=np.int64), np.int64(m))
    fit = fits.fits(order, counts, ends)[start:]
    return greedy_from_fits(fit, fits.top, fits.decided(order, counts, ends, start))


def greedy_from_fits(
    fit: np.ndarray, cap: int, runs: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Greedy batch bounds over units with fits ``fit`` (int ``[m]``, each ``<= cap``): a batch
    takes the most units ``c <= cap`` with ``c <= min(fit[i:i+c])``, at least one -> int64
    ``[n_batches + 1]`` (``greedy_bounds``' result for the same units). ``runs``: the runs of
    starts with a unit of the least fit within that many units (``ChunkFits.decided``), when
    the caller knows them; else found here."""
    m = len(fit)
    if m == 0:
        return np.zeros(1, dtype=np.int64)
    f = int(fit.min())
    if f >= cap:  # every start takes cap units
        return np.append(np.arange(0, m, cap, dtype=np.int64), np.int64(m))
    near_lo, near_hi = _decided_runs(fit, f) if runs is None else runs
    long = near_hi - near_lo >= cap  # shorter runs are cheaper lifted
    near_lo, near_hi = near_lo[long], near_hi[long]  # [r] runs of starts that take f units
    # the other starts: lifted over their runs only (each with the cap units after it)
    lo = np.concatenate([[0], near_hi])  # [r + 1]
    hi = np.concatenate([near_lo, [m]])
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    sizes, offsets = _lift_runs(fit, lo, hi, cap, f)
    # follow the batch starts: runs decided at once (an arange), lifted runs start by start
    starts: list[np.ndarray] = []
    pieces: list[int] = []
    edges = sorted(
        [(int(a), int(b), -1) for a, b in zip(near_lo, near_hi, strict=True)]
        + [(int(a), int(b), int(o)) for a, b, o in zip(lo, hi, offsets, strict=True)]
    )
    i = 0
    for a, b, off in edges:
        if i >= b:
            continue
        if off < 0:  # every start here takes f units
            k = -(-(b - i) // f)
            if pieces:
                starts.append(np.asarray(pieces, dtype=np.int64))
                pieces = []
            starts.append(np.arange(i, i + k * f, f, dtype=np.int64))
            i += k * f
        else:
            while i < b:
                pieces.append(i)
                i += max(int(sizes[off + i - a]), 1)
    if pieces:
        starts.append(np.asarray(pieces, dtype=np.int64))
    starts.append(np.array([m], dtype=np.int64))
    out = np.concatenate(starts)
    return np.minimum(out, m, out=out)


def _decided_runs(fit: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """Runs ``[lo, hi)`` of starts with a unit of fit ``f`` within ``f`` units (each takes
    ``min(f, m - i)``) -> int64 ``[r]``."""
    if f < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tight = np.flatnonzero(fit == f)  # [t] the tightest units
    # start i is decided iff some tight unit t has i <= t < i + f, i.e. i in (t - f, t]
    new = np.flatnonzero(np.diff(tight) > f) + 1  # [g-1] first tight unit of each later run
    first = tight[np.concatenate([[0], new])]
    last = tight[np.concatenate([new - 1, [len(tight) - 1]])]
    return np.maximum(first - f + 1, 0), last + 1


def _lift_runs(
    fit: np.ndarray, lo: np.ndarray, hi: np.ndarray, cap: int, f: int
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy batch size at every start of the runs ``[lo, hi)`` -> (sizes int64 ``[R]`` of the
    runs' windows laid end to end, offset of each run in it ``[r]``). A run's window is
    ``[lo, hi + f)`` and a zero (never fits): a run ends where a decided run begins, whose first
    tightest unit (fit ``f``) is at ``hi + f - 1``, and no batch from the run reaches past it
    (holding it, a batch has at most ``f`` units); the last run's window is the data's end."""
    m = len(fit)
    ends = np.where(hi < m, np.minimum(hi + f, m), m)  # [r]
    lengths = ends - lo + 1  # and the zero
    offsets = np.zeros(len(lo), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    total = int(lengths.sum())
    idx = np.arange(total, dtype=np.int64) + np.repeat(lo - offsets, lengths)
    window = fit[np.minimum(idx, m - 1)].astype(np.int16)
    window[offsets + lengths - 1] = 0
    return lift(window, cap), offsets
