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

Global planning refuses a mix with ``buckets:N`` and, with ``laplace``, sorts the mix's slots;
these plans are indexed planning's own (the chunks bucketed by their windows, as unmixed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.chunks import ChunkBuckets
from seqloader.plan.indexed.mix import IndexedMix
from seqloader.plan.indexed.mix_cuts import part_slots
from seqloader.plan.indexed.plan import MemberDraw
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.seeding import PURPOSE_INDEXED_MEMBERS


class ClassSlots:
    """A sub-epoch's slots grouped by length class: ``seqs``, ``uses`` class after class,
    ``starts`` int64 ``[G + 1]`` where each class's begin."""

    def __init__(self, seqs: np.ndarray, uses: np.ndarray, starts: np.ndarray) -> None:
        self.seqs, self.uses, self.starts = seqs, uses, starts

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.starts)


class MixChunkDraw(MemberDraw):
    """The slots of a mixed chunked sub-epoch by (chunk bucket, position): a keyed permutation
    of the bucket's list (``MemberDraw``), its chunk located in a cell (``ChunkBuckets.locate``),
    the ``j``-th slot of the cell's class (``ClassSlots``) -> (code ``sequence * stride +
    chunk``, corpus epoch)."""

    def __init__(self, units: ChunkBuckets, listed: ClassSlots, words: tuple[int, ...]) -> None:
        super().__init__(units, units.starts, np.zeros(len(units.counts), np.int64), words)
        self.units, self.listed = units, listed

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        at = self.positions(bucket, pos)
        if not len(at):
            return at, np.zeros(0, dtype=USES_DTYPE)
        g, j, chunk = self.units.locate(at)
        slot = self.listed.starts[g] + j
        return self.listed.seqs[slot] * self.units.stride + chunk, self.listed.uses[slot]


class ChunkedBucketMix(IndexedMix):
    """``IndexedMix`` over the length classes of a chunked plan (``args``: its arguments, the
    classes as its index), planning the chunks of its slots (module doc); ``units``: the
    plan's chunk buckets."""

    def __init__(self, units: ChunkBuckets, *args: Any) -> None:
        super().__init__(*args)
        self.units = units
        self._listed: tuple[tuple[int, int, int], ClassSlots] | None = None

    def _class_counts(self, ep: EpochIndex, parts: int) -> np.ndarray:
        """Slots per length class of sub-epoch ``ep`` -> int64 ``[G]`` (from the counts)."""
        return self.part(ep.full_epoch, ep.part, parts)[1].sum(axis=1)

    def class_slots(self, ep: EpochIndex, parts: int) -> ClassSlots:
        """Sub-epoch ``ep``'s slots listed (``part_slots``) and grouped by length class (kept
        for the last sub-epoch asked)."""
        key = (ep.full_epoch, ep.part, parts)
        if self._listed is None or self._listed[0] != key:
            lo, count = self.part(ep.full_epoch, ep.part, parts)  # [G, C] each
            seqs, uses = part_slots(self, lo, count)
            longest = np.asarray(self.index.longest, dtype=np.int64)
            g = np.searchsorted(longest, np.asarray(self._lengths[seqs], dtype=np.int64))
            by = np.argsort(g, kind="stable")
            starts = np.zeros(len(longest) + 1, dtype=np.int64)
            np.cumsum(count.sum(axis=1), out=starts[1:])
            self._listed = (key, ClassSlots(seqs[by], uses[by], starts))
        return self._listed[1]

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
