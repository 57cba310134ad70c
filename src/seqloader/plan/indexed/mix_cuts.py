"""A ``mix`` (``distribution="shard"``) with the orderings indexed planning batches by greedy cuts:
``random`` and the fixed ones (``default``, ``reverse``, ``sorted``, ``sorted_reverse``).

The sub-epoch is the mix's (``IndexedMix``: each (corpus, bucket) stream's part, every corpus
epoch exactly once over the epochs that cover it), and its batches are greedy cuts of that
sub-epoch's slots in the ordering, global planning's ``Batcher`` over their lengths; a slot
carries its corpus epoch (``uses``). Sharding, ``uneven``, positions and resume are those of every
indexed shard plan (``BoundsTable``: one batch a row).

- ``random`` (``mix_cuts``): ``MixDraw`` already lists the sub-epoch's slots of a bucket in a
  keyed random order (seed, full epoch, part; ``random``'s index is one bucket), computable
  position by position: the cuts are made in blocks (O(slots) time per rank, as ``random``
  unmixed; memory: a block and the bounds), and a rank draws only its own batches' slots.
- the fixed orders (``mix_fixed_cuts``): the slots in the corpus' own order (ascending sequence,
  a sequence's corpus epochs adjacent: global planning's canonical order of a mix's selection),
  reversed, or stably sorted by length (``order_sequences``), then cut. A corpus epoch the
  sub-epoch takes only part of is a random subset of the corpus, so its place in that order
  needs the subset sorted: every rank lists the sub-epoch's slots (O(slots) time and memory,
  12 bytes a slot, kept for the sub-epoch).

One mix's sub-epoch cut in both ways, ``random`` and ``default`` (the same 8 slots):

>>> from seqloader.plan.cost import BatchCost
>>> from seqloader.plan.indexed.fixed import cut_batcher
>>> from seqloader.plan.indexed.histogram import build_bucket_index
>>> from seqloader.plan.limits import BatchLimits
>>> from seqloader.plan.mix import Corpora
>>> lengths = np.array([3, 9, 4, 8, 2, 7, 5])
>>> index = build_bucket_index(lengths, np.zeros(0, np.int64))  # random's: one bucket
>>> mix = IndexedMix(0, {"a": 0.5, "b": 2}, Corpora(("a", "b"), np.array([0, 4, 7])), index, lengths)
>>> limits = BatchLimits.of(3, None, None, BatchCost(), ["data"], "data")
>>> ep, batcher, data = EpochIndex(1, 1), cut_batcher(limits), {"data": lengths}
>>> table, _ = mix_cuts(mix, ep, 1, batcher, data)
>>> table.num_seqs, table.num_batches  # 2 of corpus a, 6 of b (two corpus epochs)
(8, 3)
>>> table, draw = mix_fixed_cuts(mix, ep, 1, Ordering("default"), batcher, data, lengths)
>>> draw.seqs.tolist(), draw.uses.tolist(), table.bounds.tolist()
([0, 1, 4, 4, 5, 5, 6, 6], [0, 0, 0, 1, 0, 1, 0, 1], [0, 3, 6, 8])

Chunked (``chunked_mix_cut``): the same slots in the same order, each expanded into its chunks
(consecutive, each carrying the slot's corpus epoch) and the chunks cut greedily by their windows
(``fixed_chunks.cut_chunk_positions``): global planning's chunked batches of a mix's slots
(``PlannedChunks.batches`` with ``uses``). A rank draws only its own batches' chunks
(``ChunkedFixedDraw``); the cut costs what the unchunked one costs, per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.bijection import evaluate_many
from seqloader.plan.indexed.fixed import BoundsTable, cut_positions
from seqloader.plan.indexed.fixed_chunks import ChunkedFixedDraw, Chunking, cut_chunk_positions
from seqloader.plan.indexed.mix import IndexedMix, MixDraw
from seqloader.plan.indexed.random_order import RANDOM_BLOCK
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.options import Ordering
from seqloader.plan.ordering import order_sequences

#: positions a rank cuts at once with ``random`` and a mix: each block evaluates the bucket's
#: keyed bijection and the drawn streams' (fixed costs per call), so blocks 4x ``random``'s
#: (memory: a dozen int64/uint64 arrays of this size, 2 MiB each)
MIX_BLOCK = 4 * RANDOM_BLOCK

#: a key range at most this many times the slots is read off a bitmap (a byte a key) instead of
#: sorting the keys
DENSE = 16


class MixCutDraw:
    """The ``Draw`` of ``random`` with a mix: slot ``p`` of batch ``g`` is position
    ``bounds[g] + p`` of the sub-epoch's keyed order of its slots (``MixDraw``, one bucket),
    with its corpus epoch."""

    def __init__(self, draw: MixDraw, bounds: np.ndarray) -> None:
        self.mix_draw, self.bounds = draw, bounds

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.asarray(self.bounds[np.asarray(bucket, dtype=np.int64)], np.int64) + pos
        return self.mix_draw.bucket_slots(0, at)


class ListedDraw:
    """The ``Draw`` of a fixed ordering with a mix: the sub-epoch's slots listed in order
    (``seqs``, ``uses``), batch ``g`` at ``bounds[g]``."""

    def __init__(self, seqs: np.ndarray, uses: np.ndarray, bounds: np.ndarray) -> None:
        self.seqs, self.uses, self.bounds = seqs, uses, bounds

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.asarray(self.bounds[np.asarray(bucket, dtype=np.int64)], np.int64) + pos
        return self.seqs[at], self.uses[at]


class MixOrder:
    """``random`` with a mix: position ``p`` of the sub-epoch's keyed order of its slots
    (``MixDraw``, one bucket) -> its sequence (called) and corpus epoch (``uses``, the same
    positions asked right after: the draw is evaluated once for both)."""

    def __init__(self, draw: MixDraw) -> None:
        self.draw = draw
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        seqs, uses = self.draw.bucket_slots(0, pos)
        self._last = (pos, uses)
        return seqs

    def uses(self, pos: np.ndarray) -> np.ndarray:
        last = self._last
        if last is not None and last[0] is pos:
            return last[1]
        return self.draw.bucket_slots(0, pos)[1]


class ListedUses:
    """A fixed ordering with a mix, listed: position ``p``'s corpus epoch."""

    def __init__(self, uses: np.ndarray) -> None:
        self.listed = uses

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        return self.listed[np.asarray(pos, dtype=np.int64)]


