"""What indexed planning's bucket lists hold: sequences, or (chunked) their chunks, told once.

``IndexedPlanner`` plans *units*: the admitted sequences, or with ``chunking`` their chunks
(``seqloader.plan.indexed.chunks``: coded ``sequence * stride + chunk``, bucketed by window). Everything
that differs between the two is an answer of one object made once per planner
(``planned_units``): ``PlannedSequences`` or ``PlannedChunks``. So the planner's draws, sorts,
per-key limits, ``epoch_wise_filter`` cuts, per-corpus counts and slot costs are written once and
never test for chunking; a new unit kind is a new class here, not a branch in every method
(streaming's ``partition`` registry and global planning's ``chunk_batching`` are the model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.chunks import (
    ChunkBuckets,
    ChunkGeometry,
    ChunkWindows,
    window_lengths,
)
from seqloader.plan.indexed.filter import epoch_filtered, selected
from seqloader.plan.indexed.fixed import BoundsTable, FixedDraw, cut_positions
from seqloader.plan.indexed.fixed_chunks import (
    ChunkedFixedDraw,
    Chunking,
    admitted_index,
    cut_chunk_positions,
)
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.keep_rule import counted_filter
from seqloader.plan.indexed.plan import ChunkDraw, Draw, MemberDraw
from seqloader.plan.indexed.random_order import RANDOM_BLOCK
from seqloader.plan.indexed.sort_bins import cut_view
from seqloader.plan.limits import Batcher
from seqloader.plan.options import PlanOptions
from seqloader.plan.seeding import PURPOSE_INDEXED_MEMBERS, PURPOSE_INDEXED_PARTS, rng_for
from seqloader.plan.selections import EpochSelection

if TYPE_CHECKING:
    from seqloader.plan.cost import BatchCost
    from seqloader.plan.indexed.corpus import AdmittedCorpus
    from seqloader.plan.mix import Corpora

_CHUNK = 1 << 22  # members read at once while summing a bucket's lengths
#: a full epoch's sequence order: positions -> sequence indices (``FixedOrder``, ``RandomOrder``)
Order = Callable[[np.ndarray], np.ndarray]
#: what a greedy cut reads each batch key's lengths from
Lengths = Mapping[str, np.ndarray]


@dataclass
class EpochCut:
    """A sub-epoch after ``epoch_wise_filter``: kept units per bucket, the draw of the kept
    lists, the sequences each filter dropped, and those counts by the report's reasons."""

    counts: np.ndarray
    draw: Draw
    dropped: list[int]
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CutAsk:
    """What an epoch cut is asked: the sub-epoch ``ep``, the order rank whose draws it cuts,
    ``epoch_wise_filter``'s ``means`` and the epoch selections ``chosen`` that apply to it."""

    ep: EpochIndex
    order_rank: int
    means: Sequence[float]
    chosen: Sequence[EpochSelection]


class CutPlanner(Protocol):
    """What an epoch cut reads of the planner (``IndexedPlanner``)."""

    options: PlanOptions
    index: BucketIndex
    head: tuple[int, ...]

    def seed_epoch(self, ep: EpochIndex) -> int: ...

    def head_of(self, order_rank: int) -> tuple[int, ...]: ...

    def base_counts(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray]: ...

    def member_draw(self, ep: EpochIndex, offsets: np.ndarray, order_rank: int) -> MemberDraw: ...


