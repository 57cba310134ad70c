"""Epoch orders: a source that says its own order per sub-epoch (``seqloader.returnn``'s views of
RETURNN's ``CombinedDataset``, whose ``interleave`` / ``random_dataset`` orderings and joint
sorting are functions of every sub-dataset's own sub-epoch order, and of ``LibriSpeechCorpus``
with its old ``epoch_wise_filter``, which re-sorts a sub-epoch). The planner takes that order as
it comes, drops what admission dropped (RETURNN's length filter runs after the dataset) and
batches it; nothing else orders it. What the source's order leaves out of an epoch is counted
(``filtered``) and reported with the planner's own counts."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from seqloader.errors import DataError


class EpochOrders(Protocol):
    """The source's sequence indices of one sub-epoch, in order, as a pure function of the epoch,
    the seed offset and the order rank (RETURNN's per-rank seed step under
    ``random_seed_offset`` distribution); ``identity`` goes into the plan fingerprint.

    >>> class Reversed:
    ...     def order(self, epoch, seed, order_rank):
    ...         return np.arange(3, dtype=np.int64)[::-1]
    ...     def identity(self):
    ...         return b"reversed"
    ...     def filtered(self, epoch, seed):
    ...         return {}
    >>> Reversed().order(1, 0, 0).tolist()
    [2, 1, 0]
    """

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray: ...

    def identity(self) -> bytes: ...

    def filtered(self, epoch: int, seed: int) -> dict[str, int]:
        """What the order of ``epoch`` leaves out, per reason (the report's counts)."""
        ...


@runtime_checkable
class HasEpochOrders(Protocol):
    """A source that orders its own sub-epochs; None when it leaves that to the planner."""

    def epoch_orders(self) -> EpochOrders | None: ...


def check_source_order(order: np.ndarray, n: int, epoch: int) -> None:
    """A source's order of ``epoch`` must name each of its ``n`` sequences at most once: the
    planner batches it as it comes, so a repeat would be planned twice (O(m log m) per epoch,
    beside the planning's own O(n)).

    >>> check_source_order(np.array([2, 0]), 3, 1)
    >>> check_source_order(np.array([2, 2]), 3, 1)
    Traceback (most recent call last):
    ...
    seqloader.errors.DataError: the source's order of epoch 1 names sequence 2 twice ...
    """
    if order.size and (int(order.min()) < 0 or int(order.max()) >= n):
        bad = int(order[(order < 0) | (order >= n)][0])
        raise DataError(
            f"the source's order of epoch {epoch} names sequence {bad}, outside 0..{n - 1}; its "
            "epoch_orders() must give indices of its own sequences (a bug in that source)"
        )
    values, counts = np.unique(order, return_counts=True)
    if values.size != order.size:
        twice = int(values[counts > 1][0])
        raise DataError(
            f"the source's order of epoch {epoch} names sequence {twice} twice "
            f"({order.size - values.size} repeats in all); each sequence is planned at most once "
            "per sub-epoch, so its epoch_orders() must not repeat one (a bug in that source)"
        )
