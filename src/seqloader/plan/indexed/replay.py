"""What the first steps of a ``laplace`` segment consume, all ranks at once, without listing batches.

An elastic resume of ``distribution="files"`` under indexed planning replays every old rank's
order and split (``seqloader.plan.indexed.files``). Listing each rank's batches and sorting them
costs a Python step and a sort per rank (0.2 s at 10^7 sequences on 1,024 ranks, as much as
planning the rank's own share). Under ``laplace`` a rank's order is made of **blocks**: a rank's
batches are dealt to its ``B`` bins in length order (``laplace_blocks``), and in bin ``b`` unit
``u`` contributes consecutive batches of its order, all of the unit's batch size but the unit's
last batch. There are at most ``min(nb_u, B)`` blocks per unit, so the replay works on blocks,
vectorised over all ranks:

- **Order**: blocks sorted by (rank, bin, level ascending in even bins and descending in odd ones,
  unit), the order ``Segment.layout`` lists (from the same blocks).
- **Split** (``seqloader.plan.indexed.pieces``' rule): per rank, the level ``t*`` by bisection over its
  units (``(nb_u - 1) * ceil(k_u / t) + ceil(last_u / t)`` increments), every batch
  ``ceil(size / t*)`` pieces, and the leftover increments of value ``t*`` to the rank's latest
  eligible batches, block by block from its end.
- **Consumption**: blocks whose pieces end by ``steps`` are consumed whole; in the one block
  where ``steps`` falls, its batches are walked in closed form (a few groups of equal pieces).

Under ``buckets:N`` a rank's order is a keyed random interleaving of its units' batches (every
batch a uniform key, refined over dyadic intervals: ``seqloader.plan.indexed.interleave``), so
``buckets_consumed`` never lists a prefix. Each rank that has not run through its batches
descends from the whole key range to the interval where its ``steps`` pieces end, all ranks a
level at once, holding per unit its batches inside the current interval:

- **Halves**: each unit's batches in the interval's left half (``halves``, the same draw as the
  order's); a unit's ``t``-th occurrence holds its ``t``-th batch, so its last (short) batch is
  in a half where the unit has none after it.
- **Split**: the levels per rank as above; the left half's pieces are its batches' pieces plus
  the leftover tie increments that reach it (they go to the rank's latest batches: the rank's
  leftovers less the ties after the half). The steps end in the left half if its pieces reach
  them (then the right half's batches are after), else in the right (the left half's before).
- **End**: an interval of at most ``SMALL`` batches is ordered as the order orders it, and walked
  as ``Segment.consumed_rank_by_rank`` walks a rank's batches.

O(units x levels) per old rank (about ``log2`` of its batches), whatever the steps.

Both results equal ``Segment``'s rank-by-rank count (``tests/test_plan_indexed.py`` checks them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.plan.indexed import interleave as keyed
from seqloader.plan.indexed.bijection import round_keys_many
from seqloader.plan.indexed.interleave import (
    in_node_keys,
    interval_word,
    unit_base,
)
from seqloader.plan.options import Ordering, Uneven
from seqloader.plan.ordering import argsort_by


@dataclass(frozen=True)
class LiveUnits:
    """What the replay reads of a segment (``indexed_files.Segment.live_units``): its units with
    batches left, rank by rank (unit order within), and the per-rank totals."""

    world_size: int
    steps: int
    uneven: Uneven
    ordering: Ordering
    num_units: int  #: every unit of the epoch (the result's length)
    live: np.ndarray  #: [L] unit ids
    owner: np.ndarray  #: [L] their rank
    nb: np.ndarray  #: [L] batches left
    size: np.ndarray  #: [L] batch size
    rem: np.ndarray  #: [L] sequences left
    level: np.ndarray  #: [L] bucket level (laplace's major key)
    rank_batches: np.ndarray  #: [W]
    rank_seqs: np.ndarray  #: [W]


def _ceil(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``ceil(x / t)`` of ints ``0 <= x < 2**53``, ``t >= 1`` -> int64 (in float64: exact)."""
    out = np.divide(x, t, dtype=np.float64)
    return np.ceil(out, out=out).astype(np.int64)


