"""A ``mix`` (``distribution="shard"``) with chunking and the bucket orderings (``laplace``,
``buckets:N``) under indexed planning (``ChunkedBucketMix``).

The mix selects **sequences**, as unchunked and as a mix over files does: its streams are per
(corpus, length class) over the chunked plans' length classes (one bucket per admitted length,
``IndexedMix``), so a sub-epoch takes, per class, the mix's slots (sequence, corpus epoch), every
corpus epoch exactly once over the epochs that cover it. Every chunk of every slot is planned:
per class the count of slots gives the chunks per chunk bucket (``ChunkBuckets.kept``: a class's
cells times its slots), and chunk bucket ``b``'s list is its cells' chunks, the ``j``-th of a
cell belonging to the ``j``-th slot of its class's sub-epoch list. A rank draws its batches'
chunks position by position: a keyed permutation of the chunk bucket's list (``MemberDraw``'s),
the cell and the slot's place in its class (``ChunkBuckets.locate``) -> the chunk's code and its
corpus epoch. The counts are from the mix's count tables; the histogram batching,
``SortedWindows``, the batch table, sharding, ``uneven``, positions and resume are the unmixed
chunked plans' (``plan/indexed/chunks.py``).

**O(slots) per rank, plainly:** the classes' slot lists are the sub-epoch's slots listed once
(``mix_cuts.part_slots``: whole corpus epochs read off the index, partial ones drawn in one
vectorised evaluation of their streams' keyed bijections), grouped by class: 12 bytes a slot,
kept for the sub-epoch. Drawing a slot alone instead (``MixDraw``, as unchunked mixes do) costs
a keyed permutation per (class, corpus) stream a batch touches, and a chunk bucket mixes the
chunks of up to every length class (one per admitted length, about 2,000 for lengths 50..2000):
about 3 s per window of batches at 20,000 sequences, where the listing takes milliseconds. A
class's slot order is its listing's; the chunk bucket's keyed permutation draws the slots at
random positions.

With ``epoch_wise_filter`` the sub-epoch's slots are filtered once as one set, by length class
(``mix_chunks_filter``), and the kept slots' chunks are planned as above.

Global planning refuses a mix with ``buckets:N`` and, with ``laplace``, sorts the mix's slots;
these plans are indexed planning's own (the chunks bucketed by their windows, as unmixed).
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise
from typing import Any, cast

import numpy as np

from seqloader.plan.admission import epoch_filters, filter_reasons
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.chunks import ChunkBuckets
from seqloader.plan.indexed.mix import IndexedMix
from seqloader.plan.indexed.mix_chunks_filter import ClassSlots, kept_slots
from seqloader.plan.indexed.mix_cuts import part_slots
from seqloader.plan.indexed.mix_filter import MixKept
from seqloader.plan.indexed.plan import ChunkDraw, Take
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.seeding import PURPOSE_INDEXED_MEMBERS

#: ``CellFinder``'s table entries per cell (more: fewer positions step past an end)
BINS_PER_CELL = 4


class CellFinder:
    """``np.searchsorted(ends, at, side="right") + first`` for positions ``at`` in ``[start,
    ends[-1])`` (``ends``: one bucket's cells' ends, ascending), by a table of the answers at
    every ``2**shift``-th position (about ``BINS_PER_CELL`` entries a cell): a position's cell
    lies between its bin's two table entries, and only positions whose bin holds a cell's end
    step on past it, so most take one lookup instead of a binary search's unpredictable
    branches (the same cells: ``tests/test_plan_indexed_mix_chunks.py``).

    >>> f = CellFinder(np.array([13, 13, 20, 41]), 10, 5)
    >>> f.find(np.array([10, 12, 13, 19, 20, 40])).tolist()
    [5, 5, 7, 7, 8, 8]
    """

    def __init__(self, ends: np.ndarray, start: int, first: int) -> None:
        self.ends = np.asarray(ends, dtype=np.int64) - start  # [k] within the bucket
        self.start, self.first = start, first
        size = int(self.ends[-1]) if len(self.ends) else 0
        self.shift = max(size // (BINS_PER_CELL * max(len(self.ends), 1)), 1).bit_length() - 1
        marks = np.arange((size >> self.shift) + 2, dtype=np.int64) << self.shift
        self.table = np.searchsorted(self.ends, marks, side="right")  # [bins + 1]

    def find(self, at: np.ndarray) -> np.ndarray:
        x = at - self.start
        i = x >> self.shift
        cell = self.table[i]
        step = np.flatnonzero(self.table[i + 1] > cell)  # bins holding an end
        while len(step):
            past = self.ends[cell[step]] <= x[step]
            step = step[past]
            cell[step] += 1
        cell += self.first
        return cell


class MixChunkDraw(ChunkDraw):
    """The slots of a mixed chunked sub-epoch by (chunk bucket, position): a keyed permutation
    of the bucket's list (``MemberDraw``'s), its chunk located in a cell (``ChunkBuckets.locate``'s
    arithmetic), the ``j``-th slot of the cell's class (``ClassSlots``) -> (code ``sequence *
    stride + chunk``, corpus epoch).

    The draws come in runs of one bucket (a window of batches is one bucket's), so a run is
    permuted by its bucket's bijection alone and its cells searched among that bucket's only;
    the per-cell terms are folded once per draw (``base``: a position's offset in its cell is
    ``at - base``; ``first``: the cell's class's first slot)."""

    def __init__(self, units: ChunkBuckets, listed: ClassSlots, words: tuple[int, ...]) -> None:
        super().__init__(units, np.zeros(len(units.counts), np.int64), words)
        self.listed = listed
        g = units.cell_class
        self._width, self._lo, self._end = units.cell_width, units.cell_lo, units.cell_end
        self._base = units.cell_end - units.planned[g] * units.cell_width
        self._first = listed.starts[g]
        self._window = units.cell_windows()  # [C]
        self._cells = np.searchsorted(  # [N + 1] each bucket's first cell
            units.cell_buckets(), np.arange(len(units.counts) + 1), side="left"
        )
        self._finders: dict[int, CellFinder] = {}

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        if not len(pos):
            return np.zeros(0, np.int64), np.zeros(0, dtype=USES_DTYPE)
        return self._slots_at(*self._cells_at(bucket, pos))

    def sort_keys(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Take]:
        """(the window length of the chunks at (bucket, pos): their cells', no slot drawn, a
        function: indices into them -> their slots): ``SortedWindows`` sorts a window of
        batches by the lengths and draws the slots of only the positions a rank asked for, a
        ``1 / W`` of the window (the lengths are ``ChunkWindows``': a cell's chunks are
        its class's windows ``lo, lo + 1, ..``, each ``min(size, length - c * step)`` long,
        and a cell of more than one chunk holds only full windows)."""
        if not len(pos):
            at = cell = np.zeros(0, np.int64)
        else:
            at, cell = self._cells_at(bucket, pos)

        def take(i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return self._slots_at(at[i], cell[i])

        return self._window[cell], take

    def _cells_at(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in the cells' list, cell) of each (bucket, position) -> int64 each."""
        bucket = np.asarray(bucket, dtype=np.int64)
        edges = np.flatnonzero(bucket[1:] != bucket[:-1]) + 1
        if len(edges) > len(pos) // 64:  # scattered buckets: as the members' draw groups them
            at = self.positions(bucket, pos)
            return at, np.searchsorted(self._end, at, side="right")
        bounds = [0, *edges.tolist(), len(pos)]
        at = np.empty(len(pos), dtype=np.int64)
        cell = np.empty(len(pos), dtype=np.int64)
        for a, e in pairwise(bounds):
            b = int(bucket[a])
            here = at[a:e]
            here[:] = self.bijection(b)(pos[a:e])
            here += self.starts[b]
            cell[a:e] = self._cells_of(b).find(here)
        return at, cell

    def _cells_of(self, b: int) -> CellFinder:
        """Bucket ``b``'s cells' finder (made once per draw)."""
        found = self._finders.get(b)
        if found is None:
            c0, c1 = int(self._cells[b]), int(self._cells[b + 1])
            found = self._finders[b] = CellFinder(self._end[c0:c1], int(self.starts[b]), c0)
        return found

    def _slots_at(self, at: np.ndarray, cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slots at positions ``at`` of the cells' list, in cells ``cell``."""
        j, c = np.divmod(at - self._base[cell], self._width[cell])
        slot = self._first[cell] + j
        c += self._lo[cell]
        return self.listed.seqs[slot] * self.units.stride + c, self.listed.uses[slot]


class ChunkedBucketMix(IndexedMix):
    """``IndexedMix`` over the length classes of a chunked plan (``args``: its arguments, the
    classes as its index), planning the chunks of its slots (module doc); ``units``: the
    plan's chunk buckets."""

    def __init__(self, units: ChunkBuckets, *args: Any) -> None:
        super().__init__(*args)
        self.units = units
        self._listed: tuple[tuple[int, int, int], ClassSlots] | None = None

    def _class_counts(self, ep: EpochIndex, parts: int) -> np.ndarray:
        """Slots per length class of sub-epoch ``ep`` -> int64 ``[G]`` (from the counts;
        filtered: the kept slots)."""
        kept = self.kept(ep, parts)
        if kept is not None:
            return kept.counts
        return self.part(ep.full_epoch, ep.part, parts)[1].sum(axis=1)

    def class_slots(self, ep: EpochIndex, parts: int) -> ClassSlots:
        """Sub-epoch ``ep``'s slots grouped by length class (``all_slots``; the kept ones where
        ``epoch_wise_filter`` applies)."""
        kept = self.kept(ep, parts)
        return self.all_slots(ep, parts) if kept is None else cast(ClassSlots, kept.draw)

    def all_slots(self, ep: EpochIndex, parts: int) -> ClassSlots:
        """Sub-epoch ``ep``'s slots listed (``part_slots``) and grouped by length class (kept
        for the last sub-epoch asked)."""
        key = (ep.full_epoch, ep.part, parts)
        if self._listed is None or self._listed[0] != key:
            lo, count = self.part(ep.full_epoch, ep.part, parts)  # [G, C] each
            seqs, uses = part_slots(self, lo, count)  # class after class: the classes' lists
            starts = np.zeros(len(count) + 1, dtype=np.int64)
            np.cumsum(count.sum(axis=1), out=starts[1:])
            self._listed = (key, ClassSlots(seqs, uses, starts))
        return self._listed[1]

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        """``epoch_wise_filter`` on sub-epoch ``ep``'s slots, by length class
        (``mix_chunks_filter``): the kept slots' lists as the draw (a ``ClassSlots``), the
        class counts as the counts; None where no filter applies. Kept for the last sub-epoch
        asked."""
        return self.kept_once(ep, partial(self._class_kept, ep, parts))

    def _class_kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        """``kept``'s kept set, made (not kept)."""
        assert self.wise is not None
        means = epoch_filters(self.wise.spec, ep.epoch)
        if not means:
            return None
        listed = self.all_slots(ep, parts)
        value = self.units.geometry.whole(self.index.longest)  # [G] each class's length
        keep, dropped = kept_slots(listed, value, means)
        mine = listed.take(keep)
        reasons = filter_reasons(means, ep.epoch, dropped)
        return MixKept(mine.counts, mine, reasons, listed.counts, listed)

    def bucket_counts(self, ep: EpochIndex, parts: int) -> np.ndarray:
        """Chunks per chunk bucket of the sub-epoch's slots."""
        return self.units.kept(self._class_counts(ep, parts)).counts

    def bucket_draw(self, ep: EpochIndex, parts: int) -> MixChunkDraw:
        listed = self.class_slots(ep, parts)
        units = self.units.kept(listed.counts)
        words = (self.seed, PURPOSE_INDEXED_MEMBERS, ep.full_epoch, ep.part)
        return MixChunkDraw(units, listed, words)

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """The sub-epoch's slots, one per (sequence, corpus epoch), class after class (O(slots):
        for checks)."""
        listed = self.class_slots(ep, parts)
        return listed.seqs, listed.uses

    def random_cut(self, *args: object) -> None:
        """None: the bucket orderings are planned from the counts and draws above."""
        return None

    def fixed_cut(self, *args: object) -> None:
        """None: the bucket orderings are planned from the counts and draws above."""
        return None
