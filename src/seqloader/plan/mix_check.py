"""Checking a mix's promise from what was used: every sequence of a corpus exactly once per corpus
epoch (``seqloader check`` on a mix, and the tests).

Input is what the slots of some epochs delivered — sequence index and corpus epoch per slot — and
the full epochs they cover. Three facts together prove per-corpus exactly-once: no (sequence,
corpus epoch) pair is used twice; every pair's sequence belongs to its corpus' admitted sequences;
and corpus epoch k of corpus c is used as many times as the covered stream positions
``[a, b)`` overlap ``[k·N, (k+1)·N)`` (so a corpus epoch inside the covered span is complete).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from seqloader.plan.mix import MixPlan, stream_span


@dataclass(frozen=True)
class CorpusEpochs:
    """One corpus over the checked epochs: stream positions ``[start, end)`` covered (indexed
    mixes: summed over buckets), the corpus epochs complete in it (1-based, inclusive range;
    empty when ``first > last``)."""

    name: str
    size: int
    start: int
    end: int
    used: int
    #: the complete corpus epochs when they are not the span's (indexed mixes: per bucket)
    complete_range: tuple[int, int] | None = None

    @property
    def complete(self) -> tuple[int, int]:
        if self.complete_range is not None:
            return self.complete_range
        first = -(-self.start // self.size)  # 0-based first corpus epoch starting in the span
        last = self.end // self.size - 1  # 0-based last corpus epoch ending in the span
        return first + 1, last + 1


@dataclass(frozen=True)
class MixCheck:
    corpora: tuple[CorpusEpochs, ...]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        parts = []
        for c in self.corpora:
            a, b = c.complete
            done = f"corpus epochs {a}..{b} complete" if a <= b else "no corpus epoch complete"
            parts.append(
                f"{c.name}: {c.used} uses = stream {c.start}..{c.end} of {c.size} seqs ({done}, "
                "each sequence exactly once per corpus epoch)"
            )
        return "; ".join(parts)


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
