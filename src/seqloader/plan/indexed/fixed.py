"""The fixed orderings under indexed planning: ``default``, ``reverse``, ``sorted``, ``sorted_reverse``.

Their order does not depend on the epoch, and neither do the greedy batch cuts of a sub-epoch
(they depend only on the sub-epoch part when ``partition_epoch > 1``). So the node builds, once:

- the **order**, as a ``BucketIndex`` (``fixed_edges``): ``sorted``/``sorted_reverse`` one bucket
  per admitted length (members ascending within: the stable sort global planning makes), the
  others one bucket (the admitted sequences ascending); ``FixedOrder`` maps a position of the
  full epoch's order to its sequence (reversed orders read the index backwards);
- the **cuts**: greedy batch bounds of every sub-epoch part of that order (``fixed_cuts``: the
  batches global planning cuts, the same ``Batcher``, streamed in blocks: greedy batching restarts
  exactly at a batch boundary), stored next to the index (``BucketIndex.cuts``).

A rank reads its own batches by position: ``BoundsTable`` serves a part's bounds (memory-mapped)
as the plan's batch table, each batch a bucket of its own, and ``FixedDraw`` gives the slots of a
batch's positions: a rank reads only its own batches' bounds. Sharding, ``uneven``, positions and resume are
those of every indexed shard plan (``seqloader.plan.indexed.plan.IndexedPlan``); the batches are
global planning's, so padding and steps are 1.0x global planning's by construction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.epochs import part_bounds
from seqloader.plan.indexed.histogram import BucketIndex, length_counts
from seqloader.plan.limits import Batcher, BatchLimits

#: the orderings whose order and cuts are fixed per sub-epoch part
FIXED_KINDS = ("default", "reverse", "sorted", "sorted_reverse")
_BLOCK = 1 << 20  # positions of the order batched at once while cutting (memory: a few blocks)


def fixed_edges(admitted_lengths: np.ndarray, kind: str) -> np.ndarray:
    """Bucket edges of the order's index: every distinct admitted length for sorted kinds (one
    bucket per length), none otherwise (one bucket) -> int64.

    >>> fixed_edges(np.array([5, 3, 5, 1]), "sorted").tolist(), fixed_edges(np.array([5]), "default").size
    ([3, 5], 0)
    """
    if kind in ("sorted", "sorted_reverse"):
        return length_counts(admitted_lengths)[0][1:]
    return np.zeros(0, dtype=np.int64)


def bucket_values(index: BucketIndex, lengths: np.ndarray) -> np.ndarray | None:
    """Each bucket's one value of ``lengths`` -> int64 ``[N]`` (empty buckets: 0), or None
    where the index is not one bucket per value ascending (read from each bucket's first and
    last member, and every member of the first bucket, the one whose edges do not fix its
    value: O(buckets + its size)).

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.array([5, 3, 5, 1, 2])
    >>> bucket_values(build_bucket_index(lengths, fixed_edges(lengths, "sorted")), lengths).tolist()
    [1, 2, 3, 5]
    >>> bucket_values(build_bucket_index(lengths, np.array([3, 5])), lengths) is None  # 1 and 2
    True
    >>> twice = np.array([2, 1, 2, 5])  # the first bucket's ends agree, a 1 between them
    >>> bucket_values(build_bucket_index(twice, np.array([5])), twice) is None
    True
    """
    starts = np.asarray(index.starts, dtype=np.int64)
    full = np.flatnonzero(np.diff(starts) > 0)
    first = np.asarray(lengths[np.asarray(index.members[starts[full]])], dtype=np.int64)
    last = np.asarray(lengths[np.asarray(index.members[starts[full + 1] - 1])], dtype=np.int64)
    if not np.array_equal(first, last) or (np.diff(first) <= 0).any():
        return None
    # edges equal to the buckets' longest fix every bucket's value but the first's (all below
    # the first edge): its members are read, not only its ends
    head = np.asarray(lengths[np.asarray(index.members[starts[0] : starts[1]])])
    if len(head) and (head != head[0]).any():
        return None
    values = np.zeros(len(starts) - 1, dtype=np.int64)
    values[full] = first
    return values


def in_pool_order(
    index: BucketIndex, lengths: np.ndarray, pool: np.ndarray, mask: np.ndarray | None
) -> BucketIndex:
    """``index`` (a fixed order's, members ascending) with each bucket's members in ``pool``'s
    order instead (``fixed_random_subset``: RETURNN's shuffled subset, the order global planning
    starts from, so ``default`` is the subset's order and the sorted kinds break ties by it; the
    admitted members only, ``mask``). O(m log m) once per node.

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.array([5, 3, 5, 1])
    >>> index = build_bucket_index(lengths, fixed_edges(lengths, "sorted"))
    >>> in_pool_order(index, lengths, np.array([2, 3, 0, 1]), None).members.tolist()
    [3, 1, 2, 0]
    """
    pool = np.asarray(pool, dtype=np.int64)
    if mask is not None:
        pool = pool[mask[pool]]
    bucket = np.searchsorted(np.asarray(index.edges), np.asarray(lengths[pool]), side="right")
    members = pool[np.argsort(bucket, kind="stable")].astype(index.members.dtype)
    return dataclasses.replace(index, members=members)


class FixedOrder:
    """The full epoch's order of a fixed ordering, position by position, from its index: O(1)
    per position (``sorted_reverse``: a search over the buckets), nothing of size ``n`` made.

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.array([5, 3, 5, 1])
    >>> index = build_bucket_index(lengths, fixed_edges(lengths, "sorted"))
    >>> FixedOrder(index, "sorted_reverse")(np.arange(4)).tolist()
    [0, 2, 1, 3]
    """

    def __init__(self, index: BucketIndex, kind: str) -> None:
        self.index, self.kind = index, kind
        self.size = int(index.starts[-1])
        counts = np.diff(np.asarray(index.starts, dtype=np.int64))[::-1]  # buckets backwards
        self._back = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._back[1:])

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        """Sequence indices at positions ``pos`` of the full epoch's order -> int64."""
        pos = np.asarray(pos, dtype=np.int64)
        if self.kind == "reverse":
            at = self.size - 1 - pos
        elif self.kind == "sorted_reverse":  # buckets backwards, members ascending within
            i = np.searchsorted(self._back, pos, side="right") - 1
            b = len(self._back) - 2 - i
            at = np.asarray(self.index.starts, dtype=np.int64)[b] + (pos - self._back[i])
        else:  # default, sorted: the index's own order
            at = pos
        return np.asarray(self.index.members[at], dtype=np.int64)


class ListedOrder:
    """An order given as its sequences (a part after ``epoch_wise_filter``): position ``p`` is
    ``seqs[p]``.

    >>> ListedOrder(np.array([7, 3, 5]))(np.array([2, 0])).tolist()
    [5, 7]
    """

    def __init__(self, seqs: np.ndarray) -> None:
        self.seqs = np.asarray(seqs, dtype=np.int64)

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        return self.seqs[np.asarray(pos, dtype=np.int64)]


def fixed_cuts(
    order: FixedOrder,
    parts: int,
    limits: BatchLimits,
    lengths: Mapping[str, np.ndarray],
    block: int = _BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy batch bounds of every sub-epoch part of the fixed ordering's ``order`` (its
    ``size`` positions) -> (bounds of part 0, then part 1, ... int64, each relative to its part
    and ``[nb_p + 1]`` long; where each part's bounds start ``[parts + 1]``).

    The batches are global planning's (``Batcher.bounds_of`` over the lengths in order), cut a
    block of positions at a time: the last batch of a block may be cut short by the block's end,
    so the next block starts at its first sequence (greedy batching is memoryless).

    >>> from seqloader.plan.cost import BatchCost
    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.ones(5, np.int64)
    >>> order = FixedOrder(build_bucket_index(lengths, fixed_edges(lengths, "default")), "default")
    >>> limits = BatchLimits.of(2, None, None, BatchCost(), ["data"], "data")
    >>> cuts, starts = fixed_cuts(order, 2, limits, {"data": lengths})
    >>> cuts.tolist(), starts.tolist()
    ([0, 2, 3, 0, 2], [0, 3, 5])
    """
    batcher = cut_batcher(limits)
    out: list[np.ndarray] = []
    starts = [0]
    for part in range(parts):
        lo, hi = part_bounds(order.size, parts, part)
        part_cuts = cut_positions(order, lo, hi, batcher, lengths, block)
        out.append(part_cuts)
        starts.append(starts[-1] + len(part_cuts))
    return np.concatenate(out).astype(np.int64), np.asarray(starts, dtype=np.int64)


def cut_batcher(limits: BatchLimits) -> Batcher:
    """Global planning's ``Batcher`` for ``limits`` (its lengths passed per block)."""
    keys = sorted({limits.length_key, *limits.padded, *limits.packed})
    return Batcher(limits, {k: np.zeros(0, dtype=np.int64) for k in keys})


def cut_positions(
    order: Callable[[np.ndarray], np.ndarray],
    lo: int,
    hi: int,
    batcher: Batcher,
    lengths: Mapping[str, np.ndarray],
    block: int = _BLOCK,
) -> np.ndarray:
    """Greedy batch bounds of positions ``lo .. hi`` of the order, relative to ``lo`` -> int64
    ``[batches + 1]``: a block of positions at a time (memory: a few blocks), each block's
    last batch left to the next block unless it is the end (greedy batching is memoryless, so
    restarting at a batch's first sequence cuts what one pass cuts).

    >>> from seqloader.plan.cost import BatchCost
    >>> limits = BatchLimits.of(2, None, None, BatchCost(), ["data"], "data")
    >>> ones = {"data": np.ones(9, np.int64)}
    >>> cut_positions(lambda p: p, 2, 7, cut_batcher(limits), ones, block=3).tolist()
    [0, 2, 4, 5]
    """
    keys = batcher.keys
    got = [np.zeros(1, dtype=np.int64)]
    start, width = lo, block
    while start < hi:
        end = min(hi, start + width)
        seqs = order(np.arange(start, end, dtype=np.int64))
        ordered = {k: np.asarray(lengths[k][seqs], dtype=np.int64) for k in keys}
        bounds = batcher.bounds_of(ordered)
        if end < hi:
            if len(bounds) <= 2:  # one batch to the block's end: it may go on
                width *= 2
                continue
            bounds = bounds[:-1]  # the last batch may be cut by the block's end
        got.append(bounds[1:] + (start - lo))
        start += int(bounds[-1])
    return np.concatenate(got).astype(np.int64)


class _Sizes:
    """Batch ``b``'s size, read off the bounds when indexed (``BoundsTable.sizes``/``counts``)."""

    def __init__(self, bounds: np.ndarray) -> None:
        self.bounds = bounds

    def __getitem__(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=np.int64)
        return np.asarray(self.bounds[b + 1] - self.bounds[b], dtype=np.int64)


class BoundsTable:
    """A part's greedy bounds (e.g. memory-mapped: never copied) as the batch table of an
    ``IndexedPlan``: each batch is a "bucket" of one batch, so a rank reads only its own
    batches' bounds (O(its share)), and every count comes from one bound.

    >>> table = BoundsTable(np.array([0, 2, 4, 5]))
    >>> table.num_batches, table.batch_sizes(np.array([0, 2])).tolist(), table.batch_at(4)
    (3, [2, 1], 2)
    """

    def __init__(self, bounds: np.ndarray) -> None:
        self.bounds = bounds
        self.num_batches = len(bounds) - 1
        self.num_seqs = int(bounds[-1])
        self.sizes = self.counts = _Sizes(bounds)

    def locate(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, batch index in it) of plan batches ``g``: ``(g, 0)``."""
        g = np.asarray(g, dtype=np.int64)
        return g, np.zeros(len(g), dtype=np.int64)

    def batch_sizes(self, g: np.ndarray) -> np.ndarray:
        return self.sizes[g]

    def seqs_before(self, g: int) -> int:
        """Sequences in plan batches ``0 .. g-1``."""
        return int(self.bounds[min(max(g, 0), self.num_batches)])

    def batch_at(self, seqs: int, what: str = "start") -> int:
        """The plan batch that begins after ``seqs`` sequences; an ``OptionError`` when that is
        not a batch boundary (as ``BatchTable.batch_at``)."""
        if not 0 <= seqs <= self.num_seqs:
            raise OptionError(
                f"{what}: got {seqs}, expected a sequence position 0..{self.num_seqs}"
            )
        g = int(np.searchsorted(self.bounds, seqs))
        if int(self.bounds[g]) != seqs:
            raise OptionError(
                f"{what}: got {seqs}, which is not at a batch boundary of the indexed plan (it "
                "falls inside a batch); the position belongs to another plan"
            )
        return g


class FixedDraw:
    """The ``Draw`` of a fixed ordering's part: slot ``p`` of batch ``g`` is position
    ``lo + bounds[g] + p`` of the full epoch's order (``lo``: the part's first position)."""

    def __init__(
        self, order: Callable[[np.ndarray], np.ndarray], bounds: np.ndarray, lo: int
    ) -> None:
        self.order, self.bounds, self.lo = order, bounds, lo

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, None]:
        return self.order(self.lo + np.asarray(self.bounds[bucket], dtype=np.int64) + pos), None
