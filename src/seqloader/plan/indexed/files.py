"""``distribution="files"`` under indexed planning: each rank's batches, and elastic resume, from counts.

**Units.** The epoch's first segment (world size ``W0``) assigns the sub-epoch's files to ranks
(LPT by frames, as global planning). Old rank ``r``'s sequences, bucket after bucket (shortest
first) and in r's keyed random order within a bucket (r's member stream), are cut into runs of
one batch size (``cut_runs``: where the next bucket's size is below what the open batch holds);
run ``g`` is unit ``(r, g)``, its batch size the run's. A rank so has a short batch only where
the size falls below a batch's fill and at its end, not one per bucket. Under a limit on the sum
of lengths alone the runs are cut by that sum (``cut_packed``): a batch reaching into the next
bucket is a unit of one batch. Everything about the units except their member lists follows
from the per-(file, bucket) count table, for every rank, without drawing a sequence:
O(W0 * buckets + files).

**Segments.** A segment (the sub-epoch on one world size, from where the one before stopped)
gives each rank some units' unconsumed suffixes. The rank batches each suffix with the unit's
batch size, orders its batches apart from the member draw (``buckets:N``: a keyed random
interleaving of its units' batches whose prefixes are counted without listing them,
``seqloader.plan.indexed.interleave``; ``laplace``: dealt to the rank's bins in length order,
bins ascending and descending in turn, ``replay.laplace_blocks``), and equalises steps (``split``: its
largest batches cut into near-equal contiguous pieces, ``seqloader.plan.indexed.pieces``; one-sequence
fillers, ``real=False``, where it runs short; ``drop``: every rank keeps as many batches as
the rank with fewest, the rest counted as dropped — every rank's batch count follows from counts,
so each rank counts what the others drop). The ``t``-th batch of a unit in a rank's order
holds the unit's next ``size`` members, and pieces are contiguous: after ``s`` steps each unit's
consumption is a prefix of its suffix, and how long follows from counts and the order alone.
So a state's segment history (``(world_size, steps)`` per earlier segment) gives the consumed
count of every unit by replay on counts, never drawing a member, and a chain of resumes composes.

Segment 0 gives each old rank its own units. A later segment cuts the remaining units, in unit
order (old rank by old rank), into ``W`` contiguous runs of about equal batches (``cut_parts``),
so a new rank draws the members of the few old ranks its run touches: O(n / W) per rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.errors import ResumeError
from seqloader.plan.batches import BatchList
from seqloader.plan.files import cut_parts
from seqloader.plan.indexed.bijection import round_keys_many
from seqloader.plan.indexed.files_mix import Pieces
from seqloader.plan.indexed.interleave import interleave
from seqloader.plan.indexed.pieces import split_pieces
from seqloader.plan.indexed.replay import (
    LiveUnits,
    files_bins,
    laplace_blocks,
    laplace_consumed,
)
from seqloader.plan.indexed.replay_buckets import buckets_consumed
from seqloader.plan.options import Ordering, Uneven


@dataclass(frozen=True)
class Units:
    """A sub-epoch's units (see the module doc), numbered by (old rank, run).

    - ``part``: int64 ``[f]`` the sub-epoch's files, shuffled; ``rank_of``: int64 ``[f]`` the old
      rank of each.
    - ``rank``, ``group``, ``count``, ``size``, ``level``, ``top``: ``[U]`` (int32 but
      ``count``, int64): per unit its old rank, run within the rank, sequences, batch size
      (>= 1), first and last bucket (``level``: its place in length order).
    - ``world0``: the world size the sub-epoch starts with (the old ranks).
    - ``member_words``: the key of the old ranks' member streams (the old rank appended).
    - ``pieces``: a mix over files (``seqloader.plan.indexed.files_mix``): the sub-epoch's file
      pieces, which ``part`` numbers; None unmixed (``part`` numbers files).
    - ``keep``: ``epoch_wise_filter``: the sequences the sub-epoch admits (bool ``[n]``,
      ``files_filter``), which its counts are of; None: the admission's. With ``pieces``: the
      slots it keeps, a mask over the sub-epoch's slot positions (``files_mix_filter``).
    """

    part: np.ndarray
    rank_of: np.ndarray
    rank: np.ndarray
    group: np.ndarray
    count: np.ndarray
    size: np.ndarray
    level: np.ndarray
    top: np.ndarray
    world0: int
    member_words: tuple[int, ...] = ()
    pieces: Pieces | None = None
    keep: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        part: np.ndarray,
        rank_of: np.ndarray,
        per_rank: np.ndarray,
        cut: Callable[[np.ndarray], tuple[np.ndarray, ...]],
        member_words: tuple[int, ...] = (),
    ) -> Units:
        """From the sequences per (old rank, bucket) (``per_rank`` int64 ``[W0, N]``): each old
        rank's buckets end to end, cut into runs of one batch size by ``cut`` (the planner's
        ``cut_rows``: ``cut_runs`` by the buckets' batch sizes, ``cut_packed`` by a packed
        limit); ``member_words``: the member streams' key (old rank appended)."""
        world0, n_buckets = per_rank.shape
        r, start, count, size = cut(per_rank)
        ends = np.cumsum(per_rank.ravel())  # [W0 * N] each (rank, bucket)'s end, rank by rank
        base = np.concatenate([[0], ends[n_buckets - 1 :: n_buckets]])[r]  # the rank's first
        first = np.searchsorted(ends, base + start, side="right") - r * n_buckets
        last = np.searchsorted(ends, base + start + count - 1, side="right") - r * n_buckets
        unit = np.arange(len(r), dtype=np.int64)
        group = unit - np.searchsorted(r, r, side="left")  # the run's place in its rank
        small = np.int32  # per-unit ids and sizes: half the memory of int64
        return cls(
            part,
            rank_of,
            r.astype(small),
            group.astype(small),
            count,
            size.astype(small),
            first.astype(small),
            last.astype(small),
            world0,
            member_words,
        )

    def rank_starts(self, r: int) -> np.ndarray:
        """Where old rank ``r``'s runs start in its bucket-ordered list, and its end -> int64
        ``[G_r + 1]`` (index: ``group``)."""
        mine = slice(*np.searchsorted(self.rank, [r, r + 1]))
        starts = np.zeros(mine.stop - mine.start + 1, dtype=np.int64)
        np.cumsum(self.count[mine], out=starts[1:])
        return starts