def chunked_mix_cut(
    order: Callable[[np.ndarray], np.ndarray],
    uses: Callable[[np.ndarray], np.ndarray],
    size: int,
    batcher: Batcher,
    chunking: Chunking,
    stride: int,
    block: int,
) -> tuple[BoundsTable, ChunkedFixedDraw]:
    """Chunked: the ``size`` slots of ``order`` (positions -> sequences; ``uses``: their corpus
    epochs) expanded into their chunks and cut greedily by the windows -> (batch table in
    chunks, draw of coded chunks with their corpus epochs).

    >>> from seqloader.plan.indexed.fixed import ListedOrder, cut_batcher
    >>> from seqloader.plan.cost import BatchCost
    >>> from seqloader.plan.limits import BatchLimits
    >>> limits = BatchLimits.of(None, 4, None, BatchCost(), ["x"], "x")
    >>> ch = Chunking({"x": np.array([5, 2])}, "x", (2, 2, 0), {"x": (2, 2)})
    >>> seqs, used = np.array([1, 0, 1]), np.array([0, 0, 1])  # sequence 1 twice
    >>> table, draw = chunked_mix_cut(ListedOrder(seqs), ListedUses(used), 3,
    ...                               cut_batcher(limits), ch, 4, 3)
    >>> codes, uses = draw.slots(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 0, 1, 0]))
    >>> table.bounds.tolist(), (codes // 4).tolist(), (codes % 4).tolist(), uses.tolist()
    ([0, 2, 4, 5], [1, 0, 0, 0, 1], [0, 0, 1, 2, 0], [0, 0, 0, 0, 1])
    """
    bounds, firsts = cut_chunk_positions(order, 0, size, batcher, chunking, stride, block)
    return BoundsTable(bounds), ChunkedFixedDraw(order, firsts, 0, size, chunking, stride, uses)


