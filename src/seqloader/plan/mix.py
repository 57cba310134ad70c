"""Weighted mixing of named corpora with exact per-corpus epochs (the plan option ``mix``).

Every corpus ``c`` (``N`` admitted sequences, rate ``r`` = corpus epochs per epoch) has its own
endless *stream* of corpus epochs: corpus epoch ``k`` (0-based) is a random permutation of c's
sequences seeded by ``(seed, c's name, k)``. Full epoch ``e`` (1-based) of the mix takes the stream
positions ``[floor((e-1)·r·N), floor(e·r·N))`` — computed with exact rationals of the rate as
written (0.7 is 7/10, ``mix_rate``), so no float rounding ever moves a boundary. Hence every
sequence of c is used exactly once per corpus epoch, whatever the epoch boundaries; with ``r > 1``
one epoch spans several corpus epochs and so holds a sequence several times (once per corpus epoch
it spans).

The selection of an epoch is a *multiset* of sequence indices. It is returned in canonical order —
ascending sequence index, the uses of one sequence adjacent in corpus-epoch order — so the plan's
ordering (``default`` = as stored, ``random``, ``laplace``, ...) alone decides the order, exactly as
for an unmixed epoch. Each slot carries the corpus epoch it belongs to (``uses``): the pair
(sequence, corpus epoch) is used exactly once over the whole training, which is what per-sequence
transform RNGs are keyed by (two uses of one sequence in one epoch get different draws).

A partial corpus epoch only needs its permutation to pick *which* sequences; full corpus epochs
need no permutation at all (every sequence once), so a mix costs O(N) numpy work plus at most two
permutations per corpus and epoch. Everything here is a pure function of (seed, epoch, corpus
sizes, rates): the loader state stays O(1).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np

from seqloader.errors import OptionError
from seqloader.parts import part_of
from seqloader.plan.bounds import check_mix_slots
from seqloader.plan.mix_check import CorpusEpochs, MixCheck
from seqloader.plan.seeding import PURPOSE_MIX, rng_for
from seqloader.validate import bounds_option

USES_DTYPE = np.int32  # corpus epoch numbers (2^31 corpus epochs are far off)


@dataclass(frozen=True)
class Corpora:
    """Named corpora laid out one after another in a source's index space: corpus ``c`` holds the
    sequence indices ``[bounds[c], bounds[c + 1])`` (what ``ConcatSource`` builds)."""

    names: tuple[str, ...]
    bounds: np.ndarray  # int64 [C + 1], bounds[0] == 0, non-decreasing

    def __post_init__(self) -> None:
        names = tuple(self.names)
        if not names or any(not isinstance(n, str) or not n for n in names):
            raise OptionError(f"corpora: got names {names!r}, expected non-empty strings")
        if len(set(names)) != len(names):
            raise OptionError(f"corpora: got names {names!r}, expected each name once")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "bounds", bounds_option("corpora", self.bounds, len(names)))

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)  # [C]

    def corpus_of(self, indices: np.ndarray) -> np.ndarray:
        """Corpus number of each sequence index -> int64 ``[m]``."""
        return part_of(self.bounds, np.asarray(indices))

    def counts(self, indices: np.ndarray) -> np.ndarray:
        """Occurrences per corpus of ``indices`` -> int64 ``[C]``."""
        return np.bincount(self.corpus_of(indices), minlength=len(self.names)).astype(np.int64)

    def describe(self) -> str:
        return ", ".join(f"{n} ({int(s)} seqs)" for n, s in zip(self.names, self.sizes))


RATE_FORMS = "a number > 0 such as 0.7 or 3, a Fraction, or a string such as '7/10' or '0.7'"


def mix_rate(name: str, rate: object) -> Fraction:
    """One ``mix`` rate as the exact rational the user wrote: a float by its decimal string
    (``str(0.7)`` = ``'0.7'`` -> 7/10), a ``Fraction`` as is, a string by ``Fraction(text)``
    (``'7/10'``, ``'0.7'``, ``'2.3'``). Why: ``Fraction(0.7)`` is 0.6999999999999999555910790149937
    and would take floor(0.7*2000) - 1 sequences of a 2000-sequence corpus."""
    bad = isinstance(rate, (bool, np.bool_))
    value: Fraction | None = None
    if isinstance(rate, Fraction):
        value = rate
    elif isinstance(rate, (int, np.integer)) and not bad:
        value = Fraction(int(rate))
    elif isinstance(rate, (float, np.floating)) and math.isfinite(rate):
        value = Fraction(str(rate))  # the shortest decimal that round-trips: what was written
    elif isinstance(rate, str):
        try:
            value = Fraction(rate.strip())
        except (ValueError, ZeroDivisionError):
            value = None
    if bad or value is None or value <= 0:
        raise OptionError(
            f"mix[{name!r}]: got {rate!r}, expected {RATE_FORMS} (corpus epochs per epoch: 0.5 "
            "spreads the corpus over two epochs, 3 uses it three times)"
        )
    return value


def rate_to_json(rate: Fraction) -> float | str:
    """A rate in the plan fingerprint: the float when it is exactly that binary number (0.5, 3.0:
    the same JSON as before rates were exact, so those fingerprints hold), else ``'p/q'`` (0.7 is
    ``'7/10'``: its plan differs from the binary float's, so its fingerprint must too)."""
    as_float = float(rate)
    return as_float if Fraction(as_float) == rate else f"{rate.numerator}/{rate.denominator}"


def resolve_rates(
    mix: Mapping[str, float | Fraction | str], corpora: Corpora
) -> tuple[Fraction, ...]:
    """Rate per corpus, in corpus order; corpora not named in ``mix`` get 1. An unknown name is
    an ``OptionError`` naming it and the known ones."""
    unknown = sorted(set(mix) - set(corpora.names))
    if unknown:
        raise OptionError(
            f"mix: unknown corpus name(s) {unknown}; the source's corpora are {list(corpora.names)}"
        )
    return tuple(mix_rate(n, mix.get(n, 1)) for n in corpora.names)


def mixed_corpora(mix: Mapping[str, object], corpora: Corpora | None, origin: str) -> Corpora:
    """The named corpora ``mix`` draws from; refuses a source without any, naming the fix."""
    if corpora is None:
        raise OptionError(
            f"mix={dict(mix)} needs named corpora, but {origin or 'the source'} "
            "has none. Fix: wrap the corpora in seqloader.ConcatSource({'name': source, "
            "...}), or leave mix out."
        )
    return corpora


def refuse_empty_corpora(corpora: Corpora, admitted: Sequence[int]) -> None:
    """A mix cannot draw from a corpus without admitted sequences: an error naming it and why
    (empty, or all filtered), whatever the planning."""
    for name, n, size in zip(corpora.names, admitted, corpora.sizes):
        if n == 0:
            why = (
                "it has no sequences"
                if size == 0
                else f"all its {int(size)} sequences are filtered by the options"
            )
            raise OptionError(
                f"mix: corpus {name!r} has no admitted sequences ({why}), so it cannot be "
                "used at any rate. Fix: leave it out of the source, or relax "
                "max_seq_length/min_seq_length."
            )


def stream_span(full_epoch: int, rate: Fraction, n: int) -> tuple[int, int]:
    """Stream positions ``[a, b)`` that full epoch ``full_epoch`` (0-based) takes from a corpus of
    ``n`` sequences at ``rate``: ``a = floor(f·r·n)``, ``b = floor((f+1)·r·n)``, in exact
    rationals (no rounding moves a boundary)."""
    r = rate if isinstance(rate, Fraction) else mix_rate("rate", rate)
    return math.floor(full_epoch * r * n), math.floor((full_epoch + 1) * r * n)


def corpus_seed_word(name: str) -> int:
    """A stable 64-bit word for a corpus name (seeds its stream; independent of the other corpora
    in the mix and of the order they are listed in)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


def corpus_epoch_permutation(seed: int, name: str, k: int, n: int) -> np.ndarray:
    """Corpus epoch ``k`` (0-based) of corpus ``name``: positions ``0..n-1`` in stream order."""
    return rng_for(seed, PURPOSE_MIX, corpus_seed_word(name), k).permutation(n)  # [n]


@dataclass(frozen=True)
class Selection:
    """One full epoch's sequences (a multiset), in canonical order (ascending index, uses of one
    sequence adjacent in corpus-epoch order).

    - ``seqs``: int64 ``[m]`` sequence indices.
    - ``uses``: int32 ``[m]`` the corpus epoch (0-based) each slot belongs to.
    - ``spans``: per corpus, the stream positions ``(a, b)`` this epoch takes.
    """

    seqs: np.ndarray
    uses: np.ndarray
    spans: tuple[tuple[int, int], ...]


def select_corpus(
    seed: int,
    name: str,
    members: np.ndarray,
    rate: Fraction,
    full_epoch: int,
    permutation: Callable[[int], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """One corpus' part of full epoch ``full_epoch``: (seqs ``[m]``, uses ``[m]``, span).

    ``members``: int64 ``[n]`` the corpus' admitted sequence indices, ascending (n >= 1).
    ``permutation(k)``: corpus epoch k's permutation (default: computed; ``MixPlan`` memoises).
    """
    n = len(members)
    perm = permutation or (lambda k: corpus_epoch_permutation(seed, name, k, n))
    a, b = stream_span(full_epoch, rate, n)
    if b == a:
        return np.zeros(0, np.int64), np.zeros(0, USES_DTYPE), (a, b)
    k0, k1 = a // n, (b - 1) // n  # first and last corpus epoch touched
    lo0, hi0 = a - k0 * n, min(b, (k0 + 1) * n) - k0 * n  # span within corpus epoch k0
    whole0 = lo0 == 0 and hi0 == n
    hi1 = b - k1 * n  # corpus epoch k1 (if k1 > k0) is taken from its start
    whole1 = k1 == k0 or hi1 == n
    if whole0 and whole1:  # only whole corpus epochs: every member k1 - k0 + 1 times
        c = k1 - k0 + 1
        seqs = np.repeat(members, c) if c > 1 else members.copy()  # [n * c]
        uses = np.tile(np.arange(k0, k1 + 1, dtype=USES_DTYPE), n)  # [n * c]
        return seqs, uses, (a, b)
    in_first = np.ones(n, dtype=bool)  # [n] members used in corpus epoch k0
    if not whole0:
        in_first[:] = False
        in_first[perm(k0)[lo0:hi0]] = True
    if k1 == k0:  # one partial corpus epoch: each member at most once
        return members[in_first], np.full(hi0 - lo0, k0, dtype=USES_DTYPE), (a, b)
    in_last = np.ones(n, dtype=bool)  # [n] members used in corpus epoch k1
    if not whole1:
        in_last[:] = False
        in_last[perm(k1)[:hi1]] = True
    counts = in_first.astype(np.int64)  # [n] uses of each member this epoch
    counts += in_last
    counts += k1 - k0 - 1  # full corpus epochs strictly between k0 and k1
    seqs = np.repeat(members, counts)  # [m] ascending, a member's uses adjacent
    first_use = np.where(in_first, k0, k0 + 1).astype(USES_DTYPE)  # [n] contiguous corpus epochs
    starts = np.cumsum(counts) - counts  # [n] slot of each member's first use
    within = np.arange(len(seqs), dtype=np.int64) - np.repeat(starts, counts)  # [m] 0, 1, ...
    uses = np.repeat(first_use, counts) + within.astype(USES_DTYPE)  # [m]
    return seqs, uses, (a, b)


def select_epoch(
    seed: int,
    names: Sequence[str],
    members: Sequence[np.ndarray],
    rates: Sequence[Fraction],
    full_epoch: int,
    permutations: Sequence[Callable[[int], np.ndarray] | None] | None = None,
) -> Selection:
    """The mix's full epoch ``full_epoch`` (0-based): every corpus' part, corpus after corpus
    (corpora occupy ascending index ranges, so the whole is ascending too)."""
    perms = permutations or [None] * len(names)
    parts = [
        select_corpus(seed, name, m, r, full_epoch, p)
        for name, m, r, p in zip(names, members, rates, perms)
    ]
    return Selection(
        np.concatenate([p[0] for p in parts]),  # [m_total]
        np.concatenate([p[1] for p in parts]),  # [m_total]
        tuple(p[2] for p in parts),
    )


@dataclass(frozen=True)
class CorpusProgress:
    """Where corpus ``name`` stands after some slots of an epoch: ``corpus_epochs_done`` is the
    number of its corpus epochs used up (2.5 = two done, the third half done); ``corpus_epoch``
    (1-based) is the one in progress and ``fraction`` how much of it is done. Within one epoch the
    ordering interleaves corpus epochs, so mid-epoch these count sequences used; at a full
    epoch's end they are exact stream positions."""

    name: str
    rate: float  # for reports; planning uses the exact rate
    size: int  # admitted sequences of the corpus
    used: int  # slots of this corpus in the counted part of the epoch
    corpus_epochs_done: float
    corpus_epoch: int
    fraction: float


