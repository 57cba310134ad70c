"""``mix`` with ``distribution="files"`` under indexed planning: per-corpus streams of file pieces.

The indexed mix of ``shard`` plans (``seqloader.plan.indexed.mix``) streams per (corpus, length
bucket), so a rank draws single sequences from everywhere: no use for whole files per rank. Here
each corpus streams *files*:

- **Streams.** Corpus c's files (its range of the source's files, those holding admitted
  sequences) form an endless stream of corpus epochs: corpus epoch ``k`` (0-based) is the files
  in a keyed random order (keyed by seed, corpus name and k), each file's admitted sequences in
  stored order. Stream position ``p`` is corpus epoch ``p // N_c``, and within it a file and an
  offset in that file (``N_c``: the corpus' admitted sequences).
- **Selection.** Full epoch ``f`` (0-based) takes corpus c's positions
  ``[floor(f·r·N_c), floor((f+1)·r·N_c))`` (``stream_span``: the global mix's rule, exact
  integers on the rate as written). So every corpus gives every epoch exactly the count the
  global mix gives, and the contract is the global mix's: per corpus, every admitted sequence
  exactly once per corpus epoch (a corpus epoch the span covers only in part: as many uses as
  the span covers, none twice; ``MixPlan.check``).
- **Pieces.** The span cut at corpus-epoch and file boundaries gives *pieces*: (file, offsets
  ``[lo, hi)`` of its admitted sequences, corpus epoch). All but at most two per corpus epoch
  touched are whole files, whose per-bucket counts and frames are the index's per-file table;
  a partial piece is counted from its own sequences (at most two files per corpus and epoch).
- **Sub-epochs and ranks.** The full epoch's pieces (all corpora) are shuffled (keyed by the
  full epoch) and cut into ``partition_epoch`` sub-epochs of about equal frames; a sub-epoch's
  pieces go to ranks by LPT on frames and are planned like unmixed files
  (``seqloader.plan.indexed.files``): a slot carries ``use * n + sequence`` through the segment
  machinery, decoded into (sequence, corpus epoch) in the rank's batches.

- **``epoch_wise_filter``** (``wise``): in the epochs of a filter's range each sub-epoch's slots
  are filtered once, as one set (``files_mix_filter``: a mask over its slot positions, the same
  on every rank and world size); a filtered slot is lost for its sub-epoch, the streams move on
  as without the filter, and ``check``, ``select``, ``listed_slots`` and ``corpus_slots`` count
  the kept slots.

Cost: O(pieces) per full epoch, plus the partial pieces' files; a rank draws only its own
pieces' sequences (a filtered sub-epoch: its slots listed once, O(n / P)). ``select``,
``members`` and ``check`` are O(n) (for checks and tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import epoch_filters
from seqloader.plan.bounds import check_mix_slots
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.files import cut_parts
from seqloader.plan.indexed.files_filter import EpochKept
from seqloader.plan.indexed.files_mix_filter import slots_kept
from seqloader.plan.indexed.mix_filter import MixFilter
from seqloader.plan.mix import (
    USES_DTYPE,
    Corpora,
    CorpusProgress,
    MixPlan,
    Selection,
    corpus_seed_word,
    progress,
    refuse_empty_corpora,
    resolve_rates,
    stream_span,
)
from seqloader.plan.mix_check import MixCheck
from seqloader.plan.seeding import PURPOSE_INDEXED_FILES_MIX, rng_for

_SHUFFLE, _STREAM = 0, 1  # the two kinds of draw under PURPOSE_INDEXED_FILES_MIX


@dataclass(frozen=True)
class Pieces:
    """File pieces, all int64 ``[m]``: the file, its admitted sequences' offsets ``[lo, hi)``
    within the file, the corpus epoch (0-based) they are used in, the corpus, the frames (sum of
    the length key's lengths)."""

    file: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    use: np.ndarray
    corpus: np.ndarray
    frames: np.ndarray

    def take(self, idx: np.ndarray | slice) -> Pieces:
        return Pieces(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    @property
    def count(self) -> np.ndarray:
        return self.hi - self.lo

    def __len__(self) -> int:
        return len(self.file)


class FilesMix:
    """The mix of an indexed ``files`` planner (see the module doc).

    >>> files = np.array([0, 2, 5, 6, 9])  # four files; corpus a: files 0-1, b: files 2-3
    >>> lengths = np.array([3, 4, 5, 6, 7, 8, 9, 2, 1])
    >>> counts, frames = np.diff(files), np.add.reduceat(lengths, files[:-1])
    >>> mix = FilesMix(0, {"a": 0.4, "b": 2}, Corpora(("a", "b"), np.array([0, 5, 9])),
    ...                files, counts, frames, lengths)
    >>> mix.epoch_counts(0), mix.epoch_counts(1)  # floor(0.4 * 5) = 2, then 4 - 2; b: 2 * 4
    ((2, 8), (2, 8))
    >>> sel = mix.select(0)
    >>> sorted(sel.seqs[sel.seqs >= 5].tolist())  # b twice, once per corpus epoch
    [5, 5, 6, 6, 7, 7, 8, 8]
    """

    def __init__(
        self,
        seed: int,
        mix: Mapping[str, float | Fraction | str],
        corpora: Corpora,
        files: np.ndarray,
        file_counts: np.ndarray,
        file_frames: np.ndarray,
        lengths: np.ndarray,
        admits: Callable[[np.ndarray], np.ndarray | None] | None = None,
        origin: str = "",
        wise: MixFilter | None = None,
        by: np.ndarray | None = None,
    ) -> None:
        """``admits``: which of the given sequences are admitted (bool, or None: all; None: no
        filter), read per file piece, so no mask of every sequence is made for it. ``wise``:
        ``epoch_wise_filter`` on the sub-epochs' slots, keeping the shortest by ``by`` (per
        sequence; None: ``lengths``)."""
        self.seed, self.corpora, self._mix = seed, corpora, dict(mix)
        self.wise, self._by = wise, lengths if by is None else by
        self._kept: tuple[tuple[int, int], EpochKept | None] | None = None
        self.rates = resolve_rates(mix, corpora)
        self.files = np.asarray(files, dtype=np.int64)
        self.file_counts = np.asarray(file_counts, dtype=np.int64)
        self.file_frames = np.asarray(file_frames, dtype=np.int64)
        self._lengths, self._admits = lengths, admits
        at = np.searchsorted(self.files, corpora.bounds)  # [C + 1] first file of each corpus
        at = np.minimum(at, len(self.files) - 1)
        if not np.array_equal(self.files[at], corpora.bounds):
            bad = int(np.flatnonzero(self.files[at] != corpora.bounds)[0])
            names = corpora.names[max(bad - 1, 0) : bad + 1]
            raise OptionError(
                f"mix with distribution='files': in {origin or 'the source'} corpora "
                f"{' and '.join(map(repr, names))} meet inside a file (at sequence "
                f"{int(corpora.bounds[bad])}), so a file would belong to two corpora. Fix: give "
                "every corpus its own files (seqloader.ConcatSource does), or use "
                "distribution='shard'"
            )
        self._file_range = at  # corpus c: files [at[c], at[c + 1])
        self._words = [corpus_seed_word(name) for name in corpora.names]
        self._nonempty = [
            np.flatnonzero(self.file_counts[at[c] : at[c + 1]] > 0).astype(np.int64) + at[c]
            for c in range(len(corpora.names))
        ]
        refuse_empty_corpora(corpora, self.sizes)
        check_mix_slots(corpora.names, self.rates, self.sizes)
        self._orders: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._epoch: tuple[int, Pieces, np.ndarray] | None = None  # shuffled, part starts

    @property
    def sizes(self) -> tuple[int, ...]:
        """Admitted sequences per corpus."""
        return tuple(int(self.file_counts[f].sum()) for f in self._nonempty)

    # ---- streams and pieces ----
    def _order(self, c: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Corpus c's epoch k: its files in stream order and their cumulative admitted counts
        (int64 ``[F_c]``, ``[F_c + 1]``); the last few kept."""
        got = self._orders.get((c, k))
        if got is None:
            own = self._nonempty[c]
            perm = rng_for(self.seed, PURPOSE_INDEXED_FILES_MIX, _STREAM, self._words[c], k)
            order = own[perm.permutation(len(own))]
            cum = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(self.file_counts[order], out=cum[1:])
            if len(self._orders) >= 4 * len(self._words):
                self._orders.clear()
            got = self._orders[(c, k)] = (order, cum)
        return got

    def pieces(self, full_epoch: int) -> Pieces:
        """Full epoch ``full_epoch``'s pieces, corpus after corpus, in stream order."""
        parts: list[tuple[np.ndarray, ...]] = []
        for c, (rate, n) in enumerate(zip(self.rates, self.sizes)):
            a, b = stream_span(full_epoch, rate, n)
            for k in range(a // n, (b - 1) // n + 1 if b > a else a // n):
                t0, t1 = max(a, k * n) - k * n, min(b, (k + 1) * n) - k * n
                order, cum = self._order(c, k)
                i0 = int(np.searchsorted(cum, t0, side="right")) - 1
                i1 = int(np.searchsorted(cum, t1, side="left"))
                file = order[i0:i1]
                lo = np.maximum(t0 - cum[i0:i1], 0)
                hi = np.minimum(t1 - cum[i0:i1], self.file_counts[file])
                full = np.full(len(file), k, dtype=np.int64)
                parts.append((file, lo, hi, full, np.full(len(file), c, dtype=np.int64)))
        cols = [np.concatenate(x) if parts else np.zeros(0, np.int64) for x in zip(*parts)]
        if not parts:
            cols = [np.zeros(0, np.int64)] * 5
        file, lo, hi, use, corpus = cols
        frames = self.file_frames[file].copy()
        partial = np.flatnonzero((lo > 0) | (hi < self.file_counts[file]))
        if len(partial):
            some = Pieces(file[partial], lo[partial], hi[partial], use[partial],
                          corpus[partial], frames[partial])  # fmt: skip
            seqs, _, pid = self.slots(some)
            lens = np.asarray(self._lengths[seqs], dtype=np.float64)
            frames[partial] = np.bincount(pid, weights=lens, minlength=len(partial)).astype(
                np.int64
            )
        return Pieces(file, lo, hi, use, corpus, frames)

    def sub_epoch(self, full_epoch: int, part: int, parts: int) -> Pieces:
        """Sub-epoch ``part`` of ``parts``: its pieces, in the full epoch's keyed shuffle, cut
        by frames (``cut_parts``; the full epoch kept)."""
        if self._epoch is None or self._epoch[0] != full_epoch:
            every = self.pieces(full_epoch)
            rng = rng_for(self.seed, PURPOSE_INDEXED_FILES_MIX, _SHUFFLE, full_epoch)
            shuffled = every.take(rng.permutation(len(every)))
            self._epoch = (full_epoch, shuffled, cut_parts(shuffled.frames, parts))
        _, shuffled, starts = self._epoch
        return shuffled.take(slice(int(starts[part]), int(starts[part + 1])))

    def slots(self, pieces: Pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequence, corpus epoch, piece) of every slot of ``pieces``, piece after piece, a
        piece's sequences in stored order -> int64 each. Reads the pieces' files' mask only."""
        lo_s, hi_s = self.files[pieces.file], self.files[pieces.file + 1]
        sizes = hi_s - lo_s
        seqs = np.repeat(lo_s - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        pid = np.repeat(np.arange(len(pieces), dtype=np.int64), sizes)
        admitted = None if self._admits is None else self._admits(seqs)
        if admitted is not None:
            seqs, pid = seqs[admitted], pid[admitted]
        held = np.bincount(pid, minlength=len(pieces))
        off = np.arange(len(seqs), dtype=np.int64) - np.repeat(np.cumsum(held) - held, held)
        keep = (off >= pieces.lo[pid]) & (off < pieces.hi[pid])
        seqs, pid = seqs[keep].astype(np.int64), pid[keep]
        return seqs, pieces.use[pid], pid

    # ---- what the indexed planner asks (``MixKind``) ----
    def bucket_counts(self, ep: EpochIndex, parts: int) -> None:
        """None: the files distribution counts a sub-epoch's pieces per rank and bucket."""
        return None

    def bucket_draw(self, ep: EpochIndex, parts: int) -> None:
        """None: the files distribution draws a rank's units of its pieces."""
        return None

    def random_cut(self, ep: EpochIndex, parts: int, *cutting: object) -> None:
        """None: the files distribution plans a mix over files (fixed and random orders: not
        the planner's cuts)."""
        return None

    def fixed_cut(self, ep: EpochIndex, parts: int, *cutting: object) -> None:
        """None: as ``random_cut``."""
        return None

    # ---- epoch_wise_filter (``files_mix_filter``) ----
    def kept(self, ep: EpochIndex, parts: int) -> EpochKept | None:
        """``epoch_wise_filter`` on sub-epoch ``ep``'s slots: the one kept set (a mask over its
        slot positions, piece after piece), for every rank and world size; None where no filter
        applies (kept for the last sub-epoch asked)."""
        if self.wise is None or not epoch_filters(self.wise.spec, ep.epoch):
            return None
        key = (ep.epoch, parts)
        cached = self._kept  # read once: the plan-ahead thread may replace it meanwhile
        if cached is not None and cached[0] == key:
            return cached[1]
        seqs, uses, _ = self.slots(self.sub_epoch(ep.full_epoch, ep.part, parts))
        kept = slots_kept(self.wise.spec, ep.epoch, seqs, uses, self._by)
        self._kept = (key, kept)
        return kept

    def filtered_reasons(self, ep: EpochIndex, parts: int) -> dict[str, int]:
        """What ``epoch_wise_filter`` left out of sub-epoch ``ep``, by the report's reasons."""
        kept = self.kept(ep, parts)
        return dict(kept.reasons) if kept is not None else {}

    def left_out(self, full_epoch: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch int64) of every slot ``epoch_wise_filter`` left out of full
        epoch ``full_epoch``'s sub-epochs (O(n): for checks)."""
        seqs, uses = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for part in range(parts):
            ep = EpochIndex(full_epoch * parts + part + 1, parts)
            kept = self.kept(ep, parts)
            if kept is not None:
                s, k, _ = self.slots(self.sub_epoch(full_epoch, part, parts))
                seqs.append(s[~kept.mask])
                uses.append(k[~kept.mask])
        return np.concatenate(seqs), np.concatenate(uses)

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot of sub-epoch ``ep``: its pieces' slots, piece
        after piece, those ``epoch_wise_filter`` keeps (O(n): for checks)."""
        seqs, uses, _ = self.slots(self.sub_epoch(ep.full_epoch, ep.part, parts))
        kept = self.kept(ep, parts)
        if kept is not None:
            seqs, uses = seqs[kept.mask], uses[kept.mask]
        return seqs, uses.astype(USES_DTYPE)

    def corpus_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, list[CorpusProgress]]:
        """(slots per corpus in sub-epoch ``ep`` -> int64 ``[C]``, every corpus' progress at the
        sub-epoch's end): from the pieces' counts of the full epoch's sub-epochs up to it."""
        first = ep.full_epoch * parts + 1
        per = np.zeros(len(self.rates), dtype=np.int64)
        for e in range(first, ep.epoch + 1):
            pieces = self.sub_epoch(ep.full_epoch, EpochIndex(e, parts).part, parts)
            here = np.bincount(pieces.corpus, weights=pieces.count, minlength=len(self.rates))
            per += here.astype(np.int64)
        here = here.astype(np.int64)
        kept = self.kept(ep, parts)  # the streams move on; the sub-epoch counts its kept slots
        if kept is not None:
            seqs = self.listed_slots(ep, parts)[0]
            here = np.bincount(self.corpora.corpus_of(seqs), minlength=len(self.rates))
        return here.astype(np.int64), self.progress(ep.full_epoch, per)

    # ---- what EpochMix asks ----
    def epoch_counts(self, full_epoch: int) -> tuple[int, ...]:
        """Slots per corpus in full epoch ``full_epoch`` (0-based): the global mix's counts."""
        spans = (stream_span(full_epoch, r, n) for r, n in zip(self.rates, self.sizes))
        return tuple(b - a for a, b in spans)

    def progress(self, full_epoch: int, used: Sequence[int] | np.ndarray) -> list[CorpusProgress]:
        """Every corpus' progress after ``used[c]`` of its slots of full epoch ``full_epoch``."""
        return [
            progress(name, rate, n, stream_span(full_epoch, rate, n)[0], int(u))
            for name, rate, n, u in zip(self.corpora.names, self.rates, self.sizes, used)
        ]

    def select(self, full_epoch: int) -> Selection:
        """The whole full epoch in canonical order (ascending sequence, a sequence's uses in
        corpus epoch order): O(n), for checks and tests. With ``epoch_wise_filter``: the slots
        its sub-epochs keep (the spans stay the streams')."""
        seqs, uses, _ = self.slots(self.pieces(full_epoch))
        if self.wise is not None:
            seqs, uses = _without(seqs, uses, *self.left_out(full_epoch, self.wise.parts))
        order = np.lexsort((uses, seqs))
        spans = tuple(stream_span(full_epoch, r, n) for r, n in zip(self.rates, self.sizes))
        return Selection(seqs[order], uses[order].astype(USES_DTYPE), spans)

    @property
    def members(self) -> list[np.ndarray]:
        """Per corpus its admitted sequences, ascending (O(n): for stats and checks)."""
        out = []
        for c in range(len(self.corpora.names)):
            a, b = (int(x) for x in self.corpora.bounds[c : c + 2])
            seqs = np.arange(a, b, dtype=np.int64)
            admitted = None if self._admits is None else self._admits(seqs)
            out.append(seqs if admitted is None else seqs[admitted])
        return out

    def check(self, full_epochs: Sequence[int], seqs: np.ndarray, uses: np.ndarray) -> MixCheck:
        """Per corpus, every admitted sequence exactly once per corpus epoch over the complete
        consecutive ``full_epochs``: the global mix's check, on the same spans and members, less
        the slots ``epoch_wise_filter`` left out (none of which may be used: the check counts
        them as used, so a kept slot lost or used twice is still found)."""
        admitted = np.concatenate(self.members)
        global_mix = MixPlan(self.seed, self._mix, self.corpora, admitted)
        if self.wise is None:
            return global_mix.check(full_epochs, seqs, uses)
        gone = [self.left_out(f, self.wise.parts) for f in sorted(set(map(int, full_epochs)))]
        gone_s = np.concatenate([s for s, _ in gone])
        gone_k = np.concatenate([k for _, k in gone])
        seqs, uses = np.asarray(seqs, dtype=np.int64), np.asarray(uses, dtype=np.int64)
        used = len(seqs) - len(_without(seqs, uses, gone_s, gone_k)[0])
        check = global_mix.check(full_epochs, np.r_[seqs, gone_s], np.r_[uses, gone_k])
        gone_c = np.bincount(self.corpora.corpus_of(gone_s), minlength=len(self.rates))
        corpora = tuple(  # the slots delivered, not the filtered ones counted in
            replace(c, used=c.used - int(g)) for c, g in zip(check.corpora, gone_c, strict=True)
        )
        problems = list(check.problems)
        if used:
            problems.append(f"{used} uses of slots epoch_wise_filter left out of their sub-epoch")
        return MixCheck(corpora, problems)


def _without(
    seqs: np.ndarray, uses: np.ndarray, gone_s: np.ndarray, gone_k: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The slots (``seqs``, ``uses``) that are not among (``gone_s``, ``gone_k``)."""
    n = int(max(np.max(seqs, initial=0), np.max(gone_s, initial=0))) + 1
    key = np.asarray(uses, dtype=np.int64) * n + seqs
    out = np.isin(key, np.asarray(gone_k, dtype=np.int64) * n + gone_s)
    return seqs[~out], uses[~out]
