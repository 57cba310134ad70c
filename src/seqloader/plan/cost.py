"""What a batch costs, so that ``max_frames`` can bound accelerator time rather than frames alone.

``batch_cost="frames"`` (default): a sequence of length ``L`` costs ``L``; a batch costs its padded
frames, ``n_seqs * max_len``.

``batch_cost="packed"``: a batch costs the sum of its lengths (what a padding-free, packed
layout computes on; RETURNN's ``packed_batch_size``).

``batch_cost="quadratic:Q"``: a sequence costs ``L + L**2 / Q`` (self-attention's quadratic term; as
Lhotse's ``quadratic_duration``, where ``L = Q`` doubles the cost). A batch costs
``n_seqs * (Lmax + Lmax**2 / Q)``: every row is padded to the longest one, and the padded rows
pay the quadratic term of the padded length too (Lhotse's ``num_cuts * longest_seen`` with the
correction applied per cut). ``max_frames`` bounds that cost, so batches of long sequences hold
fewer of them.

Costs are exact integers: in *cost units* a sequence costs ``L * Q + L**2`` and the budget is
``max_frames * Q`` (for ``frames``: ``L`` and ``max_frames``), so every rank and every machine
compares the same numbers (no float rounding in the plan).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.plan.batching import padded_frames


@dataclass(frozen=True)
class BatchCost:
    """A parsed ``batch_cost`` option (``plan.options.batch_cost_option`` parses it):
    ``quadratic`` is ``Q`` (None for ``frames``/``packed``); ``packed``: a batch costs the sum of
    its lengths (no padding), not ``n_seqs * max_len``."""

    quadratic: int | None = None
    packed: bool = False

    def __str__(self) -> str:
        if self.packed:
            return "packed"
        return "frames" if self.quadratic is None else f"quadratic:{self.quadratic}"

    def units(self, lengths: np.ndarray) -> np.ndarray:
        """Cost of each sequence in cost units -> int64 ``[n]`` (monotone in the length)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.quadratic is None:
            return lengths
        return lengths * self.quadratic + lengths * lengths

    def budget(self, max_frames: int | None) -> int | None:
        """``max_frames`` in cost units (None: unbounded)."""
        if max_frames is None or self.quadratic is None:
            return max_frames
        return max_frames * self.quadratic

    def longest_fitting(self, max_frames: int) -> int:
        """The longest length that fits ``max_frames`` alone (for the error message's fix)."""
        if self.quadratic is None:
            return max_frames
        q = self.quadratic  # largest L with L*q + L*L <= max_frames*q
        length = (math.isqrt(q * q + 4 * max_frames * q) - q) // 2
        while (length + 1) * q + (length + 1) ** 2 <= max_frames * q:
            length += 1
        return length


def step_imbalance(
    seqs: np.ndarray, bounds: np.ndarray, world_size: int, costs: np.ndarray
) -> float:
    """Mean over steps of (max / mean) padded batch cost across the ranks: how much longer the
    slowest rank's batch is than the average one, i.e. what synchronous data parallelism waits
    for. ``seqs``/``bounds``: a global plan's batches (``steps * world_size`` of them, batch
    ``k`` on rank ``k % world_size``); ``costs``: cost units per sequence. 1.0 = perfectly even;
    steps with nothing to compute count as even."""
    n_batches = len(bounds) - 1
    if n_batches < world_size or world_size < 1:
        return 1.0
    per = padded_frames(costs[seqs], bounds)[: n_batches - n_batches % world_size]
    per = per.reshape(-1, world_size).astype(np.float64)  # [steps, W]
    mean = per.mean(axis=1)
    ratio = np.divide(per.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)
    return float(ratio.mean())


@dataclass(frozen=True)
class PlannedImbalance:
    """A plan's ``step_imbalance`` as its planner computes it: ``compute()`` gives the figure;
    ``cheap``: milliseconds (computed when first read), else O(n) (computed on a thread of its
    own, off the training loop).

    >>> PlannedImbalance(lambda: 1.25, cheap=True).compute()
    1.25
    """

    compute: Callable[[], float]
    cheap: bool = False