def mix_cuts(
    mix: IndexedMix,
    ep: EpochIndex,
    parts: int,
    batcher: Batcher,
    lengths: Mapping[str, np.ndarray],
) -> tuple[BoundsTable, MixCutDraw]:
    """``random`` with a mix: sub-epoch ``ep``'s slots in their keyed order, cut greedily in
    blocks -> (batch table, draw); the module's example."""
    draw = mix.draw(ep.full_epoch, ep.part, parts)
    size = int(draw.cum[:, -1].sum())

    def order(pos: np.ndarray) -> np.ndarray:
        return draw.bucket_slots(0, pos)[0]

    bounds = cut_positions(order, 0, size, batcher, lengths, MIX_BLOCK)
    return BoundsTable(bounds), MixCutDraw(draw, bounds)


def mix_fixed_cuts(
    mix: IndexedMix,
    ep: EpochIndex,
    parts: int,
    ordering: Ordering,
    batcher: Batcher,
    lengths: Mapping[str, np.ndarray],
    by: np.ndarray,
    rng: np.random.Generator | None = None,
) -> tuple[BoundsTable, ListedDraw]:
    """A fixed ordering with a mix: sub-epoch ``ep``'s slots listed, put in the ordering (the
    corpus' own order first: ascending sequence, corpus epochs adjacent; sorted kinds by ``by``,
    the length key's lengths or a source's own sort key), cut greedily by ``lengths`` ->
    (batch table, draw); the module's example."""
    seqs, uses = listed_part(mix, ep, parts, ordering, by, rng)
    return listed_cuts(seqs, uses, batcher, lengths)


def listed_cuts(
    seqs: np.ndarray, uses: np.ndarray, batcher: Batcher, lengths: Mapping[str, np.ndarray]
) -> tuple[BoundsTable, ListedDraw]:
    """Slots listed in order (``seqs``, ``uses``), cut greedily by ``lengths`` in one block ->
    (batch table, draw)."""

    def at(p: np.ndarray) -> np.ndarray:
        return seqs[p]

    bounds = cut_positions(at, 0, len(seqs), batcher, lengths, max(len(seqs), 1))
    return BoundsTable(bounds), ListedDraw(seqs, uses, bounds)


def listed_part(
    mix: IndexedMix,
    ep: EpochIndex,
    parts: int,
    ordering: Ordering,
    lengths: np.ndarray,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sub-epoch ``ep``'s slots listed in a fixed ``ordering`` (sorted kinds: by ``lengths``;
    ``rng``: the draws of an ordering that draws, ``sort_bin_shuffle``) -> (sequences, corpus
    epochs)."""
    lo, count = mix.part(ep.full_epoch, ep.part, parts)  # [N, C] each
    seqs, uses = part_slots(mix, lo, count)
    return _in_order(seqs, uses, ordering, lengths, rng)


def _in_order(
    seqs: np.ndarray,
    uses: np.ndarray,
    ordering: Ordering,
    lengths: np.ndarray,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The slots (a set) in the corpus' own order (ascending sequence, a sequence's corpus epochs
    adjacent), then in ``ordering`` (``order_sequences``: stable, so the sorted kinds order by
    (length, sequence, corpus epoch)) -> (sequences, corpus epochs). The packed keys are
    unique, so their ascending order is the one canonical order: read off a bitmap of the key
    range where that range is at most ``DENSE`` times the slots (no sort), else sorted."""
    span = int(uses.max(initial=0)) + 1
    keys = seqs * span + uses
    top = int(keys.max(initial=-1)) + 1
    if top <= DENSE * len(keys):
        mark = np.zeros(top, dtype=bool)
        mark[keys] = True
        keys = np.flatnonzero(mark)
    else:
        keys = np.sort(keys)
    rest, use = np.divmod(keys, span)
    seqs, uses = rest, use.astype(USES_DTYPE)
    if ordering.kind == "default":
        return seqs, uses
    drawn = np.random.default_rng(0) if rng is None else rng  # fixed orders: draw nothing
    order = order_sequences(lengths[seqs], ordering, drawn)
    return seqs[order], uses[order]


