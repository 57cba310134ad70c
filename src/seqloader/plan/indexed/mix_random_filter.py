"""``epoch_wise_filter`` with a ``mix`` and ``ordering="random"`` (``distribution="shard"`` or
``"random_seed_offset"``, unchunked), in blocks; ``default`` and ``reverse`` by the same rule.

The meaning is ``mix_filter``'s: sub-epoch ``e``'s ``(sequence, corpus epoch)`` slots, each
``max_mean_len`` keeping in turn the shortest by (length, sequence, corpus epoch) (RETURNN's
binary search), the kept slots in the sub-epoch's keyed order cut greedily. ``random``'s index
is one bucket, so listing "the one bucket cut inside" listed the whole sub-epoch (several times:
its length sums, its sorted lengths, the kept slots sorted, the keyed order to cut): about 7x an
unfiltered epoch's time and O(slots) memory per rank.

Here the kept set is a rule (``KeepRule``): every slot shorter than a length ``L``, and of
length ``L`` those up to a (sequence, corpus epoch) key. It is found in blocks of the
sub-epoch's slots taken as a set (``MixDraw.placed_slots``: no keyed order needed): the count of
every length (the filters' binary searches run on these counts, as ``mean_len_selection``
does), then, only when a filter cuts inside a length, the keys of that length's slots (the
``inside`` smallest kept while going). The cut (``kept_cut``) goes over the keyed order in
blocks, keeps what the rule keeps and cuts it greedily (a block's last batch carried into the
next: greedy batching is memoryless); a batch's draw reads the keyed positions from its first
kept slot to the next batch's (``KeptCutDraw``). Time O(slots / P) per rank per filtered
sub-epoch (three passes, one keyed); memory a block, the distinct lengths, the batch bounds.
The plans are those of listing the order (the same kept set, order and cuts). ``default`` and
``reverse`` (one bucket too) list the sub-epoch's slots as unfiltered and keep what the rule
keeps (``ShardMix.listed_cut``, ``OrderKept.keeps``), nothing listed again or matched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from seqloader.plan.admission import EpochFilter, epoch_filters, filter_reasons
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.indexed.keep_rule import KeepRule, rule_of
from seqloader.plan.indexed.mix import IndexedMix, MixDraw
from seqloader.plan.indexed.mix_filter import MixKept
from seqloader.plan.indexed.mix_kind import Cut, ShardMix
from seqloader.plan.indexed.plan import Draw
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import USES_DTYPE, Corpora

#: slots read at once by the passes (memory: a dozen int64 arrays of this size)
FILTER_BLOCK = 1 << 18
#: lengths below this are counted by ``bincount`` (else ``unique``)
_DENSE_LENGTHS = 1 << 20


class _Counts:
    """Slots per distinct length, accumulated block by block -> (values, counts) ascending."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)

    def add(self, lens: np.ndarray) -> None:
        if not len(lens):
            return
        if int(lens.max()) < _DENSE_LENGTHS and int(lens.min()) >= 0:
            counted = np.bincount(lens)
            values = np.flatnonzero(counted)
            counts = counted[values]
        else:
            values, counts = np.unique(lens, return_counts=True)
        both = np.concatenate([self.values, values])
        self.values, inverse = np.unique(both, return_inverse=True)
        weights = np.concatenate([self.counts, counts]).astype(np.int64)
        self.counts = np.bincount(inverse, weights=weights).astype(np.int64)


def _blocks(size: int, block: int) -> Iterator[np.ndarray]:
    for a in range(0, size, block):
        yield np.arange(a, min(size, a + block), dtype=np.int64)


