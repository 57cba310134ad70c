"""Which corpus each sequence comes from, for sources made of named corpora (``ConcatSource``).

The source says it as plain values (the ``NamesCorpora`` ability: names and index bounds; sources
sit below planning and cannot import it); this module turns them into the planner's ``Corpora``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from seqloader.parts import part_of
from seqloader.plan.mix import Corpora
from seqloader.sources.base import Source, corpus_layout


def corpora_of(source: Source) -> Corpora | None:
    """The source's named corpora, or None for a source that is one corpus."""
    layout = corpus_layout(source)
    return None if layout is None else Corpora(tuple(layout[0]), layout[1])


@dataclass(frozen=True)
class CorpusCounts:
    """What one corpus contributed to a batch: real (not filler) sequences and, per key, their
    frames. Computed where the batch is built, so the training thread only adds numbers."""

    seqs: int
    frames: Mapping[str, int]


def corpus_names(source: Source, seqs: np.ndarray) -> list[str] | None:
    """The corpus name of each sequence index (``Batch.corpus``), or None for a one-corpus source."""
    layout = corpus_layout(source)
    if layout is None:
        return None
    names, bounds = layout
    ids = part_of(bounds, seqs)  # [B]
    return [names[c] for c in ids.tolist()]


def count_by_corpus(
    corpus: list[str], real: np.ndarray, lengths: Mapping[str, np.ndarray]
) -> dict[str, CorpusCounts]:
    """Per corpus in the batch: real sequences and their frames per key (``lengths``: key ->
    int ``[B]``, aligned with ``corpus`` and ``real``)."""
    out: dict[str, CorpusCounts] = {}
    names = np.asarray(corpus, dtype=object)  # [B]
    for name in dict.fromkeys(corpus):
        mine = (names == name) & real  # [B]
        frames = {k: int(v[mine].sum()) for k, v in lengths.items()}
        out[name] = CorpusCounts(int(np.count_nonzero(mine)), frames)
    return out