def laplace_consumed(seg: LiveUnits, steps: int) -> np.ndarray:
    """Sequences of each unit consumed in the segment's first ``steps`` steps -> int64 ``[U]``."""
    world = seg.world_size
    out = np.zeros(seg.num_units, dtype=np.int64)
    live = seg.live
    if steps <= 0 or not len(live):
        return out
    nb, size = seg.nb, seg.size
    last = seg.rem - (nb - 1) * size  # [L] the unit's last batch (1..size)
    level, prev, cut, rest = _split_levels(seg, last)
    blk_unit, count, first = _rank_blocks(seg)
    blk_q = seg.owner[blk_unit]
    short = (first + count == nb[blk_unit]).astype(np.int64)  # holds the unit's last batch
    full = count - short
    k_b, l_b = size[blk_unit], last[blk_unit]
    t_b, p_b = level[blk_q], prev[blk_q]
    pk, pl = _ceil(k_b, t_b), _ceil(l_b, t_b)
    ck = np.where(cut[blk_q], _ceil(k_b, p_b) - pk, 0)
    cl = np.where(cut[blk_q], _ceil(l_b, p_b) - pl, 0)
    events = full * ck + short * cl  # [blocks] tie increments each block could take
    # leftovers go to a rank's latest eligible batches: blocks from its end
    rank_start = np.searchsorted(blk_q, np.arange(world + 1), side="left")
    after = _suffix_within(events, rank_start)  # events of the rank's later blocks
    extra = np.clip(rest[blk_q] - after, 0, events)
    pieces = full * pk + short * pl + extra
    ends = _cumsum_within(pieces, rank_start)  # pieces through each block, per rank
    seqs = full * k_b + short * l_b

    done = ends <= steps
    np.add.at(out, live[blk_unit[done]], seqs[done])
    crossing = np.flatnonzero(~done & (ends - pieces < steps))  # at most one block per rank
    for i in crossing.tolist():
        m = steps - int(ends[i] - pieces[i])
        groups = _groups(
            int(full[i]), int(short[i]), int(k_b[i]), int(l_b[i]), int(pk[i]), int(pl[i]),
            int(ck[i]), int(cl[i]), int(extra[i]),
        )  # fmt: skip
        out[live[blk_unit[i]]] += _walk(groups, m)
    return out


def buckets_consumed(
    seg: LiveUnits, steps: int, order_words: Callable[[int], tuple[int, ...]]
) -> np.ndarray:
    """Sequences of each unit consumed in the segment's first ``steps`` steps under ``buckets:N``
    (``order_words(rank)``: the key of the rank's order, ``seqloader.plan.indexed.interleave``)
    -> int64 ``[U]``: every rank that has not run through its batches descends from the whole
    key range to the small interval where its ``steps`` pieces end, all ranks a level at once
    (see the module doc), then orders that interval's few batches."""
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
    cuts = cut[qm]
    tie_k = np.where(cuts, _ceil(km, prev[qm]) - pk, 0)
    tie_l = np.where(cuts, _ceil(lm, prev[qm]) - pl, 0)
    local = (mine - lead[qm]).astype(np.uint64)
    walk = _Descent(
        qm, local, nb[mine], km, lm, seg.rem[mine], pk, pl, tie_k, tie_l, key, rest, steps
    )
    out[seg.live[mine]] = walk.consumed(world)
    return out


