"""What the greedy planner's batch lists hold: sequences, or (chunked) their chunks, told once.

The greedy ``Planner`` orders sequences and batches *units*: the sequences themselves, or with
``chunking`` each sequence's chunks, consecutive, as RETURNN's pipe yields them. Everything that
differs between the two is an answer of one object made once per planner (``planned_units``):
``PlannedSequences`` or ``PlannedChunks``. So the planner's batches, slot costs, step imbalance,
``buckets:N`` arrangements and rank lists are written once and do not test for chunking (indexed
planning's ``seqloader.plan.indexed.units`` is the same idea for its bucket lists).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from seqloader.parts import part_of
from seqloader.plan.batches import BatchList
from seqloader.plan.chunk_batching import ChunkFits, batcher_fits, fit_bounds
from seqloader.plan.chunks import ChunkTable, Units
from seqloader.plan.cost import PlannedImbalance
from seqloader.plan.epoch_plan import EpochPlan, list_imbalance
from seqloader.plan.limits import Batcher


class UnitsPlanner(Protocol):
    """What the units read of the greedy planner."""

    batcher: Batcher
    costs: np.ndarray
    lengths: np.ndarray
    length_key: str

    def batcher_of(self, epoch: int | None) -> Batcher: ...

    def costs_of(self, plan: EpochPlan) -> np.ndarray: ...


#: an optional array (a slot's corpus epoch, chunks left)
Opt = np.ndarray | None
#: lengths and costs, int64 ``[units]`` each
Pair = tuple[np.ndarray, np.ndarray]
#: ``Planner.check_start``: refuse a start position outside ``0..size`` of an epoch
CheckStart = Callable[[object, int, int], None]


class PlannedSequences:
    """Unchunked: a slot is a sequence; ``buckets:N`` arranges sequence indices."""

    chunks: ChunkTable | None = None

    def __init__(self, planner: UnitsPlanner, check_start: CheckStart) -> None:
        self.planner, self.check_start = planner, check_start

    def slots(self, order: np.ndarray) -> np.ndarray:
        """The sequence of each slot of ``order`` (sequences in plan order)."""
        return order

    def arranged_ids(self, order: np.ndarray, left: np.ndarray | None = None) -> np.ndarray:
        """What ``buckets:N`` arranges of ``order``: its sequences."""
        return order

    def arranged_slots(self, order: np.ndarray) -> np.ndarray:
        """The sequence of each slot of an arrangement's ``order``."""
        return order

    def slot_batches(self, batches: BatchList) -> BatchList:
        """Batches over arranged ids as slots: the same."""
        return batches

    def batches(
        self, order: np.ndarray, start: int, epoch: int | None, uses: Opt = None, left: Opt = None
    ) -> BatchList:
        """Greedy batches over ``order`` from position ``start`` on (``uses``: each slot's
        corpus epoch), by ``epoch``'s lengths (``Planner.batcher_of``)."""
        assert left is None, "left counts chunks"
        self.check_start(start, len(order), epoch or 0)
        order = order[int(start) :]
        uses = None if uses is None else uses[int(start) :]
        p = self.planner
        return BatchList.from_bounds(order, p.batcher_of(epoch).bounds(order), uses)

    def slot_costs(self, batches: BatchList) -> np.ndarray:
        """Cost units of each slot of ``batches`` -> int64 ``[slots]``."""
        return self.planner.costs[batches.seqs]

    def step_imbalance(self, plan: EpochPlan, from_step: int) -> PlannedImbalance:
        """The planned step imbalance of ``plan`` from ``from_step`` on (its epoch's costs)."""
        return plan.step_imbalance(from_step, self.planner.costs_of(plan))

    def left_of(self, seqs: np.ndarray) -> np.ndarray | None:
        """``distribution="files"``, elastic resumes: what tracks the units of ``seqs`` left
        besides the sequences themselves (None: the sequences are the units)."""
        return None

    def consume(self, used: BatchList, remaining: np.ndarray, left: Opt) -> np.ndarray:
        """The units ``used`` delivered, taken out of ``remaining`` (bool ``[n]``: sequences with
        a unit left) -> their ids: the sequences."""
        got = used.seqs[used.real]
        remaining[got] = False
        return got

    def fit_lengths(self, admitted: np.ndarray) -> tuple[dict[str, np.ndarray], str]:
        """What must fit a batch alone, per key, of each admitted sequence, and its name."""
        b = self.planner.batcher
        return {k: b.lengths[k][admitted] for k in b.keys}, "the whole"

    def bucket_inputs(self, admitted: np.ndarray, key: str) -> tuple[Pair, Pair]:
        """``buckets:N``: (lengths and costs per arranged id, what the bucket edges are cut
        over: the admitted units' lengths and costs)."""
        p = self.planner
        return (p.lengths, p.costs), (p.lengths[admitted], p.costs[admitted])


