"""``distribution="files"`` of indexed planning as one object (``Files``): the sub-epoch's files
(shuffled and cut as global planning cuts them), their units per old rank, the segments of an
elastic history, each rank's share drawn from its units' members, and what checks and reports ask
of a files plan (its order, its counts per corpus, its mix over files).

The algorithm (units, segments, replay on counts) is ``seqloader.plan.indexed.files``; this module
wires it to the planner's index, draws and mix, so ``IndexedPlanner`` holds no files code and no
branch on its distribution (``seqloader.plan.indexed.distributions`` picks this object).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, cast

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import EpochFilter, epoch_filters
from seqloader.plan.batches import BatchList
from seqloader.plan.chunks import ChunkTable
from seqloader.plan.chunks import Units as ChunkUnits
from seqloader.plan.edges import WINDOW_BATCHES
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import START, At, EpochIndex, replay_history
from seqloader.plan.files import (
    check_file_count,
    epoch_files,
    refuse_files_start,
    units_of,
)
from seqloader.plan.indexed.chunks import ChunkBuckets
from seqloader.plan.indexed.corpus import AdmittedCorpus
from seqloader.plan.indexed.files import Segment, Units
from seqloader.plan.indexed.files_carry import FIELD, Carried, decode, encode, pack_units
from seqloader.plan.indexed.files_filter import EpochKept, files_epoch_kept, kept_rank_counts
from seqloader.plan.indexed.files_mix import FilesMix, Pieces
from seqloader.plan.indexed.files_mix_filter import first_kept_piece, piece_positions
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.mix_filter import MixFilter
from seqloader.plan.indexed.mix_kind import MixKind
from seqloader.plan.indexed.plan import RankwisePlan, ranges
from seqloader.plan.lpt import assign_lpt
from seqloader.plan.mix import USES_DTYPE, Corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.ordering import argsort_by
from seqloader.plan.seeding import (
    PURPOSE_FILES,
    PURPOSE_INDEXED_FILES,
    PURPOSE_INDEXED_FILES_ORDER,
    rng_for,
)

_CHUNK = 1 << 22  # sequences of the admitted mask counted at once
_ROWS = 1 << 10  # files per chunk of the per-(file, bucket) table summed at once
#: files per rank from which the per-(file, bucket) table is summed rank by rank
_PER_RANK = 16

#: the largest last bucket edge ``Files._bucket_of`` keeps a table of every length for (8 MiB)
_TABLE_MAX = 1 << 20
#: a segment of an epoch: (all ranks' plan, units consumed by the segments before it)
Planned = tuple[EpochPlan, int]


class FilesPlanner(Protocol):
    """What ``Files`` reads of the indexed planner (read when asked: the batch sizes ``k`` and
    the mix are set after the distribution)."""

    options: PlanOptions
    origin: str
    corpus: AdmittedCorpus
    corpora: Corpora | None
    index: BucketIndex
    lengths: np.ndarray
    bucket_edges: np.ndarray
    k: np.ndarray
    units: ChunkBuckets | None
    chunks: ChunkTable | None
    mix: MixKind | None
    head: tuple[int, ...]

    def seed_epoch(self, ep: EpochIndex) -> int: ...

    def fingerprint(self, source_fingerprint: str) -> str: ...

    def cut_rows(self, counts: np.ndarray) -> tuple[np.ndarray, ...]: ...


class Files:
    """``distribution="files"``: whole files per rank, planned from counts (the module doc)."""

    name = "files"
    own_orders = False

    def __init__(self, planner: FilesPlanner) -> None:
        corpus = planner.corpus
        assert corpus.files is not None, "Files needs the source's file layout"
        assert corpus.index.file_counts is not None and corpus.index.file_frames is not None
        self.planner = planner
        self.files: np.ndarray = corpus.files
        #: admitted units (sequences; chunked: chunks) and frames per file
        self.file_counts = corpus.index.file_counts.sum(axis=1)
        self.file_frames = np.asarray(corpus.index.file_frames, dtype=np.int64)
        self._chunking, self._values = corpus.chunking, corpus.class_values
        self._units_kept: tuple[tuple[int, int, int, int], Units] | None = None
        #: the mix over files this distribution made (``make_mix``); None unmixed
        self.files_mix: FilesMix | None = None
        #: ``_bucket_of``'s table: (the edges it is for, the bucket of every length up to the last)
        self._bucket_table: tuple[np.ndarray, np.ndarray] | None = None
        self._segments_kept: tuple[tuple[int, int, int, int] | None, dict[tuple, Segment]] = (
            None,
            {},
        )
        #: ``epoch_wise_filter``: the last filtered sub-epoch's kept set, by ``_kept_key``
        self._epoch_kept: tuple[tuple[int, ...], EpochKept | None] | None = None
        #: what a loaded state carried (``carry``): used where its sub-epoch and history match
        self._carried: Carried | None = None
        self._plan_id: str | None = None  # ``plan_id``, made when first asked

    @property
    def _mask(self) -> np.ndarray | None:
        """The admitted mask (``AdmittedCorpus.mask``: made when first read)."""
        return self.planner.corpus.mask

    def _admits(self, seqs: np.ndarray, keep: np.ndarray | None) -> np.ndarray | None:
        """Which of ``seqs`` the sub-epoch admits (``keep``: a filtered sub-epoch's mask; else
        the admission's, per sequence: ``AdmittedCorpus.admits``) -> bool or None (all)."""
        return self.planner.corpus.admits(seqs) if keep is None else keep[seqs]

    def epoch_kept(self, ep: EpochIndex) -> EpochKept | None:
        """``epoch_wise_filter`` in sub-epoch ``ep``: the one kept set of its files' admitted
        sequences, for every rank and world size (``files_filter``); None where no filter
        applies (kept for the last sub-epoch asked). A mix over files: its slots' kept set, the
        mask over the sub-epoch's slot positions (``FilesMix.kept``)."""
        p = self.planner
        spec = cast(EpochFilter | None, p.options.epoch_wise_filter)  # normalised
        if not epoch_filters(spec, ep.epoch):  # nothing read: the admitted mask stays unmade
            return None
        if self.files_mix is not None:
            return self.files_mix.kept(ep, p.options.partition_epoch)
        key = self._kept_key(ep, 0)
        cached = self._epoch_kept  # read once: the plan-ahead thread may replace it meanwhile
        if cached is not None and cached[0] == key:
            return cached[1]
        by = p.lengths if p.corpus.filter_key is None else p.corpus.filter_key
        part = self._part_files(ep)
        kept = files_epoch_kept(spec, ep.epoch, self.files, part, self._mask, by)
        self._epoch_kept = (key, kept)
        return kept

    def _mask_of(self, ep: EpochIndex) -> np.ndarray | None:
        """What sub-epoch ``ep`` admits: the filtered set's mask, else the admission's."""
        kept = self.epoch_kept(ep)
        return self._mask if kept is None else kept.mask

    # ---- the distribution's face (``seqloader.plan.indexed.distributions.Distribution``) ----
    def segment(self, epoch: int, world_size: int, at: At = START) -> Planned:
        """(the current segment's plan, sequences consumed before it), from counts: the history
        is replayed per unit (``seqloader.plan.indexed.files``), no member drawn."""
        refuse_files_start(at.start)
        seg = self._segment_at(epoch, world_size, at.history)
        if at.history:
            seg.refuse_idle_drop(epoch)
        ep = EpochIndex(epoch, self.planner.options.partition_epoch)
        key = self._kept_key(ep, seg.units.world0)
        return self._rankwise(seg, self._fields(seg, key, at.history)), int(seg.start.sum())

    def carry(self, state: Mapping[str, object]) -> None:
        """Keep what a loaded ``state`` carries (``files_carry.FIELD``: a saved segment's units
        and consumption) for the segments it matches; a field that fails its seal (keyed by
        ``plan_id``) or shapes is set aside with a warning (planned from counts: the same
        plan)."""
        field = state.get(FIELD)
        carried = None if field is None else decode(field, self.plan_id)
        if field is not None and (carried is None or not carried.consistent(None)):
            _set_aside(
                "fails its seal or layout (damaged; edited; of another plan: other options, "
                "files or counts than this loader's; or sealed by an earlier seqloader)"
            )
            carried = None
        self._carried = carried

    @property
    def plan_id(self) -> str:
        """What the carried units are of (``Carried.plan``, the key of the field's seal): the
        planner's options, algorithm, length key and files (its fingerprint without the
        source's), and the files' admitted counts and frames. A field of another loader's state
        (the position checked by the state's own fingerprint, the field taken from elsewhere) is
        sealed for another plan; an edit made without the data cannot be sealed for this one."""
        if self._plan_id is None:
            h = hashlib.blake2b(self.planner.fingerprint("").encode(), digest_size=16)
            h.update(np.ascontiguousarray(self.file_counts, dtype=np.int64).tobytes())
            h.update(np.ascontiguousarray(self.file_frames, dtype=np.int64).tobytes())
            self._plan_id = h.hexdigest()
        return self._plan_id

    def _fields(
        self, seg: Segment, key: tuple[int, ...], history: Sequence[tuple[int, int]]
    ) -> Callable[[int], dict[str, str]]:
        """What a state saved after ``steps`` steps of ``seg`` carries (``carry``): nothing at
        the segment's end (the epoch is over: nothing to resume mid-way)."""
        before = tuple((int(w), int(s)) for w, s in history)
        units_part: list[bytes] = []  # packed once: every state of the segment shares it

        def fields(steps: int) -> dict[str, str]:
            if steps >= seg.steps:
                return {}
            used = seg.consumed(steps)
            c = Carried.of(
                key, before, seg.world_size, steps, seg.units, seg.start, used, self.plan_id
            )
            if not units_part:
                units_part.append(pack_units(c))
            return {FIELD: encode(c, units_part[0])}

        return fields

    def check_world(self, world_size: int) -> None:
        """Refuse fewer files than ``partition_epoch * world_size``."""
        parts = self.planner.options.partition_epoch
        check_file_count(self.file_counts, parts, world_size, self.planner.origin)

    def head(self, head: tuple[int, ...], order_rank: int) -> tuple[int, ...]:
        return head

    def make_mix(self, corpora: Corpora) -> FilesMix:
        """The mix over files: per-corpus streams of file pieces (``FilesMix``)."""
        p = self.planner
        assert p.options.mix is not None
        seq_counts = self.file_counts  # admitted sequences per file (chunked: the chunks')
        if p.units is not None:
            seq_counts = admitted_per_file(self.files, self._mask)
        spec = cast(EpochFilter | None, p.options.epoch_wise_filter)  # normalised
        wise = None if spec is None else MixFilter(spec, p.options.partition_epoch)
        by = p.lengths if p.corpus.filter_key is None else p.corpus.filter_key
        self.files_mix = FilesMix(
            p.options.seed, p.options.mix, corpora, self.files, seq_counts,
            self.file_frames, p.lengths, p.corpus.admits, p.origin, wise, by,
        )  # fmt: skip
        return self.files_mix

    def order_size(self, epoch: int, world_size: int) -> int:
        """The admitted units of the sub-epoch's files."""
        ep = EpochIndex(epoch, self.planner.options.partition_epoch)
        if self.files_mix is not None:
            pieces = self._pieces(ep)
            keep = self._slots_keep(ep)
            if keep is not None:  # the kept slots' units
                return len(self._piece_codes_of(pieces, keep)[0])
            if self.planner.units is None:
                return int(pieces.count.sum())
            whole = self._whole_pieces(pieces)  # chunks: whole files from the table
            rest = len(self._piece_units(pieces.take(np.flatnonzero(~whole)))[0])
            return int(self.file_counts[pieces.file[whole]].sum()) + rest
        part = self._part_files(ep)
        if self.epoch_kept(ep) is not None:  # the filtered set's units
            counts = self._kept_counts(ep, part, np.zeros(len(part), dtype=np.int64), 1)
            return int(counts.sum())
        return int(self.file_counts[part].sum())

    def sub_epoch_order(self, epoch: int, order_rank: int, world_size: int) -> np.ndarray:
        """The plan's real sequences, then what ``drop`` leaves out (chunked: one slot per chunk;
        a mix over files: its real slots, then what ``drop`` leaves out)."""
        if self.planner.units is not None:
            return self.sub_epoch_units(epoch, order_rank, world_size).seqs
        if self.files_mix is not None:
            return self._mix_order(epoch, world_size)[0]
        plan = self.files_plan(epoch, world_size)[0]
        real = plan.batches.seqs[plan.batches.real]
        if not plan.dropped:
            return real
        whole = self.sub_epoch_files(epoch)[0].seqs
        return np.concatenate([real, whole[~np.isin(whole, real)]])

    def sub_epoch_units(self, epoch: int, order_rank: int, world_size: int) -> ChunkUnits:
        """Chunking: the plan's real chunks, then what ``drop`` leaves out."""
        chunks_of = self.planner.chunks
        assert chunks_of is not None
        if self.files_mix is not None:
            seqs, chunks = self._mix_order(epoch, world_size)
            assert chunks is not None
            return ChunkUnits(seqs, chunks, {})
        b = self.files_plan(epoch, world_size)[0].batches
        seqs, chunks = b.seqs[b.real], np.asarray(b.chunks, dtype=np.int64)[b.real]
        whole = chunks_of.expand(self.sub_epoch_files(epoch)[0].seqs)
        ids = chunks_of.unit_ids(whole.seqs, whole.chunks)
        rest = ~np.isin(ids, chunks_of.unit_ids(seqs, chunks))
        return ChunkUnits(
            np.concatenate([seqs, whole.seqs[rest]]),
            np.concatenate([chunks, whole.chunks[rest]]),
            {},
        )

    def rank_order(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        raise OptionError(
            "planning='indexed' orders a rank alone only under random_seed_offset (no file pools)"
        )

    def corpus_counts(self, epoch: int) -> np.ndarray:
        """Unmixed: the sub-epoch's sequences per corpus -> int64 ``[C]``, from the per-file
        admitted counts of its files, summed per corpus; a file across a corpus bound (at most
        ``C - 1`` of them) is counted from the admitted mask over its range. No order drawn:
        O(files + C)."""
        corpora = self.planner.corpora
        assert corpora is not None
        files, bounds = np.asarray(self.files), np.asarray(corpora.bounds)
        part = self._part_files(EpochIndex(epoch, self.planner.options.partition_epoch))
        lo, hi = files[part], files[part + 1]
        first = np.searchsorted(bounds, lo, side="right") - 1  # corpus of each file's first
        last = np.searchsorted(bounds, hi - 1, side="right") - 1  # ... and last sequence
        inside = (hi > lo) & (first == last)
        out = np.zeros(len(corpora.names), dtype=np.int64)
        np.add.at(out, first[inside], np.asarray(self.file_counts)[part[inside]].astype(np.int64))
        across = np.flatnonzero((hi > lo) & (first != last))
        for i in across.tolist():
            for c in range(int(first[i]), int(last[i]) + 1):
                a, b = max(int(lo[i]), int(bounds[c])), min(int(hi[i]), int(bounds[c + 1]))
                if b > a:
                    out[c] += self._admitted_units(a, b)
        return out

    # ---- for the audit and tests (O(n)) ----
    def files_plan(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]] = ()
    ) -> tuple[EpochPlan, np.ndarray]:
        """(the current segment's plan, the sequences consumed before it: chunked, the chunk
        numbers, ``ChunkTable.unit_ids``); the latter draws every old rank's members (O(n): for
        the audit and tests; resuming uses ``segment``)."""
        p = self.planner
        seg = self._segment_at(epoch, world_size, history)
        if history:
            seg.refuse_idle_drop(epoch)
        consumed = seg.consumed_members(self.members_of(seg.units))
        if seg.units.pieces is not None:  # a mix: codes as units (sequences or chunk codes)
            consumed = consumed % self._code_span
        if p.units is not None and p.chunks is not None:  # as chunk numbers
            consumed = p.chunks.unit_ids(*p.units.split(consumed))
        return self._rankwise(seg), consumed

    def sub_epoch_files(self, epoch: int) -> tuple[BatchList, np.ndarray]:
        """(units, file of each unit) of ``epoch``: per file of the sub-epoch (shuffled order),
        its admitted sequences (O(n): for the audit and tests)."""
        p = self.planner
        ep = EpochIndex(epoch, p.options.partition_epoch)
        if self.files_mix is not None:  # a mix: per piece of a file, its slots
            pieces = self._pieces(ep)
            seqs, _, pid = self.files_mix.slots(pieces)
            keep = self._slots_keep(ep)
            if keep is not None:  # the kept slots of each piece
                seqs, pid = seqs[keep], pid[keep]
            bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
            np.cumsum(np.bincount(pid, minlength=len(pieces)), out=bounds[1:])
            return BatchList.from_bounds(seqs, bounds), pieces.file
        part = self._part_files(ep)
        mask = self._mask_of(ep)
        admitted = mask if mask is not None else np.ones(len(p.lengths), bool)
        return units_of(self.files, part, admitted)

    def _mix_order(self, epoch: int, world_size: int) -> tuple[np.ndarray, np.ndarray | None]:
        """A mix over files: the plan's real units, then what ``drop`` leaves out -> (sequence,
        chunk or None) of each (O(n / P): for checks and tests)."""
        p = self.planner
        b = self.files_plan(epoch, world_size)[0].batches
        assert b.uses is not None
        real = b.seqs[b.real]
        if p.units is not None and b.chunks is not None:
            real = real * p.units.stride + b.chunks[b.real]
        real = b.uses[b.real].astype(np.int64) * self._code_span + real
        ep = EpochIndex(epoch, p.options.partition_epoch)
        whole = self._piece_codes_of(self._pieces(ep), self._slots_keep(ep))[0]
        rest = np.concatenate([real, whole[~np.isin(whole, real)]]) % self._code_span
        if p.units is None:
            return rest, None
        return p.units.split(rest)

    # ---- the sub-epoch's files and units ----
    def _part_files(self, ep: EpochIndex) -> np.ndarray:
        """The files of sub-epoch ``ep`` in the epoch's shuffled order (as global planning)."""
        p = self.planner
        rng = rng_for(*p.head, PURPOSE_FILES, p.seed_epoch(ep))
        parts = p.options.partition_epoch
        return epoch_files(self.file_frames, self.file_counts, parts, rng).part(ep.part)

    def _admitted_units(self, a: int, b: int) -> int:
        """Admitted units (sequences; chunked: chunks) of sequences ``[a, b)``."""
        keep = np.ones(b - a, dtype=bool) if self._mask is None else self._mask[a:b]
        if self._chunking is None:
            return int(np.count_nonzero(keep))
        values = np.asarray(self._values[a:b])[keep]
        return int(self._chunking.counts(values).sum())

    def _units(self, ep: EpochIndex, world0: int) -> Units:
        """The sub-epoch's units for the world size ``world0`` it starts with (kept: a resume
        asks for them two or three times)."""
        p = self.planner
        key = self._kept_key(ep, world0)
        kept = self._units_kept
        if kept is not None and kept[0] == key:
            return kept[1]
        words = (PURPOSE_INDEXED_FILES, p.seed_epoch(ep), ep.part)
        units = self._carried_units(ep, key, words)  # a loaded state's: no LPT, no counts
        if units is None:
            units = self._planned_units(ep, world0, words)
        self._units_kept = (key, units)
        return units

    def _planned_units(self, ep: EpochIndex, world0: int, words: tuple[int, ...]) -> Units:
        """The units from counts: the files' LPT assignment to the ``world0`` old ranks, their
        sequences per (rank, bucket), cut into runs."""
        p = self.planner
        if self.files_mix is not None:  # the sub-epoch's file pieces, numbered
            pieces = self._pieces(ep)
            rank_of = assign_lpt(pieces.frames, world0)  # the pieces' frames, filtered or not
            keep = self._slots_keep(ep)
            per_rank = self._piece_rank_counts(pieces, rank_of, world0, keep)
            part = np.arange(len(pieces), dtype=np.int64)
            units = Units.of(part, rank_of, per_rank, p.cut_rows, words)
            return replace(units, pieces=pieces, keep=keep)
        part = self._part_files(ep)
        rank_of = assign_lpt(self.file_frames[part], world0)  # [f]
        if self.epoch_kept(ep) is not None:  # epoch_wise_filter: the kept set's counts
            per_rank = self._kept_counts(ep, part, rank_of, world0)
            units = Units.of(part, rank_of, per_rank, p.cut_rows, words)
            return replace(units, keep=self._mask_of(ep))
        per_rank = _rank_counts(p.index.file_counts, part, rank_of, world0)  # [W0, N]
        return Units.of(part, rank_of, per_rank, p.cut_rows, words)

    def _carried_units(
        self, ep: EpochIndex, key: tuple[int, ...], words: tuple[int, ...]
    ) -> Units | None:
        """The units a loaded state carried for sub-epoch ``ep`` (``key``), if it carried them
        and they hold the files' counts (else set aside, with a warning)."""
        c = self._carried
        if c is None or c.key != key:
            return None
        if self.files_mix is not None:
            pieces = self._pieces(ep)
            part, admitted = np.arange(len(pieces), dtype=np.int64), None
        else:
            part = self._part_files(ep)
            filtered = self.epoch_kept(ep) is not None  # its kept set's counts, below
            admitted = None if filtered else self.file_counts[part]
        ok = c.consistent(admitted, len(part))
        if ok and admitted is None:  # the pieces' or the kept set's units per old rank
            world0 = len(c.per_rank)
            if self.files_mix is not None:  # filtered: the kept slots' counts
                keep = self._slots_keep(ep)
                counts = self._piece_rank_counts(pieces, c.rank_of, world0, keep)
            else:
                counts = self._kept_counts(ep, part, c.rank_of, world0)
            ok = c.holds(counts.sum(axis=1))
        if not ok:
            _set_aside("does not hold this sub-epoch's counts")
            self._carried = None
            return None
        units = c.units(part, words)
        if self.files_mix is not None:
            return replace(units, pieces=pieces, keep=self._slots_keep(ep))
        return units if admitted is not None else replace(units, keep=self._mask_of(ep))

    def _kept_counts(
        self, ep: EpochIndex, part: np.ndarray, rank_of: np.ndarray, world0: int
    ) -> np.ndarray:
        """A filtered sub-epoch's units per (old rank, bucket) -> int64 ``[W0, N]``."""
        p = self.planner
        mask = self._mask_of(ep)
        assert mask is not None

        def buckets(seqs: np.ndarray) -> np.ndarray:
            lens = np.asarray(p.lengths[seqs])
            if p.units is not None:  # chunked: the kept sequences' chunks, by their windows
                lens = p.units.codes_of(seqs, p.corpus.class_values[seqs])[1]
            return self._bucket_of(lens)

        n_buckets = len(p.bucket_edges) + 1
        return kept_rank_counts(self.files, part, rank_of, world0, mask, buckets, n_buckets)

    def _kept_key(self, ep: EpochIndex, world0: int) -> tuple[int, int, int, int]:
        """What the kept units and segments of sub-epoch ``ep`` depend on: the draws' seed
        epoch, the sub-epoch, the first world size, and the full epoch (a mix's file pieces
        change every full epoch, also where ``buckets:N:K`` or ``fixed_random_seed`` keep the
        draws: keyed by the seed epoch alone, a planner that planned one full epoch would
        plan the next one's sub-epoch from the first one's pieces)."""
        return (ep.full_epoch, self.planner.seed_epoch(ep), ep.part, world0)

    # ---- segments ----
    def _segment_at(
        self, epoch: int, world_size: int, history: Sequence[tuple[int, int]]
    ) -> Segment:
        """Segment ``len(history)`` of ``epoch`` on ``world_size`` ranks, after the history's
        segments consumed their first steps."""
        if not history:
            self.check_world(world_size)
        p = self.planner
        ep = EpochIndex(epoch, p.options.partition_epoch)
        world0 = history[0][0] if history else world_size
        units = self._units(ep, world0)
        key = self._kept_key(ep, world0)
        if self._segments_kept[0] != key:  # segments of this sub-epoch and world0 only
            self._segments_kept = (key, {})
        kept = self._segments_kept[1]
        start = np.zeros(len(units.count), dtype=np.int64)
        c, hist = self._carried, tuple((int(w), int(s)) for w, s in history)
        if c is not None and c.key == key and hist in (c.history, c.after):  # no replay
            if hist == c.after:  # where the saved segment's steps ended
                start = c.start + c.used
            elif hist:  # the saved segment itself
                start = c.start
            return self._segment(ep, units, start, world_size, hist, kept)

        def segment(i: int, w: int) -> Segment:
            return self._segment(ep, units, start, w, tuple(history[:i]), kept)

        for seg, _, steps in replay_history(epoch, history, segment):
            start = start + seg.consumed(steps)
        return self._segment(ep, units, start, world_size, tuple(history), kept)

    def _segment(
        self,
        ep: EpochIndex,
        units: Units,
        start: np.ndarray,
        world_size: int,
        before: tuple[tuple[int, int], ...],
        kept: dict[tuple, Segment],
    ) -> Segment:
        """The segment after the segments ``before`` (which determine ``start``); kept, so the
        replays of a load, its checks and its continuation count each segment's use once."""
        seg = kept.get((before, world_size))
        if seg is not None:
            return seg
        p = self.planner
        index = len(before)
        words = (PURPOSE_INDEXED_FILES_ORDER, p.seed_epoch(ep), ep.part, index)

        def order_words(rank: int) -> tuple[int, ...]:
            return (*p.head, *words, rank)

        ordering, uneven = p.options.parsed_ordering, p.options.uneven
        seg = Segment(units, start, world_size, index, ordering, uneven, order_words)
        c = self._carried
        saved = c is not None and (c.key, c.history, c.world_size) == (
            self._kept_key(ep, units.world0),
            before,
            world_size,
        )  # the segment a loaded state was saved in: its consumption as counted then
        if c is not None and saved and not seg.carry_consumed(c.steps, c.used):
            _set_aside("does not fit its segment")
            self._carried = None
        if len(kept) >= 8:
            kept.clear()
        kept[(before, world_size)] = seg
        return seg

    # ---- members and shares ----
    def members_of(self, units: Units) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
        """Old rank r's admitted sequences drawn with its member stream, bucket after bucket
        (random within), cut into its runs -> (sequences int64, run starts int64 ``[G_r + 1]``)."""
        p = self.planner
        files = self.files
        words = units.member_words

        def members(r: int) -> tuple[np.ndarray, np.ndarray]:
            if units.pieces is not None:  # a mix: pieces of files, as codes (chunks too)
                seqs, lens = self._codes_of(units, r)
            else:
                own = units.part[units.rank_of == r]
                seqs = ranges(files[own], files[own + 1])
                admitted = self._admits(seqs, units.keep)
                if admitted is not None:
                    seqs = seqs[admitted]
                lens = np.asarray(p.lengths[seqs])
                if p.units is not None:  # chunked: the files' chunks, as codes, by windows
                    seqs, lens = p.units.codes_of(seqs, p.corpus.class_values[seqs])
            perm = rng_for(*p.head, *words, r).permutation(len(seqs))
            seqs, lens = seqs[perm], lens[perm]
            bucket = self._bucket_of(lens)
            by_bucket = argsort_by(bucket)  # buckets ascending, random within (16-bit radix)
            seqs, lens = seqs[by_bucket], lens[by_bucket]
            mine = slice(*np.searchsorted(units.rank, [r, r + 1]))
            starts = units.rank_starts(r)
            size = units.size[mine].astype(np.int64)
            run = np.repeat(np.arange(len(size)), np.diff(starts))
            # sorted by length within windows of WINDOW_BATCHES of the run's batches (fixed
            # per unit, so every segment's prefix and rest are slices of one list)
            window = (np.arange(len(seqs)) - starts[run]) // (WINDOW_BATCHES * size[run])
            major = run * (int(window.max(initial=0)) + 1) + window
            return seqs[argsort_by(lens, major)], starts

        return members

    def _bucket_of(self, lens: np.ndarray) -> np.ndarray:
        """``searchsorted(bucket_edges, lens, "right")`` by a table of every length up to the
        last edge (one gather: a member draw's binary searches took a third of it), where that
        table is small; the search itself otherwise."""
        edges = self.planner.bucket_edges
        top = int(edges[-1]) if len(edges) else -1
        if not 0 <= top < _TABLE_MAX or not len(lens) or int(lens.min()) < 0:
            return np.searchsorted(edges, lens, "right")
        if self._bucket_table is None or self._bucket_table[0] is not edges:
            self._bucket_table = (edges, np.searchsorted(edges, np.arange(top + 1), "right"))
        return self._bucket_table[1][np.minimum(lens, top)]

    def _rankwise(
        self, seg: Segment, fields: Callable[[int], dict[str, str]] | None = None
    ) -> RankwisePlan:
        members = self.members_of(seg.units)
        part = seg.units.part

        mixed = seg.units.pieces is not None

        def share(rank: int) -> BatchList:
            batches = seg.share(rank, members, lambda: self._first_unit(part, seg.units))
            return self._decode(batches) if mixed else self._split_codes(batches)

        kept: dict[bytes, np.ndarray] = {}  # per bucket costs: a walk asks W times

        def planned_costs(rank: int, bucket_costs: np.ndarray) -> np.ndarray:
            key = np.asarray(bucket_costs).tobytes()
            if key not in kept:
                kept.clear()  # a unit's sequence costs its last (longest) bucket's cost
                kept[key] = np.asarray(bucket_costs, np.int64)[seg.units.top]
            unit_costs = kept[key]

            def filler_cost() -> int:  # the sub-epoch's first sequence, in its old rank's run
                owner = self._filler_owner(seg.units)
                if owner is None:  # nothing admitted in the sub-epoch: no filler to cost
                    return 0
                r = owner[0]
                seqs, starts = members(r)  # one old rank's list (only a rank with no units)
                code = self._first_unit(part, seg.units)[0]
                at = int(np.flatnonzero(seqs == code)[0])
                run = int(np.searchsorted(starts, at, side="right")) - 1
                return int(unit_costs[int(np.searchsorted(seg.units.rank, r)) + run])

            return seg.planned_costs(rank, unit_costs, filler_cost)

        return RankwisePlan(
            share,
            seg.world_size,
            seg.steps,
            seg.real_total,
            seg.repeats,
            seg.consumed_seqs,
            planned_costs,
            seg.dropped,
            chunked=self.planner.units is not None,
            mixed=mixed,
            resume_fields=fields,
        )

    def _split_codes(self, batches: BatchList) -> BatchList:
        """Chunked: a share drawn over codes as (sequence, chunk) slots; unchanged unchunked."""
        units = self.planner.units
        if units is None:
            return batches
        seqs, chunks = units.split(batches.seqs)
        return BatchList(seqs, batches.bounds, batches.real, batches.uses, chunks)

    def _filler_owner(self, units: Units) -> tuple[int, np.ndarray] | None:
        """(old rank, the sequence) of the fillers' sequence (``_first_unit``); None when the
        sub-epoch has nothing admitted."""
        if units.pieces is not None:  # a mix: its first piece's first (kept) slot
            first = first_kept_piece(units.pieces.count, units.keep)
            if first is None:
                return None
            code = self._first_unit(units.part, units) % self._code_span
            if self.planner.units is not None:
                code = self.planner.units.split(code)[0]
            return int(units.rank_of[first]), code
        s = self._first_sequence(units.part, units.keep)
        file = int(np.searchsorted(np.asarray(self.files), s[0], side="right")) - 1
        where = np.flatnonzero(units.part == file)
        if not len(where):
            return None
        return int(units.rank_of[where[0]]), s

    def _first_unit(self, part: np.ndarray, units: Units | None = None) -> np.ndarray:
        """The fillers' unit when a rank has none of its own: the sub-epoch's first sequence
        (chunked: its first chunk's code; a mix: its first piece's first slot, as a code)."""
        if units is not None and units.pieces is not None:
            piece = first_kept_piece(units.pieces.count, units.keep)
            if piece is None:
                return np.zeros(1, dtype=np.int64)
            at = np.array([piece], dtype=np.int64)
            keep = self._keep_of(units, at)
            return self._piece_codes_of(units.pieces.take(at), keep)[0][:1]
        first = self._first_sequence(part, None if units is None else units.keep)
        chunked = self.planner.units
        return first if chunked is None else first * chunked.stride

    def _first_sequence(self, part: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """The sub-epoch's first admitted sequence (``keep``: a filtered sub-epoch's mask)."""
        for f in part.tolist():
            seqs = np.arange(self.files[f], self.files[f + 1], dtype=np.int64)
            admitted = self._admits(seqs, keep)
            if admitted is not None:
                seqs = seqs[admitted]
            if len(seqs):
                return seqs[:1]
        return np.zeros(1, dtype=np.int64)

    # ---- a mix over files: its pieces, as codes ``use * span + unit`` ----
    @property
    def _mix(self) -> FilesMix:
        """The mix over files, for the code that runs only with one (``files_mix``)."""
        assert self.files_mix is not None, "a mix over files' pieces asked without mix="
        return self.files_mix

    def _pieces(self, ep: EpochIndex) -> Pieces:
        """Sub-epoch ``ep``'s file pieces (``FilesMix.sub_epoch``)."""
        return self._mix.sub_epoch(ep.full_epoch, ep.part, self.planner.options.partition_epoch)

    def _piece_rank_counts(
        self, pieces: Pieces, rank_of: np.ndarray, world0: int, keep: np.ndarray | None = None
    ) -> np.ndarray:
        """Sequences per (rank, bucket) of the file pieces -> int64 ``[W0, N]``: whole files
        from the per-(file, bucket) table, partial pieces counted from their sequences; a
        filtered sub-epoch (``keep``: its kept slots) from the kept slots of every piece."""
        p = self.planner
        if keep is not None:
            _, lens, pid = self._piece_codes_of(pieces, keep)
            n_b = len(p.bucket_edges) + 1
            flat = rank_of[pid] * n_b + self._bucket_of(lens)
            return np.bincount(flat, minlength=world0 * n_b).reshape(world0, n_b).astype(np.int64)
        whole = self._whole_pieces(pieces)
        out = _rank_counts(p.index.file_counts, pieces.file[whole], rank_of[whole], world0)
        partial = np.flatnonzero(~whole)
        if len(partial):
            pid, lens = self._piece_units(pieces.take(partial))
            bucket = self._bucket_of(lens)
            n_b = out.shape[1]
            rows = np.bincount(pid * n_b + bucket, minlength=len(partial) * n_b)
            np.add.at(out, rank_of[partial], rows.reshape(len(partial), n_b))
        return out

    def _whole_pieces(self, pieces: Pieces) -> np.ndarray:
        """Which of ``pieces`` are whole files -> bool."""
        return (pieces.lo == 0) & (pieces.hi == self._mix.file_counts[pieces.file])

    @property
    def _code_span(self) -> int:
        """Codes are ``use * span + unit`` (unit: the sequence, chunked its chunk's code)."""
        units = self.planner.units
        return len(self.planner.lengths) * (units.stride if units is not None else 1)

    def _piece_codes_of(
        self, pieces: Pieces, keep: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every planned unit of ``pieces`` (chunked: every chunk of every slot) -> (codes
        ``use * span + unit``, lengths (chunked: windows), piece) int64 each; ``keep``: which of
        the pieces' slots a filtered sub-epoch keeps (None: all)."""
        p = self.planner
        seqs, uses, pid = self._mix.slots(pieces)
        if keep is not None:
            seqs, uses, pid = seqs[keep], uses[keep], pid[keep]
        lens = np.asarray(p.lengths[seqs])
        units = seqs
        if p.units is not None:  # each slot's chunks, slot after slot
            units, lens = p.units.codes_of(seqs, p.corpus.class_values[seqs])
            slot = np.cumsum(p.units.split(units)[1] == 0) - 1
            uses, pid = uses[slot], pid[slot]
        return uses * self._code_span + units, lens, pid

    def _piece_units(self, pieces: Pieces) -> tuple[np.ndarray, np.ndarray]:
        """(piece, length or window) of every planned unit of ``pieces``."""
        _, lens, pid = self._piece_codes_of(pieces)
        return pid, lens

    def _codes_of(self, units: Units, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Old rank r's units as codes (one per slot, chunked per chunk: a file used in two
        corpus epochs gives two), and their lengths (chunked: windows)."""
        assert units.pieces is not None
        own = np.flatnonzero(units.rank_of == r)
        codes, lens, _ = self._piece_codes_of(units.pieces.take(own), self._keep_of(units, own))
        return codes, lens

    def _slots_keep(self, ep: EpochIndex) -> np.ndarray | None:
        """A mix over files: the kept slots of filtered sub-epoch ``ep`` (a mask over its slot
        positions); None where no filter applies."""
        kept = self.epoch_kept(ep)
        return None if kept is None else kept.mask

    @staticmethod
    def _keep_of(units: Units, which: np.ndarray) -> np.ndarray | None:
        """The kept mask of the slots of the sub-epoch's pieces ``which`` (``units.keep``: over
        every slot position; None: all kept)."""
        if units.keep is None or units.pieces is None:
            return None
        return units.keep[piece_positions(units.pieces.count, which)]

    def _decode(self, batches: BatchList) -> BatchList:
        """A share drawn over codes as (sequence, corpus epoch) slots, chunked with the chunk
        of each."""
        uses, rest = np.divmod(batches.seqs, self._code_span)
        chunks = None
        if self.planner.units is not None:
            rest, chunks = self.planner.units.split(rest)
        return BatchList(rest, batches.bounds, batches.real, uses.astype(USES_DTYPE), chunks)


def _set_aside(why: str) -> None:
    """Warn that a loaded state's carried units are not used (planned from counts instead)."""
    warnings.warn(
        f"loader state {FIELD}: {why}, so it was set aside and the resume planned from counts "
        "(the same plan, more work). The state's position was checked as usual; save a new "
        "state to carry it again.",
        stacklevel=3,
    )


def _rank_counts(
    table: np.ndarray | None, part: np.ndarray, rank_of: np.ndarray, world_size: int
) -> np.ndarray:
    """Sequences per (rank, bucket) -> int64 ``[W, N]``, from the per-(file, bucket) ``table``
    (``[F, N]``, e.g. memory-mapped) for files ``part`` assigned ``rank_of``: the files sorted
    by rank, their rows summed per rank (no ``[f, N]`` copy). Ranks of many files: one sum
    per rank (numpy sums a rank's rows into int64 ~2x faster than ``reduceat`` casts them);
    few: a chunk of files at a time."""
    assert table is not None
    out = np.zeros((world_size, table.shape[1]), dtype=np.int64)
    by = argsort_by(rank_of)  # 16-bit radix where the ranks fit
    files, ranks = part[by], rank_of[by]
    if len(files) >= _PER_RANK * world_size:
        bounds = np.searchsorted(ranks, np.arange(world_size + 1)).tolist()
        for r in range(world_size):
            out[r] = table[files[bounds[r] : bounds[r + 1]]].sum(axis=0, dtype=np.int64)
        return out
    for a in range(0, len(files), _ROWS):
        rows = table[files[a : a + _ROWS]].astype(np.int64)  # [c, N]
        here = ranks[a : a + _ROWS]
        starts = np.flatnonzero(np.concatenate([[True], here[1:] != here[:-1]]))
        out[here[starts]] += np.add.reduceat(rows, starts, axis=0)
    return out


def admitted_per_file(files: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Admitted sequences per file -> int64 ``[F]`` (a mix over chunked files: the per-file
    table counts chunks). One pass over the mask, a block at a time."""
    sizes = np.diff(files).astype(np.int64)
    if mask is None:
        return sizes
    out = np.zeros(len(sizes), dtype=np.int64)
    for a in range(0, len(mask), _CHUNK):
        kept = np.flatnonzero(mask[a : a + _CHUNK]) + a
        out += np.bincount(np.searchsorted(files, kept, side="right") - 1, minlength=len(sizes))
    return out
