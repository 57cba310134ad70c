"""What the first steps of a ``buckets:N`` segment over files consume, all ranks at once, in closed form.

Under ``buckets:N`` a rank's order is a keyed stratified interleaving of its units' batches
(``seqloader.plan.indexed.interleave``): its batches fall into ``K`` blocks, unit ``u``'s batches
into every ``K / nb_u``-th block from a keyed phase, so the batches of unit ``u`` in the rank's
first ``k`` blocks are a closed form (``interleave.below``). For every old rank that has not run
through its batches, ``buckets_consumed``:

- **Blocks**: the pieces of its first ``k`` blocks follow per unit from that count (a unit's last,
  short batch is in the prefix when all its batches are), plus the leftover tie increments that
  reach them (``replay``'s split rule: they go to the rank's latest batches, so the prefix gets
  the rank's leftovers less the ties after it). A search over ``k``, all ranks at once, finds
  the block where the steps end: O(units x log2(blocks)).
- **The block**: its few batches (``BLOCK`` on average) in the order's keyed order, walked as
  ``Segment.consumed_rank_by_rank`` walks a rank's batches.

It equals ``Segment``'s rank-by-rank count (``tests/test_plan_indexed.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seqloader.plan.indexed import interleave as keyed
from seqloader.plan.indexed.bijection import round_keys_many
from seqloader.plan.indexed.replay import (
    LiveUnits,
    _ceil,
    _cumsum_within,
    _run_starts,
    _split_levels,
    _suffix_within,
)

#: the search counts in float64 where every ``k * nb_u`` lies below this (exact there)
FLOAT_EXACT = 2**53


def buckets_consumed(
    seg: LiveUnits, steps: int, order_words: Callable[[int], tuple[int, ...]]
) -> np.ndarray:
    """Sequences of each unit consumed in the segment's first ``steps`` steps under ``buckets:N``
    (``order_words(rank)``: the key of the rank's order, ``seqloader.plan.indexed.interleave``)
    -> int64 ``[U]`` (see the module doc)."""
    world = seg.world_size
    out = np.zeros(seg.num_units, dtype=np.int64)
    if steps <= 0 or not len(seg.live):
        return out
    q, nb, size = seg.owner, seg.nb.astype(np.int64), seg.size.astype(np.int64)
    last = seg.rem - (nb - 1) * size  # [L] each unit's last batch (1..size)
    rank_nb = seg.rank_batches
    listed = rank_nb
    if seg.uneven == "split":  # its pieces (split: the rank's real batches)
        listed = np.minimum(np.maximum(seg.steps, rank_nb), seg.rank_seqs)
    whole = steps >= listed  # [W] ranks whose every batch is consumed
    out[seg.live[whole[q]]] = seg.rem[whole[q]]
    walked = np.flatnonzero(~whole & (rank_nb > 0))
    if not len(walked):
        return out
    level, prev, cut, rest = _split_levels(seg, last)
    mine = np.flatnonzero(~whole[q] & (rank_nb[q] > 0))  # the walked ranks' live units
    lead = np.searchsorted(q, np.arange(world + 1), side="left")
    key = np.zeros(world, dtype=np.uint64)
    key[walked] = round_keys_many([order_words(r) for r in walked.tolist()])[:, 0]
    qm, km, lm = q[mine], size[mine], last[mine]
    pk, pl = _ceil(km, level[qm]), _ceil(lm, level[qm])
    tie_k = np.where(cut[qm], _ceil(km, prev[qm]) - pk, 0)
    tie_l = np.where(cut[qm], _ceil(lm, prev[qm]) - pl, 0)
    walk = _Blocks(qm, mine - lead[qm], nb[mine], km, lm, seg.rem[mine], pk, pl, tie_k, tie_l)
    out[seg.live[mine]] = walk.consumed(key, keyed.num_blocks(rank_nb), rest, steps)
    return out


class _Blocks:
    """``buckets_consumed``'s count over the walked ranks' live units (``[L']`` each, rank by
    rank: rank, place among the rank's units, batches, batch size, last batch, sequences left,
    pieces of a full and of the last batch at the rank's split level, their tie increments)."""

    def __init__(
        self,
        owner: np.ndarray,
        local: np.ndarray,
        nb: np.ndarray,
        size: np.ndarray,
        last: np.ndarray,
        rem: np.ndarray,
        pk: np.ndarray,
        pl: np.ndarray,
        tie_k: np.ndarray,
        tie_l: np.ndarray,
    ) -> None:
        self.owner, self.local, self.nb, self.size, self.last = owner, local, nb, size, last
        self.rem, self.pk, self.pl, self.tie_k, self.tie_l = rem, pk, pl, tie_k, tie_l
        self.cut = bool(tie_k.any() or tie_l.any())  # else no rank has tie increments
        self.starts = _run_starts(owner)
        self.ranks = owner[self.starts]
        self.sizes = np.diff(np.append(self.starts, len(owner)))
        #: per walked rank: its tie increments in all, its leftovers (set by ``consumed``)
        self.ttot = np.add.reduceat((nb - 1) * tie_k + tie_l, self.starts)
        self.rest = np.zeros(len(self.ranks), dtype=np.int64)
        self.phase = self.blocks = np.zeros(len(owner), dtype=np.int64)
        self._float_exact = True
        # the search's per-unit constants in float64: its sums and quotients of ints below 2**53
        # are exact there (a ceiling's quotient lies >= 1 / blocks from the next integer)
        f = np.float64
        self._f = (nb.astype(f), pk.astype(f), (pl - pk).astype(f), tie_k.astype(f),
                   (tie_l - tie_k).astype(f))  # fmt: skip

    def consumed(
        self, key: np.ndarray, blocks: np.ndarray, rest: np.ndarray, steps: int
    ) -> np.ndarray:
        """Sequences of each unit consumed in the first ``steps`` steps -> int64 ``[L']``
        (``key``, ``blocks``, ``rest``: per rank ``[W]``, its order key, blocks and leftover
        tie increments). The block where the steps end is found per rank by regula falsi
        (the pieces grow about linearly over the blocks: a few evaluations), every third
        step a bisection (so at most about ``3 log2(blocks)`` evaluations)."""
        ranks, sizes = self.ranks, self.sizes
        self.blocks = blocks[self.owner]
        self.phase = keyed.phases(key[self.owner], self.local, self.blocks)
        self.rest = rest[ranks]
        self._g = (self.phase.astype(np.float64), self.blocks.astype(np.float64))
        big = int(self.blocks.max(initial=0)) * int(self.nb.max(initial=0))
        self._float_exact = big < FLOAT_EXACT  # ``k * nb_u`` exact in float64 for all k
        lo = np.zeros(len(ranks), dtype=np.int64)  # pieces through lo blocks <= steps
        hi = blocks[ranks].astype(np.int64)  # ... through hi blocks > steps
        p_lo, p_hi = np.zeros(len(ranks)), self._pieces(hi)
        turn = 0
        while True:
            open_ = hi - lo > 1
            if not open_.any():
                break
            if turn % 3 == 2:
                probe = (lo + hi) // 2
            else:
                slope = (hi - lo) / np.maximum(p_hi - p_lo, 1.0)
                probe = lo + np.floor((steps + 0.5 - p_lo) * slope).astype(np.int64)
                probe = np.clip(probe, lo + 1, hi - 1)
            probe = np.where(open_, probe, lo)
            got = self._pieces(probe)
            fits = got <= steps
            lo, p_lo = np.where(open_ & fits, probe, lo), np.where(open_ & fits, got, p_lo)
            hi, p_hi = np.where(open_ & ~fits, probe, hi), np.where(open_ & ~fits, got, p_hi)
            turn += 1
        before = p_lo.astype(np.int64)
        c0 = keyed.below(np.repeat(lo, sizes), self.nb, self.phase, self.blocks)
        c1 = keyed.below(np.repeat(lo + 1, sizes), self.nb, self.phase, self.blocks)
        after = np.zeros(len(ranks), dtype=np.int64)
        if self.cut:  # the ties of the batches after the block
            full = c1 == self.nb
            tp = c1 * self.tie_k + full * (self.tie_l - self.tie_k)
            after = self.ttot - np.add.reduceat(tp, self.starts)
        done, partial = c0.copy(), np.zeros(len(c0), dtype=np.int64)
        self._finish(key, c0, c1, steps - before, after, done, partial)
        return np.minimum(done * self.size, self.rem) + partial

    def _pieces(self, k: np.ndarray) -> np.ndarray:
        """Per rank, the pieces of its first ``k`` blocks -> float64 ``[R]`` (integers): each
        unit's batches there (``interleave.below``, in float64), its last, short batch where
        all are, and the leftover tie increments reaching them."""
        nb, pk, dpl, tk, dtl = self._f
        phase, blocks = self._g
        if self._float_exact:
            c = np.repeat(k.astype(np.float64), self.sizes)
            c *= nb
            c -= phase
            c /= blocks
            np.ceil(c, out=c)
            np.clip(c, 0.0, nb, out=c)
        else:  # blocks * batches of a unit reach 2**53: the integer form (exact, slower)
            kk = np.repeat(k, self.sizes)
            c = keyed.below(kk, self.nb, self.phase, self.blocks).astype(np.float64)
        full = c == nb  # the unit's last, short batch is in the prefix
        pieces = c * pk
        pieces += full * dpl
        per = np.add.reduceat(pieces, self.starts)
        if not self.cut:
            return per
        tp = np.multiply(c, tk, out=c)
        tp += full * dtl
        ties = np.add.reduceat(tp, self.starts)
        per += np.clip(self.rest - (self.ttot - ties), 0, ties)
        return per

    def _finish(
        self,
        key: np.ndarray,
        c0: np.ndarray,
        c1: np.ndarray,
        need: np.ndarray,
        after: np.ndarray,
        done: np.ndarray,
        partial: np.ndarray,
    ) -> None:
        """Order the batches of each rank's block (units' batches ``c0 .. c1 - 1``) as
        ``interleave`` does and count what the ``need`` pieces left (per rank) consume: whole
        batches into ``done``, the one where the steps end into ``partial``."""
        n = c1 - c0
        ent = np.repeat(np.arange(len(n)), n)  # the block's batches, unit after unit
        t = c0[ent] + (np.arange(len(ent)) - np.repeat(np.cumsum(n) - n, n))
        r = self.owner[ent]
        h = keyed.batch_keys(key[r], self.local[ent], t)
        order = np.lexsort((h, r))  # stable: ties in the listing's (unit, t) order
        at_pos = np.empty(len(order), dtype=np.int64)
        at_pos[order] = np.arange(len(order))  # each listed batch's place in the order
        lead = np.flatnonzero(n)
        last_at = np.full(len(n), -1, dtype=np.int64)
        last_at[lead] = np.maximum.reduceat(at_pos, np.cumsum(n)[lead] - n[lead])
        ent, r = ent[order], r[order]  # the blocks' batches in order, rank by rank
        pos = np.arange(len(ent))
        holds_last = (last_at[ent] == pos) & (c1[ent] == self.nb[ent])
        first = np.ones(len(r), dtype=bool)
        first[1:] = r[1:] != r[:-1]
        bounds = np.append(np.flatnonzero(first), len(r))
        at = np.searchsorted(self.ranks, r)  # its place among the walked ranks
        pieces = np.where(holds_last, self.pl[ent], self.pk[ent])
        if self.cut:
            tie = np.where(holds_last, self.tie_l[ent], self.tie_k[ent])
            later = _suffix_within(tie, bounds) + after[at]
            pieces = pieces + np.clip(self.rest[at] - later, 0, tie)
        ends = _cumsum_within(pieces, bounds)
        left = need[at]
        done += np.bincount(ent[ends <= left], minlength=len(done))
        cross = np.flatnonzero((ends - pieces < left) & (ends > left))  # at most one a rank
        m = (left - (ends - pieces))[cross]
        sizes = np.where(holds_last[cross], self.last[ent[cross]], self.size[ent[cross]])
        whole, extra = np.divmod(sizes, pieces[cross])
        partial[ent[cross]] += m * whole + np.minimum(m, extra)  # one unit a rank