class PlannedChunks(PlannedSequences):
    """Chunked: a slot is a (sequence, chunk) pair, a sequence's chunks consecutive;
    ``buckets:N`` arranges chunk numbers (``ChunkTable.unit_ids``)."""

    def __init__(self, planner: UnitsPlanner, check_start: CheckStart, chunks: ChunkTable) -> None:
        super().__init__(planner, check_start)
        self.chunks: ChunkTable = chunks

    def slots(self, order: np.ndarray) -> np.ndarray:
        return self.chunks.expand(order).seqs

    def arranged_ids(self, order: np.ndarray, left: np.ndarray | None = None) -> np.ndarray:
        """What ``buckets:N`` arranges of ``order``: its chunk numbers (those ``left``, bool
        ``[chunks]``, when given)."""
        units = self.chunks.expand(order)
        ids = self.chunks.unit_ids(units.seqs, units.chunks)
        return ids if left is None else ids[left[ids]]

    def arranged_slots(self, order: np.ndarray) -> np.ndarray:
        return part_of(self.chunks.first, order)

    def slot_batches(self, batches: BatchList) -> BatchList:
        """Batches over chunk numbers (an arrangement of chunks) as (sequence, chunk) slots."""
        seqs = part_of(self.chunks.first, batches.seqs)
        chunks = batches.seqs - self.chunks.first[seqs]
        return BatchList(seqs, batches.bounds, batches.real, batches.uses, chunks)

    def batches(
        self, order: np.ndarray, start: int, epoch: int | None, uses: Opt = None, left: Opt = None
    ) -> BatchList:
        """Greedy batches over the chunks of ``order`` (sequences in plan order) from chunk
        position ``start`` on (``left``, bool ``[chunks]``: only those chunks, from 0). Under one
        padded limit the batches come from the chunks' fits (``seqloader.plan.chunk_batching``:
        no per-chunk lengths, batch starts decided in runs); other limits batch the chunks'
        lengths per key. Both give the same batches. ``uses``: in a mix, each slot's corpus
        epoch (int ``[s]``), which each of its chunks carries."""
        if left is not None:
            units = self.chunks.expand(order, self.planner.batcher.keys)
            keep = left[self.chunks.unit_ids(units.seqs, units.chunks)]  # [u]
            lengths = {k: v[keep] for k, v in units.lengths.items()}
            return self.chunk_batches(Units(units.seqs[keep], units.chunks[keep], lengths))
        fits = self.fits
        if fits is None:
            units = self.chunks.expand(order, self.planner.batcher.keys)
            self.check_start(start, len(units), epoch or 0)
            batches = self.chunk_batches(units.tail(int(start)))
            if uses is None:
                return batches
            unit_uses = np.repeat(uses, self.chunks.counts[order])[int(start) :]
            return BatchList(batches.seqs, batches.bounds, batches.real, unit_uses, batches.chunks)
        counts = self.chunks.counts[order]  # [s]
        ends = np.cumsum(counts, dtype=np.int64)  # [s]
        units = self.chunks.expand(order, counts=counts, ends=ends)  # sequences, chunk indices
        self.check_start(start, len(units), epoch or 0)
        start = int(start)
        bounds = fit_bounds(fits, order, counts, ends, start)
        of_units = None if uses is None else np.repeat(uses, counts)[start:]
        return BatchList.from_bounds(units.seqs[start:], bounds, of_units, units.chunks[start:])

    def chunk_batches(self, units: Units) -> BatchList:
        """Greedy batches over ``units`` (chunks in plan order, their lengths per key)."""
        bounds = self.planner.batcher.bounds_of(units.lengths)
        return BatchList.from_bounds(units.seqs, bounds, chunks=units.chunks)

    @functools.cached_property
    def fits(self) -> ChunkFits | int | None:
        """How chunked plans batch (once per planner): ``ChunkFits`` under one padded limit, the
        batch size when only ``max_seqs`` limits, None for the general batcher."""
        batcher = self.planner.batcher
        limits = batcher.limits
        cap = limits.max_seqs if limits.max_seqs is not None else max(self.chunks.num_units, 1)
        return batcher_fits(self.chunks, batcher, cap)

    def slot_costs(self, batches: BatchList) -> np.ndarray:
        """Cost units of each slot of ``batches`` (a chunk costs its window on the length key)."""
        if batches.chunks is None:
            return super().slot_costs(batches)
        p = self.planner
        window = self.chunks.window(p.length_key, p.lengths[batches.seqs], batches.chunks)
        return p.batcher.limits.units(p.length_key, window)

    def step_imbalance(self, plan: EpochPlan, from_step: int) -> PlannedImbalance:
        return PlannedImbalance(
            lambda: list_imbalance(plan, from_step, self.slot_costs(plan.batches), per_slot=True)
        )

    def left_of(self, seqs: np.ndarray) -> np.ndarray | None:
        """The chunks of ``seqs`` not consumed yet: all of them (bool ``[chunks]``)."""
        left = np.zeros(self.chunks.num_units, dtype=bool)
        whole = self.chunks.expand(seqs)
        left[self.chunks.unit_ids(whole.seqs, whole.chunks)] = True
        return left

    def consume(self, used: BatchList, remaining: np.ndarray, left: Opt) -> np.ndarray:
        """The chunks ``used`` delivered (a prefix of each sequence's), taken out of ``left``;
        ``remaining`` becomes the sequences with a chunk left -> the chunk numbers."""
        assert left is not None and used.chunks is not None
        ids = self.chunks.unit_ids(used.seqs[used.real], used.chunks[used.real])
        left[ids] = False
        remaining[:] = False
        remaining[part_of(self.chunks.first, np.flatnonzero(left))] = True
        return ids

    def fit_lengths(self, admitted: np.ndarray) -> tuple[dict[str, np.ndarray], str]:
        """A sequence's first chunk is its longest: what must fit a batch alone."""
        keys: Sequence[str] = self.planner.batcher.keys
        return {k: self.chunks.longest(k)[admitted] for k in keys}, "a chunk"

    def bucket_inputs(self, admitted: np.ndarray, key: str) -> tuple[Pair, Pair]:
        """Buckets of chunks: every chunk's window (the admitted sequences' chunks, in
        chunk-number order), as length and (with a quadratic cost) in cost units, per chunk
        number and for the edges alike."""
        every = self.chunks.expand(admitted, [key]).lengths[key]  # [chunks], in number order
        limits = self.planner.batcher.limits
        costs = every if limits.cost.quadratic is None else limits.units(key, every)
        return (every, costs), (every, costs)


def planned_units(
    planner: UnitsPlanner, check_start: CheckStart, chunks: ChunkTable | None
) -> PlannedSequences:
    """The planner's units: its chunks with ``chunking``, else its sequences."""
    if chunks is None:
        return PlannedSequences(planner, check_start)
    return PlannedChunks(planner, check_start, chunks)
