"""What bounds a batch when more than the length key's padded frames do: per-key limits
(``max_frames={key: F}``, ``"*"`` = every key), limits on the sum of lengths (``batch_cost="packed"``,
``max_packed_frames``), and ``max_seqs``; all at once, as RETURNN's ``BatchingIterDataPipe`` applies
``batch_size``, ``packed_batch_size`` and ``max_seqs``.

Greedy, RETURNN's rule: a batch takes the next unit unless that would break a limit; a new batch
always takes at least one. Each limit is a predicate monotone in the batch size ``c`` at a start
``i``, so the batch size is the least of the largest ``c`` each allows:

- padded, per key ``k``: ``c * max(len_k[i:i+c]) <= F_k`` for every ``k`` iff
  ``c <= min(fit[i:i+c])`` with ``fit[j] = min_k F_k // len_k[j]``: found for all starts at once by
  binary lifting over power-of-two range minima, as ``seqloader.plan.batching`` does for one key;
- packed, per key: ``sum(len_k[i:i+c]) <= P_k``: a ``searchsorted`` on the prefix sums.

The plain case (one padded limit on the length key, nothing packed) keeps
``seqloader.plan.batching.greedy_bounds`` (and so its plans, bit for bit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import SequenceTooLongError, sequence_named
from seqloader.plan.batching import greedy_bounds
from seqloader.plan.cost import BatchCost
from seqloader.plan.keyed import KeyedInt, resolve_keyed

# Starts handled per vectorised block of the lifting; bounds its working memory.
_BLOCK = 1 << 18


@dataclass(frozen=True)
class BatchLimits:
    """The limits of one plan, resolved against the data's keys (budgets in cost units)."""

    max_seqs: int | None
    padded: dict[str, int]  # key -> budget on n_seqs * max_len (the length key: cost units)
    packed: dict[str, int]  # key -> budget on the sum of lengths
    length_key: str
    cost: BatchCost

    @classmethod
    def of(
        cls,
        max_seqs: int | None,
        max_frames: KeyedInt | None,
        max_packed_frames: KeyedInt | None,
        cost: BatchCost,
        keys: Sequence[str],
        length_key: str,
    ) -> BatchLimits:
        frames = resolve_keyed("max_frames", max_frames, keys, length_key)
        packed = resolve_keyed("max_packed_frames", max_packed_frames, keys, length_key)
        if cost.packed:
            packed, frames = frames, {}
        elif cost.quadratic is not None:
            frames = {k: int(cost.budget(v) or 0) for k, v in frames.items()}
        return cls(max_seqs, frames, packed, length_key, cost)

    @property
    def plain(self) -> bool:
        """Only the length key's padded cost (or nothing) bounds a batch: the classic path."""
        return not self.packed and set(self.padded) <= {self.length_key}

    def units(self, key: str, lengths: np.ndarray) -> np.ndarray:
        """Cost units of ``lengths`` under the padded limit of ``key``: a quadratic cost applies
        to every key a padded limit bounds (per-key ``max_frames`` with ``quadratic:Q``, each
        key's budget ``F_k * Q``: ``c * (L_k * Q + L_k**2) <= F_k * Q``)."""
        if self.cost.quadratic is not None and (key == self.length_key or key in self.padded):
            return self.cost.units(lengths)
        return np.asarray(lengths, dtype=np.int64)


