"""``distribution="files"`` with a fixed or random ordering under indexed planning (``CutFiles``).

The meaning is global planning's (``seqloader.plan.greedy.distributions.Files``), batch for batch
with the same seed: each sub-epoch's files (shuffled and cut as global planning cuts them) are
dealt to ranks largest first by admitted frames (``assign_lpt``); a rank orders its files'
sequences with the ordering (``default``: file after file in the dealt order, sequences ascending
within; ``reverse``: that backwards; ``sorted``/``sorted_reverse``: its share sorted by length;
``random``: its share in an order drawn per (full epoch, part, segment, rank)) and cuts them
greedily (global planning's ``Batcher``); ``uneven`` equalises the steps as global planning's
``equalise`` does. An elastic resume re-plans what the history's segments left (files' remainders,
halved while there are fewer than ranks, dealt again). Chunked (``ChunkSlots``): a rank's ordered
sequences are expanded into their chunks and the chunks cut by their windows, as global planning's
files plans cut them; a resume continues each sequence from its first undelivered chunk.

What a rank computes: its own batches, from its own files' sequences (O(n / W)); and every rank's
batch count, which ``uneven`` needs for equal steps. A greedy cut depends on every length before
it, and each rank's list exists only for this (epoch, world size), so every rank's list is
ordered and cut, one rank at a time: **O(n) time per rank** (memory: one rank's list at a time and
every rank's batch bounds, O(n / W + batches)). The node keeps only the per-file counts and frames
(one bucket of the admitted sequences; nothing of the order, which depends on the epoch and the
world size). An elastic resume replays each earlier segment's consumption (which sequences each
rank's first steps took): O(n) time and a mask of ``n`` bools (chunked: and the chunks each
sequence delivered, ``n`` int64), as global planning's. The step imbalance is counted from every
rank's share (no planned cost: the batches are real lengths'). Chunked, the same per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.batches import BatchList
from seqloader.plan.chunks import ChunkTable
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import START, At, EpochIndex, replay_history
from seqloader.plan.files import fill_rank, refuse_files_start
from seqloader.plan.indexed.chunks import ChunkBuckets
from seqloader.plan.indexed.files_distribution import Files, FilesPlanner, admitted_per_file
from seqloader.plan.indexed.files_mix import FilesMix
from seqloader.plan.indexed.fixed import FIXED_KINDS, cut_batcher, cut_positions
from seqloader.plan.indexed.fixed_chunks import Chunking, cut_chunk_positions
from seqloader.plan.indexed.pieces import split_pieces
from seqloader.plan.indexed.plan import RankwisePlan, piece_bounds, ranges
from seqloader.plan.indexed.random_order import RANDOM_BLOCK
from seqloader.plan.indexed.sort_bins import DRAWN_KINDS
from seqloader.plan.limits import Batcher
from seqloader.plan.lpt import assign_lpt
from seqloader.plan.mix import Corpora
from seqloader.plan.options import PlanOptions, Uneven
from seqloader.plan.ordering import order_sequences
from seqloader.plan.seeding import PURPOSE_FILES_ORDER, rng_for

#: the orderings whose files plans are greedy cuts of each rank's own order
CUT_KINDS = (*FIXED_KINDS, *DRAWN_KINDS)


def files_cut(options: PlanOptions) -> bool:
    """Whether ``options`` plan files by greedy cuts of each rank's order (``CutFiles``).

    >>> files_cut(PlanOptions(ordering="random", distribution="files"))
    True
    >>> files_cut(PlanOptions(ordering="laplace:.10", distribution="files"))
    False
    """
    return options.distribution == "files" and options.parsed_ordering.kind in CUT_KINDS


@dataclass(frozen=True)
class _Units:
    """A segment's units: file pieces ``file``, ``start``, ``count`` (offsets into the file's
    remaining sequences, ascending), in the sub-epoch's file order, and the rank of each."""

    file: np.ndarray
    start: np.ndarray
    count: np.ndarray
    rank_of: np.ndarray


#: a rank's slots: (sequence of each, its chunk or None unchunked)
Slots = tuple[np.ndarray, np.ndarray | None]


