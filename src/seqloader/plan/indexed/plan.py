"""Plans of indexed planning: a rank's batches computed alone, from counts and keyed draws.

``IndexedPlan`` (``distribution="shard"``) is an ``EpochPlan`` whose batch list is virtual: plan
batch ``g`` is row ``g`` of a ``BatchTable`` (bucket ``b``, index ``j``), its members are
positions ``j*k_b ..`` of bucket ``b``'s sub-epoch slice of the keyed member permutation
(``MemberDraw``). Global batch ``k`` of the segment goes to rank ``k % W``, as in every shard plan;
``rank_share`` lists only the rank's own batches, so a rank's work and memory are about
``n / W``. The last round (plan batches past the last full round) follows ``uneven``:

- ``split``: the round's batches are cut into near-equal contiguous pieces (the batch whose
  pieces are largest gets one more, ties the latest) until there are ``W``; a piece of a batch
  is a valid batch. With fewer sequences than ranks every sequence is a batch and the rest are
  one-sequence filler repeats (``real=False``). Only the last round is re-cut (a global plan
  extends the tail back by whole rounds when it is that small).
- ``pad``: the missing batches are repeats of the segment's first batches (``real=False``).
- ``drop``: the round is left out; its sequences are counted as dropped.

``batches`` materialises the whole global list (every rank's batches, interleaved): for the audit,
the report's step imbalance and tests, not for planning.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.edges import WINDOW_BATCHES
from seqloader.plan.indexed.batch_table import BatchTable
from seqloader.plan.indexed.bijection import Bijection
from seqloader.plan.indexed.chunks import ChunkBuckets, ChunkWindows
from seqloader.plan.indexed.fixed import BoundsTable
from seqloader.plan.indexed.imbalance import files_imbalance, rankwise_imbalance, table_imbalance
from seqloader.plan.indexed.pieces import split_pieces
from seqloader.plan.mix import USES_DTYPE
from seqloader.plan.options import Uneven
from seqloader.plan.ordering import argsort_by

#: drawn positions a ``SortedWindows`` sorts at once: bounds a share's transient memory
WINDOW_BLOCK = 1 << 15


class Draw(Protocol):
    """The slots at positions of buckets' sub-epoch lists: ``MemberDraw``, or a mix's
    ``seqloader.plan.indexed.mix.MixDraw``."""

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(sequence indices int64, corpus epochs or None unmixed), one per (bucket, pos)."""
        ...


class Codes(Protocol):
    """Coded units split into (sequences, what else each slot carries): length variants'
    ``seqloader.plan.indexed.variants.VariantCodes``."""

    def split(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


#: indices into the positions a ``Keyed`` was made for -> their slots (``Draw.slots``' pair)
Take = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]


class Keyed(Protocol):
    """A ``Draw`` that knows its slots' lengths before their slots (``sort_keys``): a
    ``SortedWindows`` sorts a window of batches by them and draws the slots of only the
    positions it was asked for (``MixChunkDraw``: a chunk's window is its cell's)."""

    def sort_keys(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Take] | None:
        """(the lengths ``SortedWindows`` sorts by at (bucket, pos), the slots of some of
        them), or None: this draw's slots are drawn first (``slots``)."""
        ...