class Batcher:
    """Greedy batch bounds under ``BatchLimits``, over sequences (``bounds``) or over any units
    whose lengths are given in order (``bounds_of``: chunks)."""

    def __init__(self, limits: BatchLimits, lengths: Mapping[str, np.ndarray]) -> None:
        """``lengths``: int64 ``[n]`` per key, per sequence."""
        self.limits = limits
        used = {limits.length_key, *limits.padded, *limits.packed}  # other keys: not read
        self.lengths = {k: np.asarray(v, dtype=np.int64) for k, v in lengths.items() if k in used}
        self.costs = limits.units(limits.length_key, self.lengths[limits.length_key])
        self.budget = limits.padded.get(limits.length_key)

    @property
    def keys(self) -> list[str]:
        """The keys whose lengths batching needs."""
        lim = self.limits
        return sorted({lim.length_key, *lim.padded, *lim.packed})

    def bounds(self, order: np.ndarray) -> np.ndarray:
        """Batch boundaries over ``order`` (sequence indices) -> int64 ``[n_batches + 1]``."""
        if self.limits.plain:
            return greedy_bounds(self.costs[order], self.limits.max_seqs, self.budget)
        return self.bounds_of({k: self.lengths[k][order] for k in self.keys})

    def bounds_of(self, ordered: Mapping[str, np.ndarray]) -> np.ndarray:
        """Batch boundaries over units whose lengths per key (``self.keys``) are ``ordered``
        (int64 ``[m]`` each, in plan order) -> int64 ``[n_batches + 1]``."""
        lim = self.limits
        main = ordered[lim.length_key]
        if lim.plain:
            return greedy_bounds(lim.units(lim.length_key, main), lim.max_seqs, self.budget)
        m = len(main)
        if m == 0:
            return np.zeros(1, dtype=np.int64)
        cap = m if lim.max_seqs is None else min(lim.max_seqs, m)
        size = np.minimum(m - np.arange(m, dtype=np.int64), cap)  # [m]
        if lim.padded:
            big = np.iinfo(np.int64).max
            fit = np.full(m, big, dtype=np.int64)  # [m] how many of each unit fit a batch
            for key, budget in lim.padded.items():
                c = lim.units(key, ordered[key])
                per = np.full(m, big, dtype=np.int64)
                np.floor_divide(budget, c, out=per, where=c > 0)
                np.minimum(fit, per, out=fit)
            np.minimum(size, lift(fit, cap), out=size)
        for key, budget in lim.packed.items():
            cum = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(ordered[key], out=cum[1:])
            most = np.searchsorted(cum, cum[:-1] + budget, side="right") - 1  # last end that fits
            np.minimum(size, most - np.arange(m, dtype=np.int64), out=size)
        np.maximum(size, 1, out=size)
        return _chain(size.tolist(), m)

    def check_fits(
        self,
        longest: Mapping[str, np.ndarray],
        seq_of: np.ndarray,
        tags: Sequence[str] | None,
        origin: str,
        what: str = "sequence",
    ) -> None:
        """Every unit must fit a batch alone; else raise naming the first one, its key and the
        fix. ``longest``: per key, the longest unit of each checked sequence (int64 ``[m]``);
        ``seq_of``: those sequences (int64 ``[m]``)."""
        lim = self.limits
        q = lim.cost.quadratic
        # (key, option, over, the limit in frames, the longest length that fits it alone)
        frames = {k: b if q is None else b // q for k, b in lim.padded.items()}
        checks = [(k, "max_frames", lim.units(k, longest[k]) > b, frames[k],
                   lim.cost.longest_fitting(frames[k])) for k, b in lim.padded.items()]  # fmt: skip
        name = "max_frames" if lim.cost.packed else "max_packed_frames"
        checks += [(k, name, longest[k] > b, b, b) for k, b in lim.packed.items()]
        for key, option, over, shown, fits in checks:
            bad = np.flatnonzero(over)
            if not len(bad):
                continue
            u = int(bad[0])
            named = sequence_named(int(seq_of[u]), tags, origin)
            quadratic = q is not None and option == "max_frames"  # its cost, not its frames
            than = f"costing more than {option}[{key!r}]={shown} (batch_cost={lim.cost})"
            raise SequenceTooLongError(
                f"{what} of {named} has {int(longest[key][u])} frames of {key!r}, "
                f"{than if quadratic else f'more than {option}[{key!r}]={shown}'} allows, so it "
                f"fits no batch ({len(bad)} like this). Fix: raise {option} for {key!r}, or set "
                f"max_seq_length={{{key!r}: {fits}}} to filter such sequences (counted in the "
                "report)."
            )


def lift(fit: np.ndarray, cap: int) -> np.ndarray:
    """For every start ``i``: the largest ``c <= cap`` with ``c <= min(fit[i:i+c])`` (0 when even
    one does not fit; past the end counts as 0) -> int64 ``[m]``. Binary lifting over power-of-two
    range minima, in blocks of starts, in place; int16 while ``cap`` allows it (a quarter of the
    memory traffic: the chunked batcher's windows are long)."""
    m = len(fit)
    top = max(cap - 1, 0).bit_length()  # 2**top >= cap
    dtype = np.int16 if cap <= 1 << 13 else np.int64  # size + 2**top stays below 2**15
    out = np.empty(m, dtype=np.int64)
    for a in range(0, m, _BLOCK):
        b = min(m, a + _BLOCK)
        seg = np.zeros(b - a + (2 << top), dtype=dtype)  # zero past the end: never fits
        w = min(m, b + cap) - a
        np.minimum(fit[a : a + w], cap, out=seg[:w], casting="unsafe")  # values <= cap fit dtype
        levels = [seg]
        for k in range(1, top + 1):
            half = 1 << (k - 1)
            prev = levels[-1]
            levels.append(np.minimum(prev[:-half], prev[half:]))
        starts = np.arange(b - a, dtype=np.int64)
        size = np.zeros(b - a, dtype=dtype)
        low = np.full(b - a, cap, dtype=dtype)
        got = np.empty(b - a, dtype=dtype)
        ok = np.empty(b - a, dtype=bool)
        for k in range(top, -1, -1):
            cand = size + dtype(1 << k)
            np.take(levels[k], starts + size, out=got)
            np.minimum(got, low, out=got)
            np.less_equal(cand, got, out=ok)
            np.copyto(size, cand, where=ok)
            np.copyto(low, got, where=ok)
        out[a:b] = size
    return out


def _chain(size: list[int], m: int) -> np.ndarray:
    """Follow the batch starts: ``0, size[0], ...`` -> int64 bounds ``[n_batches + 1]``."""
    out = [0]
    start = 0
    while start < m:
        start += size[start]
        out.append(start)
    return np.asarray(out, dtype=np.int64)