@dataclass(frozen=True)
class Left:
    """What the segments of an elastic history left, per element (a sequence; a mix over files:
    a slot position): ``seqs`` the elements with a unit left (bool ``[n]``); chunked, ``done``
    the chunks each has delivered (int64 ``[n]``: always a prefix of its chunks, as a rank's
    consumed steps are a prefix of its list)."""

    seqs: np.ndarray
    done: np.ndarray | None = None

    def copy(self) -> Left:
        """A copy to consume into: a kept segment reads its ``Left`` when a rank's list is
        drawn, so what it was planned on must not change under it."""
        return Left(self.seqs.copy(), None if self.done is None else self.done.copy())


class SequenceSlots:
    """Unchunked: a rank's slots are its ordered elements (sequences; a mix over files: slot
    positions), cut by their sequences' lengths (``batcher``: global planning's, over
    ``lengths``). Every method takes the elements and their sequences apart: what was delivered
    is kept per element, what a slot costs is its sequence's."""

    chunked = False

    def __init__(self, batcher: Batcher, lengths: Mapping[str, np.ndarray]) -> None:
        self.batcher, self.lengths = batcher, lengths

    def slots(self, elements: np.ndarray, seqs: np.ndarray, left: Left | None) -> Slots:
        """A rank's slots from its ordered ``elements`` (``seqs``: the sequence of each)."""
        return elements, None

    def bounds(self, elements: np.ndarray, seqs: np.ndarray, left: Left | None) -> np.ndarray:
        """Greedy bounds over the slots of ``elements`` (a rank's ordered elements, ``seqs``
        the sequence of each)."""
        at = _positions(seqs)
        return cut_positions(at, 0, len(seqs), self.batcher, self.lengths, RANDOM_BLOCK)

    def consume(
        self, left: Left, elements: np.ndarray, seqs: np.ndarray, chunks: np.ndarray | None
    ) -> None:
        """Mark the slots taken (``elements``, ``seqs`` the sequence of each) as delivered."""
        left.seqs[elements] = False

    def ids(self, seqs: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        """What ``files_plan`` reports as consumed: the sequences."""
        return seqs

    def start(self, every: np.ndarray) -> Left:
        """Nothing consumed yet of the elements ``every`` (bool, a copy of it kept)."""
        return Left(every)


class ChunkSlots(SequenceSlots):
    """Chunked: a rank's slots are its ordered elements' chunks (their sequences'), each
    element's in turn (after an elastic resume, from the first it has not delivered: counted per
    element, so a sequence holding two slots of a mix continues each on its own), cut by their
    windows as global planning cuts them (``chunk_batching``'s fits in blocks,
    ``cut_chunk_positions``; after a resume, the general batcher over the windows: the same
    bounds)."""

    chunked = True

    def __init__(
        self,
        batcher: Batcher,
        chunking: Chunking,
        units: ChunkBuckets,
        number: Callable[[], ChunkTable],
    ) -> None:
        super().__init__(batcher, chunking.lengths)
        self.chunking, self.stride, self._number = chunking, units.stride, number

    def slots(self, elements: np.ndarray, seqs: np.ndarray, left: Left | None) -> Slots:
        at, chunks = self._chunks(elements, seqs, left)
        return elements[at], chunks

    def _chunks(
        self, elements: np.ndarray, seqs: np.ndarray, left: Left | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The chunks of ``elements`` (``seqs``: the sequence of each) each element's in turn,
        from its first undelivered one -> (index into ``elements`` of each chunk, its chunk)."""
        per = self.chunking.counts(seqs)
        skip = np.zeros(len(seqs), np.int64) if left is None else self._skip(left, elements)
        per = per - skip
        ends = np.cumsum(per)
        total = int(ends[-1]) if len(ends) else 0
        chunk = np.arange(total, dtype=np.int64) - np.repeat(ends - per - skip, per)
        return np.repeat(np.arange(len(seqs), dtype=np.int64), per), chunk

    @staticmethod
    def _skip(left: Left, elements: np.ndarray) -> np.ndarray:
        assert left.done is not None
        return np.asarray(left.done[elements], dtype=np.int64)

    def bounds(self, elements: np.ndarray, seqs: np.ndarray, left: Left | None) -> np.ndarray:
        """From the fits in blocks when every element starts at its first chunk, else the
        windows of what is left (the same bounds: ``chunk_batching``)."""
        c, batcher = self.chunking, self.batcher
        if left is None or not self._skip(left, elements).any():
            at = _positions(seqs)
            return cut_chunk_positions(at, 0, len(seqs), batcher, c, self.stride, RANDOM_BLOCK)[0]
        on, chunks = self._chunks(elements, seqs, left)
        return batcher.bounds_of({k: c.windows(k, seqs[on], chunks) for k in batcher.keys})

    def consume(
        self, left: Left, elements: np.ndarray, seqs: np.ndarray, chunks: np.ndarray | None
    ) -> None:
        """Count each taken chunk on its element (an element's delivered chunks are a prefix
        of its chunks); an element is left while it has chunks to deliver."""
        assert left.done is not None
        if not len(elements):
            return
        # an element's taken chunks are adjacent (one rank's list): counted per run of them
        run = np.flatnonzero(np.r_[True, elements[1:] != elements[:-1]])
        size = np.diff(np.r_[run, len(elements)])
        own = elements[run]
        np.add.at(left.done, own, size)
        left.seqs[own] = left.done[own] < self.chunking.counts(seqs[run])

    def ids(self, seqs: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
        """The chunk numbers (``ChunkTable.unit_ids``), as global planning reports them."""
        assert chunks is not None
        return self._number().unit_ids(seqs, chunks)

    def start(self, every: np.ndarray) -> Left:
        return Left(every, np.zeros(len(every), dtype=np.int64))


class CutSegment:
    """One segment: every rank's greedy bounds (counted), a rank's batches drawn when asked."""

    def __init__(
        self,
        order_of: Callable[[int], Slots],
        bounds: list[np.ndarray],
        uneven: Uneven,
        chunked: bool = False,
    ) -> None:
        self.order_of, self.bounds, self.uneven = order_of, bounds, uneven
        self.chunked = chunked
        self.world_size = len(bounds)
        nb = [len(b) - 1 for b in bounds]
        few = uneven == "drop"
        self.steps = min(nb, default=0) if few else max(nb, default=0)
        #: real slots per step of each rank's list after equalising (split: the pieces)
        self._cum: list[np.ndarray] = []
        for b in bounds:
            sizes = np.diff(b)[: self.steps] if few else np.diff(b)
            if uneven == "split":
                _, lo, hi = piece_bounds(sizes, split_pieces(sizes, self.steps))
                sizes = hi - lo
            cum = np.zeros(len(sizes) + 1, dtype=np.int64)
            np.cumsum(sizes, out=cum[1:])
            self._cum.append(cum)
        self.real_total = int(sum(int(c[-1]) for c in self._cum))
        self.dropped = int(sum(int(b[-1]) for b in bounds)) - self.real_total
        self.repeats = sum(self._filler_slots(b, c) for b, c in zip(bounds, self._cum, strict=True))

    def _filler_slots(self, bounds: np.ndarray, cum: np.ndarray) -> int:
        """Filler slots of a rank (``pad``: its first batches repeated whole; else one
        slot per missing step)."""
        missing = self.steps - (len(cum) - 1)
        batches = len(bounds) - 1
        if missing <= 0:
            return 0
        if self.uneven != "pad" or not batches:
            return missing
        rounds, rest = divmod(missing, batches)
        return rounds * int(bounds[-1]) + int(bounds[rest])

    def consumed(self, steps: int) -> int:
        """Real slots of the first ``steps`` steps, all ranks together (from the bounds)."""
        return int(sum(int(c[min(steps, len(c) - 1)]) for c in self._cum))

    def share(self, rank: int) -> BatchList:
        """``rank``'s batches for ``steps`` steps, equalised as global planning's ``equalise``
        (fillers of a rank without slots: the first of the ranks' slots, rank by rank)."""
        seqs, chunks = self.order_of(rank)
        batches = BatchList.from_bounds(seqs, self.bounds[rank], chunks=chunks)
        if self.uneven == "drop":
            return batches.first(self.steps)
        return fill_rank(batches, self.steps, self.uneven, self._pool)

    def _pool(self, need: int) -> Slots:
        """The ranks' slots, rank after rank, at least ``need`` of them (or all)."""
        seqs: list[np.ndarray] = []
        chunks: list[np.ndarray] = []
        have = 0
        for r in range(self.world_size):
            if have >= need:
                break
            if int(self.bounds[r][-1]):
                s, c = self.order_of(r)
                seqs.append(s)
                chunks.append(np.zeros(0, np.int64) if c is None else c)
                have += len(s)
        if not seqs:
            seqs, chunks = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        return np.concatenate(seqs), (np.concatenate(chunks) if self.chunked else None)

    def taken(self, steps: int) -> Slots:
        """The slots of every rank's first ``steps`` steps (real ones), rank after rank ->
        (sequences, chunks or None) int64 (draws every rank: O(n))."""
        seqs, chunks = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for r in range(self.world_size):
            if int(self.bounds[r][-1]):
                share = self.share(r).first(steps)
                seqs.append(share.seqs[share.real])
                if share.chunks is not None:
                    chunks.append(np.asarray(share.chunks, np.int64)[share.real])
        got = np.concatenate(seqs).astype(np.int64)
        return got, (np.concatenate(chunks) if self.chunked else None)

    def plan(self, slots: Callable[[BatchList], BatchList] | None = None) -> RankwisePlan:
        """The segment's plan (``slots``: a share's elements as a mix's (sequence, corpus
        epoch) slots, ``MixCutFiles``)."""
        share = self.share if slots is None else (lambda rank: slots(self.share(rank)))
        return RankwisePlan(
            share,
            self.world_size,
            self.steps,
            self.real_total,
            self.repeats,
            self.consumed,
            None,
            self.dropped,
            chunked=self.chunked,
            mixed=slots is not None,
        )


def _positions(seqs: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A rank's order as ``cut_positions`` reads it: positions to sequences."""

    def at(pos: np.ndarray) -> np.ndarray:
        return seqs[pos]

    return at


class CutFiles(Files):
    """``distribution="files"`` with greedy cuts of each rank's order (the module doc): the
    sub-epoch's files as ``Files`` (their shuffle, the counts per corpus, the checks), the
    segments as global planning plans them.

    >>> from seqloader.plan.indexed.planner import IndexedPlanner
    >>> options = PlanOptions(ordering="sorted", max_seqs=2, distribution="files")
    >>> planner = IndexedPlanner({"data": np.array([4, 1, 3, 2, 6, 5])}, options,
    ...                          files=np.array([0, 2, 4, 6]))
    >>> share = planner.global_plan(1, 2).rank_share(1)  # files 1 and 0: its lengths sorted
    >>> type(planner.distribution).__name__, share.seqs.tolist()
    ('CutFiles', [1, 3, 2, 0])
    """

    def __init__(self, planner: FilesPlanner) -> None:
        super().__init__(planner)
        self._kept: dict[tuple, CutSegment] = {}
        corpus = planner.corpus
        batcher = cut_batcher(corpus.limits)
        #: what a rank's slots are: its elements (sequences), or chunked their chunks
        self.slots = SequenceSlots(batcher, corpus.batch_lengths)
        #: admitted sequences per file (the per-file table counts chunks when chunked)
        self._seq_counts = np.asarray(self.file_counts, dtype=np.int64)
        if corpus.units is not None:
            chunking = corpus.fixed_chunking()
            self.slots = ChunkSlots(batcher, chunking, corpus.units, self._chunk_table)
            self._seq_counts = admitted_per_file(self.files, self._mask)

    def _chunk_table(self) -> ChunkTable:
        chunks = self.planner.corpus.chunks
        assert chunks is not None
        return chunks

    def make_mix(self, corpora: Corpora) -> FilesMix:
        raise OptionError(
            f"planning='indexed': mix with distribution='files' and "
            f"ordering={self.planner.options.ordering!r} is not supported; use planning='global', "
            "or a laplace or buckets:N ordering"
        )

    def segment(self, epoch: int, world_size: int, at: At = START) -> tuple[EpochPlan, int]:
        refuse_files_start(at.start)
        seg, before = self._replayed(epoch, world_size, at.history, draw=False)
        return seg.plan(), int(before)

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        seg, before = self._replayed(epoch, world_size, history, draw=True)
        assert isinstance(before, np.ndarray)
        return seg.plan(), before

    def _replayed(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]], draw: bool
    ) -> tuple[CutSegment, int | np.ndarray]:
        """The segment after ``history`` and what the history consumed (``draw``: the
        elements, chunked the chunk numbers, else their count); the history's consumption is
        replayed on what is left (``Left``)."""
        if not history:
            self.check_world(world_size)
        ep = EpochIndex(epoch, self.planner.options.partition_epoch)
        left: Left | None = None
        if self.epoch_kept(ep) is not None:  # epoch_wise_filter: the kept set, dealt and cut
            left = self.slots.start(self._all_left(ep))
        taken: list[np.ndarray] = []
        count = 0

        def segment(i: int, w: int) -> CutSegment:
            return self._cut_segment(ep, w, tuple(history[:i]), left)

        for seg, _, steps in replay_history(epoch, history, segment):
            used, chunks = seg.taken(steps)
            seqs = self._seqs_of(ep, used)
            # a new Left per segment: the kept segments (``_cut_segment``) hold theirs
            left = self.slots.start(self._all_left(ep)) if left is None else left.copy()
            self.slots.consume(left, used, seqs, chunks)
            if draw:
                taken.append(self.slots.ids(seqs, chunks))
            count += len(used)
        seg = self._cut_segment(ep, world_size, tuple(history), left)
        if not draw:
            return seg, count
        return seg, (np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64))

    def _cut_segment(
        self,
        ep: EpochIndex,
        world_size: int,
        before: tuple[tuple[int, int], ...],
        left: Left | None,
    ) -> CutSegment:
        """The segment after the segments ``before`` on ``world_size`` ranks over the elements
        ``left`` (None: every admitted one); kept, as a resume asks for it more than once."""
        p = self.planner
        key = (*self._segment_key(ep), before, world_size)
        if key in self._kept:
            return self._kept[key]
        mask = None if left is None else left.seqs
        units = self._deal(ep, world_size, mask)
        words = (*p.head, PURPOSE_FILES_ORDER, p.seed_epoch(ep), ep.part, len(before))
        # sorted kinds sort by the length key, or by a source's own sort key (order_lengths) as
        # global planning's rank orders sort
        ordering, lengths, slots = p.options.parsed_ordering, p.corpus.order_by, self.slots
        cache: dict[int, np.ndarray] = {}

        def ordered(rank: int) -> np.ndarray:
            if rank not in cache:
                own = self._rank_elements(ep, units, rank, mask)
                seqs = self._seqs_of(ep, own)
                rng = rng_for(*words, rank)
                cache.clear()  # one rank's list at a time
                cache[rank] = own[order_sequences(np.asarray(lengths[seqs]), ordering, rng)]
            return cache[rank]

        def order_of(rank: int) -> Slots:
            own = ordered(rank)
            return slots.slots(own, self._seqs_of(ep, own), left)

        bounds = []
        for r in range(world_size):
            own = ordered(r)
            bounds.append(slots.bounds(own, self._seqs_of(ep, own), left))
        seg = CutSegment(order_of, bounds, p.options.uneven, slots.chunked)
        if len(self._kept) >= 8:
            self._kept.clear()
        self._kept[key] = seg
        return seg

    def _segment_key(self, ep: EpochIndex) -> tuple[int, ...]:
        """What a kept segment depends on besides the history and the world: the order's seed
        epoch, the sub-epoch, and where ``epoch_wise_filter`` applies the epoch (its kept set:
        epochs that share their draws, ``fixed_random_seed`` or ``:K``, are filtered apart)."""
        filtered = self.epoch_kept(ep) is not None
        return (self.planner.seed_epoch(ep), ep.part, ep.epoch if filtered else -1)

    def _deal(self, ep: EpochIndex, world_size: int, left: np.ndarray | None) -> _Units:
        """The sub-epoch's files with sequences ``left`` as units, the largest halved while there
        are fewer units than ranks (``split_units``' rule), dealt by frames (``assign_lpt``)."""
        part, bounds, counts, frames = self._items(ep)
        if left is not None:  # what the earlier segments left of each file
            seqs = ranges(bounds[part], bounds[part + 1])
            of = np.repeat(np.arange(len(part)), bounds[part + 1] - bounds[part])
            keep = left[seqs]
            counts = np.bincount(of[keep], minlength=len(part)).astype(np.int64)
            lengths = self.planner.lengths[self._seqs_of(ep, seqs[keep])]
            weights = np.asarray(lengths, dtype=np.float64)
            frames = np.bincount(of[keep], weights=weights, minlength=len(part)).astype(np.int64)
        held = counts > 0
        file, count, frames = part[held], counts[held], frames[held]
        start = np.zeros(len(file), dtype=np.int64)
        split = False
        while len(file) < world_size and len(count) and int(count.max()) >= 2:
            k = len(count) - 1 - int(np.argmax(count[::-1]))  # the largest, ties: the latest
            first = int(count[k]) // 2 + int(count[k]) % 2
            file = np.insert(file, k + 1, file[k])
            start = np.insert(start, k + 1, start[k] + first)
            count = np.insert(count, k + 1, count[k] - first)
            count[k] = first
            split = True
        if split:  # the halves' frames from their sequences
            draft = _Units(file, start, count, np.zeros(len(file), dtype=np.int64))
            lengths = self.planner.lengths
            frames = np.array(
                [
                    int(np.asarray(lengths[self._unit_seqs(ep, draft, [u], left)]).sum())
                    for u in range(len(file))
                ],
                dtype=np.int64,
            )
        return _Units(file, start, count, assign_lpt(frames, world_size))

    def _items(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What sub-epoch ``ep`` deals: (its items in order, every item's elements as bounds
        ``[bounds[i], bounds[i + 1])``, each item's admitted elements and frames) -> int64. Here
        the items are files and their elements sequences (a mix over files: ``MixCutFiles``)."""
        part = self._part_files(ep)
        counts = self._seq_counts[part]
        frames = np.asarray(self.file_frames, dtype=np.int64)[part]
        return part, self._bounds(ep), counts, frames

    def _bounds(self, ep: EpochIndex) -> np.ndarray:
        """Every item's elements ``[bounds[i], bounds[i + 1])`` (here: the files' sequences)."""
        return np.asarray(self.files, dtype=np.int64)

    def _unit_seqs(
        self, ep: EpochIndex, units: _Units, which: Sequence[int], left: np.ndarray | None
    ) -> np.ndarray:
        """The sequences of units ``which`` (ascending unit numbers), unit after unit -> int64
        (a mix over files: its slots' sequences)."""
        elements = self._unit_elements(ep, units, which, left)
        return self._seqs_of(ep, elements)

    def _unit_elements(
        self, ep: EpochIndex, units: _Units, which: Sequence[int], left: np.ndarray | None
    ) -> np.ndarray:
        """The elements of units ``which``, unit after unit (``unit_elements``)."""
        mask = self._mask if left is None else left
        return unit_elements(self._bounds(ep), mask, units, which)

    def _all_left(self, ep: EpochIndex) -> np.ndarray:
        """Every element of sub-epoch ``ep`` as still to plan, a mask (here: the admitted
        sequences, with ``epoch_wise_filter`` the sub-epoch's kept ones; a mix over files: its
        slots, ``MixCutFiles``)."""
        mask = self._mask_of(ep)
        n = len(self.planner.lengths)
        return np.ones(n, dtype=bool) if mask is None else np.array(mask, dtype=bool)

    def _seqs_of(self, ep: EpochIndex, elements: np.ndarray) -> np.ndarray:
        """The sequences of elements of sub-epoch ``ep`` (here the elements are sequences)."""
        return elements

    def _rank_elements(
        self, ep: EpochIndex, units: _Units, rank: int, left: np.ndarray | None
    ) -> np.ndarray:
        """Rank ``rank``'s elements: its units' in the sub-epoch's unit order."""
        return self._unit_elements(ep, units, np.flatnonzero(units.rank_of == rank).tolist(), left)


#: a segment's units, as ``MixCutFiles`` reads them
CutUnits = _Units


def unit_elements(
    bounds: np.ndarray, mask: np.ndarray | None, units: _Units, which: Sequence[int]
) -> np.ndarray:
    """The elements of units ``which`` (ascending unit numbers), unit after unit -> int64: unit
    ``u`` is elements ``start .. start + count`` of item ``file[u]``'s elements ``[bounds[f],
    bounds[f + 1])`` that ``mask`` holds (None: all)."""
    files = np.asarray(bounds, dtype=np.int64)
    us = np.asarray(which, dtype=np.int64)
    f = units.file[us]
    seqs = ranges(files[f], files[f + 1])
    of = np.repeat(np.arange(len(us)), files[f + 1] - files[f])
    if mask is not None:
        keep = mask[seqs]
        seqs, of = seqs[keep], of[keep]
    held = np.bincount(of, minlength=len(us))  # of each unit, what the mask holds
    within = np.arange(len(seqs)) - (np.cumsum(held) - held)[of]  # offset within its unit
    lo = units.start[us][of]
    take = (within >= lo) & (within < lo + units.count[us][of])
    return seqs[take].astype(np.int64)
