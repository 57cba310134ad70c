"""Weighted mixing of named corpora under indexed planning (``mix`` with ``planning="indexed"``).

Global mixing (``seqloader.plan.mix``) selects a full epoch's sequences from one stream per corpus
and orders the selection: O(n) on every rank. Indexed planning plans from per-bucket counts and
draws only a rank's own members, so here the streams are per *(corpus c, length bucket b)*:

- **Streams.** The ``N_cb`` admitted members of corpus c in bucket b (a contiguous range of the
  bucket's ascending members, since corpora are contiguous index ranges: found by one
  ``searchsorted`` of the corpus bounds per bucket, no copy) form an endless stream of corpus
  epochs; corpus epoch ``k`` (0-based) is a keyed bijection of ``[0, N_cb)`` (``Bijection``, keyed
  by seed, corpus name, bucket and k): the member at any stream position is computable alone.
- **Selection.** Full epoch ``f`` (0-based) takes corpus c's stream positions
  ``[floor(f·r·N_c), floor((f+1)·r·N_c))``: the global mix's rule, in exact integer arithmetic on
  the rate as written, so every epoch takes from each corpus what the global mix takes. The
  corpus' first ``H`` positions are apportioned to its buckets by a divisor method
  (``apportion``: each bucket near its share ``H·N_cb/N_c``, never moving back, exactly
  ``k·N_cb`` at ``H = k·N_c``); bucket b's part is the next positions of the (c, b) stream.
- **Sub-epochs.** Each (c, b) epoch segment is cut into ``partition_epoch`` parts by RETURNN's rule
  (the first ``len % P`` parts one longer). Sub-epoch i's list of bucket b is the concatenation over
  corpora of their part i, permuted by a keyed bijection over its size (keyed by seed, full
  epoch, part and bucket) so corpora interleave in batches. Histogram batching and the
  ``BatchTable`` work on the per-bucket counts unchanged.
- **A slot alone.** Position p of bucket b's sub-epoch list: the bijection gives its place in the
  concatenation, a ``searchsorted`` on the per-corpus cumulative counts its corpus, then the
  stream position, hence corpus epoch ``k`` (the slot's ``uses`` value) and the member. A corpus
  epoch the sub-epoch takes whole is every member of the stream, so its stream order is not drawn
  (member ``t`` at stream offset ``t``: the bucket's bijection orders the slots); one it takes
  in part (``partition_epoch``, a rate that is no whole number) is drawn by the stream's
  bijection, so its parts are keyed random subsets (``seqloader-plan-indexed/10``; the listing of
  ``mix_cuts.part_slots`` reads whole corpus epochs the same way).

Per-corpus counts of any sub-epoch, the corpus progress and the check's expectations follow from
the ``[N, C]`` count tables alone; nothing here is O(n) except ``select``, ``members`` and ``check``
(for checks, stats and tests).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from seqloader.plan.bounds import check_mix_slots
from seqloader.plan.epochs import EpochIndex, part_cut
from seqloader.plan.indexed.bijection import BIG, Bijection, evaluate_many
from seqloader.plan.indexed.histogram import BucketIndex
from seqloader.plan.indexed.mix_filter import MixFilter, MixKept, mix_kept
from seqloader.plan.mix import (
    USES_DTYPE,
    Corpora,
    CorpusProgress,
    Selection,
    corpus_seed_word,
    progress,
    refuse_empty_corpora,
    resolve_rates,
)
from seqloader.plan.mix_check import CorpusEpochs, MixCheck
from seqloader.plan.ordering import unique_sorted
from seqloader.plan.seeding import PURPOSE_INDEXED_MIX, PURPOSE_INDEXED_MIX_ORDER

if TYPE_CHECKING:
    from seqloader.plan.indexed.plan import Draw

_Cache = dict[tuple[int, int, int], Bijection]


def corpus_offsets(index: BucketIndex, bounds: np.ndarray) -> np.ndarray:
    """Where each corpus' members start within each bucket -> int64 ``[N, C + 1]`` (row b: offsets
    into ``index.bucket(b)``; corpus c is ``[row[c], row[c + 1])``). One ``searchsorted`` per
    bucket over its ascending members, in their own dtype (no copy of a memory-mapped index)."""
    n_buckets = len(index.starts) - 1
    members = index.members
    cut = np.asarray(bounds, dtype=np.int64)
    if np.issubdtype(members.dtype, np.unsignedinteger):  # bounds <= n fit the index dtype
        cut = cut.astype(members.dtype)
    out = np.zeros((n_buckets, len(bounds)), dtype=np.int64)
    for b in range(n_buckets):
        lo, hi = int(index.starts[b]), int(index.starts[b + 1])
        out[b] = np.searchsorted(members[lo:hi], cut)
    return out


def apportion(total: int, sizes: Sequence[int]) -> list[int]:
    """A corpus' first ``total`` stream positions over its buckets (``sizes``: ``N_cb``) -> how
    many each bucket has given. The Sainte-Laguë divisor method: position ``j`` (0-based) of
    bucket b comes at time ``(j + 1/2) / N_cb``; the first ``total`` in time order (ties: the
    lower bucket first). So the count grows one at a time (never back: a bucket's stream only
    moves on), every bucket stays near its share ``total·N_cb/N_c``, and ``total = k·N_c`` gives
    exactly ``k·N_cb`` per bucket. O(B log B): every position up to time ``total/N_c``, then at
    most about B/2 added or taken back.

    >>> apportion(5, [4, 2, 0, 4]), apportion(10, [4, 2, 0, 4]), apportion(20, [4, 2, 0, 4])
    ([2, 1, 0, 2], [4, 2, 0, 4], [8, 4, 0, 8])
    """
    n_all = sum(sizes)
    if n_all == 0:
        return [0] * len(sizes)
    seats = [(2 * total * n + n_all) // (2 * n_all) for n in sizes]  # times <= total / n_all
    excess = sum(seats) - total
    if excess > 0:  # take back the latest: the largest time, ties the higher bucket
        late = [_time(1 - 2 * a, 2 * n, -b) for b, (a, n) in enumerate(zip(seats, sizes)) if a]
        heapq.heapify(late)
        for _ in range(excess):
            b = -heapq.heappop(late)[2]
            seats[b] -= 1
            if seats[b]:
                heapq.heappush(late, _time(1 - 2 * seats[b], 2 * sizes[b], -b))
    elif excess < 0:  # add the next: the smallest time, ties the lower bucket
        nxt = [_time(2 * a + 1, 2 * n, b) for b, (a, n) in enumerate(zip(seats, sizes)) if n]
        heapq.heapify(nxt)
        for _ in range(-excess):
            b = heapq.heappop(nxt)[2]
            seats[b] += 1
            heapq.heappush(nxt, _time(2 * seats[b] + 1, 2 * sizes[b], b))
    return seats


class _Ratio:
    """``p / q`` (``q > 0``) compared exactly, by cross-multiplying: the tie-break of ``_time``."""

    __slots__ = ("p", "q")

    def __init__(self, p: int, q: int) -> None:
        self.p, self.q = p, q

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ratio) and self.p * other.q == other.p * self.q

    def __lt__(self, other: _Ratio) -> bool:
        return self.p * other.q < other.p * self.q

    __hash__ = None  # type: ignore[assignment]


def _time(p: int, q: int, b: int) -> tuple[float, _Ratio, int]:
    """The heap key of time ``p / q`` and bucket ``b``: ordered as ``(Fraction(p, q), b)``.
    Python's ``p / q`` is correctly rounded and rounding is monotone, so unequal floats order
    as the exact times do; equal ones fall to the exact ``_Ratio`` (no ``Fraction`` per seat:
    thousands of buckets, a sorted index's, cost milliseconds each)."""
    return (p / q, _Ratio(p, q), b)


class IndexedMix:
    """The mix of an indexed planner: per (bucket, corpus) streams over a ``BucketIndex``.

    >>> from seqloader.plan.indexed.histogram import build_bucket_index
    >>> lengths = np.array([3, 9, 4, 8, 2, 7, 5])
    >>> index = build_bucket_index(lengths, np.array([6]))  # two buckets: < 6, >= 6
    >>> corpora = Corpora(("a", "b"), np.array([0, 4, 7]))
    >>> mix = IndexedMix(0, {"a": 0.5, "b": 2}, corpora, index, lengths)
    >>> mix.counts.tolist()  # admitted members per (bucket, corpus)
    [[2, 2], [2, 1]]
    >>> mix.epoch_counts(0)  # floor(r * N_cb) per bucket, summed per corpus
    (2, 6)
    """

    def __init__(
        self,
        seed: int,
        mix: Mapping[str, float | Fraction | str],
        corpora: Corpora,
        index: BucketIndex,
        lengths: np.ndarray,
        admits: Callable[[np.ndarray], np.ndarray | None] | None = None,
        wise: MixFilter | None = None,
    ) -> None:
        """``admits``: which of the given sequences are admitted (bool, or None: all; None: no
        filter; ``AdmittedCorpus.admits``), read by ``check`` alone. ``wise``:
        ``epoch_wise_filter`` on the sub-epochs' slots (``mix_filter``; ``laplace``,
        ``buckets:N``: the counts and draws the planner asks are the kept ones)."""
        self.seed, self.corpora, self.index = seed, corpora, index
        self.rates = resolve_rates(mix, corpora)
        self.offsets = corpus_offsets(index, corpora.bounds)  # [N, C + 1]
        self.counts = np.diff(self.offsets, axis=1)  # [N, C] N_cb
        self._lengths, self._admits = lengths, admits
        self._words = [corpus_seed_word(name) for name in corpora.names]
        refuse_empty_corpora(corpora, self.sizes)
        check_mix_slots(corpora.names, self.rates, self.sizes)
        self._last: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None
        self.wise = wise
        self._kept: tuple[int, MixKept | None] | None = None  # the last filtered sub-epoch asked

    @property
    def sizes(self) -> tuple[int, ...]:
        """Admitted sequences per corpus."""
        return tuple(int(s) for s in self.counts.sum(axis=0))

    # ---- counts ----
    def spans(self, full_epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Stream positions ``[start, end)`` full epoch ``full_epoch`` (0-based) takes from every
        (bucket, corpus) stream -> int64 ``[N, C]`` each: corpus c's ``floor(f·r·N_c)`` positions
        (exact integers) apportioned to its buckets (``apportion``)."""
        if self._last is not None and self._last[0] == full_epoch:
            return self._last[1]
        f = int(full_epoch)
        start = np.zeros(self.counts.shape, dtype=np.int64)
        end = np.zeros(self.counts.shape, dtype=np.int64)
        for c, rate in enumerate(self.rates):
            p, q = rate.numerator, rate.denominator
            sizes = self.counts[:, c].tolist()
            total = sum(sizes)
            start[:, c] = apportion(f * p * total // q, sizes)
            end[:, c] = apportion((f + 1) * p * total // q, sizes)
        self._last = (full_epoch, (start, end))
        return start, end

    def part(self, full_epoch: int, part: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """Sub-epoch ``part`` of ``parts``: (first stream position, slots) per (bucket, corpus)
        -> int64 ``[N, C]`` each; every (bucket, corpus) segment cut by RETURNN's rule."""
        start, end = self.spans(full_epoch)
        lo, count = part_cut(end - start, parts, part)
        return start + lo, count

    def epoch_counts(self, full_epoch: int) -> tuple[int, ...]:
        """Slots per corpus in full epoch ``full_epoch`` (0-based), from counts."""
        start, end = self.spans(full_epoch)
        return tuple(int(x) for x in (end - start).sum(axis=0))

    def progress(self, full_epoch: int, used: Sequence[int] | np.ndarray) -> list[CorpusProgress]:
        """Every corpus' progress after ``used[c]`` of its slots of full epoch ``full_epoch``
        (stream positions summed over buckets: exact at a full epoch's end)."""
        start, _ = self.spans(full_epoch)
        first = start.sum(axis=0)
        return [
            progress(name, rate, n, int(a), int(u))
            for name, rate, n, a, u in zip(self.corpora.names, self.rates, self.sizes, first, used)
        ]

    # ---- what the indexed planner asks (``MixKind``) ----
    def bucket_counts(self, ep: EpochIndex, parts: int) -> np.ndarray:
        """Slots per bucket of sub-epoch ``ep`` -> int64 ``[N]``: every (bucket, corpus)
        segment cut on its own (filtered: the kept slots)."""
        kept = self.kept(ep, parts)
        if kept is not None:
            return kept.counts
        return self.part(ep.full_epoch, ep.part, parts)[1].sum(axis=1)

    def bucket_draw(self, ep: EpochIndex, parts: int) -> Draw:
        """The slots of sub-epoch ``ep`` per bucket position (``draw``; filtered: the kept)."""
        kept = self.kept(ep, parts)
        if kept is not None:
            return kept.draw
        return self.draw(ep.full_epoch, ep.part, parts)

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        """``epoch_wise_filter`` on sub-epoch ``ep``'s slots (``mix_filter``), None where none
        applies; kept for the last sub-epoch asked (counts and draw ask alike)."""
        return self.kept_once(ep, lambda: self.listed_kept(ep, parts))

    def listed_kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        """``kept``'s kept set, made (not kept): the buckets cut, listed (``mix_kept``)."""
        assert self.wise is not None
        count = self.part(ep.full_epoch, ep.part, parts)[1].sum(axis=1)
        draw = self.draw(ep.full_epoch, ep.part, parts)
        return mix_kept(self.wise.spec, ep, count, draw, self.filter_by())

    def kept_once(self, ep: EpochIndex, make: Callable[[], MixKept | None]) -> MixKept | None:
        """The kept set ``make()`` makes of sub-epoch ``ep`` (None: no filter applies), kept for
        the last sub-epoch asked (counts, draw, cuts and the report ask alike); None unfiltered."""
        if self.wise is None:
            return None
        last = self._kept
        if last is None or last[0] != ep.epoch:
            last = self._kept = (ep.epoch, make())
        return last[1]

    def filter_by(self) -> np.ndarray:
        """What ``epoch_wise_filter`` keeps the shortest by, per sequence (``MixFilter.by``: a
        source's own sort key, or the length key where the mix streams over its classes'
        values; else the mix's lengths)."""
        by = None if self.wise is None else self.wise.by
        return self._lengths if by is None else by

    def filtered_reasons(self, ep: EpochIndex, parts: int) -> dict[str, int]:
        """What ``epoch_wise_filter`` left out of sub-epoch ``ep``, by the report's reasons."""
        kept = self.kept(ep, parts)
        return dict(kept.reasons) if kept is not None else {}

    def left_out(self, full_epoch: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot ``epoch_wise_filter`` left out of full epoch
        ``full_epoch``'s sub-epochs (O(slots of the buckets cut): for checks)."""
        seqs, uses = [np.zeros(0, np.int64)], [np.zeros(0, USES_DTYPE)]
        for part in range(parts):
            kept = self.kept(EpochIndex(full_epoch * parts + part + 1, parts), parts)
            if kept is not None:
                s, k = kept.left_out()
                seqs.append(s)
                uses.append(k)
        return np.concatenate(seqs), np.concatenate(uses)

    def listed_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, np.ndarray] | None:
        """None: a sub-epoch's slots are listed from the plan's batches (the keyed order of a
        bucket's slots is the plan's)."""
        return None

    def corpus_slots(self, ep: EpochIndex, parts: int) -> tuple[np.ndarray, list[CorpusProgress]]:
        """(slots per corpus in sub-epoch ``ep`` -> int64 ``[C]``, every corpus' progress at the
        sub-epoch's end: its stream positions up to there, summed over buckets)."""
        lo, count = self.part(ep.full_epoch, ep.part, parts)
        start, _ = self.spans(ep.full_epoch)
        here = count.sum(axis=0) - self._left_per_corpus(ep, parts, count)
        return here, self.progress(ep.full_epoch, (lo + count - start).sum(axis=0))

    def _left_per_corpus(self, ep: EpochIndex, parts: int, count: np.ndarray) -> np.ndarray:
        """Slots per corpus ``epoch_wise_filter`` left out of sub-epoch ``ep`` -> int64 ``[C]``
        (``count``: the sub-epoch's ``[N, C]``): the buckets dropped whole from the counts, the
        one cut inside from its kept slots. The streams' positions move on as without it."""
        out = np.zeros(count.shape[1], dtype=np.int64)
        kept = self.kept(ep, parts)
        if kept is None:
            return out
        for b in np.flatnonzero(kept.counts < kept.full).tolist():
            k = int(kept.counts[b])
            pos = np.arange(k, dtype=np.int64)
            seqs = kept.draw.slots(np.full(k, b, dtype=np.int64), pos)[0]
            here = np.bincount(self.corpora.corpus_of(seqs), minlength=count.shape[1])
            out += count[b] - here
        return out

    # ---- members ----
    def draw(self, full_epoch: int, part: int, parts: int) -> MixDraw:
        """The slots of sub-epoch ``part`` of full epoch ``full_epoch``, per bucket position."""
        lo, count = self.part(full_epoch, part, parts)
        return MixDraw(self, lo, count, (self.seed, PURPOSE_INDEXED_MIX_ORDER, full_epoch, part))

    def stream_words(self, b: int, c: int, k: int) -> tuple[int, ...]:
        """The key of corpus epoch ``k`` of the (corpus ``c``, bucket ``b``) stream's bijection."""
        return (self.seed, PURPOSE_INDEXED_MIX, self._words[c], b, k)

    def stream_slots(
        self, b: int, c: int, stream: np.ndarray, cache: _Cache
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) at positions ``stream`` (int64) of the (c, b) stream."""
        n = int(self.counts[b, c])
        k = stream // n
        t = stream - k * n
        seqs = np.empty(len(stream), dtype=np.int64)
        base = int(self.index.starts[b]) + int(self.offsets[b, c])
        for kk in unique_sorted(k).tolist():  # at most ceil(rate) + 1 corpus epochs per epoch
            here = k == kk
            pi = cache.get((b, c, kk))
            if pi is None:
                pi = cache[(b, c, kk)] = Bijection(n, self.stream_words(b, c, kk))
            seqs[here] = self.index.members[base + pi(t[here]).astype(np.int64)]
        return seqs, k.astype(USES_DTYPE)

    def streams_slots(
        self, b: int, c: np.ndarray, stream: np.ndarray, taken: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) at positions ``stream`` of the (corpus ``c``, bucket ``b``)
        streams, a corpus per element: ``stream_slots``' answers, every corpus and corpus epoch's
        bijection in one vectorised pass (``evaluate_many``), not one pass each. ``taken``: the
        sub-epoch's stream positions ``[lo, end)`` of bucket ``b``'s corpora (int64 ``[2, C]``):
        a corpus epoch within them whole is read in stream order, not drawn (``MixDraw``)."""
        n = self.counts[b][c]
        k = stream // n
        t = stream - k * n
        if not len(k):
            return np.zeros(0, np.int64), k.astype(USES_DTYPE)
        if taken is not None:
            whole = (taken[0][c] <= k * n) & (taken[1][c] >= (k + 1) * n)
            if whole.any():
                seqs = np.empty(len(k), dtype=np.int64)
                base = int(self.index.starts[b]) + self.offsets[b][c]
                seqs[whole] = self.index.members[(base + t)[whole]]
                drawn = np.flatnonzero(~whole)
                seqs[drawn] = self.streams_slots(b, c[drawn], stream[drawn])[0]
                return seqs, k.astype(USES_DTYPE)
        first = int(k.min())
        span = int(k.max()) - first + 1
        dense = c * span + (k - first)  # (corpus, corpus epoch) of each slot
        present = np.flatnonzero(np.bincount(dense, minlength=len(self.rates) * span))
        which = np.zeros(len(self.rates) * span, dtype=np.int64)
        which[present] = np.arange(len(present))
        groups = [divmod(int(g), span) for g in present]
        sizes = [int(self.counts[b, cc]) for cc, _ in groups]
        words = [self.stream_words(b, cc, first + kk) for cc, kk in groups]
        drawn = evaluate_many(sizes, words, which[dense], t).astype(np.int64)
        base = int(self.index.starts[b]) + self.offsets[b][c]
        seqs = np.asarray(self.index.members[base + drawn], dtype=np.int64)
        return seqs, k.astype(USES_DTYPE)

    def select(self, full_epoch: int) -> Selection:
        """The whole full epoch in canonical order (ascending sequence, uses adjacent in corpus
        epoch order): O(n), for checks and tests. With ``epoch_wise_filter``: the slots its
        sub-epochs keep (the spans stay the streams')."""
        start, end = self.spans(full_epoch)
        cache: _Cache = {}
        seqs, uses = [np.zeros(0, np.int64)], [np.zeros(0, USES_DTYPE)]
        for b, c in zip(*np.nonzero(end > start)):
            s, u = self.stream_slots(
                int(b), int(c), np.arange(start[b, c], end[b, c], dtype=np.int64), cache
            )
            seqs.append(s)
            uses.append(u)
        all_seqs, all_uses = np.concatenate(seqs), np.concatenate(uses)
        if self.wise is not None:
            gone_seqs, gone_uses = self.left_out(full_epoch, self.wise.parts)
            n = int(self.corpora.bounds[-1]) + 1
            gone = np.isin(
                all_uses.astype(np.int64) * n + all_seqs, gone_uses.astype(np.int64) * n + gone_seqs
            )
            all_seqs, all_uses = all_seqs[~gone], all_uses[~gone]
        order = np.lexsort((all_uses, all_seqs))
        spans = tuple(
            (int(a), int(e)) for a, e in zip(start.sum(axis=0), end.sum(axis=0), strict=True)
        )
        return Selection(all_seqs[order], all_uses[order], spans)

    @property
    def members(self) -> list[np.ndarray]:
        """Per corpus its admitted sequences, ascending (O(n): for stats and checks)."""
        out = []
        for c in range(len(self.corpora.names)):
            parts = [
                self.index.members[
                    int(self.index.starts[b]) + int(self.offsets[b, c]) : int(self.index.starts[b])
                    + int(self.offsets[b, c + 1])
                ]
                for b in range(len(self.counts))
            ]
            out.append(np.sort(np.concatenate(parts).astype(np.int64)))
        return out

    def bucket_of(self, seqs: np.ndarray) -> np.ndarray:
        """Length bucket of each sequence index -> int64."""
        lengths = np.asarray(self._lengths[np.asarray(seqs, dtype=np.int64)])
        return np.searchsorted(np.asarray(self.index.edges), lengths, side="right")

    def check(self, full_epochs: Sequence[int], seqs: np.ndarray, uses: np.ndarray) -> MixCheck:
        """Per-corpus exactly-once over the complete consecutive full epochs ``full_epochs`` from
        the real slots delivered (``seqs``, ``uses``): no (sequence, corpus epoch) pair twice, only
        admitted sequences, and per (bucket, corpus) every corpus epoch used as often as the
        covered stream positions overlap it (so a corpus epoch inside the span is complete),
        less the slots ``epoch_wise_filter`` left out (none of which may be used)."""
        fulls = sorted(set(int(f) for f in full_epochs))
        if fulls != list(range(fulls[0], fulls[0] + len(fulls))):
            raise ValueError(f"full epochs must be consecutive, got {fulls}")
        seqs = np.asarray(seqs, dtype=np.int64)
        uses = np.asarray(uses, dtype=np.int64)
        start, _ = self.spans(fulls[0])
        start = start.copy()
        _, end = self.spans(fulls[-1])
        corpus = self.corpora.corpus_of(seqs)
        bucket = self.bucket_of(seqs)
        admitted = None if self._admits is None else self._admits(seqs)
        if admitted is None:
            admitted = np.ones(len(seqs), bool)
        gone_s, gone_k = self._left_out_of(fulls)
        gone_c, gone_b = self.corpora.corpus_of(gone_s), self.bucket_of(gone_s)
        problems: list[str] = []
        out = []
        n_all = int(self.corpora.bounds[-1]) + 1
        for c, name in enumerate(self.corpora.names):
            mine, left = corpus == c, gone_c == c
            s, k, bk = seqs[mine], uses[mine], bucket[mine]
            problems += _pair_problems(name, s, k, ~admitted[mine], n_all)
            problems += _filtered_problems(name, s, k, gone_s[left], gone_k[left], n_all)
            counts, a, e = self.counts[:, c], start[:, c], end[:, c]
            bad, firsts, lasts = _stream_problems(counts, a, e, bk, k, (gone_b[left], gone_k[left]))
            if bad:
                problems.append(f"{name}: " + "; ".join(bad[:3]))
            complete = (max(firsts) + 1, min(lasts) + 1) if firsts else (1, 0)
            out.append(
                CorpusEpochs(
                    name,
                    self.sizes[c],
                    int(start[:, c].sum()),
                    int(end[:, c].sum()),
                    len(s),
                    complete,
                )
            )
        return MixCheck(tuple(out), problems)

    def _left_out_of(self, fulls: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch int64) of the slots ``epoch_wise_filter`` left out of the
        full epochs ``fulls``."""
        seqs, uses = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        wise = self.wise
        for f in fulls if wise is not None else ():
            assert wise is not None
            s, k = self.left_out(f, wise.parts)
            seqs.append(s)
            uses.append(k.astype(np.int64))
        return np.concatenate(seqs), np.concatenate(uses)


def _filtered_problems(
    name: str, s: np.ndarray, k: np.ndarray, gone_s: np.ndarray, gone_k: np.ndarray, n_all: int
) -> list[str]:
    """Corpus ``name``'s uses (``s``, ``k``) of slots ``epoch_wise_filter`` left out."""
    used = np.isin(k * n_all + s, gone_k * n_all + gone_s)
    if not used.any():
        return []
    return [
        f"{name}: {int(used.sum())} uses of slots epoch_wise_filter left out of their sub-epoch "
        f"(e.g. #{int(s[used][0])} in corpus epoch {int(k[used][0]) + 1})"
    ]


def _pair_problems(
    name: str, s: np.ndarray, k: np.ndarray, alien: np.ndarray, n_all: int
) -> list[str]:
    """Corpus ``name``'s uses (sequences ``s``, corpus epochs ``k``; ``alien``: not admitted)
    that are not its admitted sequences, or that repeat a (sequence, corpus epoch) pair."""
    problems = []
    if alien.any():
        problems.append(
            f"{name}: {int(alien.sum())} uses of sequences that are not its admitted "
            f"ones (e.g. #{int(s[alien][0])})"
        )
    pair = k * n_all + s
    uniq, times = np.unique(pair, return_counts=True)
    if (times > 1).any():
        j = int(np.flatnonzero(times > 1)[0])
        at = pair == uniq[j]
        problems.append(
            f"{name}: {int((times > 1).sum())} sequences used twice in one corpus epoch "
            f"(e.g. #{int(s[at][0])} in corpus epoch {int(k[at][0]) + 1})"
        )
    return problems


def _stream_problems(
    counts: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    bk: np.ndarray,
    k: np.ndarray,
    gone: tuple[np.ndarray, np.ndarray],
) -> tuple[list[str], list[int], list[int]]:
    """One corpus' uses per bucket (``bk``: bucket, ``k``: corpus epoch of each use) against the
    stream positions ``[start, end)`` per bucket of its ``counts`` members, less the slots
    filtered out (``gone``: their buckets and corpus epochs): (what is wrong, and per bucket with
    members the first and last corpus epoch the span covers completely)."""
    bad: list[str] = []
    firsts, lasts = [], []
    for b in range(len(counts)):
        n = int(counts[b])
        here = bk == b
        if n == 0:
            if here.any():
                bad.append(f"{int(here.sum())} uses in bucket {b}, which it has none of")
            continue
        a, e = int(start[b]), int(end[b])
        firsts.append(-(-a // n))
        lasts.append(e // n - 1)
        ks = np.arange(a // n, max(e - 1, a) // n + 1, dtype=np.int64)
        want = np.maximum(np.minimum(e, (ks + 1) * n) - np.maximum(a, ks * n), 0)
        gone_k = gone[1][gone[0] == b]
        want -= np.array([int(np.count_nonzero(gone_k == x)) for x in ks.tolist()], np.int64)
        kb = k[here]
        got = np.array([int(np.count_nonzero(kb == x)) for x in ks.tolist()], np.int64)
        outside = len(kb) - int(got.sum())
        if outside:
            bad.append(f"bucket {b}: {outside} uses of corpus epochs outside the span")
        bad.extend(
            f"bucket {b}, corpus epoch {int(x) + 1}: {int(g)} uses, expected {int(w)}"
            for x, g, w in zip(ks, got, want)
            if g != w
        )
    return bad, firsts, lasts


def _piece_of(edges: list[int], q: np.ndarray) -> np.ndarray:
    """``searchsorted(edges, q, side="right")`` (the piece of places ``q`` in a bucket's
    concatenation; ``edges`` ascending: each piece's first place but the first's): a few edges by
    one comparison each, summed as bytes (cheaper than a binary search per place), many by the
    search.

    >>> _piece_of([2, 2, 5], np.array([0, 1, 2, 4, 5])).tolist()
    [0, 0, 2, 2, 3]
    """
    if len(edges) > 16:
        return np.searchsorted(np.asarray(edges, dtype=np.int64), q, side="right")
    out = np.zeros(len(q), dtype=np.int8)
    for edge in edges:
        out += (q >= edge).view(np.int8)
    return out


class _Pieces:
    """Bucket ``b``'s concatenation of a sub-epoch's slots as pieces of one (corpus, corpus epoch)
    each: piece ``j`` holds places ``[first[j], first[j + 1])``, corpus epoch ``k[j]``; a whole
    corpus epoch's place ``q`` is member ``q + shift[j]`` of the index, a part's is drawn by its
    stream's bijection (``drawn[j]``: (corpus, stream offset of its first place))."""

    def __init__(self, draw: MixDraw, b: int) -> None:
        mix, cum = draw.mix, draw.cum[b]
        first, k, shift, drawn = [], [], [], []
        for c in np.flatnonzero(np.diff(cum)).tolist():
            n = int(mix.counts[b, c])
            base = int(mix.index.starts[b]) + int(mix.offsets[b, c])
            lo, end = int(draw.span[0, b, c]), int(draw.span[1, b, c])
            for kk in range(lo // n, (end - 1) // n + 1):
                a, e = max(lo, kk * n), min(end, (kk + 1) * n)  # stream positions of the piece
                place = int(cum[c]) + a - lo
                first.append(place)
                k.append(kk)
                shift.append(base + a - kk * n - place)
                drawn.append(None if e - a == n else (c, a - kk * n))
        self.edges = first[1:]
        self.first, self.k, self.drawn = first, np.array(k, USES_DTYPE), drawn
        self.shift = np.array(shift, dtype=np.int64)


class MixDraw:
    """The slots of one mixed sub-epoch, by (bucket, position in its list): ``slots`` gives
    (sequence index, corpus epoch) of each, computed alone (``IndexedPlan`` draws with it)."""

    def __init__(
        self, mix: IndexedMix, lo: np.ndarray, count: np.ndarray, words: tuple[int, ...]
    ) -> None:
        self.mix, self.lo = mix, lo  # [N, C] first stream position of each (bucket, corpus)
        self.cum = np.zeros((count.shape[0], count.shape[1] + 1), dtype=np.int64)
        np.cumsum(count, axis=1, out=self.cum[:, 1:])  # [N, C + 1] corpora in a bucket's list
        self.words = words
        self.span = np.stack([lo, lo + count])  # [2, N, C] the sub-epoch's stream positions
        self._orders: dict[int, Bijection] = {}
        self._streams: _Cache = {}  # the streams' bijections asked by large calls (``bucket_slots``)
        self._pieces: dict[int, _Pieces] = {}  # each bucket's pieces (large calls)

    def slots(self, bucket: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sequence indices int64, corpus epochs int32), one per (bucket, position) pair."""
        seqs = np.empty(len(pos), dtype=np.int64)
        uses = np.empty(len(pos), dtype=USES_DTYPE)
        if not len(pos):
            return seqs, uses
        by = np.argsort(bucket, kind="stable")
        for sel in np.split(by, np.flatnonzero(np.diff(bucket[by])) + 1):
            seqs[sel], uses[sel] = self.bucket_slots(int(bucket[sel[0]]), pos[sel])
        return seqs, uses

    def bucket_slots(self, b: int, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``slots`` of positions ``pos`` of bucket ``b`` alone (``random``'s cut: one bucket,
        blocks of hundreds of thousands of positions). Many positions go by the bucket's pieces
        (``_Pieces``: a whole corpus epoch's member is its place shifted, a part's is drawn by its
        stream's bijection, kept between calls: the cut asks the same few streams block after
        block; no per-position sizes or keys); a few go by
        ``streams_slots`` (one pass over the thousands of small streams a rank's share
        touches). The same bijections: the same slots either way."""
        order = self._orders.get(b)
        if order is None:
            order = self._orders[b] = Bijection(int(self.cum[b, -1]), (*self.words, b))
        return self.placed_slots(b, order(pos).astype(np.int64))

    def placed_slots(self, b: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``bucket_slots`` of places ``q`` (int64) of bucket ``b``'s concatenation of its
        corpora's parts, before the bucket's keyed order: what a pass over the sub-epoch's
        slots as a set reads (``mix_random_filter``: no bijection of the bucket's)."""
        cum = self.cum[b]
        if len(q) < BIG:
            c = np.searchsorted(cum, q, side="right") - 1
            return self.mix.streams_slots(b, c, self.lo[b, c] + (q - cum[c]), self.span[:, b])
        pieces = self._pieces.get(b)
        if pieces is None:
            pieces = self._pieces[b] = _Pieces(self, b)
        piece = _piece_of(pieces.edges, q)
        at = q + pieces.shift.take(piece)  # a whole corpus epoch's place in the index
        for j, part in enumerate(pieces.drawn):  # the parts of corpus epochs: by their streams
            if part is None:
                continue
            sel = np.flatnonzero(piece == j)
            if not len(sel):
                continue
            c, offset = part
            kk = int(pieces.k[j])
            pi = self._streams.get((b, c, kk))
            if pi is None:
                n = int(self.mix.counts[b, c])
                pi = self._streams[(b, c, kk)] = Bijection(n, self.mix.stream_words(b, c, kk))
            t = q[sel] + (offset - pieces.first[j])
            base = int(self.mix.index.starts[b]) + int(self.mix.offsets[b, c])
            at[sel] = base + pi(t).astype(np.int64)
        seqs = np.asarray(self.mix.index.members[at], dtype=np.int64)
        return seqs, pieces.k.take(piece)
