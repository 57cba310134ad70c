"""Chunked fixed orderings under indexed planning: global planning's chunked batches, cut once.

Global planning orders the admitted sequences (``default``, ``reverse``, ``sorted``,
``sorted_reverse``), cuts sub-epoch part ``p`` of that sequence order, expands each sequence into
its chunks (consecutive, chunk after chunk) and batches the chunks greedily by their windows. That
order and those cuts do not depend on the epoch, so the node cuts them once, as for unchunked
fixed orders (``seqloader.plan.indexed.fixed``), in chunk positions:

- ``cuts``: per part, the batches' bounds in chunks (what positions, steps and resume count);
- ``firsts``: per part, the first chunk of each batch as a code ``sequence position * stride +
  chunk`` (the position in the part's sequence order; ``stride``: more than any sequence's
  chunks), and one past the part's end.

A rank reads its batch's first chunk and expands the next sequences of the order only as far as
the batch reaches (``ChunkedFixedDraw``: O(batch size) per batch, nothing of size ``n``). The
index is the chunked plans' length-class index (one bucket per admitted length): ``sorted``
orders read it as they are; ``default``/``reverse`` read the admitted sequences ascending by rank
in the admitted mask (``AdmittedSelect``: a count per block of the mask, no array of size ``n``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from seqloader.plan.chunk_batching import batcher_fits, fit_bounds
from seqloader.plan.chunks import ChunkTable
from seqloader.plan.epochs import part_bounds
from seqloader.plan.indexed.chunks import ChunkGeometry
from seqloader.plan.indexed.fixed import FixedOrder, cut_batcher
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.plan import ranges
from seqloader.plan.limits import Batcher, BatchLimits
from seqloader.plan.ordering import unique_sorted

_BLOCK = 1 << 16  # sequences expanded into chunks at once while cutting (a few blocks' memory)
_SELECT = 1 << 12  # mask entries per count of ``AdmittedSelect`` (8 bytes per 4,096 sequences)


class AdmittedSelect:
    """The ``i``-th admitted sequence (ascending), read by position like ``BucketIndex.members``:
    the admitted count before each block of the mask (``n / 4096`` int64), then a scan of the
    blocks a request touches. ``mask`` None: every sequence (position ``i`` is sequence ``i``).

    >>> AdmittedSelect(np.array([False, True, True, False, True]), 5)[np.array([2, 0])].tolist()
    [4, 1]
    """

    def __init__(self, mask: np.ndarray | None, n: int, block: int = _SELECT) -> None:
        self.mask, self.block = mask, block
        if mask is None:
            self.size = n
            return
        per = np.zeros(0, dtype=np.int64)
        if n:
            per = np.add.reduceat(mask.astype(np.int64), np.arange(0, n, block))
        self.before = np.zeros(len(per) + 1, dtype=np.int64)
        np.cumsum(per, out=self.before[1:])
        self.size = int(self.before[-1])

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        at = np.asarray(at, dtype=np.int64)
        if self.mask is None:
            return at.copy()
        out = np.empty(len(at), dtype=np.int64)
        blocks = np.searchsorted(self.before, at, side="right") - 1
        for b in unique_sorted(blocks).tolist():
            sel = blocks == b
            here = np.flatnonzero(self.mask[b * self.block : (b + 1) * self.block])
            out[sel] = here[at[sel] - self.before[b]] + b * self.block
        return out


def chunked_order(
    index: BucketIndex, kind: str, mask: np.ndarray | None, n: int
) -> Callable[[np.ndarray], np.ndarray]:
    """The full epoch's sequence order of a fixed ``kind`` over the chunked plans' length-class
    index (``sorted`` kinds: the index itself; the others: the admitted sequences ascending).

    >>> from seqloader.plan.indexed.histogram import build_bucket_index, length_counts
    >>> lengths = np.array([5, 3, 5, 1])
    >>> index = build_bucket_index(lengths, length_counts(lengths)[0][1:])
    >>> chunked_order(index, "reverse", None, 4)(np.arange(4)).tolist()
    [3, 2, 1, 0]
    """
    if kind in ("sorted", "sorted_reverse"):
        return FixedOrder(index, kind)
    return FixedOrder(admitted_index(mask, n), kind)


def admitted_index(mask: np.ndarray | None, n: int) -> BucketIndex:
    """One bucket of the admitted sequences ascending (``AdmittedSelect``): what ``default``,
    ``reverse`` and ``random`` (``RandomOrder``) read positions of, chunked.

    >>> admitted_index(np.array([True, False, True]), 3).members[np.array([1])].tolist()
    [2]
    """
    select = AdmittedSelect(mask, n)
    return BucketIndex(
        select,  # type: ignore[arg-type]  # read by position only
        np.array([0, len(select)], dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
    )


class Chunking:
    """How the sequences of a chunked plan expand: the length key's ``(size, step, min)`` (or a
    ``ChunkGeometry`` over each sequence's class value ``values``) gives each sequence's chunk
    count (every chunked key gives the same, checked at admission), and ``spec`` (every
    chunked key's ``(size, step)``) each chunk's window per key."""

    def __init__(
        self,
        lengths: Mapping[str, np.ndarray],
        key: str,
        counting: tuple[int, int, int] | ChunkGeometry,
        spec: Mapping[str, tuple[int, int]],
        values: np.ndarray | None = None,
    ) -> None:
        self.lengths, self.key, self.spec = lengths, key, dict(spec)
        self.geometry = (
            counting if isinstance(counting, ChunkGeometry) else ChunkGeometry(*counting)
        )
        self.values = lengths[key] if values is None else values

    def counts(self, seqs: np.ndarray) -> np.ndarray:
        """Chunks of each sequence ``seqs`` -> int64."""
        return self.geometry.counts(np.asarray(self.values[seqs]))

    def windows(self, key: str, seqs: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """Length in ``key`` of chunk ``chunks`` of sequences ``seqs`` (keys not chunked:
        whole) -> int64, as ``ChunkTable.window``."""
        whole = np.asarray(self.lengths[key][seqs], dtype=np.int64)
        if key not in self.spec:
            return whole
        size, step = self.spec[key]
        return np.minimum(whole - chunks * step, size)


def chunked_cuts(
    order: Callable[[np.ndarray], np.ndarray],
    size: int,
    parts: int,
    limits: BatchLimits,
    chunking: Chunking,
    stride: int,
    block: int = _BLOCK,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy chunk batches of every sub-epoch part of the order (``size`` sequence positions)
    -> (bounds in chunks per part, first-chunk codes per part, both ``[nb_p + 1]`` each and laid
    part after part; where each part starts in them ``[parts + 1]``).

    >>> from seqloader.plan.cost import BatchCost
    >>> limits = BatchLimits.of(None, 4, None, BatchCost(), ["x"], "x")
    >>> ch = Chunking({"x": np.array([5, 2])}, "x", (2, 2, 0), {"x": (2, 2)})
    >>> cuts, firsts, starts = chunked_cuts(lambda p: p, 2, 1, limits, ch, 4)
    >>> cuts.tolist(), firsts.tolist(), starts.tolist()  # chunks 2, 2, 1 | 2: [2, 2] [1, 2]
    ([0, 2, 4], [0, 2, 8], [0, 3])
    """
    batcher = cut_batcher(limits)
    cuts, firsts, starts = [], [], [0]
    for part in range(parts):
        lo, hi = part_bounds(size, parts, part)
        c, f = cut_chunk_positions(order, lo, hi, batcher, chunking, stride, block)
        cuts.append(c)
        firsts.append(f)
        starts.append(starts[-1] + len(c))
    return (
        np.concatenate(cuts).astype(np.int64),
        np.concatenate(firsts).astype(np.int64),
        np.asarray(starts, dtype=np.int64),
    )


def _block_bounds(
    batcher: Batcher,
    chunking: Chunking,
    seqs: np.ndarray,
    per: np.ndarray,
    ends: np.ndarray,
    skip: int,
) -> np.ndarray:
    """Greedy bounds over the chunks of ``seqs`` (``per`` chunks each, ``ends`` their cumulative
    sum) from chunk ``skip`` on: from the chunks' fits as global planning batches its chunks
    (``seqloader.plan.chunk_batching``, no window per chunk) when one padded limit bounds a
    batch, else the general batcher over every key's windows; the same bounds either way."""
    lim, key, counts = batcher.limits, batcher.limits.length_key, per.astype(np.int32)
    total = int(ends[-1]) if len(ends) else 0
    cap = lim.max_seqs if lim.max_seqs is not None else max(total, 1)
    whole = {key: np.asarray(chunking.lengths[key][seqs], dtype=np.int64)}
    table = ChunkTable(np.concatenate([[0], ends]), chunking.spec, whole, counts)
    fits = batcher_fits(table, batcher, cap)
    if fits is not None:
        return fit_bounds(fits, np.arange(len(seqs)), counts, ends, skip)
    rel = np.repeat(np.arange(len(seqs), dtype=np.int64), per)  # sequence of each chunk
    chunk = np.arange(total, dtype=np.int64) - np.repeat(ends - per, per)
    on = seqs[rel[skip:]]
    return batcher.bounds_of({k: chunking.windows(k, on, chunk[skip:]) for k in batcher.keys})


def cut_chunk_positions(
    order: Callable[[np.ndarray], np.ndarray],
    lo: int,
    hi: int,
    batcher: Batcher,
    chunking: Chunking,
    stride: int,
    block: int = _BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy chunk batches of sequence positions ``lo .. hi`` of the order -> (bounds in
    chunks, relative to the part, ``[nb + 1]``; first-chunk codes relative to ``lo``, ``[nb +
    1]``, the last one past the end): a block of sequences at a time, expanded into chunks (the
    first one from chunk ``skip``), each block's last batch left to the next block unless it ends
    the part (greedy batching restarts exactly at a batch's first chunk). ``random`` cuts each
    epoch's part so on every rank (O(n / P) per part, a block's memory)."""
    cuts, firsts = [np.zeros(1, dtype=np.int64)], []
    start, skip, done, width = lo, 0, 0, block
    while start < hi:
        end = min(hi, start + width)
        seqs = order(np.arange(start, end, dtype=np.int64))
        per = chunking.counts(seqs)
        ends = np.cumsum(per)
        bounds = _block_bounds(batcher, chunking, seqs, per, ends, skip)
        if end < hi:
            if len(bounds) <= 2:  # one batch to the block's end: it may go on
                width *= 2
                continue
            bounds = bounds[:-1]  # the last batch may be cut by the block's end
        heads = bounds[:-1] + skip  # chunk positions in the block's sequences' chunks
        rel = np.searchsorted(ends, heads, side="right")  # each batch's first sequence
        firsts.append((start - lo + rel) * stride + heads - (ends - per)[rel])
        cuts.append(bounds[1:] + done)
        done += int(bounds[-1])
        last = int(bounds[-1]) + skip
        if last == int(ends[-1]):
            start, skip = end, 0
        else:
            at = int(np.searchsorted(ends, last, side="right"))
            start, skip = start + at, last - int(ends[at] - per[at])
    firsts.append(np.array([(hi - lo) * stride], dtype=np.int64))
    return np.concatenate(cuts), np.concatenate(firsts)


def _batch_widths(bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """(the batches asked, ascending; each position's batch among them; the most positions
    asked of each batch: its largest ``pos`` + 1) -> int64 each: ``np.unique`` with
    ``return_inverse`` and ``np.maximum.at``, read off the runs where the batches come
    ascending (a rank's share asks its batches in order), without a sort.

    >>> [a.tolist() for a in _batch_widths(np.array([3, 3, 5, 9, 9]), np.array([0, 1, 0, 1, 0]))]
    [[3, 5, 9], [0, 0, 1, 2, 2], [2, 1, 2]]
    """
    if len(bucket) and bool((bucket[1:] >= bucket[:-1]).all()):
        new = np.empty(len(bucket), dtype=bool)
        new[0] = True
        np.not_equal(bucket[1:], bucket[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        inverse = np.cumsum(new) - 1
        return bucket[starts], inverse, np.maximum.reduceat(pos + 1, starts)
    batches, inverse = np.unique(bucket, return_inverse=True)
    width = np.zeros(len(batches), dtype=np.int64)
    np.maximum.at(width, inverse, pos + 1)
    return batches, inverse, width


class ChunkedFixedDraw:
    """The ``Draw`` of a chunked fixed ordering's part: slot ``p`` of batch ``g`` is the
    ``p``-th chunk from the batch's first (``firsts[g]``), the part's sequences expanded from
    there, as a code ``sequence * stride + chunk`` (``ChunkBuckets.split`` reads it): a batch of
    ``k`` chunks spans at most ``k`` sequences, and no further than the next batch's first
    chunk (``firsts`` holds one past the last batch), so a rank expands only its batches' own.
    ``uses``: with a mix, the corpus epoch of the slot at each position of the order, which
    every chunk of the slot carries (``mix_cuts.chunked_mix_cut``)."""

    def __init__(
        self,
        order: Callable[[np.ndarray], np.ndarray],
        firsts: np.ndarray,
        lo: int,
        size: int,
        chunking: Chunking,
        stride: int,
        uses: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.order, self.firsts, self.lo, self.size = order, firsts, lo, size
        self.chunking, self.stride, self.uses = chunking, stride, uses

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        pos = np.asarray(pos, dtype=np.int64)
        if not len(pos):
            none = None if self.uses is None else self.uses(pos)
            return np.zeros(0, dtype=np.int64), none
        batches, inverse, width = _batch_widths(np.asarray(bucket, dtype=np.int64), pos)
        s0, c0 = np.divmod(np.asarray(self.firsts[batches], dtype=np.int64), self.stride)
        s1, c1 = np.divmod(np.asarray(self.firsts[batches + 1], dtype=np.int64), self.stride)
        # the sequences the batch reaches: to the next batch's first chunk (its sequence too
        # when that chunk is not the sequence's first), no more than its asked chunks
        width = np.minimum(width, s1 - s0 + (c1 > 0))
        at_pos = self.lo + ranges(s0, s0 + width)
        seqs = self.order(at_pos)
        per = self.chunking.counts(seqs)
        head = np.cumsum(width) - width  # each window's first sequence
        per[head] -= c0
        ends = np.cumsum(per)
        begins = ends - per
        target = begins[head][inverse] + pos
        # the sequence of each target chunk: a gather from the windows' chunks laid out (about
        # as many as asked) instead of a binary search over their ends per chunk
        at = np.repeat(np.arange(len(per), dtype=np.int64), per)[target]
        chunk = target - begins[at] + np.where(at == head[inverse], c0[inverse], 0)
        uses = None if self.uses is None else self.uses(at_pos)[at]
        return seqs[at] * self.stride + chunk, uses
