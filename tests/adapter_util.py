"""Shared by the adapter tests: run epochs through a real SeqLoader and check exactly-once."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

import numpy as np

import seqloader as sl


def check_epochs(
    loader: sl.SeqLoader,
    tags: Sequence[str],
    reference: Callable[[str], np.ndarray],
    epochs: Sequence[int] = (1, 2),
    key: str = "data",
) -> None:
    """Every tag exactly once per epoch, and each sequence's unpadded ``key`` equal to
    ``reference(tag)``. Closes the loader."""
    with loader:
        for epoch in epochs:
            seen: collections.Counter = collections.Counter()
            for batch in loader.epoch(epoch):
                for b, tag in enumerate(batch.seq_tags):
                    seen[tag] += 1
                    n = int(batch.lengths[key][b])
                    np.testing.assert_array_equal(batch[key][b, :n].numpy(), reference(tag))
            assert seen == collections.Counter(tags), f"epoch {epoch} not exactly once"
