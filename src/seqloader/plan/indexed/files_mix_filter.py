"""``epoch_wise_filter`` with a ``mix`` over ``distribution="files"`` under indexed planning.

The meaning (docs/planning.md, "epoch_wise_filter over files under indexed planning", its mix
paragraph): the filter is a property of the mix's sub-epoch, not of a rank. Sub-epoch ``e``'s
set is its file pieces' ``(sequence, corpus epoch)`` slots (the pieces cut and shuffled as without
the filter, ``FilesMix.sub_epoch``); each ``max_mean_len`` of the epoch keeps, in turn, the
shortest slots by (length, sequence, corpus epoch) whose mean stays about ``M`` (RETURNN's binary
search, ``admission.mean_filtered``, the sharded mix's rule). The slots are listed from the pieces
alone (keyed by seed and full epoch), so the kept set is the same on every rank and world size,
and a resume on another world size plans the rest of the same set. A filtered slot is lost for
its sub-epoch (its corpus epoch not made up later: the streams move on as without the filter)
and counted per epoch in the report.

The kept set is a mask over the sub-epoch's slot positions (its pieces' slots, piece after piece:
``FilesMix.slots``), not over sequences: with a rate above 1 a sequence holds two slots of a
sub-epoch, and the filter may keep one of them. A rank's pieces read their part of the mask
(``piece_positions``), so what it counts per bucket, draws or cuts is its pieces' kept slots.

Cost: in the epochs a filter applies to, the sub-epoch's slots are listed and sorted once per
planner (O(n / P) time, a bool per slot; only the ties at the cut length are sorted); other epochs are planned from the per-file tables
as before.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from seqloader.plan.admission import (
    EpochFilter,
    counted_filters,
    epoch_filters,
    filter_reason,
    mean_len_keep,
)
from seqloader.plan.indexed.files_filter import EpochKept
from seqloader.plan.indexed.plan import ranges


def slots_kept(
    spec: EpochFilter | None, epoch: int, seqs: np.ndarray, uses: np.ndarray, by: np.ndarray
) -> EpochKept | None:
    """The filters of ``epoch`` on a sub-epoch's slots (``seqs``, ``uses``: sequence and corpus
    epoch of each, piece after piece; ``by``: what the filter keeps the shortest by, per
    sequence) -> ``EpochKept`` whose mask is over the slot positions; None where no filter
    applies to ``epoch``. Ties in length are kept by (sequence, corpus epoch).

    >>> seqs, uses = np.array([3, 0, 3, 1]), np.array([0, 0, 1, 0])  # sequence 3 twice
    >>> kept = slots_kept(((1, 1, 1.0),), 1, seqs, uses, np.array([1, 9, 0, 2]))
    >>> kept.mask.tolist(), kept.reasons  # sequence 0 kept; both slots of 3 and 1 left out
    ([False, True, False, False], {'epoch_wise_filter max_mean_len=1 (epoch 1)': 3})
    """
    means = epoch_filters(spec, epoch)
    if not means:
        return None
    seqs = np.asarray(seqs, dtype=np.int64)
    lens = np.asarray(np.asarray(by)[seqs], dtype=np.int64)  # the slots' only
    span = int(np.max(uses, initial=0)) + 1
    keys = seqs * span + np.asarray(uses, dtype=np.int64)  # (sequence, corpus epoch) order
    filters = ((filter_reason(m, epoch), partial(_keep, lens, keys, m)) for m in means)
    kept, reasons = counted_filters(np.arange(len(seqs), dtype=np.int64), filters)
    mask = np.zeros(len(seqs), dtype=bool)
    mask[kept] = True
    return EpochKept(mask, reasons)


def _keep(lens: np.ndarray, keys: np.ndarray, max_mean: float, part: np.ndarray) -> np.ndarray:
    """RETURNN's selection on the slots ``part`` (positions) still kept: by their lengths, ties
    by (sequence, corpus epoch); only the cut length's ties are sorted, not every slot."""
    return mean_len_keep(lens[part], keys[part], max_mean)


def piece_positions(counts: np.ndarray, which: np.ndarray | slice) -> np.ndarray:
    """The slot positions of the sub-epoch's pieces ``which`` (``counts``: every piece's slots,
    in the sub-epoch's order), piece after piece in the order given: where their slots (as
    ``FilesMix.slots`` lists them) read the sub-epoch's mask.

    >>> piece_positions(np.array([2, 0, 3]), np.array([2, 0])).tolist()
    [2, 3, 4, 0, 1]
    """
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    idx = np.arange(len(counts), dtype=np.int64)[which]
    return ranges(bounds[idx], bounds[idx + 1])


def first_kept_piece(counts: np.ndarray, mask: np.ndarray | None) -> int | None:
    """The first piece holding a kept slot (``mask``: the sub-epoch's kept slots, None: all; a
    piece without slots is skipped only when filtered); None when nothing is kept. The fillers'
    unit comes from it, so a filler is never a slot the filter left out.

    >>> first_kept_piece(np.array([2, 1, 2]), np.array([False, False, False, True, False]))
    2
    """
    if mask is None:
        return 0 if len(counts) else None
    at = np.flatnonzero(mask)
    if not len(at):
        return None
    return int(np.searchsorted(np.cumsum(counts), int(at[0]), side="right"))
