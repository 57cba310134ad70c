"""The verdict of checking a mix's promise from what was used: every sequence of a corpus exactly
once per corpus epoch (``seqloader check`` on a mix, and the tests).

Input is what the slots of some epochs delivered — sequence index and corpus epoch per slot — and
the full epochs they cover. Three facts together prove per-corpus exactly-once: no (sequence,
corpus epoch) pair is used twice; every pair's sequence belongs to its corpus' admitted sequences;
and corpus epoch k of corpus c is used as many times as the covered stream positions
``[a, b)`` overlap ``[k·N, (k+1)·N)`` (so a corpus epoch inside the covered span is complete).
The check itself is the mix's own (``MixPlan.check``, ``IndexedMix.check``); this module holds
what they return, so that both import it and it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
