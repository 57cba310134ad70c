"""A plan's units as those who check and count plans see them: sequences, or (chunked) chunks.

A plan batches *units*: the sequences themselves, or with ``chunking`` each sequence's chunks
(``seqloader.plan.chunks``). The audit's orders (``audit_order``) and its check of each delivered
batch (``trainer/audit.py``), the simulation's exactly-once and load counts (``simulate``) and
``seqloader stats`` count units, so what differs between the two is answered by one object, made once per planner (``units_of``): ``SequenceUnits`` or
``ChunkUnits``. Their callers are written once and do not test for chunking (the planners' own
``greedy/units.py`` and ``indexed/units.py`` are the same idea for planning itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from seqloader.parts import part_of
from seqloader.plan.batches import BatchList
from seqloader.plan.chunks import ChunkTable
from seqloader.plan.inputs import PlannedInputs


class PlannedUnits(Protocol):
    """What a plan's units answer; a unit is numbered ``0..num_units-1``, sequence after
    sequence (a sequence's chunks consecutive)."""

    @property
    def noun(self) -> str:
        """What a unit is called in messages: "sequence" or "chunk"."""
        ...

    @property
    def num_units(self) -> int: ...

    def of_slots(self, batches: BatchList, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The unit of each real slot of ``batches.seqs[lo:hi]`` -> int64 ``[real slots]``."""
        ...

    def of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        """Every unit of the sequences ``seqs``, each sequence's in order -> int64."""
        ...

    def seqs_of(self, units: np.ndarray) -> np.ndarray:
        """The sequence of each unit -> int64 like ``units``."""
        ...

    def slot_lengths(self, batches: BatchList, lengths: np.ndarray) -> np.ndarray:
        """Each slot's length on the length key (``lengths``: the whole sequences') -> int64."""
        ...

    def use_starts(self, batches: BatchList) -> np.ndarray:
        """bool ``[slots]``: the real slots where a use of a sequence starts (its first unit)."""
        ...

    def admitted(self, admitted_seqs: np.ndarray) -> np.ndarray:
        """bool ``[num_units]``: the units a full epoch must use, of the admitted sequences."""
        ...

    def sequences_used(self, counts: np.ndarray, admitted: np.ndarray) -> tuple[int, int, int]:
        """From uses per unit (``counts``) and ``admitted`` (bool per unit): (sequences used,
        sequences admitted, sequences with only some of their units used)."""
        ...

    def misplanned(self, seqs: np.ndarray, chunks: np.ndarray | None) -> str | None:
        """What is wrong with delivered rows (sequence ``seqs``, chunk index ``chunks``) as
        units of this plan, or None (the audit's check of a batch)."""
        ...

    def windows(self, seqs: np.ndarray, chunks: np.ndarray | None) -> dict[str, np.ndarray]:
        """Each delivered row's length on the keys its unit cuts -> ``{key: int64 [rows]}``
        (``{}`` for whole sequences: the source's lengths hold); rows ``misplanned`` accepts."""
        ...


@dataclass(frozen=True)
class SequenceUnits:
    """Unchunked plans: every sequence is one unit.

    >>> units = SequenceUnits(4)
    >>> units.of_slots(BatchList.from_bounds(np.array([3, 1]), np.array([0, 2]))).tolist()
    [3, 1]
    """

    num_units: int
    noun: str = "sequence"

    def of_slots(self, batches: BatchList, lo: int = 0, hi: int | None = None) -> np.ndarray:
        return batches.seqs[lo:hi][batches.real[lo:hi]]

    def of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        return seqs

    def seqs_of(self, units: np.ndarray) -> np.ndarray:
        return units

    def slot_lengths(self, batches: BatchList, lengths: np.ndarray) -> np.ndarray:
        return lengths[batches.seqs]

    def use_starts(self, batches: BatchList) -> np.ndarray:
        return batches.real

    def admitted(self, admitted_seqs: np.ndarray) -> np.ndarray:
        mask = np.zeros(self.num_units, dtype=bool)
        mask[admitted_seqs] = True
        return mask

    def sequences_used(self, counts: np.ndarray, admitted: np.ndarray) -> tuple[int, int, int]:
        return int(np.count_nonzero(counts)), int(admitted.sum()), 0

    def misplanned(self, seqs: np.ndarray, chunks: np.ndarray | None) -> str | None:
        return None

    def windows(self, seqs: np.ndarray, chunks: np.ndarray | None) -> dict[str, np.ndarray]:
        return {}


@dataclass(frozen=True)
class ChunkUnits:
    """Chunked plans: every chunk of ``table`` is one unit; slots carry their chunk index
    (``BatchList.chunks``) and are as long as their chunk's window on ``length_key``.

    >>> from seqloader.plan.chunks import chunk_table
    >>> table = chunk_table({"data": np.array([5, 2])}, {"*": (2, 2)}, 0, np.ones(2, bool))
    >>> units = ChunkUnits(table, "data")
    >>> units.of_seqs(np.array([1, 0])).tolist(), units.seqs_of(np.array([3, 0])).tolist()
    ([3, 0, 1, 2], [1, 0])
    >>> units.misplanned(np.array([0, 1]), np.array([2, 1]))
    'chunk indices [2, 1] not planned for [0, 1]'
    >>> units.windows(np.array([0, 1]), np.array([2, 0]))["data"].tolist()
    [1, 2]
    """

    table: ChunkTable
    length_key: str
    noun: str = "chunk"

    @property
    def num_units(self) -> int:
        return self.table.num_units

    def of_slots(self, batches: BatchList, lo: int = 0, hi: int | None = None) -> np.ndarray:
        real = batches.real[lo:hi]
        seqs = batches.seqs[lo:hi][real]
        if batches.chunks is None:
            return seqs
        return self.table.unit_ids(seqs, batches.chunks[lo:hi][real])

    def of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        expanded = self.table.expand(seqs)
        return self.table.unit_ids(expanded.seqs, expanded.chunks)

    def seqs_of(self, units: np.ndarray) -> np.ndarray:
        return part_of(self.table.first, units)

    def slot_lengths(self, batches: BatchList, lengths: np.ndarray) -> np.ndarray:
        whole = lengths[batches.seqs]
        if batches.chunks is None:
            return whole
        return self.table.window(self.length_key, whole, batches.chunks)

    def use_starts(self, batches: BatchList) -> np.ndarray:
        if batches.chunks is None:
            return batches.real
        return batches.real & (batches.chunks == 0)

    def admitted(self, admitted_seqs: np.ndarray) -> np.ndarray:
        return np.ones(self.num_units, dtype=bool)  # only admitted sequences have chunks

    def sequences_used(self, counts: np.ndarray, admitted: np.ndarray) -> tuple[int, int, int]:
        first, per_seq_chunks = self.table.first, self.table.counts
        ran = np.concatenate([[0], np.cumsum(counts > 0)])
        per_seq = ran[first[1:]] - ran[first[:-1]]  # units used of each sequence
        partly = int(np.count_nonzero((per_seq > 0) & (per_seq < per_seq_chunks)))
        return int(np.count_nonzero(per_seq)), int(np.count_nonzero(per_seq_chunks)), partly

    def misplanned(self, seqs: np.ndarray, chunks: np.ndarray | None) -> str | None:
        if chunks is None or len(chunks) != len(seqs):
            return "a chunked plan's batch without its chunk indices"
        first = self.table.first
        if (chunks < 0).any() or (first[seqs] + chunks >= first[seqs + 1]).any():
            return f"chunk indices {chunks.tolist()} not planned for {seqs.tolist()}"
        return None

    def windows(self, seqs: np.ndarray, chunks: np.ndarray | None) -> dict[str, np.ndarray]:
        assert chunks is not None, "rows that misplanned() refuses have no windows"
        t = self.table
        return {k: t.window(k, t.whole[k][seqs], chunks) for k in t.spec}


class Chunked(PlannedInputs, Protocol):
    """What ``units_of`` reads of a planner."""

    @property
    def length_key(self) -> str: ...


def units_of(planner: Chunked) -> PlannedUnits:
    """The units ``planner`` plans: its chunks where it chunks, else its sequences."""
    if planner.chunks is None:
        return SequenceUnits(len(planner.lengths))
    return ChunkUnits(planner.chunks, planner.length_key)