class _Descent:
    """``buckets_consumed``'s walk over the walked ranks' live units (``[L']`` each: rank, place
    among the rank's units, batches, batch size, last batch, sequences left, pieces of a full
    and of the last batch at the rank's split level, their tie increments; ``[W]``: the ranks'
    order keys and leftover tie increments)."""

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
        key: np.ndarray,
        rest: np.ndarray,
        steps: int,
    ) -> None:
        self.owner, self.local, self.nb, self.size, self.last = owner, local, nb, size, last
        self.rem, self.pk, self.pl, self.tie_k, self.tie_l = rem, pk, pl, tie_k, tie_l
        self.key, self.rest, self.steps = key, rest, steps
        self.base = unit_base(key[owner], local)  # each unit's first hash (``halves``)
        self.cut = bool(tie_k.any() or tie_l.any())  # else no rank has tie increments

    def consumed(self, world: int) -> np.ndarray:
        """Sequences of each unit consumed in the first ``steps`` steps -> int64 ``[L']``. The
        walk holds only the units with batches in their rank's current interval (fewer every
        level), whether each has batches after it, and per rank the interval, the pieces before
        it and the tie increments after it. Entries stay sorted by rank, so per-rank sums are
        ``reduceat`` over each rank's run (much faster than bincount with weights)."""
        q, steps = self.owner, self.steps
        done = np.zeros(len(q), dtype=np.int64)  # batches of each unit before the interval
        partial = np.zeros(len(q), dtype=np.int64)
        idx = np.flatnonzero(self.nb > 0)  # the walk's entries (ascending: rank by rank)
        cnt, later = self.nb[idx], np.zeros(len(idx), dtype=bool)
        before_c = np.zeros(len(idx), dtype=np.int64)  # ``done`` of the entries, kept with them
        scratch = self._scratch(len(idx))
        starts = _run_starts(q[idx]) if len(idx) else np.zeros(0, np.int64)
        ranks, sizes = q[idx][starts], np.diff(np.append(starts, len(idx)))
        node = np.zeros(world, dtype=np.uint64)
        before = np.zeros(world, dtype=np.int64)
        ties_after = np.zeros(world, dtype=np.int64)
        level = 0
        while len(idx):
            total = np.add.reduceat(cnt, starts)
            ends = (total <= keyed.SMALL) | (level == keyed.MAX_LEVEL)
            if ends.any():  # the interval's few batches in their keyed order
                ending = np.repeat(ends, sizes)
                sel, stay = np.flatnonzero(ending), np.flatnonzero(~ending)
                done[idx[sel]] = before_c[sel]
                self._finish(idx[sel], cnt[sel], later[sel], done, partial, node, level,
                             before, ties_after)  # fmt: skip
                idx, cnt, later, before_c = idx[stay], cnt[stay], later[stay], before_c[stay]
                if not len(idx):
                    break
                ranks, sizes = ranks[~ends], sizes[~ends]
                starts = np.cumsum(sizes) - sizes
            left, right, per, t_r = self._left_half(
                idx, cnt, later, ranks, sizes, starts, node, ties_after, level, scratch
            )
            tmp = scratch[3][: len(idx)]
            go_left = per >= steps - before[ranks]  # the steps end in the left half
            gl = np.repeat(go_left, sizes)
            before_c += np.multiply(left, ~gl, out=tmp)
            later |= gl & (right > 0)
            left -= right  # the new interval's count: left where the steps go left, else right
            left *= gl
            right += left
            cnt = right
            ties_after[ranks] += go_left * t_r
            before[ranks] += ~go_left * per
            node[ranks] = (node[ranks] << np.uint64(1)) | (~go_left).astype(np.uint64)
            level += 1
            if np.count_nonzero(cnt) < len(cnt):  # units with none in the new interval leave
                gone = np.flatnonzero(cnt == 0)
                done[idx[gone]] = before_c[gone]
                keep = np.flatnonzero(cnt)
                sizes = np.add.reduceat(cnt > 0, starts, dtype=np.int64)
                idx, cnt, later, before_c = idx[keep], cnt[keep], later[keep], before_c[keep]
                ranks, sizes = ranks[sizes > 0], sizes[sizes > 0]
                starts = np.cumsum(sizes) - sizes
        return np.minimum(done * self.size, self.rem) + partial

    def _scratch(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``consumed``'s per-entry constants (pieces of a full batch, the last's extra, and the
        same for tie increments) and its scratch arrays for ``n`` entries, reused per level."""
        consts = np.stack([self.pk, self.pl - self.pk, self.tie_k, self.tie_l - self.tie_k], 1)
        if not self.cut:
            consts = consts[:, :2]
        rows = np.empty((n, consts.shape[1]), dtype=np.int64)
        sums_buf = np.empty((n, 3 if self.cut else 1), dtype=np.int64)
        return consts, rows, sums_buf, np.empty(n, dtype=np.int64)

    def _left_half(
        self,
        idx: np.ndarray,
        cnt: np.ndarray,
        later: np.ndarray,
        ranks: np.ndarray,
        sizes: np.ndarray,
        starts: np.ndarray,
        node: np.ndarray,
        ties_after: np.ndarray,
        level: int,
        scratch: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | int]:
        """One level of ``consumed``'s descent: each entry's batches in its rank's interval's
        left half (``halves``' draw) -> (left, right: batches per entry; per rank the left
        half's pieces with the leftover tie increments reaching it, and the right half's tie
        increments, 0 where no rank has any)."""
        consts, rows, sums_buf, tmp_buf = scratch
        m = len(idx)
        h = self.base[idx]
        h += np.repeat(keyed.interval_mix(node[ranks], level), sizes)
        left = keyed.keyed_ones(h, cnt)
        right = cnt - left
        fresh = ~later
        last_l = fresh & (right == 0)  # a unit's last batch
        c = np.take(consts, idx, axis=0, out=rows[:m])
        sums, tmp = sums_buf[:m], tmp_buf[:m]
        np.multiply(left, c[:, 0], out=sums[:, 0])
        sums[:, 0] += np.multiply(last_l, c[:, 1], out=tmp)
        if self.cut:  # leftover tie increments reaching the left half, and the right's
            last_r = fresh ^ last_l
            np.multiply(left, c[:, 2], out=sums[:, 1])
            sums[:, 1] += np.multiply(last_l, c[:, 3], out=tmp)
            np.multiply(right, c[:, 2], out=sums[:, 2])
            sums[:, 2] += np.multiply(last_r, c[:, 3], out=tmp)
        per_rank = np.add.reduceat(sums, starts, axis=0)
        per = per_rank[:, 0]
        t_r: np.ndarray | int = 0
        if self.cut:
            t_r = per_rank[:, 2]
            per += np.clip(self.rest[ranks] - (ties_after[ranks] + t_r), 0, per_rank[:, 1])
        return left, right, per, t_r

    def _finish(
        self,
        units: np.ndarray,
        c: np.ndarray,
        later: np.ndarray,
        done: np.ndarray,
        partial: np.ndarray,
        node: np.ndarray,
        level: int,
        before: np.ndarray,
        ties_after: np.ndarray,
    ) -> None:
        """Order the batches of the ranks' small intervals (``units``: their units with batches
        there, rank by rank, ``c`` batches each, ``later``: with batches after the interval) as
        ``interleave`` does and count what the steps consume: whole batches into ``done``, the
        one where the steps end into ``partial``."""
        batch = np.repeat(np.arange(len(units)), c)  # listed unit after unit, rank by rank
        u = units[batch]
        r = self.owner[u]
        first = np.ones(len(r), dtype=bool)
        first[1:] = r[1:] != r[:-1]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        j = np.arange(len(r), dtype=np.int64) - starts[group]
        sort_key = in_node_keys(self.key[r], interval_word(node[r], level), j)
        order = np.lexsort((j, sort_key, r))
        u, r = u[order], r[order]  # the intervals' batches in order, rank by rank
        pos = np.arange(len(u))
        last_at = np.full(len(done), -1, dtype=np.int64)
        np.maximum.at(last_at, u, pos)
        holds_last = (last_at[u] == pos) & ~later[batch[order]]
        tie = np.where(holds_last, self.tie_l[u], self.tie_k[u])
        bounds = np.append(starts, len(u))
        later = _suffix_within(tie, bounds) + ties_after[r]  # ties of the rank's later batches
        pieces = np.where(holds_last, self.pl[u], self.pk[u])
        pieces = pieces + np.clip(self.rest[r] - later, 0, tie)
        ends = _cumsum_within(pieces, bounds)
        need = self.steps - before[r]
        np.add.at(done, u[ends <= need], 1)
        cross = np.flatnonzero((ends - pieces < need) & (ends > need))  # at most one a rank
        m = (need - (ends - pieces))[cross]
        sizes = np.where(holds_last[cross], self.last[u[cross]], self.size[u[cross]])
        whole, extra = np.divmod(sizes, pieces[cross])
        np.add.at(partial, u[cross], m * whole + np.minimum(m, extra))


def _split_levels(
    seg: LiveUnits, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per rank (``last``: each live unit's last batch size): the split level t* (big: no
    split; 1: every piece one sequence), the level of its ties (increments of value exactly
    t*), whether the rank splits at a level, and its leftover increments -> ``[W]`` each."""
    world = seg.world_size
    big = int(seg.size.max()) + 1
    rank_nb, rank_seqs = seg.rank_batches, seg.rank_seqs
    need = (
        np.maximum(seg.steps - rank_nb, 0) if seg.uneven == "split" else np.zeros(world, np.int64)
    )
    level = np.full(world, big, dtype=np.int64)
    singles = need >= rank_seqs - rank_nb
    level[singles & (need > 0)] = 1
    cut = (need > 0) & ~singles

    rest = np.zeros(world, dtype=np.int64)
    if cut.any():
        ranks, hi, left = _bisect_levels(seg, last, cut, need, big)
        level[ranks], rest[ranks] = hi, left
    prev = np.where(cut, level - 1, 1)  # ties: increments of value exactly t*
    return level, prev, cut, rest


