"""``mix`` with ``distribution="files"`` and a fixed or random ordering under indexed planning.

The mix is the one the laplace and ``buckets:N`` orderings plan over files
(``seqloader.plan.indexed.files_mix``): per-corpus streams of file pieces, each full epoch's span
of every corpus' stream cut at corpus-epoch and file boundaries, the pieces shuffled and cut into
sub-epochs by frames. The batches are ``CutFiles``' (``seqloader.plan.indexed.files_cut``) with
pieces where it has files: a sub-epoch's pieces are dealt to ranks largest first by frames
(``assign_lpt``; halved while there are fewer than ranks), a rank orders its pieces' slots with
the ordering (``default``: piece after piece in the dealt order, a piece's sequences in stored
order; ``reverse``: that backwards; ``sorted``/``sorted_reverse``: by length; ``random``: an order
drawn per (full epoch, part, segment, rank)) and cuts them greedily (global planning's
``Batcher``); ``uneven`` equalises the steps as ``CutFiles`` does. A slot is (sequence, corpus
epoch): a file used in two corpus epochs of one sub-epoch gives two pieces, two slots per
sequence.

The elements ``CutFiles`` deals, orders and replays are positions in the sub-epoch's slot list
(its pieces' slots, piece after piece): an elastic resume replays the history on a mask of the
sub-epoch's slots, not of the corpus' sequences (a sequence may hold two slots).

With ``epoch_wise_filter`` (``files_mix_filter``) a filtered sub-epoch's slots are the one kept
set (the same for every rank and world size), planned as ``CutFiles`` plans a filtered sub-epoch:
the kept slots of each piece dealt by their frames and cut, as what an elastic history left.

Chunked, as ``CutFiles`` chunks files (``ChunkSlots``): a rank's ordered slots are expanded into
their sequences' chunks and the chunks cut greedily by their windows; the chunk records an
elastic resume keeps (which chunks each has delivered) are keyed by slot position, so a sequence
holding two slots (a rate over 1) continues each from its own first undelivered chunk. A share's
slots carry (sequence, chunk, corpus epoch); the audit gets the consumed chunks' numbers.

Cost per rank: the sub-epoch's pieces and slots (O(n / P) time and memory: every rank lists the
slots, as every rank's batch count is needed for equal steps) and every rank's order cut in
turn (O(n / P) time, one rank's list at a time; chunked O(chunks / P)): **O(n) per rank per full
epoch**, as ``CutFiles``, for the same reason (a greedy cut depends on every length before it,
and a rank's list exists only for this epoch and world size); an elastic resume adds a mask and
(chunked) an int64 per slot of the sub-epoch. Global planning does not plan a mix over files
with these orderings at all (it selects a mix's sequences across files).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqloader.plan.batches import BatchList
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import START, At, EpochIndex
from seqloader.plan.files import refuse_files_start
from seqloader.plan.indexed.files_cut import (
    CutFiles,
    CutSegment,
    CutUnits,
    unit_elements,
)
from seqloader.plan.indexed.files_distribution import Files, FilesPlanner
from seqloader.plan.indexed.files_mix import FilesMix
from seqloader.plan.indexed.plan import RankwisePlan
from seqloader.plan.mix import USES_DTYPE, Corpora


class MixCutFiles(CutFiles):
    """``CutFiles`` over a mix's file pieces (the module doc).

    >>> from seqloader.plan import PlanOptions
    >>> from seqloader.plan.indexed.planner import IndexedPlanner
    >>> from seqloader.plan.mix import Corpora
    >>> options = PlanOptions(ordering="sorted", max_seqs=2, distribution="files",
    ...                       mix={"a": 1, "b": 2})
    >>> planner = IndexedPlanner({"data": np.array([4, 1, 3, 2, 6, 5])}, options,
    ...                          files=np.array([0, 2, 4, 6]),
    ...                          corpora=Corpora(("a", "b"), np.array([0, 4, 6])))
    >>> plan = planner.global_plan(1, 2)
    >>> shares = [plan.rank_share(r) for r in range(2)]
    >>> sorted(s for share in shares for s in share.seqs[share.real].tolist())  # b twice
    [0, 1, 2, 3, 4, 4, 5, 5]
    """

    def __init__(self, planner: FilesPlanner) -> None:
        super().__init__(planner)
        #: (sub-epoch key, its slots' sequences, corpus epochs, the pieces' slot bounds)
        self._slots_kept: tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray] | None = None

    def make_mix(self, corpora: Corpora) -> FilesMix:
        """The mix over files (``FilesMix``, as the laplace and buckets:N orderings plan it)."""
        return Files.make_mix(self, corpora)

    # ---- the sub-epoch's slots as CutFiles' elements ----
    def _slots(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot of ``ep``'s pieces, piece after piece, and the
        pieces' slot bounds ``[pieces + 1]`` (kept for the last sub-epoch asked)."""
        key = (ep.full_epoch, ep.part)
        kept = self._slots_kept
        if kept is None or kept[0] != key:
            pieces = self._pieces(ep)
            seqs, uses, _ = self._mix.slots(pieces)
            bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
            np.cumsum(pieces.count, out=bounds[1:])
            kept = self._slots_kept = (key, seqs, uses, bounds)
        return kept[1], kept[2], kept[3]

    def _items(self, ep: EpochIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The sub-epoch's pieces (their slots, counts and frames)."""
        pieces = self._pieces(ep)
        items = np.arange(len(pieces), dtype=np.int64)
        return items, self._bounds(ep), pieces.count.astype(np.int64), pieces.frames

    def _bounds(self, ep: EpochIndex) -> np.ndarray:
        return self._slots(ep)[2]

    def _all_left(self, ep: EpochIndex) -> np.ndarray:
        """Every slot, or with ``epoch_wise_filter`` the sub-epoch's kept slots (``FilesMix.kept``:
        one set for every rank and world size, dealt and cut as an elastic history's rest)."""
        kept = self.epoch_kept(ep)
        if kept is not None:
            return np.array(kept.mask, dtype=bool)
        return np.ones(int(self._bounds(ep)[-1]), dtype=bool)

    def _unit_elements(
        self, ep: EpochIndex, units: CutUnits, which: Sequence[int], left: np.ndarray | None
    ) -> np.ndarray:
        """Every slot is planned: nothing of the admitted mask applies to positions."""
        return unit_elements(self._bounds(ep), left, units, which)

    def _seqs_of(self, ep: EpochIndex, elements: np.ndarray) -> np.ndarray:
        return self._slots(ep)[0][elements]

    # ---- plans: shares decoded into (sequence, corpus epoch) slots ----
    def segment(self, epoch: int, world_size: int, at: At = START) -> tuple[EpochPlan, int]:
        refuse_files_start(at.start)
        seg, before = self._replayed(epoch, world_size, at.history, draw=False)
        return self._plan(seg, self._ep(epoch)), int(before)

    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        """(the segment's plan, the sequences the history consumed, chunked their chunk
        numbers (``ChunkTable.unit_ids``): O(n / P), for the audit)."""
        seg, before = self._replayed(epoch, world_size, history, draw=True)
        assert isinstance(before, np.ndarray)
        return self._plan(seg, self._ep(epoch)), before

    def _ep(self, epoch: int) -> EpochIndex:
        return EpochIndex(epoch, self.planner.options.partition_epoch)

    def _plan(self, seg: CutSegment, ep: EpochIndex) -> RankwisePlan:
        """``seg``'s plan, a share's slot positions decoded into (sequence, corpus epoch),
        chunked with the chunk of each."""
        seqs, uses, _ = self._slots(ep)

        def slots(b: BatchList) -> BatchList:
            use = uses[b.seqs].astype(USES_DTYPE)
            return BatchList(seqs[b.seqs], b.bounds, b.real, use, b.chunks)

        return seg.plan(slots)

    def _segment_key(self, ep: EpochIndex) -> tuple[int, ...]:
        """``CutFiles``' key and the full epoch: the pieces change every full epoch, also where
        ``random:K`` keeps its draws."""
        return (ep.full_epoch, *super()._segment_key(ep))
