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
- **Consumption** (``laplace_consumed``): per (rank, bin) the pieces are summed in closed form
  from each unit's share of the bins (no block listed), so the bins a rank's ``steps`` consume
  whole are counted per unit at once; only the one bin where ``steps`` falls lists its blocks in
  order, and in its one block where ``steps`` falls the batches are walked in closed form (a few
  groups of equal pieces). ``laplace_blocks`` lists every block (the rank's layout).

Under ``buckets:N`` a rank's order is a keyed stratified interleaving whose prefixes of whole
blocks are counted per unit in closed form (``seqloader.plan.indexed.replay_buckets``, which
shares the split rule here).

The result equals ``Segment``'s rank-by-rank count (``tests/test_plan_indexed.py`` checks them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

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


@dataclass(frozen=True)
class _Layout:
    """Each live unit's batches over its rank's bins and their pieces under the rank's split:
    computed once by ``_layout`` and read by each step of ``laplace_consumed``."""

    owner: np.ndarray  #: [L] the unit's rank
    size: np.ndarray  #: [L] batch size (int64)
    last: np.ndarray  #: [L] the unit's last batch (1..size)
    bins: np.ndarray  #: [L] its rank's bins
    phase: np.ndarray  #: [L] the bin of the unit's first batch
    whole: np.ndarray  #: [L] batches in every bin of its rank
    more: np.ndarray  #: [L] bins (from its phase on) with one more
    last_bin: np.ndarray  #: [L] the bin of its last batch
    pk: np.ndarray  #: [L] pieces of a full batch at the rank's level t*
    pl: np.ndarray  #: [L] pieces of its last batch
    ck: np.ndarray  #: [L] tie increments of a full batch (0 where the rank does not cut)
    cl: np.ndarray  #: [L] tie increments of its last batch
    rest: np.ndarray  #: [W] the rank's leftover tie increments
    rank_bins: np.ndarray  #: [W]
    off: np.ndarray  #: [W + 1] each rank's first bin in the flat (rank, bin) list
    rank_of_bin: np.ndarray  #: [total bins] the rank of each flat bin


def laplace_consumed(seg: LiveUnits, steps: int) -> np.ndarray:
    """Sequences of each unit consumed in the segment's first ``steps`` steps -> int64 ``[U]``.

    Per (rank, bin) the pieces, tie increments and sequences are summed in closed form (a unit
    adds ``nb // B`` batches to every bin of its rank, one more to ``nb % B`` bins from its
    phase on, its last batch to its last one), so the bins a rank's steps consume whole are counted
    per unit without listing blocks; only the one bin where the steps end is listed in its
    order and walked."""
    out = np.zeros(seg.num_units, dtype=np.int64)
    if steps <= 0 or not len(seg.live):
        return out
    lay = _layout(seg)
    ends, after = _bin_ends(lay, seg.world_size)
    done = np.bincount(lay.rank_of_bin, weights=ends <= steps, minlength=seg.world_size)
    done = done.astype(np.int64)  # [W] bins of each rank consumed whole
    c = done[lay.owner]
    out[seg.live] = _seqs_in_bins(lay, c)
    before = np.where(done > 0, ends[np.maximum(lay.off[:-1] + done - 1, 0)], 0)  # [W]
    left = steps - before
    crossing = (done < lay.rank_bins) & (left > 0)  # [W] ranks whose steps end inside a bin
    blocks = _crossing_blocks(seg, lay, crossing, c)
    if blocks is not None:
        _add_crossing_bin(seg, lay, blocks, after, left, out)
    return out


def _layout(seg: LiveUnits) -> _Layout:
    """The per-unit bin deal and piece counts, computed once because every later step reads
    them: each unit's share of its rank's bins (``laplace_blocks``' deal, in closed form) and
    its batches' pieces at the rank's split level."""
    owner, nb, size = seg.owner, seg.nb.astype(np.int64), seg.size.astype(np.int64)
    last = seg.rem - (nb - 1) * size  # [L] the unit's last batch (1..size)
    level, prev, cut, rest = _split_levels(seg, last)
    rank_bins = _num_bins(seg, seg.rank_seqs)  # [W]
    bins = rank_bins[owner]
    phase = _phases(owner, seg.live, nb, seg.level, bins)
    whole, more = np.divmod(nb, bins)
    # a unit's batches fill its blocks in bin order: its last batch is in its last bin
    last_bin = np.where((whole > 0) | (phase + more > bins), bins - 1, phase + more - 1)
    t, p = level[owner], prev[owner]
    pk, pl = _ceil(size, t), _ceil(last, t)
    ck = np.where(cut[owner], _ceil(size, p) - pk, 0)
    cl = np.where(cut[owner], _ceil(last, p) - pl, 0)
    off = np.concatenate([[0], np.cumsum(rank_bins)])
    rank_of_bin = np.repeat(np.arange(seg.world_size, dtype=np.int64), rank_bins)
    return _Layout(
        owner, size, last, bins, phase, whole, more, last_bin, pk, pl, ck, cl, rest, rank_bins,
        off, rank_of_bin,
    )  # fmt: skip


def _bin_ends(lay: _Layout, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Per (rank, bin), flat: the pieces through the bin (its rank's leftover tie increments
    added to its latest eligible batches) and the tie increments of the rank's later bins
    -> int64 ``[total bins]`` each; whole bins are counted without listing their blocks."""
    pos, wrap = _change_points(lay)
    pieces = _per_bin(lay, world, pos, wrap, lay.pk, lay.pl)
    events = _per_bin(lay, world, pos, wrap, lay.ck, lay.cl)
    after = _suffix_within(events, lay.off)  # events of the rank's later bins
    pieces += np.clip(lay.rest[lay.rank_of_bin] - after, 0, events)
    return _cumsum_within(pieces, lay.off), after


def _change_points(lay: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """Where each unit's batches per bin change along its rank's flat bins (the same for every
    ``_per_bin`` sum, so found once): + at its phase, - where its extra bins end (wrapped: at
    the rank's end, then + at bin 0 and - where they end), its last batch's change at its last
    bin and undone after it -> (the positions, the units whose extra bins wrap)."""
    base, end, bins = lay.off[lay.owner], lay.phase + lay.more, lay.bins
    wrap = end > bins  # the bins with one more batch run past the rank's last bin
    lb = base + lay.last_bin
    stop = base + np.minimum(end, bins)
    pos = np.concatenate(
        [base + lay.phase, stop, base[wrap], (base + end - bins)[wrap], lb, lb + 1]
    )
    return pos, wrap


def _per_bin(
    lay: _Layout,
    world: int,
    pos: np.ndarray,
    wrap: np.ndarray,
    v_full: np.ndarray,
    v_last: np.ndarray,
) -> np.ndarray:
    """The sum per (rank, bin) of a per-batch value (``v_full`` of a unit's full batches,
    ``v_last`` of its last) -> int64 ``[total bins]``: the values at ``_change_points``,
    summed, then cumsum, so no block is listed."""
    n, nw = len(lay.owner), int(wrap.sum())
    val = np.empty(len(pos), dtype=np.float64)
    val[:n] = v_full
    val[n : 2 * n] = -v_full
    val[2 * n : 2 * n + nw] = v_full[wrap]
    val[2 * n + nw : 2 * n + 2 * nw] = -v_full[wrap]
    val[2 * n + 2 * nw : 3 * n + 2 * nw] = v_last - v_full
    val[3 * n + 2 * nw :] = v_full - v_last
    total = int(lay.off[-1])
    diff = np.bincount(pos, weights=val, minlength=total + 1)
    every = np.bincount(lay.owner, weights=lay.whole * v_full, minlength=world)  # in every bin
    diff[lay.off[:-1]] += every
    diff[lay.off[1:]] -= every
    return np.rint(np.cumsum(diff[:total])).astype(np.int64)


def _seqs_in_bins(lay: _Layout, c: np.ndarray) -> np.ndarray:
    """Sequences of each unit in its rank's first ``c`` bins (the bins consumed whole), from
    its share of the bins in closed form, so no whole bin lists its blocks -> int64 ``[L]``."""
    phase, more, bins = lay.phase, lay.more, lay.bins

    def overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # |[a, b) & [0, c)|
        return np.maximum(np.minimum(b, c) - np.maximum(a, 0), 0)

    n_in = lay.whole * c + overlap(phase, phase + more) + overlap(phase - bins, phase + more - bins)
    has_last = (lay.last_bin < c).astype(np.int64)
    return n_in * lay.size - has_last * (lay.size - lay.last)


class _Blocks(NamedTuple):
    """The blocks of the one bin where each crossing rank's steps end, in the rank's order."""

    units: np.ndarray  #: indices into ``live``
    rank: np.ndarray
    bin: np.ndarray
    full: np.ndarray  #: full batches in the block
    short: np.ndarray  #: 1 where the block holds the unit's last batch


def _crossing_blocks(
    seg: LiveUnits, lay: _Layout, crossing: np.ndarray, c: np.ndarray
) -> _Blocks | None:
    """The blocks of bin ``c`` of each ``crossing`` rank, in the rank's order: the only blocks
    listed, because only there the steps may end inside a block (levels ascending in even
    bins, descending in odd ones) -> None where there are none."""
    units = np.flatnonzero(crossing[lay.owner])
    if not len(units):
        return None
    q, cu = lay.owner[units], c[units]
    rel = (cu - lay.phase[units]) % lay.bins[units]
    count = lay.whole[units] + (rel < lay.more[units])
    keep = count > 0
    units, q, cu, count = units[keep], q[keep], cu[keep], count[keep]
    if not len(units):
        return None
    short = (lay.last_bin[units] == cu).astype(np.int64)
    full = count - short
    lev = seg.level[units].astype(np.int64)
    major = np.where(cu & 1, -lev, lev)
    order = _block_order(lay.owner, seg.live, units, cu, major)  # by (rank, major, unit)
    return _Blocks(*(x[order] for x in (units, q, cu, full, short)))


def _add_crossing_bin(
    seg: LiveUnits, lay: _Layout, blk: _Blocks, after: np.ndarray, left: np.ndarray, out: np.ndarray
) -> None:
    """Add to ``out`` the sequences of the crossing bins' first ``left`` pieces (per rank): the
    blocks consumed whole at once, the one block where the steps end walked in closed form."""
    units, q = blk.units, blk.rank
    ev = blk.full * lay.ck[units] + blk.short * lay.cl[units]
    starts = np.searchsorted(q, np.arange(seg.world_size + 1), side="left")
    later = after[lay.off[q] + blk.bin] + _suffix_within(ev, starts)
    extra = np.clip(lay.rest[q] - later, 0, ev)
    blk_pieces = blk.full * lay.pk[units] + blk.short * lay.pl[units] + extra
    blk_ends = _cumsum_within(blk_pieces, starts)
    m_all = left[q]
    whole_blk = blk_ends <= m_all
    seqs = blk.full * lay.size[units] + blk.short * lay.last[units]
    out[seg.live[units[whole_blk]]] += seqs[whole_blk]
    for i in np.flatnonzero(~whole_blk & (blk_ends - blk_pieces < m_all)).tolist():
        u = int(units[i])
        m = int(m_all[i] - (blk_ends[i] - blk_pieces[i]))
        groups = _groups(
            int(blk.full[i]), int(blk.short[i]), int(lay.size[u]), int(lay.last[u]),
            int(lay.pk[u]), int(lay.pl[u]), int(lay.ck[u]), int(lay.cl[u]), int(extra[i]),
        )  # fmt: skip
        out[seg.live[u]] += _walk(groups, m)


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
    phase = _phases(owner, unit, nb, level, bins)  # the bin of the unit's first batch
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


def _phases(
    owner: np.ndarray, unit: np.ndarray, nb: np.ndarray, level: np.ndarray, bins: np.ndarray
) -> np.ndarray:
    """The bin of each unit's first batch (``laplace_blocks``' deal: a rank's units in length
    order, their batches end to end, position ``j`` in bin ``j % B``) -> int64 ``[L]``."""
    by = _length_order(owner, unit, level)  # each rank's units in length order
    owned = owner[by]
    ends = np.cumsum(nb[by])
    begin = np.searchsorted(owned, owned, side="left")  # each rank's first unit
    before = ends - nb[by] - np.concatenate([[0], ends])[begin]  # batches before, in its rank
    phase = np.empty(len(nb), dtype=np.int64)
    phase[by] = before % bins[by]
    return phase


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
    """``files_bins`` of each rank -> int64 ``[W]``."""
    ordering = seg.ordering
    if ordering.bin_size is not None:
        bins = np.maximum(seqs // ordering.bin_size, 2).astype(np.int64)
    else:
        bins = np.full(len(seqs), ordering.bins or 2, dtype=np.int64)
    return np.minimum(bins, np.maximum(seg.rank_batches // 2, 2))


def files_bins(ordering: Ordering, seqs: int, batches: int) -> int:
    """The bins of a ``files`` rank under ``laplace``: ``Ordering.num_bins`` of its sequences,
    at most half its batches (at least 2), so every bin holds two batches or more and the
    rank's lengths rise and fall (bins of one batch each would list its length order, one
    ramp: ``laplace:.N`` with ``N`` below a batch's sequences).

    >>> files_bins(Ordering.parse("laplace:.10"), seqs=100, batches=7)
    3
    """
    return min(ordering.num_bins(seqs), max(batches // 2, 2))


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
