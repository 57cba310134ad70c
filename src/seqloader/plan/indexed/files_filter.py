"""``epoch_wise_filter`` with ``distribution="files"`` under indexed planning: what a sub-epoch admits.

The meaning (docs/planning.md, "epoch_wise_filter over files"): the filter is a property of the
sub-epoch, not of a rank. Sub-epoch ``e``'s set is its files' admitted sequences (the files
shuffled and cut as without the filter); in the epochs of a filter's range RETURNN's
``max_mean_len`` selection (``admission.mean_filtered``: the shortest by (length, index) whose
mean stays about ``M``, each filter of the epoch in turn) keeps a part of that set once, for
every rank and every world size. The rest is lost for that sub-epoch (not deferred: the next
sub-epochs hold their own files) and counted per epoch in the report. So the set does not
depend on the world size, and a resume on another world size (``W -> W'``) plans the same kept
set: exactly once of what is admitted. Files are then dealt and batched from the kept set alone
(per-rank counts from it; chunked: the kept sequences' chunks).

Cost: the sub-epoch's sequences are listed and their admitted mask copied, O(n) bools and
O(n / P) time per rank, in the epochs a filter applies to (as the filter's sums over a
sub-epoch are without files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.plan.admission import EpochFilter, epoch_filters, mean_filtered
from seqloader.plan.indexed.plan import ranges


@dataclass(frozen=True)
class EpochKept:
    """A filtered sub-epoch: ``mask`` (bool ``[n]``) the sequences it admits (its files' kept
    ones; what lies outside its files is the admission's), ``reasons`` what each filter left out.
    """

    mask: np.ndarray
    reasons: dict[str, int]


def files_epoch_kept(
    spec: EpochFilter | None,
    epoch: int,
    files: np.ndarray,
    part: np.ndarray,
    admitted: np.ndarray | None,
    by: np.ndarray,
) -> EpochKept | None:
    """The filters of ``epoch`` on the admitted sequences of files ``part`` (``files``: file
    bounds; ``admitted``: the admission's mask, None: all; ``by``: what the filter keeps the
    shortest by) -> the sub-epoch's ``EpochKept``; None where no filter applies to ``epoch``.

    >>> by = np.array([9, 9, 1, 50, 2, 3])  # file 1 (sequences 2..5): 50 left out
    >>> kept = files_epoch_kept(((1, 1, 2.0),), 1, np.array([0, 2, 6]), np.array([1]), None, by)
    >>> np.flatnonzero(kept.mask).tolist(), kept.reasons
    ([0, 1, 2, 4, 5], {'epoch_wise_filter max_mean_len=2 (epoch 1)': 1})
    """
    if not epoch_filters(spec, epoch):
        return None
    bounds = np.asarray(files, dtype=np.int64)
    seqs = np.sort(ranges(bounds[part], bounds[part + 1]))
    n = int(bounds[-1])
    mask = np.ones(n, dtype=bool) if admitted is None else np.array(admitted, dtype=bool)
    seqs = seqs[mask[seqs]]
    kept, reasons = mean_filtered(spec, epoch, seqs, by)
    mask[seqs] = False
    mask[kept] = True
    return EpochKept(mask, reasons)


def kept_rank_counts(
    files: np.ndarray,
    part: np.ndarray,
    rank_of: np.ndarray,
    world_size: int,
    mask: np.ndarray,
    units_of: Callable[[np.ndarray], np.ndarray],
    n_buckets: int,
) -> np.ndarray:
    """Units per (rank, bucket) of a filtered sub-epoch -> int64 ``[W, N]``: each rank's files'
    kept sequences, as units (``units_of``: sequences -> the bucket of each unit, a sequence or
    its chunks), counted per bucket (the per-(file, bucket) table counts the unfiltered ones).

    >>> kept_rank_counts(np.array([0, 2, 4]), np.array([1, 0]), np.array([0, 1]), 2,
    ...                  np.array([True, False, True, True]), lambda s: s % 2, 2).tolist()
    [[1, 1], [1, 0]]
    """
    bounds = np.asarray(files, dtype=np.int64)
    out = np.zeros((world_size, n_buckets), dtype=np.int64)
    for r in range(world_size):
        own = part[rank_of == r]
        seqs = ranges(bounds[own], bounds[own + 1])
        out[r] = np.bincount(units_of(seqs[mask[seqs]]), minlength=n_buckets)[:n_buckets]
    return out