def progress(name: str, rate: Fraction, size: int, span_start: int, used: int) -> CorpusProgress:
    """``CorpusProgress`` after ``used`` slots of a full epoch whose span starts at ``span_start``."""
    pos = span_start + used
    k, rest = divmod(pos, size)
    return CorpusProgress(name, float(rate), size, used, pos / size, k + 1, rest / size)


class MixPlan:
    """The mix of one planner: rates and admitted members per corpus, and the epoch selection."""

    def __init__(
        self,
        seed: int,
        mix: Mapping[str, float | Fraction | str],
        corpora: Corpora,
        admitted: np.ndarray,
        filtered_total: int = 0,
    ) -> None:
        self.seed = seed
        self.corpora = corpora
        self.rates = resolve_rates(mix, corpora)
        bounds = np.searchsorted(admitted, corpora.bounds)  # [C + 1] admitted range per corpus
        self.members = [admitted[bounds[c] : bounds[c + 1]] for c in range(len(corpora.names))]
        refuse_empty_corpora(corpora, [len(m) for m in self.members])

        check_mix_slots(corpora.names, self.rates, self.sizes)  # before any epoch is planned

        # memos, pure functions of the arguments: the last corpus epoch permutation per corpus
        # (consecutive epochs share one where a span ends mid corpus epoch) and the last
        # selection (every sub-epoch of a full epoch, and a loader's several look-ups, use it)
        self._perms: dict[int, tuple[int, np.ndarray]] = {}
        self._last: tuple[int, Selection] | None = None

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(m) for m in self.members)

    def _permutation(self, c: int) -> Callable[[int], np.ndarray]:
        def get(k: int) -> np.ndarray:
            found = self._perms.get(c)
            if found is None or found[0] != k:
                n = len(self.members[c])
                perm = corpus_epoch_permutation(self.seed, self.corpora.names[c], k, n)
                found = (k, perm)
                self._perms[c] = found
            return found[1]

        return get

    def select(self, full_epoch: int) -> Selection:
        if self._last is None or self._last[0] != full_epoch:
            perms = [self._permutation(c) for c in range(len(self.members))]
            selection = select_epoch(
                self.seed, self.corpora.names, self.members, self.rates, full_epoch, perms
            )
            self._last = (full_epoch, selection)
        return self._last[1]

    def epoch_counts(self, full_epoch: int) -> tuple[int, ...]:
        """Slots per corpus in full epoch ``full_epoch`` (0-based), without building it."""
        spans = (stream_span(full_epoch, r, n) for r, n in zip(self.rates, self.sizes))
        return tuple(b - a for a, b in spans)

    def progress(self, full_epoch: int, used: Sequence[int] | np.ndarray) -> list[CorpusProgress]:
        """Every corpus' progress after ``used[c]`` of its slots of full epoch ``full_epoch``."""
        out = []
        for name, rate, n, u in zip(self.corpora.names, self.rates, self.sizes, used):
            a, _ = stream_span(full_epoch, rate, n)
            out.append(progress(name, rate, n, a, int(u)))
        return out

    def check(self, full_epochs: Sequence[int], seqs: np.ndarray, uses: np.ndarray) -> MixCheck:
        """Per-corpus exactly-once of the slots delivered over ``full_epochs``
        (``seqloader.plan.mix_check``)."""
        return check_corpus_epochs(self, full_epochs, seqs, uses)