class PlannedUnits(Protocol):
    """The contract of a planner's units: ``members``/``starts`` the bucket lists, ``lengths``
    what a unit sorts by (``SortedWindows``), ``chunks`` the chunk buckets or None."""

    @property
    def members(self) -> np.ndarray | ChunkBuckets: ...

    @property
    def starts(self) -> np.ndarray: ...

    @property
    def lengths(self) -> np.ndarray | ChunkWindows: ...

    @property
    def chunks(self) -> ChunkBuckets | None: ...

    def draw(self, offsets: np.ndarray, words: tuple[int, ...]) -> MemberDraw:
        """The keyed draw of the bucket lists from ``offsets`` on."""
        ...

    def sequences(self, units: np.ndarray) -> np.ndarray:
        """The sequence of each drawn unit."""
        ...

    def key_longest(self, class_longest: np.ndarray, key: str) -> np.ndarray:
        """Per bucket the longest unit in ``key``, from the index's longest per bucket."""
        ...

    def first_lengths(self, lengths: np.ndarray, key: str) -> np.ndarray:
        """Each sequence's longest unit in ``key`` (what must fit a batch alone)."""
        ...

    def slot_costs(self, batches: BatchList, costs: np.ndarray, cost: BatchCost) -> np.ndarray:
        """Cost units of each slot of ``batches`` (``costs``: the sequences')."""
        ...

    def cuts_every_epoch(self, options: PlanOptions) -> bool:
        """Whether every epoch is cut (``cut``), filtered or not."""
        ...

    def cut(self, planner: CutPlanner, ask: CutAsk) -> EpochCut:
        """The sub-epoch after the selections (their drops in ``reasons``), then the filter."""
        ...

    def corpus_counts(self, corpora: Corpora, mask: np.ndarray | None) -> np.ndarray:
        """Every admitted unit per corpus -> int64 ``[C]`` (one sub-epoch, nothing filtered)."""
        ...

    def random_index(self, index: BucketIndex) -> BucketIndex:
        """What ``random``'s keyed order permutes, from the planner's ``index``."""
        ...

    def fixed_draw(self, order: Order, index: BucketIndex, cuts: slice, lo: int, hi: int) -> Draw:
        """A fixed ordering's draw of positions ``lo .. hi`` over the index's ``cuts``."""
        ...

    def greedy_cut(
        self, order: Order, lo: int, hi: int, batcher: Batcher, lengths: Lengths, full: int = 0
    ) -> tuple[BoundsTable, Draw]:
        """Greedy batches of positions ``lo .. hi`` of ``order``, cut in blocks (length variants:
        on full epoch ``full``'s drawn lengths, ``seqloader.plan.indexed.variants_units``)."""
        ...