def part_slots(mix: IndexedMix, lo: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slots of stream positions ``[lo, lo + count)`` of every (bucket b, corpus c) stream
    (``[N, C]`` each) -> (sequences int64, corpus epochs), bucket after bucket (a bucket's
    ``count[b].sum()`` slots: its whole corpus epochs, then its drawn ones, each in stream order;
    callers that need no order take them as a set): a whole corpus epoch is every member of the
    stream (no draw), a part of one its members drawn by the stream's bijection
    (``IndexedMix.stream_slots``'s), all parts in one vectorised evaluation (``evaluate_many``),
    not one per stream; the (bucket, corpus, corpus epoch) segments are laid out as arrays and
    every slot gathered from the index at once (thousands of streams: no loop over them).

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> from seqloader.plan.mix import Corpora
    >>> lengths = np.array([3, 9, 4, 8, 2, 7, 5])
    >>> index = build_bucket_index(lengths, np.array([6]))
    >>> mix = IndexedMix(0, {"a": 1, "b": 2}, Corpora(("a", "b"), np.array([0, 4, 7])), index, lengths)
    >>> seqs, uses = part_slots(mix, np.array([[0, 1], [1, 0]]), np.array([[2, 3], [1, 1]]))
    >>> list(zip(seqs.tolist(), uses.tolist()))  # bucket 0: a's epoch 0, b's 1 whole, 1 of b's 0
    [(0, 0), (2, 0), (4, 1), (6, 1), (4, 0), (5, 0), (1, 0)]
    >>> mix.stream_slots(1, 0, np.array([1]), {})[0].tolist()  # bucket 1, a: position 1 drawn
    [1]
    """
    b, c = np.nonzero(count)  # the streams with slots, bucket-major
    n = mix.counts[b, c]
    base = np.asarray(mix.index.starts, dtype=np.int64)[b] + mix.offsets[b, c]
    a0 = lo[b, c]
    end = a0 + count[b, c]
    k0 = a0 // n
    nk = (end - 1) // n - k0 + 1  # corpus epochs each stream's span touches
    seg = np.repeat(np.arange(len(b), dtype=np.int64), nk)  # [S] its stream
    k = k0[seg] + np.arange(len(seg), dtype=np.int64) - np.repeat(np.cumsum(nk) - nk, nk)
    ns = n[seg]
    first = np.maximum(a0[seg], k * ns)
    size = np.minimum(end[seg], (k + 1) * ns) - first  # [S] slots of each segment
    whole = size == ns
    # laid out bucket after bucket: its whole corpus epochs, then its drawn parts
    order = np.argsort(b[seg] * 2 + ~whole, kind="stable")
    sizes = size[order]
    starts = np.cumsum(sizes) - sizes  # [S] each laid-out segment's first slot
    first_at = base[seg][order]  # [S] its first member's place in the index
    # a whole corpus epoch's slot j is member j of its stream: the index read in place
    at = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(first_at - starts, sizes)
    part = np.flatnonzero(~whole[order])  # the parts of corpus epochs, drawn by their streams' keys
    if len(part):
        psizes = sizes[part]
        j = np.arange(int(psizes.sum()), dtype=np.int64)
        j -= np.repeat(np.cumsum(psizes) - psizes, psizes)  # [D] slot within its segment
        which = order[part]  # the parts' segments
        words = [
            mix.stream_words(int(bb), int(cc), int(kk))
            for bb, cc, kk in zip(b[seg[which]].tolist(), c[seg[which]].tolist(), k[which].tolist())
        ]
        family = np.repeat(np.arange(len(part), dtype=np.int64), psizes)
        t = j + np.repeat((first - k * ns)[which], psizes)  # positions in their corpus epochs
        drawn = evaluate_many(ns[which].tolist(), words, family, t).astype(np.int64)
        at[j + np.repeat(starts[part], psizes)] = np.repeat(first_at[part], psizes) + drawn
    uses = np.repeat(k.astype(USES_DTYPE)[order], sizes)
    return np.asarray(mix.index.members[at], dtype=np.int64), uses