def check_corpus_epochs(
    mix: MixPlan, full_epochs: Sequence[int], seqs: np.ndarray, uses: np.ndarray
) -> MixCheck:
    """Check the real slots (``seqs``, ``uses``: int ``[m]`` each) delivered over the complete full
    epochs ``full_epochs`` (0-based, consecutive)."""
    fulls = sorted(set(int(f) for f in full_epochs))
    problems: list[str] = []
    if fulls != list(range(fulls[0], fulls[0] + len(fulls))):
        raise ValueError(f"full epochs must be consecutive, got {fulls}")
    seqs = np.asarray(seqs, dtype=np.int64)
    uses = np.asarray(uses, dtype=np.int64)
    corpus = mix.corpora.corpus_of(seqs)  # [m]
    out = []
    for c, (name, members, rate) in enumerate(zip(mix.corpora.names, mix.members, mix.rates)):
        n = len(members)
        start, _ = stream_span(fulls[0], rate, n)
        _, end = stream_span(fulls[-1], rate, n)
        mine = corpus == c  # [m]
        s, k = seqs[mine], uses[mine]  # [m_c]
        out.append(CorpusEpochs(name, n, start, end, len(s)))
        alien = ~np.isin(s, members)
        if alien.any():
            problems.append(
                f"{name}: {int(alien.sum())} uses of sequences that are not its admitted ones "
                f"(e.g. #{int(s[alien][0])})"
            )
        pair = k * (int(mix.corpora.bounds[-1]) + 1) + s  # [m_c] unique per (corpus epoch, seq)
        uniq, times = np.unique(pair, return_counts=True)
        if (times > 1).any():
            j = int(np.flatnonzero(times > 1)[0])
            problems.append(
                f"{name}: {int((times > 1).sum())} sequences used twice in one corpus epoch "
                f"(e.g. #{int(s[pair == uniq[j]][0])} in corpus epoch {int(k[pair == uniq[j]][0]) + 1})"
            )
        ks = np.arange(start // n, max(end - 1, start) // n + 1, dtype=np.int64)  # [K]
        want = np.minimum(end, (ks + 1) * n) - np.maximum(start, ks * n)  # [K] positions of k
        got = np.array([int(np.count_nonzero(k == x)) for x in ks.tolist()], dtype=np.int64)
        outside = len(k) - int(got.sum())
        if outside or not np.array_equal(np.maximum(want, 0), got):
            bad = [
                f"corpus epoch {int(x) + 1}: {int(g)} uses, expected {int(w)}"
                for x, g, w in zip(ks, got, np.maximum(want, 0))
                if g != w
            ][:3]
            if outside:
                bad.append(f"{outside} uses of corpus epochs outside the span")
            problems.append(f"{name}: " + "; ".join(bad))
    return MixCheck(tuple(out), problems)


class EpochMix(Protocol):
    """What planning, reports, stats and checks use of a mix: ``MixPlan`` (global planning) or
    ``seqloader.plan.indexed.mix.IndexedMix`` (indexed planning)."""

    seed: int
    corpora: Corpora
    rates: tuple[Fraction, ...]

    @property
    def sizes(self) -> tuple[int, ...]: ...

    @property
    def members(self) -> list[np.ndarray]: ...

    def select(self, full_epoch: int) -> Selection: ...

    def epoch_counts(self, full_epoch: int) -> tuple[int, ...]: ...

    def progress(
        self, full_epoch: int, used: Sequence[int] | np.ndarray
    ) -> list[CorpusProgress]: ...

    def check(self, full_epochs: Sequence[int], seqs: np.ndarray, uses: np.ndarray) -> MixCheck: ...
