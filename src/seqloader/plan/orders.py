"""Epoch orders: a source that says its own order per sub-epoch (``seqloader.returnn``'s view of
RETURNN's ``CombinedDataset``, whose ``interleave`` / ``random_dataset`` orderings and joint
sorting are functions of every sub-dataset's own sub-epoch order). The planner takes that order as
it comes, drops what admission dropped (RETURNN's length filter runs after the dataset) and
batches it; nothing else orders it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


class EpochOrders(Protocol):
    """The source's sequence indices of one sub-epoch, in order, as a pure function of the epoch,
    the seed offset and the order rank (RETURNN's per-rank seed step under
    ``random_seed_offset`` distribution); ``identity`` goes into the plan fingerprint.

    >>> class Reversed:
    ...     def order(self, epoch, seed, order_rank):
    ...         return np.arange(3, dtype=np.int64)[::-1]
    ...     def identity(self):
    ...         return b"reversed"
    >>> Reversed().order(1, 0, 0).tolist()
    [2, 1, 0]
    """

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray: ...

    def identity(self) -> bytes: ...


@runtime_checkable
class HasEpochOrders(Protocol):
    """A source that orders its own sub-epochs; None when it leaves that to the planner."""

    def epoch_orders(self) -> EpochOrders | None: ...