def keyed_slots(
    draw: Draw, lengths: np.ndarray | ChunkWindows, bucket: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, Take]:
    """(the lengths of the slots at (bucket, pos), a function: indices into them -> their
    slots): the draw's own ``sort_keys`` where it has them, else its slots drawn and their
    ``lengths`` looked up. Both give the same lengths and slots (``sort_keys`` is a shortcut)."""
    own = getattr(draw, "sort_keys", None)
    keyed = own(bucket, pos) if own is not None else None
    if keyed is not None:
        return keyed
    seqs, uses = draw.slots(bucket, pos)

    def take(i: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return seqs[i], None if uses is None else uses[i]

    return np.asarray(lengths[seqs]), take


class MemberDraw:
    """Sequence index at position ``p`` of bucket ``b``'s sub-epoch list: ``members[starts[b] +
    pi_b(offset[b] + p)]``, ``pi_b`` a keyed permutation of the bucket's full-epoch list."""

    def __init__(
        self,
        members: np.ndarray | ChunkBuckets,
        starts: np.ndarray,
        offsets: np.ndarray,
        words: tuple[int, ...],
    ) -> None:
        self.members, self.starts, self.offsets = members, starts, offsets
        self.words = words
        self._bijections: dict[int, Bijection] = {}

    def __call__(self, bucket: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Sequence indices -> int64, one per (bucket, position) pair."""
        at = self.positions(bucket, pos)
        return np.asarray(self.members[at], dtype=np.int64) if len(at) else at

    def positions(self, bucket: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The places in ``members`` of (bucket, position) pairs -> int64."""
        out = np.empty(len(pos), dtype=np.int64)
        if not len(pos):
            return out
        by = np.argsort(bucket, kind="stable")
        cuts = np.flatnonzero(np.diff(bucket[by])) + 1
        for sel in np.split(by, cuts):
            b = int(bucket[sel[0]])
            out[sel] = int(self.starts[b]) + self.bijection(b)(pos[sel] + self.offsets[b]).astype(
                np.int64
            )
        return out

    def bijection(self, b: int) -> Bijection:
        """Bucket ``b``'s keyed permutation of its full-epoch list (made once per draw)."""
        pi = self._bijections.get(b)
        if pi is None:
            size = int(self.starts[b + 1] - self.starts[b])
            pi = self._bijections[b] = Bijection(size, (*self.words, b))
        return pi

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, None]:
        return self(bucket, pos), None


class ChunkDraw(MemberDraw):
    """``MemberDraw`` over chunk codes (``ChunkBuckets``) that tells ``SortedWindows`` which
    buckets' positions all sort alike (one window length): such a window stays in list order
    when sorted (ties in list order), so a rank draws only its own positions there, not the
    window's ``WINDOW_BATCHES`` batches."""

    units: ChunkBuckets
    _alike: np.ndarray | None = None
    _windows: np.ndarray | None = None  # [C] each cell's window length (``sort_keys``)

    def __init__(self, units: ChunkBuckets, offsets: np.ndarray, words: tuple[int, ...]) -> None:
        super().__init__(units, units.starts, offsets, words)
        self.units = units

    def sort_keys(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Take] | None:
        """(the window length of the chunks at (bucket, pos): their cells', no code made, a
        function: indices into them -> their slots): ``SortedWindows`` sorts a window by the
        lengths and makes the codes of only the positions a rank asked for (no sequence or
        whole length looked up for the rest of the window)."""
        at = self.positions(bucket, pos)
        cell = self.units.cell_of(at)
        if self._windows is None:
            self._windows = self.units.cell_windows()

        def take(i: np.ndarray) -> tuple[np.ndarray, None]:
            return self.units.codes_in(at[i], cell[i]), None

        return self._windows[cell], take

    def alike_keys(self) -> np.ndarray:
        """``ChunkBuckets.alike_keys``, made once per draw."""
        if self._alike is None:
            self._alike = self.units.alike_keys()
        return self._alike

    def sorts_alike(self) -> bool:
        """Whether any bucket's positions all sort alike (``alike_windows`` can say True)."""
        return bool((self.alike_keys() >= 0).any())

    def alike_windows(self, bucket: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """bool per window (positions ``[lo, hi)`` of ``bucket``): whether its positions all
        sort alike (``SortedWindows``: such a window stays in list order, so only the positions
        asked are drawn)."""
        return self.alike_keys()[bucket] >= 0


class SortedWindows:
    """A ``Draw`` whose bucket lists are sorted by length within windows of ``batches`` batches
    (positions ``[w*m, (w+1)*m)`` of bucket ``b``, ``m = batches * sizes[b]``; ties in list
    order): a batch then holds lengths that lie close together, so it pads little, while which
    sequences share a window stays random every epoch. A position's slot needs its window drawn
    (``batches`` times the draws of the batch alone); windows end at batch boundaries, so every
    batch and every prefix of a bucket's list keeps its set of sequences' count, and the lists
    stay permutations (exactly once)."""

    def __init__(
        self,
        draw: Draw,
        lengths: np.ndarray | ChunkWindows,
        counts: np.ndarray,
        sizes: np.ndarray,
        batches: int = WINDOW_BATCHES,
        block: int = WINDOW_BLOCK,
    ) -> None:
        self.draw, self.lengths, self.counts = draw, lengths, counts
        self.window = np.asarray(sizes, dtype=np.int64) * batches  # [N] positions per window
        self.block = block  # drawn positions sorted at once (whole windows, at least one)

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        alike = getattr(self.draw, "alike_windows", None)
        sorts = getattr(self.draw, "sorts_alike", None)
        if alike is None or sorts is None or not len(pos) or not sorts():
            return self._windowed(bucket, pos)
        flat = self._alike(alike, bucket, pos)
        if not flat.any():
            return self._windowed(bucket, pos)
        # a window whose slots all sort alike stays in list order when sorted (ties in list
        # order), so its positions' slots are the draw's own, no window drawn; a block at a
        # time (memory: as a window block's)
        seqs, uses = np.empty(len(pos), dtype=np.int64), None
        same = np.flatnonzero(flat)
        for a in range(0, len(same), 8 * self.block):
            at = same[a : a + 8 * self.block]
            uses = self._put(seqs, uses, at, self.draw.slots(bucket[at], pos[at]))
        del same
        rest = np.flatnonzero(~flat)
        return seqs, self._put(seqs, uses, rest, self._windowed(bucket[rest], pos[rest]))

    def _alike(
        self, alike: Callable[..., np.ndarray], bucket: np.ndarray, pos: np.ndarray
    ) -> np.ndarray:
        """bool per position: its window sorts alike (the draw's ``alike_windows``, asked once
        per window)."""
        w = pos // self.window[bucket]
        wide = int(w.max()) + 1
        which, inverse = _windows_of(bucket * wide + w, int(bucket.max()) * wide + wide)
        del w
        ub, uw = np.divmod(which, wide)
        lo = uw * self.window[ub]
        return np.asarray(alike(ub, lo, np.minimum(lo + self.window[ub], self.counts[ub])))[inverse]

    @staticmethod
    def _put(
        seqs: np.ndarray,
        uses: np.ndarray | None,
        at: np.ndarray,
        got: tuple[np.ndarray, np.ndarray | None],
    ) -> np.ndarray | None:
        """Slots ``got`` written at ``at`` -> the corpus epochs (made by the first that has)."""
        seqs[at] = got[0]
        if got[1] is not None and len(at):
            if uses is None:
                uses = np.empty(len(seqs), dtype=got[1].dtype)
            uses[at] = got[1]
        return uses

    def _windowed(
        self, bucket: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``slots`` by the windows: each window the positions touch drawn and sorted."""
        if not len(pos):
            return self.draw.slots(bucket, pos)
        m = self.window[bucket]
        w = pos // m
        wide = int(w.max()) + 1
        which, inverse = _windows_of(bucket * wide + w, int(bucket.max()) * wide + wide)
        ub, uw = np.divmod(which, wide)
        lo = uw * self.window[ub]
        hi = np.minimum(lo + self.window[ub], self.counts[ub])
        # the windows a block at a time: a rank's share touches about one window per batch, so
        # drawn at once they would hold ``batches`` times the share
        by = np.argsort(inverse, kind="stable")  # the positions asked, window after window
        asked = np.searchsorted(inverse[by], np.arange(len(ub) + 1))  # [U + 1] into ``by``
        drawn = np.zeros(len(ub) + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=drawn[1:])  # positions drawn before each window
        seqs, uses = np.empty(len(pos), dtype=np.int64), None
        a = 0
        while a < len(ub):
            b = max(int(np.searchsorted(drawn, drawn[a] + self.block, side="right")) - 1, a + 1)
            sel = by[asked[a] : asked[b]]
            got, got_uses = self._sorted(ub[a:b], lo[a:b], hi[a:b], inverse[sel] - a, pos[sel])
            seqs[sel] = got
            if got_uses is not None:
                if uses is None:
                    uses = np.empty(len(pos), dtype=got_uses.dtype)
                uses[sel] = got_uses
            a = b
        return seqs, uses

    def _sorted(
        self, ub: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Windows (bucket ``ub``, positions ``[lo, hi)``) drawn and sorted by length -> the
        slots at ``pos`` of window ``k`` each."""
        lengths, take = keyed_slots(self.draw, self.lengths, np.repeat(ub, hi - lo), ranges(lo, hi))
        window_of = np.repeat(np.arange(len(ub), dtype=np.int64), hi - lo)
        order = argsort_by(lengths, window_of)
        begin = np.cumsum(hi - lo) - (hi - lo)  # [U] each window's first in the drawn list
        return take(order[begin[k] + pos - lo[k]])


def _windows_of(key: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for keys in ``[0, span)``: where the keys are dense
    (a whole epoch's lists, as ``seqloader stats`` and the audit ask), marked in a table of
    ``span`` instead of sorted; a rank's few positions over many windows are sorted."""
    if span > 4 * len(key):
        return np.unique(key, return_inverse=True)
    present = np.zeros(span, dtype=bool)
    present[key] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[key]


class RunDraw:
    """A ``Draw`` over runs of buckets (``seqloader.plan.indexed.histogram.row_runs``): position
    ``p`` of run ``r`` is position ``starts[r] + p`` of the buckets laid end to end, i.e. a
    position of one bucket's list, drawn by ``draw``. Runs partition the laid-out positions, so
    the slots stay a permutation."""

    def __init__(self, draw: Draw, counts: np.ndarray, starts: np.ndarray) -> None:
        self.draw, self.starts = draw, np.asarray(starts, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        self.ends = np.cumsum(counts)  # [N] each bucket's end in the laid-out row
        self.begin = self.ends - counts  # [N] its first position

    def slots(self, run: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self.draw.slots(*self._located(run, pos))

    def sort_keys(self, run: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Take] | None:
        """The inner draw's ``sort_keys`` (``Keyed``), None where it has none."""
        own = getattr(self.draw, "sort_keys", None)
        return own(*self._located(run, pos)) if own is not None else None

    def alike_windows(self, run: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """bool, one per window (positions ``[lo, hi)`` of run ``run``): whether every position
        sorts alike, its buckets' one key the same (the inner draw's ``alike_keys``; buckets
        without positions between them do not count); all False where the inner draw has no
        such keys."""
        chain = self._key_chain()
        if chain is None:
            return np.zeros(len(run), dtype=bool)
        filled, change = chain
        at = self.starts[run]
        first = np.searchsorted(self.ends, at + lo, side="right")
        final = np.searchsorted(self.ends, at + np.maximum(hi - 1, lo), side="right")
        first = np.minimum(first, len(filled) - 1)
        final = np.minimum(final, len(filled) - 1)
        return (filled[first] >= 0) & (change[final] == change[first])

    def sorts_alike(self) -> bool:
        """Whether any bucket's positions all sort alike (``alike_windows`` can say True)."""
        chain = self._key_chain()
        return chain is not None and bool((chain[0] >= 0).any())

    def _key_chain(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(each bucket's one key, a bucket without positions taking the key before it; the
        count of key changes up to each bucket), made once; None: no ``alike_keys``."""
        kept = getattr(self, "_chain", False)
        if kept is not False:
            return kept  # type: ignore[return-value]
        own = getattr(self.draw, "alike_keys", None)
        chain = None
        if own is not None and len(self.ends):
            keys = np.asarray(own(), dtype=np.int64)
            n = len(keys)
            has = (keys != -2) & (self.ends > self.begin)
            last = np.where(has, np.arange(n, dtype=np.int64), 0)
            np.maximum.accumulate(last, out=last)
            filled = keys[last]
            change = np.zeros(n, dtype=np.int64)
            np.cumsum(filled[1:] != filled[:-1], out=change[1:])
            chain = (filled, change)
        self._chain = chain
        return chain

    def _located(self, run: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, position in its list) of position ``pos`` of run ``run``."""
        at = self.starts[run] + pos
        bucket = np.searchsorted(self.ends, at, side="right").astype(np.int64)
        return bucket, at - self.begin[bucket]


def ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers of ``[lo[i], hi[i])`` for every i, concatenated -> int64."""
    sizes = hi - lo
    return np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))


def piece_bounds(
    sizes: np.ndarray, pieces: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch of each piece, its first and end position in the batch), the first ``r`` pieces of
    a batch one longer -> int64 arrays ``[sum(pieces)]``."""
    batch_of = np.repeat(np.arange(len(sizes)), pieces)
    within = np.arange(len(batch_of)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    q, r = np.divmod(sizes, pieces)
    piece = q[batch_of] + (within < r[batch_of])
    lo = (within * q[batch_of]) + np.minimum(within, r[batch_of])
    return batch_of, lo, lo + piece


class Slots:
    """Batch descriptors: plan batch ``g``, its positions ``[lo, hi)``, real or filler."""

    def __init__(self, g: np.ndarray, lo: np.ndarray, hi: np.ndarray, real: np.ndarray) -> None:
        self.g, self.lo, self.hi, self.real = g, lo, hi, real

    def take(self, ids: np.ndarray) -> Slots:
        return Slots(self.g[ids], self.lo[ids], self.hi[ids], self.real[ids])

    def concat(self, other: Slots) -> Slots:
        return Slots(
            *(np.concatenate([a, b]) for a, b in zip(self.arrays(), other.arrays(), strict=True))
        )

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.g, self.lo, self.hi, self.real


class IndexedPlan:
    """The shard plan of one segment: plan batches ``[start, table.num_batches)`` over
    ``world_size`` ranks (see the module doc)."""

    def __init__(
        self,
        table: BatchTable | BoundsTable,
        draw: Draw,
        world_size: int,
        start: int,
        uneven: Uneven,
        chunks: ChunkBuckets | None = None,
        variants: Codes | None = None,
    ) -> None:
        self.world_size = world_size
        self.table, self.draw, self.start, self.uneven = table, draw, start, uneven
        self.chunks = chunks  # chunked: the draw gives coded chunks (split into the batch list)
        #: length variants: the draw gives coded (sequence, variant) units, split likewise
        self.variants = variants
        total = table.num_batches - start
        self.full_rounds, t = divmod(total, world_size)
        self.tail_start = start + self.full_rounds * world_size  # first plan batch of the tail
        self.tail = self._tail(t)
        dropped = 0
        if t and uneven == "drop":
            dropped = table.num_seqs - table.seqs_before(self.tail_start)
        self.dropped = dropped
        self._batches: BatchList | None = None
        self._kept: tuple[int, BatchList] | None = None  # (rank, its share from step 0)

    def __repr__(self) -> str:  # not every batch
        return (
            f"IndexedPlan(world_size={self.world_size}, steps={self.steps}, "
            f"batches={self.table.num_batches - self.start}, dropped={self.dropped})"
        )

    def _tail(self, t: int) -> Slots:
        """The last round's ``world_size`` batches (none without a partial round or with drop)."""
        w, table = self.world_size, self.table
        empty = np.zeros(0, dtype=np.int64)
        if t == 0 or self.uneven == "drop":
            return Slots(empty, empty, empty, np.zeros(0, dtype=bool))
        g = self.tail_start + np.arange(t, dtype=np.int64)
        sizes = table.batch_sizes(g)
        if self.uneven == "pad":
            fill = self.start + np.arange(w - t, dtype=np.int64) % (table.num_batches - self.start)
            fill_sizes = table.batch_sizes(fill)
            real = Slots(g, np.zeros(t, np.int64), sizes, np.ones(t, bool))
            return real.concat(
                Slots(fill, np.zeros(w - t, np.int64), fill_sizes, np.zeros(w - t, bool))
            )
        batch_of, lo, hi = piece_bounds(sizes, split_pieces(sizes, w))
        pieces = Slots(g[batch_of], lo, hi, np.ones(len(lo), bool))
        missing = w - len(lo)
        if missing:  # fewer sequences than ranks: one-sequence fillers of the tail's own
            pick = np.arange(missing) % len(lo)
            pieces = pieces.concat(
                Slots(pieces.g[pick], pieces.lo[pick], pieces.lo[pick] + 1, np.zeros(missing, bool))
            )
        return pieces

    @property
    def steps(self) -> int:
        return self.full_rounds + (1 if len(self.tail.g) else 0)

    @property
    def repeats(self) -> int:
        fill = ~self.tail.real
        return int((self.tail.hi[fill] - self.tail.lo[fill]).sum())

    def consumed_seqs(self, steps: int) -> int:
        """Real sequences of the first ``steps`` steps, all ranks together."""
        if steps <= self.full_rounds:
            end = self.start + steps * self.world_size
            return self.table.seqs_before(end) - self.table.seqs_before(self.start)
        return self.real_total()

    def resume_fields(self, steps: int) -> dict[str, str]:
        """Nothing carried besides the position (only indexed ``files`` plans carry some)."""
        return {}

    def real_total(self) -> int:
        full = self.table.seqs_before(self.tail_start) - self.table.seqs_before(self.start)
        real = self.tail.real
        return full + int((self.tail.hi[real] - self.tail.lo[real]).sum())

    def step_imbalance(
        self, from_step: int, costs: np.ndarray, bucket_costs: np.ndarray | None = None
    ) -> PlannedImbalance:
        """Off the batch table where its buckets plan a cost (``table_imbalance``: milliseconds),
        else every rank's share drawn in turn (``rankwise_imbalance``, O(n))."""
        if bucket_costs is None:
            return PlannedImbalance(partial(rankwise_imbalance, self, costs, from_step))
        return PlannedImbalance(partial(table_imbalance, self, bucket_costs, from_step), cheap=True)

    def rank_share(self, rank: int, start_step: int = 0) -> BatchList:
        """Rank ``rank``'s batches from ``start_step`` on: only its own are drawn (the last share
        drawn from step 0 is kept, so a share drawn ahead is taken over at once)."""
        kept = self._kept
        if kept is not None and kept[0] == rank:
            share = kept[1]
            return share if not start_step else share.take(np.arange(start_step, len(share)))
        if start_step == 0:
            self._kept = (rank, self._draw_share(rank, 0))
            return self._kept[1]
        return self._draw_share(rank, start_step)

    def _draw_share(self, rank: int, start_step: int) -> BatchList:
        steps = np.arange(start_step, self.full_rounds, dtype=np.int64)
        g = self.start + steps * self.world_size + rank
        sizes = self.table.batch_sizes(g)
        slots = Slots(g, np.zeros(len(g), np.int64), sizes, np.ones(len(g), bool))
        if len(self.tail.g) and start_step <= self.full_rounds:
            slots = slots.concat(self.tail.take(np.array([rank])))
        return self.members(slots)

    def members(self, slots: Slots) -> BatchList:
        """The batches ``slots`` describe, their members drawn."""
        b, j = self.table.locate(slots.g)
        sizes = slots.hi - slots.lo
        bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        base = np.minimum(j * self.table.sizes[b], self.table.counts[b]) + slots.lo
        pos = np.repeat(base - bounds[:-1], sizes) + np.arange(bounds[-1], dtype=np.int64)
        seqs, uses = self.draw.slots(np.repeat(b, sizes), pos)
        chunks = variants = None
        if self.chunks is not None:
            seqs, chunks = self.chunks.split(seqs)
        if self.variants is not None:
            seqs, variants = self.variants.split(seqs)
        return BatchList(seqs, bounds, np.repeat(slots.real, sizes), uses, chunks, variants)

    def slots(self, a: int, b: int) -> Slots:
        """Global batches ``[a, b)`` of the plan (batch ``k`` is rank ``k % W``'s step
        ``k // W``), described, not drawn."""
        full = self.tail_start - self.start
        g = self.start + np.arange(a, min(b, full), dtype=np.int64)
        out = Slots(g, np.zeros(len(g), np.int64), self.table.batch_sizes(g), np.ones(len(g), bool))
        if b > full:
            out = out.concat(self.tail.take(np.arange(max(a - full, 0), b - full)))
        return out

    @property
    def batches(self) -> BatchList:
        """Every rank's batches, interleaved (materialised once; O(n): not for planning)."""
        if self._batches is None:
            self._batches = self.members(self.slots(0, self.steps * self.world_size))
        return self._batches


class RankwisePlan:
    """A plan whose ranks' shares are computed independently (``distribution="files"`` with
    indexed planning): ``share(rank)`` gives rank ``rank``'s whole batch list for ``steps`` steps;
    totals come from counts (``real_total``, ``repeats``, ``consumed(steps)``: real sequences of
    the first steps, all ranks together; ``planned_costs(rank, bucket_costs)``: the rank's planned
    cost per step, for the report's step imbalance; ``chunked``: the shares hold chunks; ``mixed``: corpus epochs; ``varied``: length variants)."""

    planned_costs: Callable[[int, np.ndarray], np.ndarray] | None

    def __init__(
        self,
        share: Callable[[int], BatchList],
        world_size: int,
        steps: int,
        real_total: int,
        repeats: int,
        consumed: Callable[[int], int],
        planned_costs: Callable[[int, np.ndarray], np.ndarray] | None = None,
        dropped: int = 0,
        chunked: bool = False,
        mixed: bool = False,
        resume_fields: Callable[[int], dict[str, str]] | None = None,
        varied: bool = False,
    ) -> None:
        self.world_size = world_size
        self._resume_fields = resume_fields
        self.chunked = chunked  # the shares carry chunk indices (an empty one too)
        self.mixed = mixed  # the shares carry corpus epochs (an empty one too)
        self.varied = varied  # the shares carry length variants (an empty one too)
        # (rank, cost per bucket) -> the rank's planned cost per step, from counts
        self.planned_costs = planned_costs
        self.dropped = dropped  # uneven="drop": real sequences past the shortest rank's batches
        self._share, self._steps = share, steps
        self._real_total, self._repeats, self._consumed = real_total, repeats, consumed
        self._batches: BatchList | None = None
        self._kept: tuple[int, BatchList] | None = None  # (rank, its share from step 0)

    def __repr__(self) -> str:  # not every rank's batches
        return f"RankwisePlan(world_size={self.world_size}, steps={self.steps})"

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def repeats(self) -> int:
        return self._repeats

    def real_total(self) -> int:
        return self._real_total

    def consumed_seqs(self, steps: int) -> int:
        """Real sequences of the first ``steps`` steps, all ranks together (from counts)."""
        if steps >= self._steps:
            return self._real_total
        return self._consumed(steps)

    def resume_fields(self, steps: int) -> dict[str, str]:
        """What a state saved after ``steps`` steps carries besides its position (``files``:
        the units and their consumption, ``seqloader.plan.indexed.files_carry``)."""
        return {} if self._resume_fields is None else self._resume_fields(steps)

    def step_imbalance(
        self, from_step: int, costs: np.ndarray, bucket_costs: np.ndarray | None = None
    ) -> PlannedImbalance:
        """From counts (``files_imbalance``) where the plan has planned costs and the buckets
        plan them, else every rank's share drawn in turn (``rankwise_imbalance``, O(n))."""
        if bucket_costs is None or self.planned_costs is None:
            return PlannedImbalance(partial(rankwise_imbalance, self, costs, from_step))
        return PlannedImbalance(partial(files_imbalance, self, bucket_costs, from_step))

    def rank_share(self, rank: int, start_step: int = 0) -> BatchList:
        """Rank ``rank``'s batches from ``start_step`` on (the last share drawn is kept, so a
        share drawn ahead is taken over at once). Past the last step: none, on any rank (a
        finished segment continued on more ranks)."""
        if start_step >= self._steps:
            empty = BatchList.empty()
            if not self.chunked and not self.mixed and not self.varied:
                return empty
            uses = np.zeros(0, USES_DTYPE) if self.mixed else None
            chunks = empty.seqs.copy() if self.chunked else None
            variants = empty.seqs.copy() if self.varied else None
            return BatchList(empty.seqs, empty.bounds, empty.real, uses, chunks, variants)
        kept = self._kept
        if kept is None or kept[0] != rank:
            kept = self._kept = (rank, self._share(rank))
        share = kept[1]
        return share if not start_step else share.take(np.arange(start_step, len(share)))

    @property
    def batches(self) -> BatchList:
        """Every rank's batches, interleaved (materialised once; O(n): not for planning)."""
        if self._batches is None:
            from seqloader.plan.epoch_plan import interleave

            self._batches = interleave([self._share(r) for r in range(self.world_size)])
        return self._batches
