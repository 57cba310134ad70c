"""Per-corpus lines of the epoch report (sources of named corpora, ``mix``; docs/corpora.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from seqloader.loading.corpora import CorpusCounts
from seqloader.plan.planners import Planner


@dataclass
class CorpusReport:
    """One corpus in one epoch: ``seqs``/``frames`` (of the length key) this rank delivered,
    ``planned_seqs`` the epoch's slots of it (all ranks). With a mix also the rate and where the
    corpus stands once the epoch is done: ``corpus_epochs_done`` (2.5: two corpus epochs used up
    and half of the third), ``corpus_epoch`` in progress (1-based) and its ``fraction`` done."""

    seqs: int = 0
    frames: int = 0
    planned_seqs: int = 0
    rate: float | None = None
    corpus_epochs_done: float | None = None
    corpus_epoch: int | None = None
    fraction: float | None = None

    def format(self, name: str) -> str:
        text = f"{name} {self.seqs} seqs {self.frames} frames"
        if self.corpus_epochs_done is not None:
            text += (
                f" (rate {self.rate:g}; {self.corpus_epochs_done:g} corpus epochs done, "
                f"corpus epoch {self.corpus_epoch} at {100 * (self.fraction or 0):.0f}%)"
            )
        return text


def planned_corpora(planner: Planner, epoch: int) -> dict[str, CorpusReport]:
    """The report's per-corpus entries of ``epoch`` before any batch (empty for one corpus)."""
    out = {}
    for name, slots, progress in planner.corpus_plan(epoch):
        entry = CorpusReport(planned_seqs=slots)
        if progress is not None:
            entry.rate = progress.rate
            entry.corpus_epochs_done = round(progress.corpus_epochs_done, 6)
            entry.corpus_epoch = progress.corpus_epoch
            entry.fraction = round(progress.fraction, 6)
        out[name] = entry
    return out


def add_counts(
    corpora: dict[str, CorpusReport], counts: Mapping[str, CorpusCounts], length_key: str
) -> None:
    """Add one batch's per-corpus counts (computed where the batch was built)."""
    for name, c in counts.items():
        entry = corpora.setdefault(name, CorpusReport())
        entry.seqs += c.seqs
        entry.frames += c.frames.get(length_key, 0)