class PlannedSequences:
    """Unchunked: the bucket lists hold the index's sequences.

    >>> units = PlannedSequences(np.array([2, 0, 1]), np.array([0, 1, 3]), np.array([5, 9, 4]))
    >>> units.sequences(np.array([1, 2])).tolist(), units.first_lengths(np.array([7]), "data")
    ([1, 2], array([7]))
    """

    chunks: ChunkBuckets | None = None

    def __init__(self, members: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.members, self.starts, self.lengths = members, starts, lengths
        self._sums: np.ndarray | None = None  # per bucket length sums (epoch_wise_filter)

    def draw(self, offsets: np.ndarray, words: tuple[int, ...]) -> MemberDraw:
        return MemberDraw(self.members, self.starts, offsets, words)

    def sequences(self, units: np.ndarray) -> np.ndarray:
        return units

    def key_longest(self, class_longest: np.ndarray, key: str) -> np.ndarray:
        return class_longest

    def first_lengths(self, lengths: np.ndarray, key: str) -> np.ndarray:
        return np.asarray(lengths)

    def slot_costs(self, batches: BatchList, costs: np.ndarray, cost: BatchCost) -> np.ndarray:
        return costs[batches.seqs]

    def cuts_every_epoch(self, options: PlanOptions) -> bool:
        return False

    def cut(self, planner: CutPlanner, ask: CutAsk) -> EpochCut:
        """The epoch selections (their drops counted in ``reasons``), then
        ``epoch_wise_filter``'s means, on the sub-epoch's bucket lists."""
        ep, reasons = ask.ep, dict[str, int]()
        counts, lo = planner.base_counts(ep)
        draw: Draw = planner.member_draw(ep, lo, ask.order_rank)
        for sel in ask.chosen:  # as global planning: each on what the ones before kept
            counts, draw, out = selected(counts, draw, sel.keep)
            if out:
                reason = f"epoch_wise_filter {sel.name} (epoch {ep.epoch})"
                reasons[reason] = reasons.get(reason, 0) + out
        if not ask.means:
            return EpochCut(counts, draw, [], reasons)
        sums = None
        if planner.options.partition_epoch == 1 and not ask.chosen:  # every bucket, every epoch
            if self._sums is None:
                self._sums = _bucket_sums(planner.index, self.lengths)
            sums = self._sums
        return EpochCut(*epoch_filtered(counts, draw, self.lengths, ask.means, sums), reasons)

    def corpus_counts(self, corpora: Corpora, mask: np.ndarray | None) -> np.ndarray:
        """Counted per corpus range of the admission mask."""
        if mask is None:
            return np.asarray(corpora.sizes, dtype=np.int64)
        edges = np.asarray(corpora.bounds).tolist()
        return np.asarray([np.count_nonzero(mask[a:b]) for a, b in pairwise(edges)], np.int64)

    def random_index(self, index: BucketIndex) -> BucketIndex:
        return index

    def fixed_draw(self, order: Order, index: BucketIndex, cuts: slice, lo: int, hi: int) -> Draw:
        assert index.cuts is not None
        return FixedDraw(order, index.cuts[cuts], lo)

    def greedy_cut(
        self, order: Order, lo: int, hi: int, batcher: Batcher, lengths: Lengths, full: int = 0
    ) -> tuple[BoundsTable, Draw]:
        cut_order, cut_lengths = cut_view(order, batcher.keys, lengths)  # sort_bins: by length
        bounds = cut_positions(cut_order, lo, hi, batcher, cut_lengths, RANDOM_BLOCK)
        return BoundsTable(bounds), FixedDraw(order, bounds, lo)


class PlannedChunks:
    """Chunked: the bucket lists hold chunk codes (``ChunkBuckets``), sorted by their windows;
    ``classes`` the admitted sequences by length class (the planner's index), ``whole`` each
    sequence's class value (``ChunkGeometry``: chunked length key, its length), ``spec`` the
    chunked keys' ``(size, step)``, ``chunking`` a class's chunks (``ChunkGeometry``), ``fixed`` how the fixed orders and ``random`` expand
    a sequence (``fixed_chunks.Chunking``), ``mask`` the admitted sequences (None: all)."""

    def __init__(
        self,
        chunks: ChunkBuckets,
        classes: BucketIndex,
        whole: np.ndarray,
        key: str,
        spec: Mapping[str, tuple[int, int]],
        chunking: ChunkGeometry,
        fixed: Chunking,
        mask: np.ndarray | None,
    ) -> None:
        self.chunks, self.classes, self.fixed, self.mask = chunks, classes, fixed, mask
        self.members, self.starts = chunks, chunks.starts
        self.lengths = ChunkWindows(chunks, whole, key)
        self.whole, self.key, self.spec, self.chunking = whole, key, dict(spec), chunking

    def draw(self, offsets: np.ndarray, words: tuple[int, ...]) -> MemberDraw:
        return ChunkDraw(self.chunks, offsets, words)  # codes

    def sequences(self, units: np.ndarray) -> np.ndarray:
        return self.chunks.split(units)[0]

    def key_longest(self, class_longest: np.ndarray, key: str) -> np.ndarray:
        """Per chunk bucket the key's longest window (``ChunkBuckets.window_max``)."""
        return self.chunks.window_max(class_longest, self.spec.get(key))

    def first_lengths(self, lengths: np.ndarray, key: str) -> np.ndarray:
        """A sequence's first chunk is its longest: its length, at most the key's chunk size."""
        first = np.asarray(lengths)
        return np.minimum(first, self.spec[key][0]) if key in self.spec else first

    def slot_costs(self, batches: BatchList, costs: np.ndarray, cost: BatchCost) -> np.ndarray:
        """Each slot's chunk window in cost units."""
        if batches.chunks is None:
            return costs[batches.seqs]
        whole = np.asarray(self.whole[batches.seqs])
        windows = window_lengths(self.chunks, self.key, whole, batches.chunks)
        return np.asarray(cost.units(windows), dtype=np.int64)

    def cuts_every_epoch(self, options: PlanOptions) -> bool:
        """With ``epoch_wise_filter`` and sub-epochs every sub-epoch is a set of whole sequences
        (``part_classes``), so the filter keeps or drops sequences as global planning's does,
        and together a full epoch's sub-epochs hold every admitted sequence's chunks once
        (every epoch of such a plan, filtered or not, is cut so)."""
        return options.epoch_wise_filter is not None and options.partition_epoch > 1

    def cut(self, planner: CutPlanner, ask: CutAsk) -> EpochCut:
        """``epoch_wise_filter`` keeps whole sequences of the sub-epoch (every admitted
        sequence; sub-epochs: ``part_classes``), as global planning's (RETURNN's shortest by
        (length, index), ``mean_len_cut`` over the length classes: every length below one
        class, the lowest indices of that class), and their chunks are planned
        (``ChunkBuckets.kept``). From counts: O(distinct lengths); sub-epochs: O(n / P).
        Epoch selections are refused with chunking (``ask.chosen`` is empty)."""
        ep, base = ask.ep, self.chunks
        if self.cuts_every_epoch(planner.options):
            base = replace(base, classes=part_classes(planner, ep))
        kept = np.diff(np.asarray(base.classes.starts, dtype=np.int64))  # [G] per length class
        value = self.chunking.whole(planner.index.longest)  # [G] its length
        dropped = []
        for mean in ask.means:
            out, g = counted_filter(kept, value, mean)  # g: the class cut inside, its lowest kept
            dropped.append(out)
            if g is not None and self.chunking.per:  # one length's classes: its lowest indices
                tie_cut(base.classes, kept, value, g)
        units = base.kept(kept)
        words = (*planner.head_of(ask.order_rank), PURPOSE_INDEXED_MEMBERS, planner.seed_epoch(ep))
        draw = ChunkDraw(units, np.zeros(len(units.counts), np.int64), words)
        return EpochCut(units.counts, draw, dropped)

    def corpus_counts(self, corpora: Corpora, mask: np.ndarray | None) -> np.ndarray:
        """From the length index (a class's members ascending: each corpus' range is a
        ``searchsorted``), times the chunks of each length. O(lengths x corpora)."""
        classes, bounds = self.classes, np.asarray(corpora.bounds, dtype=np.int64)
        per_class = self.chunking.counts(classes.longest)  # [G]
        out = np.zeros(len(corpora.names), dtype=np.int64)
        for g in range(len(classes.longest)):
            members = classes.members[int(classes.starts[g]) : int(classes.starts[g + 1])]
            at = np.searchsorted(members, bounds)  # [C + 1]
            out += np.diff(at) * int(per_class[g])
        return out

    def random_index(self, index: BucketIndex) -> BucketIndex:
        """The admitted sequences in one bucket, ascending (``admitted_index``): the planner's
        index holds length classes."""
        return admitted_index(self.mask, len(self.whole))

    def fixed_draw(self, order: Order, index: BucketIndex, cuts: slice, lo: int, hi: int) -> Draw:
        """Each sequence's chunks in turn (``seqloader.plan.indexed.fixed_chunks``)."""
        assert index.cut_firsts is not None
        firsts = index.cut_firsts[cuts]
        return ChunkedFixedDraw(order, firsts, lo, hi - lo, self.fixed, self.chunks.stride)

    def greedy_cut(
        self, order: Order, lo: int, hi: int, batcher: Batcher, lengths: Lengths, full: int = 0
    ) -> tuple[BoundsTable, Draw]:
        """Each sequence's chunks in turn, cut by their windows (``fixed_chunks``)."""
        stride = self.chunks.stride
        bounds, firsts = cut_chunk_positions(
            order, lo, hi, batcher, self.fixed, stride, RANDOM_BLOCK
        )
        return BoundsTable(bounds), ChunkedFixedDraw(order, firsts, lo, hi - lo, self.fixed, stride)


def tie_cut(classes: BucketIndex, kept: np.ndarray, value: np.ndarray, g: int) -> None:
    """The length key not chunked, a filter's cut inside class ``g``: the classes of ``g``'s
    length (adjacent, one per chunk count) keep, together, the lowest indices of their kept
    members (RETURNN's (length, index) order) rather than ``g``'s alone; ``kept`` in place.

    >>> classes = BucketIndex(np.array([4, 0, 3, 1, 2]), np.array([0, 2, 5]),
    ...     np.array([21, 22]), np.array([22]))
    >>> kept = np.array([2, 1])  # the cut fell inside class 1: three of length 7 kept
    >>> tie_cut(classes, kept, np.array([7, 7]), 1); kept.tolist()
    [1, 2]
    """
    same = np.flatnonzero(value == value[g])
    lo, hi = int(same[0]), int(same[-1]) + 1
    starts = np.asarray(classes.starts, dtype=np.int64)
    total = int(kept[lo:hi].sum())
    full = np.diff(starts)[lo:hi]  # the members each class of the length holds
    members = np.asarray(classes.members[int(starts[lo]) : int(starts[hi])], dtype=np.int64)
    owner = np.repeat(np.arange(hi - lo), full)
    lowest = np.argsort(members, kind="stable")[:total]
    kept[lo:hi] = np.bincount(owner[lowest], minlength=hi - lo)


def planned_units(corpus: AdmittedCorpus) -> PlannedSequences | PlannedChunks:
    """The units an admitted corpus's bucket lists hold (made once per planner)."""
    if corpus.units is None:
        return PlannedSequences(corpus.index.members, corpus.index.starts, corpus.lengths)
    assert corpus.chunks is not None and corpus.chunking is not None
    return PlannedChunks(
        corpus.units,
        corpus.index,
        corpus.class_values,
        corpus.length_key,
        corpus.chunks.spec,
        corpus.chunking,
        corpus.fixed_chunking(),
        corpus.mask,
    )


def part_classes(planner: CutPlanner, ep: EpochIndex) -> BucketIndex:
    """Chunked with sub-epochs (``PlannedChunks.cuts_every_epoch``): the length index restricted
    to sub-epoch ``ep``'s sequences. Each length class's members are shuffled by one stream keyed
    alike on every rank (seed, full epoch, ``PURPOSE_INDEXED_PARTS``; the classes in order, so the
    full epoch's sub-epochs are disjoint) and laid end to end: position ``x`` goes to part
    ``x % P``, so every part holds its share of every class and the parts' sizes differ by at
    most one (a slice per class would give a class of fewer than ``P`` sequences to the first
    parts only). Ascending by index within a class (the filter keeps a class's lowest indices).
    O(n) time per sub-epoch (a shuffle per class, its memory), O(n / P) memory kept."""
    index, parts = planner.index, planner.options.partition_epoch
    starts = np.asarray(index.starts, dtype=np.int64)
    rng = rng_for(*planner.head, PURPOSE_INDEXED_PARTS, planner.seed_epoch(ep))
    got: list[np.ndarray] = []
    counts = np.zeros(len(starts) - 1, dtype=np.int64)
    for g in range(len(counts)):
        first = (ep.part - int(starts[g])) % parts
        mine = rng.permutation(int(starts[g + 1] - starts[g]))[first::parts]
        got.append(np.sort(np.asarray(index.members[starts[g] + mine], dtype=np.int64)))
        counts[g] = len(mine)
    part_starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=part_starts[1:])
    seqs = np.concatenate([*got, np.zeros(0, dtype=np.int64)])
    return replace(index, members=seqs, starts=part_starts, file_counts=None, file_frames=None)


def _bucket_sums(index: BucketIndex, lengths: np.ndarray) -> np.ndarray:
    """The admitted lengths' sum per bucket -> int64 ``[N]`` (a chunk of members at a time)."""
    out = np.zeros(len(index.starts) - 1, dtype=np.int64)
    for a in range(0, len(index.members), _CHUNK):
        members = np.asarray(index.members[a : a + _CHUNK], dtype=np.int64)
        bucket = np.searchsorted(index.starts, a + np.arange(len(members)), side="right") - 1
        out += np.bincount(
            bucket, weights=np.asarray(lengths[members], dtype=np.float64), minlength=len(out)
        ).astype(np.int64)
    return out