@dataclass
class KeptSet:
    """The filters of one sub-epoch on a one-bucket mix's slots (``draw``, ``size`` of them;
    ``lengths``: what the filter sorts by): the ``rule``, the slots each filter dropped."""

    draw: MixDraw
    size: int
    lengths: np.ndarray
    means: Sequence[float]
    block: int = FILTER_BLOCK
    rule: KeepRule = field(init=False)
    dropped: list[int] = field(init=False)

    def __post_init__(self) -> None:
        counts, span = _Counts(), 1
        for q in _blocks(self.size, self.block):
            seqs, uses = self.draw.placed_slots(0, q)
            counts.add(np.asarray(self.lengths[seqs], dtype=np.int64))
            span = max(span, int(uses.max(initial=0)) + 1)
        values = counts.values

        def key_at(g: int, inside: int) -> tuple[int, int]:
            return self._key_at(int(values[g]), inside, span), span

        self.rule, self.dropped, _ = rule_of(values, counts.counts, self.means, key_at)

    def _key_at(self, length: int, inside: int, span: int) -> int:
        """The ``inside``-th smallest (sequence, corpus epoch) key of the slots of ``length``."""
        best = np.zeros(0, dtype=np.int64)
        for q in _blocks(self.size, self.block):
            seqs, uses = self.draw.placed_slots(0, q)
            tie = np.asarray(self.lengths[seqs], dtype=np.int64) == length
            keys = np.concatenate([best, seqs[tie] * span + uses[tie].astype(np.int64)])
            best = np.partition(keys, inside - 1)[:inside] if len(keys) > inside else keys
        return int(best.max())

    def kept_lists(self) -> tuple[np.ndarray, Draw]:
        """(kept slots per bucket, their draw: the kept ones listed when asked, for checks)."""
        return np.array([self.kept], dtype=np.int64), _KeptList(self)

    def keeps(self, seqs: np.ndarray, uses: np.ndarray) -> np.ndarray:
        return self.rule.keeps(seqs, uses, np.asarray(self.lengths[seqs], dtype=np.int64))

    @property
    def kept(self) -> int:
        return self.size - sum(self.dropped)

    def corpus_left(self, corpora: Corpora) -> np.ndarray:
        """Slots per corpus the filters left out -> int64 ``[C]`` (a pass over the set)."""
        out = np.zeros(len(corpora.names), dtype=np.int64)
        for q in _blocks(self.size if self.rule.length is not None else 0, self.block):
            seqs, uses = self.draw.placed_slots(0, q)
            out += corpora.counts(seqs[~self.keeps(seqs, uses)])
        return out

    def left_out(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot left out (O(them): for checks)."""
        seqs_out, uses_out = [np.zeros(0, np.int64)], [np.zeros(0, USES_DTYPE)]
        for q in _blocks(self.size if self.rule.length is not None else 0, self.block):
            seqs, uses = self.draw.placed_slots(0, q)
            gone = ~self.keeps(seqs, uses)
            seqs_out.append(seqs[gone])
            uses_out.append(uses[gone].astype(USES_DTYPE))
        return np.concatenate(seqs_out), np.concatenate(uses_out)


class _KeptList:
    """The kept slots in the keyed order, listed when asked (``MixKept.draw``: for checks; the
    plan draws by ``KeptCutDraw``)."""

    def __init__(self, kept: KeptSet) -> None:
        self.kept = kept
        self._listed: tuple[np.ndarray, np.ndarray] | None = None

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._listed is None:
            got = [_kept_at(self.kept, p) for p in _blocks(self.kept.size, self.kept.block)]
            seqs = np.concatenate([np.zeros(0, np.int64), *(s for s, _, _ in got)])
            uses = np.concatenate([np.zeros(0, USES_DTYPE), *(u for _, u, _ in got)])
            self._listed = (seqs, uses)
        return self._listed[0][pos], self._listed[1][pos]


def _kept_at(kept: KeptSet, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept slots among keyed positions ``pos``: (sequences, corpus epochs, positions)."""
    seqs, uses = kept.draw.bucket_slots(0, pos)
    keep = kept.keeps(seqs, uses)
    return seqs[keep], uses[keep], pos[keep]


@dataclass(frozen=True)
class OrderKept(MixKept):
    """``MixKept`` of a one-bucket mix (``random``'s) kept by a ``KeptSet``'s rule: what the
    filtered mix's counts, reasons and checks read, none of it listed but for checks."""

    kept_set: KeptSet | None = None

    def left_out(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.kept_set is not None
        return self.kept_set.left_out()

    def keeps(self, seqs: np.ndarray, uses: np.ndarray) -> np.ndarray:
        """By the rule: nothing listed or matched."""
        assert self.kept_set is not None
        return self.kept_set.keeps(seqs, uses)


def order_kept(
    spec: EpochFilter,
    ep: EpochIndex,
    draw: MixDraw,
    lengths: np.ndarray,
    block: int = FILTER_BLOCK,
    make: Callable[..., KeptSet] = KeptSet,
) -> OrderKept | None:
    """The filters of sub-epoch ``ep`` (``spec``: ``epoch_wise_filter``) on a one-bucket mix's
    slots (``draw``) -> ``OrderKept``; None where no filter applies to ``ep``. ``make``: the
    ``KeptSet`` kind (one bucket per value: ``mix_sorted_filter.BucketKeptSet``)."""
    means = epoch_filters(spec, ep.epoch)
    if not means:
        return None
    size = int(draw.cum[:, -1].sum())
    kept = make(draw, size, lengths, means, block)
    reasons = filter_reasons(means, ep.epoch, kept.dropped)
    counts, listed = kept.kept_lists()
    return OrderKept(counts, listed, reasons, draw.cum[:, -1].copy(), draw, kept)


class KeptCutDraw:
    """The ``Draw`` of a filtered ``random`` mix's cut: batch ``g``'s slots are the kept ones of
    keyed positions ``firsts[g] .. firsts[g + 1]`` (``bounds``: kept slots before each batch)."""

    def __init__(self, kept: KeptSet, bounds: np.ndarray, firsts: np.ndarray) -> None:
        self.kept, self.bounds, self.firsts = kept, bounds, firsts

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = np.asarray(bucket, dtype=np.int64)
        batches, inverse = np.unique(g, return_inverse=True)
        lo, hi = self.firsts[batches], self.firsts[batches + 1]
        width = hi - lo
        at = np.arange(int(width.sum()), dtype=np.int64)
        at += np.repeat(lo - (np.cumsum(width) - width), width)  # the batches' keyed positions
        seqs, uses, _ = _kept_at(self.kept, at)
        size = self.bounds[batches + 1] - self.bounds[batches]
        first = np.cumsum(size) - size  # each batch's first slot in the kept list
        j = first[inverse] + np.asarray(pos, dtype=np.int64)
        return seqs[j], uses[j]


def kept_cut(
    kept: KeptSet, batcher: Batcher, lengths: Mapping[str, np.ndarray]
) -> tuple[BoundsTable, KeptCutDraw]:
    """The kept slots of the keyed order cut greedily, a block of positions at a time (a
    block's last batch carried into the next) -> (batch table, draw)."""
    keys = batcher.keys
    bounds, firsts = [np.zeros(1, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    carry_seqs, carry_pos = np.zeros(0, np.int64), np.zeros(0, np.int64)
    done = 0  # kept slots cut
    for pos in _blocks(kept.size, kept.block):
        seqs, _, at = _kept_at(kept, pos)
        seqs = np.concatenate([carry_seqs, seqs])
        at = np.concatenate([carry_pos, at])
        b = _bounds(batcher, keys, lengths, seqs)
        if int(pos[-1]) + 1 < kept.size and len(b) > 1:
            b = b[:-1]  # the last batch may go on into the next block
        bounds.append(b[1:] + done)
        firsts.append(at[b[:-1]])
        cut = int(b[-1])
        done += cut
        carry_seqs, carry_pos = seqs[cut:], at[cut:]
    ends = np.array([kept.size], dtype=np.int64)
    return BoundsTable(np.concatenate(bounds)), KeptCutDraw(
        kept, np.concatenate(bounds), np.concatenate([*firsts, ends])
    )


def _bounds(
    batcher: Batcher, keys: Sequence[str], lengths: Mapping[str, np.ndarray], seqs: np.ndarray
) -> np.ndarray:
    return batcher.bounds_of({k: np.asarray(lengths[k][seqs], dtype=np.int64) for k in keys})


class OneBucketShardMix(ShardMix):
    """``ShardMix`` over a one-bucket index (``random``, ``default``, ``reverse`` unchunked): a
    filtered sub-epoch's kept set as a rule (``order_kept``), per-corpus counts by a pass;
    ``random``'s kept slots cut in blocks (``kept_cut``), a fixed order's listed slots masked by
    the rule (the listing those orders make anyway, nothing listed again or matched)."""

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        return rule_kept(self, ep, parts)

    def random_cut(
        self, ep: EpochIndex, parts: int, batcher: Batcher, lengths: Mapping[str, np.ndarray]
    ) -> Cut:
        kept = self.kept(ep, parts)
        if not isinstance(kept, OrderKept) or kept.kept_set is None:
            return super().random_cut(ep, parts, batcher, lengths)
        return kept_cut(kept.kept_set, batcher, lengths)

    def _left_per_corpus(self, ep: EpochIndex, parts: int, count: np.ndarray) -> np.ndarray:
        return rule_left(self, ep, parts, count)


def rule_kept(
    mix: IndexedMix, ep: EpochIndex, parts: int, make: Callable[..., KeptSet] = KeptSet
) -> MixKept | None:
    """``IndexedMix.kept`` of a mix whose filtered sub-epochs keep by a rule (``order_kept``,
    ``make``: the ``KeptSet`` kind), by the filter's lengths; kept for the last sub-epoch."""
    return mix.kept_once(ep, partial(made_by_rule, mix, ep, parts, make))


def made_by_rule(
    mix: IndexedMix, ep: EpochIndex, parts: int, make: Callable[..., KeptSet] = KeptSet
) -> MixKept | None:
    """``rule_kept``'s kept set, made (not kept)."""
    assert mix.wise is not None
    draw = mix.draw(ep.full_epoch, ep.part, parts)
    return order_kept(mix.wise.spec, ep, draw, np.asarray(mix.filter_by()), make=make)


def rule_left(mix: IndexedMix, ep: EpochIndex, parts: int, count: np.ndarray) -> np.ndarray:
    """``IndexedMix._left_per_corpus`` of such a mix: the kept set's pass (``corpus_left``)."""
    kept = mix.kept(ep, parts)
    if kept is None:
        return np.zeros(count.shape[1], dtype=np.int64)
    assert isinstance(kept, OrderKept) and kept.kept_set is not None  # kept by a rule
    return kept.kept_set.corpus_left(mix.corpora)