class Segment:
    """One segment: the units' suffixes from ``start`` (int64 ``[U]``, consumed before it) on
    ``world_size`` ranks (``index`` 0: each old rank its own units). ``order_words(rank)``: the
    key of the rank's batch order (``buckets:N``: ``interleave`` keyed by the first of its round keys,
    ``bijection.round_keys_many``)."""

    def __init__(
        self,
        units: Units,
        start: np.ndarray,
        world_size: int,
        index: int,
        ordering: Ordering,
        uneven: Uneven,
        order_words: Callable[[int], tuple[int, ...]],
    ) -> None:
        self.units, self.start, self.world_size, self.index = units, start, world_size, index
        self.ordering, self.uneven, self.order_words = ordering, uneven, order_words
        self.rem = units.count - start  # [U]
        live = self.rem > 0
        self.nb = np.where(live, -(-self.rem // units.size), 0).astype(np.int32)  # [U] batches
        ranks = np.full(len(start), world_size, dtype=np.int32)  # dead units: an extra bin
        if index == 0:
            ranks[live] = units.rank[live]
        else:
            ids = np.flatnonzero(live)
            cuts = cut_parts(self.nb[ids], world_size)
            ranks[ids] = np.repeat(np.arange(world_size, dtype=np.int32), np.diff(cuts))
        self.rank_batches = np.bincount(ranks, weights=self.nb, minlength=world_size + 1)[
            :world_size
        ].astype(np.int64)
        self.rank_seqs = np.bincount(ranks, weights=self.rem, minlength=world_size + 1)[
            :world_size
        ].astype(np.int64)
        # drop: every rank keeps as many batches as the one with fewest (each rank's count is
        # known from counts, so every rank counts the others' surplus: ``dropped``)
        few = uneven == "drop" and world_size > 0
        self.steps = int(self.rank_batches.min() if few else self.rank_batches.max(initial=0))
        self._consumed: dict[int, np.ndarray] = {}  # the last few counts asked for
        self._real: np.ndarray | None = None  # ``real_counts``
        # rank 0's live units, rank 1's.., then the dead ones: the live units' ranks never fall
        # (segment 0: units are numbered rank by rank; later ones: ``cut_parts`` runs), so this
        # is the stable argsort of ``ranks`` without a sort
        by = np.concatenate([np.flatnonzero(live), np.flatnonzero(~live)]).astype(np.int32)
        ends = np.searchsorted(ranks[by], np.arange(world_size + 1), side="left")
        self._by, self._ends = by, ends

    def live_units(self) -> LiveUnits:
        """The units with batches left, rank by rank, for the replay (``indexed_replay``)."""
        live = self._by[: self._ends[self.world_size]]
        return LiveUnits(
            self.world_size, self.steps, self.uneven, self.ordering, len(self.start), live,
            self.owners(), self.nb[live], self.units.size[live],
            self.rem[live], self.units.level[live], self.rank_batches, self.rank_seqs,
        )  # fmt: skip

    def owners(self) -> np.ndarray:
        """The rank of each live unit, in ``_by`` order -> int64 ``[L]``."""
        return np.repeat(np.arange(self.world_size, dtype=np.int64), np.diff(self._ends))

    def refuse_idle_drop(self, epoch: int) -> None:
        """A resumed ``drop`` segment where some rank has no unit left would take no step, so
        ``drop`` would cut every remaining sequence: refused (``pad``/``split`` give that rank
        fillers instead). A fresh start is refused earlier, for too few files."""
        rest = int(self.rem.sum())
        fed = int(np.count_nonzero(self.rank_batches))
        if self.uneven != "drop" or not rest or fed == self.world_size:
            return
        raise ResumeError(
            f"cannot resume epoch {epoch} mid-way on world_size={self.world_size} with "
            f"distribution='files' and uneven='drop': the files' remaining sequences go to only "
            f"{fed} rank(s) (each rank takes whole remainders), so a rank would have no batch and "
            f"drop would cut all {rest} remaining sequences. Fix: resume on at most {fed} ranks, "
            "finish the epoch first, or use uneven='pad' or 'split' (fillers instead of cuts)."
        )

    # ---- from counts ----
    @property
    def real_total(self) -> int:
        """Real sequences of the segment's batches (``drop``: less the ranks' surplus)."""
        if self.uneven == "drop":
            return int(self.consumed(self.steps).sum())
        return int(self.rem.sum())

    @property
    def dropped(self) -> int:
        """Sequences ``uneven="drop"`` leaves out: every rank's batches past the shortest
        rank's count (from counts and the order: the same on every rank)."""
        return int(self.rem.sum()) - self.real_total

    def real_batches(self, rank: int) -> int:
        """Real batches of ``rank`` after equalising (split pieces included; drop: cut)."""
        return int(self.real_counts()[rank])

    def real_counts(self) -> np.ndarray:
        """``real_batches`` of every rank -> int64 ``[W]`` (kept: read-only)."""
        if self._real is None:
            nb = self.rank_batches
            if self.uneven == "split":
                self._real = np.minimum(np.maximum(self.steps, nb), self.rank_seqs)
            elif self.uneven == "drop":
                self._real = np.minimum(self.steps, nb)
            else:
                self._real = nb.copy()
            self._real.flags.writeable = False
        return self._real

    def listed_batches(self, rank: int) -> int:
        """``rank``'s batches before ``drop`` cuts them (split pieces included)."""
        if self.uneven == "split":
            return self.real_batches(rank)
        return int(self.rank_batches[rank])

    @property
    def repeats(self) -> int:
        """One-sequence filler batches over all ranks."""
        return int((self.steps - self.real_counts()).sum())

    def rank_units(self, rank: int) -> np.ndarray:
        """The live units of ``rank``, ascending -> int64."""
        return self._by[self._ends[rank] : self._ends[rank + 1]]

    def layout(self, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rank``'s batches before equalising, in plan order: (unit, index ``t`` within the
        unit's suffix, size) -> int64 ``[m]`` each. The ``t``-th of a unit comes after its
        ``t - 1``-th, so a unit's batches in order are consecutive slices of its suffix."""
        us = self.rank_units(rank)
        nb = self.nb[us]
        m = int(nb.sum())
        unit = np.repeat(us, nb)
        within = np.arange(m, dtype=np.int64) - np.repeat(np.cumsum(nb) - nb, nb)
        if self.ordering.is_buckets:
            key = int(round_keys_many([self.order_words(rank)])[0, 0])
            unit = us[interleave(nb, key)]
            t = np.empty(m, dtype=np.int64)
            t[np.argsort(unit, kind="stable")] = within  # by occurrence: 0, 1, ... per unit
        else:  # laplace: the rank's batches dealt to its bins in length order (replay's blocks)
            bins = np.full(len(us), files_bins(self.ordering, int(self.rem[us].sum()), m))
            blk, count, first = laplace_blocks(
                np.zeros_like(us), us, nb, self.units.level[us], bins
            )
            unit = np.repeat(us[blk], count)
            t = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(m)
        size = self.units.size[unit]
        return unit, t, np.minimum(size, self.rem[unit] - t * size)

    def pieces(self, sizes: np.ndarray) -> np.ndarray:
        if self.uneven == "split":
            return split_pieces(sizes, self.steps)
        return np.ones(len(sizes), dtype=np.int64)

    def planned_costs(
        self, rank: int, unit_costs: np.ndarray, filler_cost: Callable[[], int]
    ) -> np.ndarray:
        """``rank``'s planned cost per step -> int64 ``[steps]``, from counts (no member drawn):
        a batch (or split piece) costs its size times its unit's ``unit_costs`` (int64 ``[U]``);
        a one-sequence filler, the unit cost of the sequence ``share`` repeats (the rank's
        ``i``-th in batch order, else ``filler_cost()``)."""
        unit, _, sizes = self.layout(rank)
        pieces = self.pieces(sizes)
        batch_of = np.repeat(np.arange(len(sizes)), pieces)
        within = np.arange(len(batch_of)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        whole, rest = np.divmod(sizes, np.maximum(pieces, 1))
        piece = whole[batch_of] + (within < rest[batch_of])
        out = np.zeros(self.steps, dtype=np.int64)
        real = piece * unit_costs[unit[batch_of]]
        out[: len(real)] = real[: self.steps]
        missing = self.steps - len(real)
        if missing > 0:
            own = int(sizes.sum())
            if own:  # filler i repeats the rank's (i mod own)-th sequence in batch order
                at = np.arange(missing, dtype=np.int64) % own
                out[len(real) :] = unit_costs[unit[np.searchsorted(np.cumsum(sizes), at, "right")]]
            else:
                out[len(real) :] = filler_cost()
        return out

    def consumed(self, steps: int) -> np.ndarray:
        """Sequences of each unit consumed in this segment's first ``steps`` steps (all ranks)
        -> int64 ``[U]``: a prefix of each suffix, from counts and the order (no draw; kept:
        read-only)."""
        kept = self._consumed.get(steps)
        if kept is None:
            if len(self._consumed) >= 4:  # a loop's state_dict asks at ever new steps
                self._consumed.clear()
            kept = self._consumed[steps] = self._count_consumed(steps)
            kept.flags.writeable = False
        return kept

    def carry_consumed(self, steps: int, used: np.ndarray) -> bool:
        """Take ``consumed(steps)`` as counted where a state was saved (carried in it,
        ``seqloader.plan.indexed.files_carry``) instead of replaying it; refused (False) where it
        does not fit this segment (a unit past its suffix)."""
        if len(used) != len(self.start) or bool((used > self.rem).any()) or used.min(initial=0) < 0:
            return False
        if len(self._consumed) >= 4:
            self._consumed.clear()
        kept = self._consumed[steps] = np.array(used, dtype=np.int64)
        kept.flags.writeable = False
        return True

    def _count_consumed(self, steps: int) -> np.ndarray:
        if not self.ordering.is_buckets:  # laplace: blocks, all ranks at once
            return laplace_consumed(self.live_units(), steps)
        return buckets_consumed(self.live_units(), steps, self.order_words)  # prefixes at once

    def consumed_rank_by_rank(self, steps: int) -> np.ndarray:
        """``consumed`` from each rank's listed batch order and split (any ordering; what the
        replays are checked against)."""
        out = np.zeros(len(self.start), dtype=np.int64)
        if steps <= 0:
            return out
        for rank in range(self.world_size):
            us = self.rank_units(rank)
            if not len(us):
                continue
            if steps >= self.listed_batches(rank):  # all its batches (fillers follow)
                out[us] = self.rem[us]
                continue
            unit, _, sizes = self.layout(rank)
            pieces = self.pieces(sizes)
            ends = np.cumsum(pieces)
            k = int(np.searchsorted(ends, steps, side="right"))  # batches [0, k) whole
            used = np.zeros(len(sizes), dtype=np.int64)
            used[:k] = sizes[:k]
            if k < len(sizes):  # batch k: its first pieces, the first r of them one longer
                m = steps - (int(ends[k - 1]) if k else 0)
                q, r = divmod(int(sizes[k]), int(pieces[k]))
                used[k] = m * q + min(m, r)
            lo, span = int(us[0]), int(us[-1]) + 1 - int(us[0])  # a rank's units: one run
            out[lo : lo + span] += np.bincount(unit - lo, used, span).astype(np.int64)
        return out

    def consumed_seqs(self, steps: int) -> int:
        """Real sequences of the first ``steps`` steps, all ranks together."""
        if steps >= self.steps:
            return self.real_total
        return int(self.consumed(steps).sum())

    # ---- drawn: one rank's batches ----
    def share(
        self,
        rank: int,
        members: Callable[[int], tuple[np.ndarray, np.ndarray]],
        filler: Callable[[], np.ndarray],
    ) -> BatchList:
        """``rank``'s batches for ``steps`` steps. ``members(r)``: old rank r's sequences, run
        after run, in its drawn order, and the runs' starts (``Units.rank_starts``); ``filler()``:
        a sequence for fillers when the rank has none of its own."""
        us = self.rank_units(rank)
        drawn: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        suffixes = []
        for u in us.tolist():
            r = int(self.units.rank[u])
            if r not in drawn:
                drawn[r] = members(r)
            seqs, starts = drawn[r]
            g = int(self.units.group[u])
            suffixes.append(seqs[int(starts[g]) + int(self.start[u]) : int(starts[g + 1])])
        pool = np.concatenate(suffixes) if suffixes else np.zeros(0, dtype=np.int64)
        base = np.zeros(len(self.start), dtype=np.int64)
        if len(us):
            base[us] = np.cumsum(self.rem[us]) - self.rem[us]
        unit, t, sizes = self.layout(rank)
        lo = base[unit] + t * self.units.size[unit]
        bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        idx = np.repeat(lo - bounds[:-1], sizes) + np.arange(bounds[-1], dtype=np.int64)
        seqs = pool[idx].astype(np.int64)
        pieces = self.pieces(sizes)
        if len(pieces) and int(pieces.max()) > 1:  # cut into near-equal contiguous pieces
            batch_of = np.repeat(np.arange(len(sizes)), pieces)
            within = np.arange(len(batch_of)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
            whole, rest = np.divmod(sizes, pieces)
            piece = whole[batch_of] + (within < rest[batch_of])
            bounds = np.zeros(len(piece) + 1, dtype=np.int64)
            np.cumsum(piece, out=bounds[1:])
        batches = BatchList.from_bounds(seqs, bounds)
        if len(batches) > self.steps:  # drop: the batches past the shortest rank's count
            batches = batches.first(self.steps)
        missing = self.steps - len(batches)
        if missing > 0:  # one-sequence fillers: the rank's own, else the sub-epoch's first
            own = seqs if len(seqs) else filler()
            pick = own[np.arange(missing) % len(own)]
            extra = BatchList(pick, np.arange(missing + 1, dtype=np.int64), np.zeros(missing, bool))
            batches = batches.concat(extra)
        return batches

    def consumed_members(
        self, members: Callable[[int], tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """The sequences consumed before this segment, unit after unit -> int64 (draws every old
        rank: O(n), for the audit and tests)."""
        out = []
        for r in np.unique(self.units.rank[self.start > 0]).tolist():
            seqs, starts = members(r)
            for u in np.flatnonzero((self.units.rank == r) & (self.start > 0)).tolist():
                a = int(starts[int(self.units.group[u])])
                out.append(seqs[a : a + int(self.start[u])])
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)