def _bisect_levels(
    seg: LiveUnits, last: np.ndarray, cut: np.ndarray, need: np.ndarray, big: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_split_levels``' bisection, per cut rank over its units only, in float64 (exact: the
    ceiling of a quotient of ints below 2**53 lies >= 1/t from the next integer, farther than
    the division's rounding) -> (the cut ranks, their level t*, their leftover increments)."""
    q = seg.owner
    units = np.flatnonzero(cut[q])  # q sorted: each cut rank's units are one run
    starts = _run_starts(q[units])
    ranks = q[units][starts]
    group = np.repeat(np.arange(len(ranks)), np.diff(np.append(starts, len(units))))
    k, lb = seg.size[units].astype(np.float64), last[units].astype(np.float64)
    w = seg.nb[units].astype(np.float64) - 1
    t, a, b = np.empty(len(units)), np.empty(len(units)), np.empty(len(units))
    base, goal = seg.rank_batches[ranks], need[ranks]

    def above(t_of_rank: np.ndarray) -> np.ndarray:  # increments of value > t, per rank
        np.take(t_of_rank.astype(np.float64), group, out=t)
        np.ceil(np.divide(k, t, out=a), out=a)
        np.ceil(np.divide(lb, t, out=b), out=b)
        np.add(np.multiply(a, w, out=a), b, out=a)
        return np.add.reduceat(a, starts).astype(np.int64) - base

    lo, hi = np.ones(len(ranks), dtype=np.int64), np.full(len(ranks), big, dtype=np.int64)
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            break
        mid = (lo + hi) // 2
        fits = above(np.where(open_, mid, hi)) <= goal
        hi = np.where(open_ & fits, mid, hi)
        lo = np.where(open_ & ~fits, mid, lo)
    return ranks, hi, goal - above(hi)


def _rank_blocks(seg: LiveUnits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (unit, bin) blocks with batches, in each rank's order: (the unit, an index into
    ``live``; its batches in the block; the first of them) -> int64 ``[blocks]`` each."""
    bins = _num_bins(seg, seg.rank_seqs)[seg.owner]
    return laplace_blocks(seg.owner, seg.live, seg.nb, seg.level, bins)


def laplace_blocks(
    owner: np.ndarray, unit: np.ndarray, nb: np.ndarray, level: np.ndarray, bins: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``laplace`` over ``files``: each rank's batches dealt to its bins in length order.

    Per unit ``[L]``: its rank, id, batches, level (its first bucket) and its rank's bins ``B``.
    A rank's units in (level, unit) order, their batches end to end, put the batch at position
    ``j`` in bin ``j % B``: every bin holds every ``B``-th batch in length order (bin sizes
    differ by at most one), so each bin spans the rank's lengths as a shard bin spans every run,
    also where most units hold one batch (many ranks, few sequences each). The bins come in
    turn, levels ascending in even bins and descending in odd ones (as ``laplace_bins``).

    -> the blocks ``(unit, bin)`` with batches, in each rank's order: (an index into the
    arguments, its batches, the first of them in the unit's order) -> int64 ``[blocks]`` each;
    a unit's ``t``-th batch in the rank's order is its ``t``-th (its blocks: bin after bin).

    >>> laplace_blocks(*(np.array(a) for a in ([0, 0], [4, 5], [2, 1], [0, 3], [2, 2])))
    (array([0, 1, 0]), array([1, 1, 1]), array([0, 0, 1]))
    """
    nb = nb.astype(np.int64)
    bins = bins.astype(np.int64)
    by = _length_order(owner, unit, level)  # each rank's units in length order
    owned = owner[by]
    ends = np.cumsum(nb[by])
    begin = np.searchsorted(owned, owned, side="left")  # each rank's first unit
    before = ends - nb[by] - np.concatenate([[0], ends])[begin]  # batches before, in its rank
    phase = np.empty(len(nb), dtype=np.int64)
    phase[by] = before % bins[by]  # the bin of the unit's first batch
    nblk = np.minimum(nb, bins)  # relative bin k: positions phase + k, phase + k + B, ..
    blk = np.repeat(np.arange(len(nb), dtype=np.int64), nblk)
    k = np.arange(int(nblk.sum()), dtype=np.int64) - np.repeat(np.cumsum(nblk) - nblk, nblk)
    b, p = bins[blk], phase[blk]
    q, r = np.divmod(nb[blk], b)

    def through(a: np.ndarray) -> np.ndarray:  # batches in relative bins [0, a), a <= B
        return a * q + np.minimum(a, r)

    count = q + (k < r)
    wrapped = p + k >= b  # relative bins from B - phase on come first (bins 0, 1, ..)
    first = np.where(wrapped, 0, nb[blk]) + through(k) - through(b - p)
    bin_of = np.where(wrapped, p + k - b, p + k)
    lev = level[blk].astype(np.int64)
    major = np.where(bin_of % 2 == 1, -lev, lev)
    order = _block_order(owner, unit, blk, bin_of, major)
    return blk[order], count[order], first[order]


def _ranked_units(owner: np.ndarray, unit: np.ndarray) -> bool:
    """Whether the units come rank by rank, ascending within a rank (what the callers pass)."""
    if len(owner) < 2:
        return True
    same = owner[1:] == owner[:-1]
    return bool(np.all(owner[1:] >= owner[:-1]) and np.all(unit[1:][same] > unit[:-1][same]))


def _length_order(owner: np.ndarray, unit: np.ndarray, level: np.ndarray) -> np.ndarray:
    """The units by (rank, level, unit) -> int64: no sort where they already come so (a first
    segment's units: an old rank's runs are in bucket order)."""
    n = len(owner)
    if _ranked_units(owner, unit):
        same = owner[1:] == owner[:-1]
        if not np.any(same & (level[1:] < level[:-1])):
            return np.arange(n, dtype=np.int64)
    return np.lexsort((unit, level, owner)).astype(np.int64)


def _block_order(
    owner: np.ndarray, unit: np.ndarray, blk: np.ndarray, bin_of: np.ndarray, major: np.ndarray
) -> np.ndarray:
    """The blocks by (rank, bin, major, unit) -> int64. Blocks are listed unit after unit, so
    where the units come rank by rank (ascending within) one stable sort of the packed
    (rank, bin, major) is that order (ties keep the listing's, i.e. the unit's), without a
    four-key lexsort."""
    if not len(blk) or not _ranked_units(owner, unit):
        return np.lexsort((unit[blk], major, bin_of, owner[blk])).astype(np.int64)
    lo = int(major.min())
    span_major = int(major.max()) - lo + 1
    span_bin = int(bin_of.max()) + 1
    if int(owner.max()) * span_bin * span_major >= 2**62:
        return np.lexsort((unit[blk], major, bin_of, owner[blk])).astype(np.int64)
    key = owner[blk].astype(np.int64) * span_bin
    key += bin_of
    key *= span_major
    key += major - lo
    return argsort_by(key)


def _num_bins(seg: LiveUnits, seqs: np.ndarray) -> np.ndarray:
    """``Ordering.num_bins`` of each rank's sequences -> int64 ``[W]``."""
    ordering = seg.ordering
    if ordering.bin_size is not None:
        return np.maximum(seqs // ordering.bin_size, 2).astype(np.int64)
    return np.full(len(seqs), ordering.bins or 2, dtype=np.int64)


def _run_starts(r: np.ndarray) -> np.ndarray:
    """Where each run of equal values of sorted, non-empty ``r`` starts -> int64."""
    return np.concatenate(([0], np.flatnonzero(r[1:] != r[:-1]) + 1))


def _cumsum_within(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each group (``starts``: group bounds ``[G + 1]``)."""
    total = np.cumsum(x)
    before = np.concatenate([[0], total])[starts[:-1]]  # [G] sum before each group
    sizes = np.diff(starts)
    return total - np.repeat(before, sizes)


def _suffix_within(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of the later elements of each element's group (exclusive)."""
    through = _cumsum_within(x, starts)
    group_total = np.repeat(through[np.maximum(starts[1:] - 1, 0)], np.diff(starts))
    return group_total - through


def _groups(
    full: int, short: int, k: int, last: int, pk: int, pl: int, ck: int, cl: int, extra: int
) -> list[tuple[int, int, int]]:
    """A block's batches in order as (batches, size, pieces each): ``extra`` tie increments go
    to its latest eligible batches (the last batch first, then full ones from the end)."""
    el = min(extra, cl) if short else 0
    rest = extra - el
    whole, part = divmod(rest, ck) if ck else (0, 0)
    plain = full - whole - (1 if part else 0)
    return [
        (plain, k, pk),
        (1 if part else 0, k, pk + part),
        (whole, k, pk + ck),
        (short, last, pl + el),
    ]


def _walk(groups: list[tuple[int, int, int]], m: int) -> int:
    """Sequences in the first ``m`` pieces of batches ``groups`` (each batch cut into its pieces,
    the first ``size % pieces`` one longer)."""
    seqs = 0
    for batches, size, pieces in groups:
        if m <= 0:
            break
        if not batches:
            continue
        whole = min(m // pieces, batches)
        seqs += whole * size
        m -= whole * pieces
        if whole == batches:
            continue
        q, r = divmod(size, pieces)  # m < pieces: part of the next batch
        seqs += m * q + min(m, r)
        m = 0
    return seqs
