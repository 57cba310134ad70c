"""What the first steps of a ``laplace`` segment consume, all ranks at once, without listing batches.

An elastic resume of ``distribution="files"`` under indexed planning replays every old rank's
order and split (``seqloader.plan.indexed.files``). Listing each rank's batches and sorting them
costs a Python step and a sort per rank (0.2 s at 10^7 sequences on 1,024 ranks, as much as
planning the rank's own share). Under ``laplace`` a rank's order is made of **blocks**: in bin
``b``, unit ``u`` contributes its batches ``t`` with ``t * B // nb_u == b``, consecutive, all of the unit's batch size but the unit's last batch. There are at most ``bins x
units`` blocks (a few per unit), so the replay works on blocks, vectorised over all ranks:

- **Order**: blocks sorted by (rank, bin, level ascending in even bins and descending in odd ones,
  unit), as ``Segment.layout`` sorts batches.
- **Split** (``seqloader.plan.indexed.pieces``' rule): per rank, the level ``t*`` by bisection over its
  units (``(nb_u - 1) * ceil(k_u / t) + ceil(last_u / t)`` increments), every batch
  ``ceil(size / t*)`` pieces, and the leftover increments of value ``t*`` to the rank's latest
  eligible batches, block by block from its end.
- **Consumption**: blocks whose pieces end by ``steps`` are consumed whole; in the one block
  where ``steps`` falls, its batches are walked in closed form (a few groups of equal pieces).

Under ``buckets:N`` a rank's order is its listed batches (unit after unit) at the positions of a
keyed bijection (``seqloader.plan.indexed.bijection``), so ``buckets_consumed`` computes, of each
rank that has not run through its batches, only the first ``steps`` positions of its order (all
ranks' prefixes at once by lookup tables, ``prefix_images``: O(consumed), not O(batches)) and
counts the rest for a block of ranks at once (a batch is one piece or more, so no later batch is
reached):

- **Sizes**: a unit's ``t``-th occurrence holds its ``t``-th batch, of the unit's size but the last
  (``t = nb - 1``): in the prefix, the last occurrence of a unit whose every batch lies there.
- **Split**: the levels per rank as above; the leftover tie increments go to the rank's latest
  batches, so what a prefix position takes follows from the rank's ties in all less the
  prefix's through it. Then consumption as ``Segment.consumed_rank_by_rank`` walks it.

Both results equal ``Segment``'s rank-by-rank count (``tests/test_plan_indexed.py`` checks them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.plan.indexed.bijection import prefix_images
from seqloader.plan.indexed.plan import ranges
from seqloader.plan.options import Ordering, Uneven


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
    return -(-x // t)


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


#: prefix positions of the walked ranks counted at once: bounds the replay's memory
_BLOCK = 1 << 20


def buckets_consumed(
    seg: LiveUnits,
    steps: int,
    order_words: Callable[[int], tuple[int, ...]],
    block: int = _BLOCK,
) -> np.ndarray:
    """Sequences of each unit consumed in the segment's first ``steps`` steps under ``buckets:N``
    (``order_words(rank)``: the key of the rank's batch order, as ``Segment.layout`` lists it)
    -> int64 ``[U]``: of each rank that has not run through its batches, only the first
    ``steps`` positions of its order are computed (``prefix_images``); their sizes, split and
    consumption are counted for ranks of about ``block`` positions at once."""
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
    level, prev, cut, rest = _split_levels(seg, last)
    t_u, p_u = level[q], prev[q]  # per unit: tie increments of a full and of its last batch
    tie_k = np.where(cut[q], _ceil(size, p_u) - _ceil(size, t_u), 0)
    tie_l = np.where(cut[q], _ceil(last, p_u) - _ceil(last, t_u), 0)
    ties = np.bincount(q, weights=(nb - 1) * tie_k + tie_l, minlength=world).astype(np.int64)
    first = np.zeros(len(nb) + 1, dtype=np.int64)  # each live unit's first batch, end to end
    np.cumsum(nb, out=first[1:])
    units = _Prefix(
        first, np.searchsorted(q, np.arange(world + 1), side="left"), q, size, last,
        seg.rem, _ceil(size, t_u), _ceil(last, t_u), tie_k, tie_l,
    )  # fmt: skip
    walked = np.flatnonzero(~whole & (rank_nb > 0))
    a = 0
    while a < len(walked):  # blocks of ranks, about ``block`` prefix positions each
        span = np.cumsum(np.minimum(rank_nb[walked[a:]], steps))
        b = a + max(int(np.searchsorted(span, block, side="right")), 1)
        ranks = walked[a:b]
        lengths = np.minimum(rank_nb[ranks], steps)
        # each prefix position's listed batch (the rank's order, a keyed bijection), rank after
        # rank, as a batch of every live unit end to end; then its live unit
        at = prefix_images(rank_nb[ranks], [order_words(r) for r in ranks.tolist()], lengths)
        at += np.repeat(units.first[units.lead[ranks]], lengths)
        unit = np.searchsorted(units.first, at, side="right") - 1
        out[seg.live] += units.consumed(ranks, unit, lengths, steps, rest, ties)
        a = b
    return out


@dataclass(frozen=True)
class _Prefix:
    """The live units as ``buckets_consumed`` walks them: ``first`` int64 ``[L + 1]`` each one's
    first batch with every rank's units end to end (``_by`` order), ``lead`` ``[W + 1]`` each
    rank's first live unit; per live unit ``[L]`` its rank, batch size, last batch, sequences
    left, the pieces of a full and of its last batch at its rank's level and their ties."""

    first: np.ndarray
    lead: np.ndarray
    owner: np.ndarray
    size: np.ndarray
    last: np.ndarray
    rem: np.ndarray
    pk: np.ndarray
    pl: np.ndarray
    tie_k: np.ndarray
    tie_l: np.ndarray

    def consumed(
        self,
        ranks: np.ndarray,
        unit: np.ndarray,
        lengths: np.ndarray,
        steps: int,
        rest: np.ndarray,
        ties: np.ndarray,
    ) -> np.ndarray:
        """Sequences of each live unit consumed in the first ``steps`` steps of ``ranks``
        (ascending; ``unit``: the live unit of each position of their permuted batches, cut to
        ``steps``, ``lengths`` positions a rank; ``rest``, ``ties``: ``[W]`` each rank's leftover
        tie increments and its ties in all) -> int64 ``[L]``."""
        starts = np.zeros(len(ranks) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        nb = np.diff(self.first)
        count = np.bincount(unit, minlength=len(nb))
        full = count == nb  # units whose every batch is in the prefix: their last one there
        last_at = np.full(len(nb), -1, dtype=np.int64)
        inside = np.flatnonzero(full[unit])
        np.maximum.at(last_at, unit[inside], inside)
        short = last_at[full]  # [S] the positions of those last batches
        pieces = self.pk[unit]
        pieces[short] = self.pl[unit[short]]
        # leftover tie increments go to a rank's latest batches: only ranks whose prefix
        # reaches them (more left over than the ties past the prefix) take any in it
        prefix_ties = count * self.tie_k + full * (self.tie_l - self.tie_k)
        past = ties - np.bincount(self.owner, weights=prefix_ties, minlength=len(ties))
        for i in np.flatnonzero(rest[ranks] > past[ranks]).tolist():
            r, span = int(ranks[i]), slice(int(starts[i]), int(starts[i + 1]))
            tie = self.tie_k[unit[span]]
            mine = short[(short >= span.start) & (short < span.stop)]
            tie[mine - span.start] = self.tie_l[unit[mine]]
            after = int(ties[r]) - np.cumsum(tie)  # ties of the rank's later batches
            pieces[span] += np.clip(int(rest[r]) - after, 0, tie)
        ends = np.cumsum(pieces)  # pieces through each position, the block's ranks end to end
        limit = np.concatenate([[0], ends])[starts[:-1]] + steps  # [R] each rank's last end
        stop = np.minimum(np.searchsorted(ends, limit, side="right"), starts[1:])
        later = ranges(stop, starts[1:])  # positions past the steps (not whole)
        done = count - np.bincount(unit[later], minlength=len(nb))
        out = np.minimum(done * self.size, self.rem)
        cross = stop[stop < starts[1:]]  # the batch where the steps end, if partly consumed
        m = limit[stop < starts[1:]] - (ends[cross] - pieces[cross])  # its first m pieces
        last = last_at[unit[cross]] == cross  # the unit's last batch
        sizes = np.where(last, self.last[unit[cross]], self.size[unit[cross]])
        whole, extra = np.divmod(sizes, pieces[cross])
        np.add.at(out, unit[cross], m * whole + np.minimum(m, extra))
        return out


def _split_levels(
    seg: LiveUnits, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per rank (``last``: each live unit's last batch size): the split level t* (big: no
    split; 1: every piece one sequence), the level of its ties (increments of value exactly
    t*), whether the rank splits at a level, and its leftover increments -> ``[W]`` each."""
    world, q = seg.world_size, seg.owner  # q: [L], aligned with live
    nb, size = seg.nb, seg.size
    big = int(size.max()) + 1
    rank_nb, rank_seqs = seg.rank_batches, seg.rank_seqs
    need = (
        np.maximum(seg.steps - rank_nb, 0) if seg.uneven == "split" else np.zeros(world, np.int64)
    )
    level = np.full(world, big, dtype=np.int64)
    singles = need >= rank_seqs - rank_nb
    level[singles & (need > 0)] = 1
    cut = (need > 0) & ~singles

    def above(t_of_rank: np.ndarray) -> np.ndarray:  # increments of value > t, per rank
        t = t_of_rank[q]
        per = (nb - 1) * _ceil(size, t) + _ceil(last, t)
        return np.bincount(q, weights=per, minlength=world).astype(np.int64) - rank_nb

    rest = np.zeros(world, dtype=np.int64)
    if cut.any():
        lo, hi = np.ones(world, dtype=np.int64), np.full(world, big, dtype=np.int64)
        while True:
            open_ = cut & (hi - lo > 1)
            if not open_.any():
                break
            mid = (lo + hi) // 2
            fits = above(np.where(open_, mid, hi)) <= need
            hi = np.where(open_ & fits, mid, hi)
            lo = np.where(open_ & ~fits, mid, lo)
        level[cut] = hi[cut]
        rest[cut] = (need - above(level))[cut]
    prev = np.where(cut, level - 1, 1)  # ties: increments of value exactly t*
    return level, prev, cut, rest


def _rank_blocks(seg: LiveUnits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (unit, bin) blocks with batches, in each rank's order: (the unit, an index into
    ``live``; its batches in the block; the first of them) -> int64 ``[blocks]`` each."""
    q, nb, live = seg.owner, seg.nb, seg.live
    bins = _num_bins(seg, seg.rank_seqs)[q]
    nblk = np.minimum(bins, nb)
    blk_unit = np.repeat(np.arange(len(live)), nblk)  # index into live
    k = np.arange(int(nblk.sum()), dtype=np.int64) - np.repeat(np.cumsum(nblk) - nblk, nblk)
    nb_b, bins_b = nb[blk_unit], bins[blk_unit]
    wide = nb_b >= bins_b  # every bin has batches: block k is bin k; else batch k alone
    bin_of = np.where(wide, k, (k * bins_b) // np.maximum(nb_b, 1))
    first = np.where(wide, -(-(k * nb_b) // bins_b), k)  # batch t is in bin t * B // nb_u
    count = np.where(wide, -(-((k + 1) * nb_b) // bins_b) - first, 1)
    lev = seg.level[blk_unit]
    major = np.where(bin_of % 2 == 1, -lev, lev)
    order = np.lexsort((live[blk_unit], major, bin_of, q[blk_unit]))
    return blk_unit[order], count[order], first[order]


def _num_bins(seg: LiveUnits, seqs: np.ndarray) -> np.ndarray:
    """``Ordering.num_bins`` of each rank's sequences -> int64 ``[W]``."""
    ordering = seg.ordering
    if ordering.bin_size is not None:
        return np.maximum(seqs // ordering.bin_size, 2).astype(np.int64)
    return np.full(len(seqs), ordering.bins or 2, dtype=np.int64)


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
